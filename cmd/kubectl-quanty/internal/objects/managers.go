package objects

// Who made a change, from the object's managedFields. An update gives the
// fields it changed to its field manager alone, and an apply to its
// manager (k8s.io/apimachinery's field manager, through
// sigs.k8s.io/structured-merge-diff): so the entry that owns the fields a
// change set, in the state after it, names the manager that made it. It
// also stamps the time of that entry (to the second) whenever its request
// changed a field, and leaves the others' times alone: where no changed
// field can be looked up (a create, a change that only removed fields),
// the entry whose time the change moved, or that it added, names it.
// Anything else is left empty rather than guessed: a delete carries no
// managedFields of its own, an object written without a field manager (by
// QuantyKube, by etcdctl) has none, and a restore writes back the old
// ones (the changes view tells restores apart: internal/cmd/changes).

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FieldsEntry is one managedFields entry, as it is compared.
type FieldsEntry struct {
	ID     string // manager, operation and subresource
	Name   string // the manager, as printed
	Time   string
	fields string         // canonical, to compare
	set    map[string]any // fieldsV1, as its JSON reads
}

// ManagedEntries reads obj's metadata.managedFields.
func ManagedEntries(obj map[string]any) []FieldsEntry {
	meta, _ := obj["metadata"].(map[string]any)
	list, _ := meta["managedFields"].([]any)
	var out []FieldsEntry
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		fields, _ := m["fieldsV1"].(map[string]any)
		out = append(out, FieldsEntry{
			ID:   str("manager") + "\x00" + str("operation") + "\x00" + str("subresource"),
			Name: str("manager"), Time: str("time"), fields: canonical(fields), set: fields,
		})
	}
	return out
}

// canonical is a fieldsV1 set as a comparable string.
func canonical(m map[string]any) string {
	if m == nil {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

// ChangeManager is the field manager that turned prev into cur (prev nil
// for a create), committed at unixMs; "" where managedFields do not say.
func ChangeManager(prev, cur map[string]any, unixMs int64) string {
	name, _ := ChangeManagerStamp(prev, cur, unixMs)
	return name
}

// ChangeManagerStamp is ChangeManager, and the time its entry was stamped
// with (RFC 3339, seconds).
func ChangeManagerStamp(prev, cur map[string]any, unixMs int64) (string, string) {
	if cur == nil {
		return "", ""
	}
	if prev != nil {
		if name, stamp, ok := ownerOfChange(prev, cur); ok {
			return name, stamp
		}
	}
	before := map[string]FieldsEntry{}
	for _, e := range ManagedEntries(prev) {
		before[e.ID] = e
	}
	var moved, sameSecond []FieldsEntry
	commit := time.UnixMilli(unixMs).UTC()
	for _, e := range ManagedEntries(cur) {
		b, had := before[e.ID]
		if !had || e.Time > b.Time || e.Time != b.Time && b.Time == "" {
			moved = append(moved, e)
			continue
		}
		// Stamped within the commit's second, or the one before (the
		// request is stamped before its commit).
		if t, err := time.Parse(time.RFC3339, e.Time); err == nil && !t.After(commit) && commit.Sub(t) < 2*time.Second && e.fields != b.fields {
			sameSecond = append(sameSecond, e)
		}
	}
	if len(moved) == 0 {
		moved = sameSecond
	}
	if len(moved) == 0 {
		return "", ""
	}
	// The newest stamp made it; several with that stamp (a create by one
	// request names one manager, but an object may be written with
	// several entries by hand) are all named.
	newest := slices.MaxFunc(moved, func(a, b FieldsEntry) int { return strings.Compare(a.Time, b.Time) }).Time
	var names []string
	for _, e := range moved {
		if e.Time == newest && !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ","), newest
}

// ownerOfChange is the manager owning the most of the fields the change
// from prev to cur set, and its stamp; false when no entry owns any.
func ownerOfChange(prev, cur map[string]any) (string, string, bool) {
	paths := ChangedFields(prev, cur)
	best, bestStamp, bestCount := []string{}, "", 0
	for _, e := range ManagedEntries(cur) {
		n := 0
		for _, p := range paths {
			if owns(e.set, p) {
				n++
			}
		}
		switch {
		case n == 0 || n < bestCount:
		case n > bestCount:
			best, bestStamp, bestCount = []string{e.Name}, e.Time, n
		case !slices.Contains(best, e.Name):
			// Shared ownership (two appliers of the same value): the
			// one stamped last made this change.
			if e.Time > bestStamp {
				best, bestStamp = []string{e.Name}, e.Time
			}
		}
	}
	if bestCount == 0 {
		return "", "", false
	}
	return best[0], bestStamp, true
}

// owns reports whether a fieldsV1 set holds path (as changedFields writes
// paths), as far as its field keys ("f:name") go: a path into a list item
// is owned where the list is, since fieldsV1 names items by key or value
// ("k:{...}", "v:..."), not by index.
func owns(set map[string]any, path string) bool {
	node := set
	for _, tok := range pathTokens(path) {
		if tok.index {
			return true
		}
		next, ok := node["f:"+tok.name].(map[string]any)
		if !ok {
			return false
		}
		node = next
	}
	return node != nil
}

type pathToken struct {
	name  string
	index bool
}

// pathTokens splits a path as Child and walk write it (spec.a[0].b,
// metadata.labels["app.kubernetes.io/name"]); nil where it does not parse.
func pathTokens(p string) []pathToken {
	var out []pathToken
	for p != "" {
		switch {
		case p[0] == '.':
			p = p[1:]
		case strings.HasPrefix(p, "[\""):
			q, err := strconv.QuotedPrefix(p[1:])
			if err != nil || !strings.HasPrefix(p[1+len(q):], "]") {
				return nil
			}
			name, _ := strconv.Unquote(q)
			out = append(out, pathToken{name: name})
			p = p[len(q)+2:]
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return nil
			}
			out = append(out, pathToken{index: true})
			p = p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			out = append(out, pathToken{name: p[:end]})
			p = p[end:]
		}
	}
	return out
}
