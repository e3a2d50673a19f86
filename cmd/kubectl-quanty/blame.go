package main

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var blameCmd = &command{
	name:  "blame",
	usage: "TYPE/NAME [-n NS] [--rev N | --at TIME] [--show-secrets] [-o text|json|yaml]",
	short: "Show an object as YAML with who last set each field, when, at which revision",
	long: `Prints the object as YAML (as kubectl get -o yaml, without managedFields and
resourceVersion) and, beside each field that holds a value, the revision
that last set that value, how long ago, and the field manager that made
that change, as git blame does for lines. The manager comes from the
object's managedFields: the entry whose time the change moved; it is
empty where they do not say (a write without a field manager), and
"(restore)" for a value kubectl quanty restore wrote back.

It walks the object's retained history up to now, or up to --rev or
--at. A value set before the oldest change QuantyKube still holds is
shown with that oldest revision, as "<=REV": it was set then or before.
List items with a name (containers, env, ports, volumes) or a type
(conditions) are followed by it, so an item added before them does not
move their blame. A Secret's values are masked unless --show-secrets.
`,
	examples: `
  # Who set each field of a Deployment, and when
  kubectl quanty blame deployment/web -n shop

  # As it was an hour ago
  kubectl quanty blame configmap/web --at -1h

  # For a script: every field's path, revision, time and manager
  kubectl quanty blame deploy/web -o json
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		var at point
		at.register(fs, "to show (default: now)")
		showSecrets := showSecretsFlag(fs, "in every output format")
		out := outputFlag(fs, "text", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			t, err := s.target(ctx, args, *key)
			if err != nil {
				return err
			}
			req, err := at.request(t.key, s.now(), false)
			if err != nil {
				return err
			}
			rev, kv, err := s.state(ctx, req)
			if err != nil {
				return err
			}
			if kv == nil {
				return fmt.Errorf("%s did not exist at revision %d (kubectl quanty log lists its revisions)", t, rev)
			}
			v := decodeValue(kv.Value)
			if v.Object == nil {
				return fmt.Errorf("%s at revision %d: %s", t, kv.ModRevision, v.describe())
			}
			entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(t.key)})
			if err != nil {
				return err
			}
			origins := blameOf(entries, kv.ModRevision)
			obj := v.shown(0, false)
			if !*showSecrets {
				maskSecrets(obj, nil)
			}
			return s.printBlame(t, kv.ModRevision, obj, origins, out.format)
		}
	},
}

// origin is the change that last set a value.
type origin struct {
	Revision int64  `json:"revision"`
	UnixMs   int64  `json:"unixMs,omitempty"`
	Time     string `json:"time,omitempty"`
	Manager  string `json:"manager,omitempty"`
	// Oldest says the value was set at this revision or before it: the
	// oldest state the retention window still holds.
	Oldest bool `json:"atOrBefore,omitempty"`
}

// blameOf walks a key's log (oldest first) up to revision upto and
// returns, for each leaf path of the state at upto, the change that last
// set its value there. Only the last incarnation counts: a delete forgets
// everything before it.
func blameOf(entries []*historypb.LogEntry, upto int64) map[string]origin {
	rows := logRows(entries)
	blame := map[string]origin{}
	var prevObj map[string]any
	var prevLeaves map[string]any
	for i, e := range entries {
		if e.GetRevision() > upto {
			break
		}
		if e.GetDeleted() != 0 {
			blame, prevObj, prevLeaves = map[string]origin{}, nil, nil
			continue
		}
		cur := decodeValue(e.GetKv().GetValue()).Object
		if cur == nil {
			blame, prevObj, prevLeaves = map[string]origin{}, nil, nil
			continue
		}
		if prevObj == nil && e.GetPrevKv() != nil {
			// The oldest retained change of a key created before the
			// window: what it did not change was set at its prev state's
			// revision or before.
			if p := decodeValue(e.GetPrevKv().GetValue()).Object; p != nil {
				prevObj, prevLeaves = p, leaves(p)
				for path := range prevLeaves {
					blame[path] = origin{Revision: e.GetPrevKv().GetModRevision(), Oldest: true}
				}
			}
		}
		o := origin{Revision: e.GetRevision(), UnixMs: e.GetUnixMs()}
		if rows[i].Action == "restored" {
			o.Manager = "(restore)"
		} else {
			o.Manager = changeManager(prevObj, cur, e.GetUnixMs())
		}
		curLeaves := leaves(cur)
		next := map[string]origin{}
		for path, val := range curLeaves {
			if old, ok := prevLeaves[path]; ok && reflect.DeepEqual(old, val) {
				if b, ok := blame[path]; ok {
					next[path] = b
					continue
				}
			}
			next[path] = o
		}
		blame, prevObj, prevLeaves = next, cur, curLeaves
	}
	return blame
}

// blameSkipped are fields blame neither shows nor walks: managedFields
// are where managers come from, resourceVersion is not stored.
var blameSkipped = []string{"metadata.managedFields", "metadata.resourceVersion"}

// leaves are the paths of obj's values that are not maps or lists, and
// of its empty maps and lists.
func leaves(obj map[string]any) map[string]any {
	out := map[string]any{}
	var walkLeaves func(path string, v any)
	walkLeaves = func(path string, v any) {
		if slices.Contains(blameSkipped, path) {
			return
		}
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 {
				out[path] = t
			}
			for k, c := range t {
				walkLeaves(child(path, k), c)
			}
		case []any:
			if len(t) == 0 {
				out[path] = t
			}
			key := listKey(t)
			for i, c := range t {
				walkLeaves(itemPath(path, key, i, c), c)
			}
		default:
			out[path] = v
		}
	}
	walkLeaves("", obj)
	return out
}

// listKey is the field that names each item of a list, as the merge keys
// of Kubernetes' lists do (containers, env, ports and volumes by name,
// conditions by type): "" when not every item has a distinct one.
func listKey(items []any) string {
	for _, k := range []string{"name", "type"} {
		seen := map[string]bool{}
		ok := true
		for _, it := range items {
			m, isMap := it.(map[string]any)
			s, isStr := m[k].(string)
			if !isMap || !isStr || seen[s] {
				ok = false
				break
			}
			seen[s] = true
		}
		if ok && len(items) > 0 {
			return k
		}
	}
	return ""
}

// itemPath is the path of the i-th item of a list at path: by its key's
// value when the list has one, else by its index.
func itemPath(path, key string, i int, item any) string {
	if key == "" {
		return fmt.Sprintf("%s[%d]", path, i)
	}
	return fmt.Sprintf("%s[%s=%s]", path, key, item.(map[string]any)[key])
}

// blameLine is one line of YAML and the origin of its value, if it holds
// one.
type blameLine struct {
	text   string
	path   string
	origin *origin
}

// blameYAML renders obj as YAML, keys sorted and lists indented as
// kubectl prints them, one value a line (a string that spans lines is
// written quoted on one), each leaf's line with its origin.
func blameYAML(obj map[string]any, blame map[string]origin) []blameLine {
	var lines []blameLine
	add := func(text, path string, leaf bool) {
		l := blameLine{text: text, path: path}
		if o, ok := blame[path]; ok && leaf {
			l.origin = &o
		}
		lines = append(lines, l)
	}
	var emitKey func(prefix, ind, key, path string, v any)
	var emitItem func(ind, path string, v any)
	// emitKey writes key and its value v: its line begins with prefix,
	// and its map's keys are indented from ind.
	emitKey = func(prefix, ind, key, path string, v any) {
		head := prefix + yamlScalar(key) + ":"
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 {
				add(head+" {}", path, true)
				return
			}
			add(head, path, false)
			for _, k := range blameKeys(path, t) {
				emitKey(ind+"  ", ind+"  ", k, child(path, k), t[k])
			}
		case []any:
			if len(t) == 0 {
				add(head+" []", path, true)
				return
			}
			add(head, path, false)
			key := listKey(t)
			for i, c := range t {
				emitItem(ind, itemPath(path, key, i, c), c)
			}
		default:
			add(head+" "+yamlScalar(v), path, true)
		}
	}
	// emitItem writes a list item at ind: "- " and its value, a map's
	// first key on the dash's line, as YAML writes it.
	emitItem = func(ind, path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 {
				add(ind+"- {}", path, true)
				return
			}
			for i, k := range blameKeys(path, t) {
				prefix := ind + "  "
				if i == 0 {
					prefix = ind + "- "
				}
				emitKey(prefix, ind+"  ", k, child(path, k), t[k])
			}
		case []any:
			if len(t) == 0 {
				add(ind+"- []", path, true)
				return
			}
			add(ind+"-", path, false)
			key := listKey(t)
			for i, c := range t {
				emitItem(ind+"  ", itemPath(path, key, i, c), c)
			}
		default:
			add(ind+"- "+yamlScalar(v), path, true)
		}
	}
	for _, k := range blameKeys("", obj) {
		emitKey("", "", k, child("", k), obj[k])
	}
	return lines
}

// blameKeys are m's keys, sorted, but for the fields blame skips.
func blameKeys(path string, m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !slices.Contains(blameSkipped, child(path, k)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// blameReport is blame's -o json and -o yaml: the object, and the origin
// of each of its values by path.
type blameReport struct {
	Object   string         `json:"object"`
	Revision int64          `json:"revision"`
	Fields   []blameField   `json:"fields"`
	Value    map[string]any `json:"value"`
}

type blameField struct {
	Path string `json:"path"`
	origin
}

func (s *session) printBlame(t target, rev int64, obj map[string]any, blame map[string]origin, format string) error {
	lines := blameYAML(obj, blame)
	if format != "text" {
		rep := blameReport{Object: t.String(), Revision: rev, Value: obj, Fields: []blameField{}}
		for _, l := range lines {
			if l.origin != nil {
				o := *l.origin
				o.Time = s.when(o.UnixMs)
				rep.Fields = append(rep.Fields, blameField{Path: l.path, origin: o})
			}
		}
		b, err := render(rep, format)
		if err != nil {
			return err
		}
		_, err = s.out.Write(b)
		return err
	}
	tw := newTabular(s.out, 2)
	fmt.Fprintln(tw, "REVISION\tAGE\tMANAGER\t"+t.nameOnly()+" at revision "+fmt.Sprint(rev))
	for _, l := range lines {
		rev, age, manager := "", "", ""
		if o := l.origin; o != nil {
			rev, manager = fmt.Sprint(o.Revision), o.Manager
			if o.Oldest {
				rev = "<=" + rev
			} else {
				age = s.age(o.UnixMs)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rev, age, manager, l.text)
	}
	return tw.Flush()
}

// yamlScalar is v as YAML writes a scalar, on one line.
func yamlScalar(v any) string {
	if s, ok := v.(string); ok && strings.ContainsAny(s, "\n\r") {
		b, _ := render(s, "json")
		return strings.TrimSpace(string(b))
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
