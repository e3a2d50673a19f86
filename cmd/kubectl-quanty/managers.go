package main

// Who made a change, from the object's managedFields: kube-apiserver's
// field manager stamps the time of an entry (manager, operation,
// subresource) whenever a request of that manager changed a field, or
// applied (k8s.io/apimachinery's managedFieldsUpdater), and leaves the
// others' times alone. So the entry whose time a change moved, or that the
// change added, names the manager that made it. Where none moved (the same
// manager wrote twice within one second: times have second precision), an
// entry stamped in the change's own second is taken. Anything else is left
// empty rather than guessed: a restore writes back the old managedFields
// (its times move backwards), a delete carries none, an object written
// without a field manager (by QuantyKube, by etcdctl) has none.

import (
	"slices"
	"strings"
	"time"
)

// fieldsEntry is one managedFields entry, as it is compared.
type fieldsEntry struct {
	id     string // manager, operation and subresource
	name   string // the manager, as printed
	time   string
	fields string
}

// managedEntries reads obj's metadata.managedFields.
func managedEntries(obj map[string]any) []fieldsEntry {
	meta, _ := obj["metadata"].(map[string]any)
	list, _ := meta["managedFields"].([]any)
	var out []fieldsEntry
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		fields, _ := m["fieldsV1"].(map[string]any)
		out = append(out, fieldsEntry{
			id:   str("manager") + "\x00" + str("operation") + "\x00" + str("subresource"),
			name: str("manager"), time: str("time"), fields: canonical(fields),
		})
	}
	return out
}

// canonical is a fieldsV1 set as a comparable string.
func canonical(m map[string]any) string {
	if m == nil {
		return ""
	}
	b, err := render(m, "json")
	if err != nil {
		return ""
	}
	return string(b)
}

// changeManager is the field manager that turned prev into cur (prev nil
// for a create), committed at unixMs; "" where managedFields do not say.
func changeManager(prev, cur map[string]any, unixMs int64) string {
	name, _ := changeManagerStamp(prev, cur, unixMs)
	return name
}

// changeManagerStamp is changeManager, and the time its entry was stamped
// with (RFC 3339, seconds).
func changeManagerStamp(prev, cur map[string]any, unixMs int64) (string, string) {
	if cur == nil {
		return "", ""
	}
	before := map[string]fieldsEntry{}
	for _, e := range managedEntries(prev) {
		before[e.id] = e
	}
	var moved, sameSecond []fieldsEntry
	commit := time.UnixMilli(unixMs).UTC()
	for _, e := range managedEntries(cur) {
		b, had := before[e.id]
		if !had || e.time > b.time || e.time != b.time && b.time == "" {
			moved = append(moved, e)
			continue
		}
		// Stamped within the commit's second, or the one before (the
		// request is stamped before its commit).
		if t, err := time.Parse(time.RFC3339, e.time); err == nil && !t.After(commit) && commit.Sub(t) < 2*time.Second && e.fields != b.fields {
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
	newest := slices.MaxFunc(moved, func(a, b fieldsEntry) int { return strings.Compare(a.time, b.time) }).time
	var names []string
	for _, e := range moved {
		if e.time == newest && !slices.Contains(names, e.name) {
			names = append(names, e.name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ","), newest
}
