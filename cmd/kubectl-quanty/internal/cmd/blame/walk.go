package blame

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

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
	rows := objects.Changes(entries)
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
		cur := objects.Decode(e.GetKv().GetValue()).Object
		if cur == nil {
			blame, prevObj, prevLeaves = map[string]origin{}, nil, nil
			continue
		}
		if prevObj == nil && e.GetPrevKv() != nil {
			// The oldest retained change of a key created before the
			// window: what it did not change was set at its prev state's
			// revision or before.
			if p := objects.Decode(e.GetPrevKv().GetValue()).Object; p != nil {
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
			o.Manager = objects.ChangeManager(prevObj, cur, e.GetUnixMs())
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
				walkLeaves(objects.Child(path, k), c)
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
				emitKey(ind+"  ", ind+"  ", k, objects.Child(path, k), t[k])
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
				emitKey(prefix, ind+"  ", k, objects.Child(path, k), t[k])
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
		emitKey("", "", k, objects.Child("", k), obj[k])
	}
	return lines
}

// blameKeys are m's keys, sorted, but for the fields blame skips.
func blameKeys(path string, m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !slices.Contains(blameSkipped, objects.Child(path, k)) {
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

func (o *Options) print(t util.Target, rev int64, obj map[string]any, blame map[string]origin) error {
	lines := blameYAML(obj, blame)
	if o.Output.Format != "text" {
		rep := blameReport{Object: t.String(), Revision: rev, Value: obj, Fields: []blameField{}}
		for _, l := range lines {
			if l.origin != nil {
				or := *l.origin
				or.Time = o.clock.When(or.UnixMs)
				rep.Fields = append(rep.Fields, blameField{Path: l.path, origin: or})
			}
		}
		b, err := terminal.Render(rep, o.Output.Format)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	tw := terminal.NewTabular(o.Out, 2)
	fmt.Fprintln(tw, "REVISION\tAGE\tMANAGER\t"+t.NameOnly()+" at revision "+fmt.Sprint(rev))
	for _, l := range lines {
		rev, age, manager := "", "", ""
		if or := l.origin; or != nil {
			rev, manager = fmt.Sprint(or.Revision), or.Manager
			if or.Oldest {
				rev = "<=" + rev
			} else {
				age = o.clock.Age(or.UnixMs)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rev, age, manager, l.text)
	}
	return tw.Flush()
}

// yamlScalar is v as YAML writes a scalar, on one line: a string that
// spans lines as its JSON (which YAML reads as the same string), and each
// character a Screen would escape as YAML's escape of it.
func yamlScalar(v any) string {
	if s, ok := v.(string); ok && strings.ContainsAny(s, "\n\r") {
		b, _ := terminal.Render(s, "json")
		return strings.TrimSpace(string(b))
	}
	b, err := terminal.Render(v, "yaml")
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
