package robustness

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
)

// Change is one key's change at a revision, as the store's history holds
// it.
type Change struct {
	Delete bool
	Key    string
	Value  []byte // a put's
	Lease  int64  // a put's
}

// Revision is what one revision changed.
type Revision struct {
	Rev     int64
	Changes []Change
}

// Rebuilt is the list of requests a store persisted, made from its
// history.
type Rebuilt struct {
	// Requests are the requests that produced the revisions, in revision
	// order, each lease's grant before the first request that uses it:
	// what etcd's validators take from etcd's WAL. Requests that changed
	// nothing (a failed compare without writes, a delete of an absent key,
	// a revoke of a lease without keys) leave no trace in a history and
	// are not in it; nor are compactions, which set no revision.
	Requests []model.EtcdRequest
	// Revisions is how many revisions were matched.
	Revisions int
	// Unacknowledged is how many of them were produced by a request whose
	// client saw an error (its outcome unknown to the client).
	Unacknowledged int
	// Ambiguous is how many revisions different requests could each have
	// produced: the first acknowledged at that revision, else the first
	// sent, was taken.
	Ambiguous int
}

// candidate is a write a client sent.
type candidate struct {
	req  model.EtcdRequest
	json string
	rev  int64 // the revision its answer reported (0: no answer)
	call int64
	used bool
}

type putKey struct {
	key   string
	value model.ValueOrHash
}

// Rebuild matches each revision of revs, which must run from 2 (the first
// write of an empty store) without a gap, to the write of reports that
// produced it: the write that, applied by etcd's model to the state the
// revisions before left, takes exactly that revision and makes exactly its
// changes (keys, values, leases, deletes). A write answered with another
// revision cannot have made it. A revision no write explains, a gap, or a
// history that does not start at 2 is an error.
func Rebuild(reports []report.ClientReport, revs []Revision) (*Rebuilt, error) {
	byPut := map[putKey][]*candidate{}
	byDelete := map[string][]*candidate{}
	var revokes []*candidate
	for _, r := range reports {
		for _, op := range r.KeyValue {
			req := op.Input.(model.EtcdRequest)
			resp := op.Output.(model.MaybeEtcdResponse)
			if req.Type != model.LeaseRevoke && (req.Type != model.Txn || req.IsRead()) {
				continue
			}
			b, err := json.Marshal(req)
			if err != nil {
				return nil, err
			}
			c := &candidate{req: req, json: string(b), call: op.Call}
			if resp.Error == "" {
				c.rev = resp.Revision
			}
			if req.Type == model.LeaseRevoke {
				revokes = append(revokes, c)
				continue
			}
			for _, o := range append(slices.Clip(req.Txn.OperationsOnSuccess), req.Txn.OperationsOnFailure...) {
				switch o.Type {
				case model.PutOperation:
					k := putKey{o.Put.Key, o.Put.Value}
					byPut[k] = append(byPut[k], c)
				case model.DeleteOperation:
					byDelete[o.Delete.Key] = append(byDelete[o.Delete.Key], c)
				}
			}
		}
	}
	out := &Rebuilt{}
	state := emptyState()
	want := int64(2)
	for _, rv := range revs {
		if rv.Rev != want {
			if want == 2 {
				return nil, fmt.Errorf("the history starts at revision %d, not 2: the store was not empty", rv.Rev)
			}
			return nil, fmt.Errorf("revision %d is missing from the history (the next is %d)", want, rv.Rev)
		}
		want++
		changes := normalize(rv.Changes)
		var pool []*candidate
		if c, ok := firstPut(changes); ok {
			pool = byPut[putKey{c.key, c.value}]
		} else if len(changes) > 0 {
			pool = append(slices.Clip(byDelete[changes[0].key]), revokes...)
		}
		var best *candidate
		var bestState model.EtcdState
		var bestGrants []model.EtcdRequest
		explained := map[string]bool{}
		for _, c := range pool {
			if c.used || (c.rev != 0 && c.rev != rv.Rev) {
				continue
			}
			next, grants, ok := apply(state, c.req, rv.Rev)
			if !ok || !slices.Equal(diff(state, next), changes) {
				continue
			}
			explained[c.json] = true
			if best == nil || (c.rev != 0 && best.rev == 0) || (c.rev == best.rev && c.call < best.call) {
				best, bestState, bestGrants = c, next, grants
			}
		}
		if best == nil {
			return nil, fmt.Errorf("revision %d (%s) is explained by no client request: %s", rv.Rev, describe(changes), whyNot(state, pool, rv.Rev))
		}
		if len(explained) > 1 {
			out.Ambiguous++
		}
		if best.rev == 0 {
			out.Unacknowledged++
		}
		best.used = true
		state = bestState
		out.Requests = append(append(out.Requests, bestGrants...), best.req)
		out.Revisions++
	}
	return out, nil
}

// emptyState is etcd's model of an empty store (its own constructor is
// unexported).
func emptyState() model.EtcdState {
	return model.EtcdState{
		Revision:        1,
		CompactRevision: -1,
		KeyValues:       map[string]model.ValueRevision{},
		KeyLeases:       map[string]int64{},
		Leases:          map[int64]model.EtcdLease{},
	}
}

// apply steps etcd's model from state by req, granting first the leases
// req puts keys with that the state lacks; ok reports that it took
// revision rev.
func apply(state model.EtcdState, req model.EtcdRequest, rev int64) (next model.EtcdState, grants []model.EtcdRequest, ok bool) {
	next = state
	if req.Type == model.Txn {
		for _, o := range append(slices.Clip(req.Txn.OperationsOnSuccess), req.Txn.OperationsOnFailure...) {
			if id := o.Put.LeaseID; o.Type == model.PutOperation && id != 0 {
				if _, have := next.Leases[id]; !have {
					g := model.EtcdRequest{Type: model.LeaseGrant, LeaseGrant: &model.LeaseGrantRequest{LeaseID: id}}
					next, _ = next.Step(g)
					grants = append(grants, g)
				}
			}
		}
	}
	next, resp := next.Step(req)
	return next, grants, resp.Error == "" && next.Revision == rev
}

// change is a Change as the model sees it: values as the model keeps them
// (long ones hashed).
type change struct {
	delete bool
	key    string
	value  model.ValueOrHash
	lease  int64
}

func normalize(cs []Change) []change {
	out := make([]change, 0, len(cs))
	for _, c := range cs {
		n := change{delete: c.Delete, key: c.Key}
		if !c.Delete {
			n.value, n.lease = model.ToValueOrHash(string(c.Value)), c.Lease
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func firstPut(cs []change) (change, bool) {
	for _, c := range cs {
		if !c.delete {
			return c, true
		}
	}
	return change{}, false
}

// diff is what took the model from a to b, in key order.
func diff(a, b model.EtcdState) []change {
	var out []change
	for k, v := range b.KeyValues {
		if old, ok := a.KeyValues[k]; !ok || old != v {
			out = append(out, change{key: k, value: v.Value, lease: b.KeyLeases[k]})
		}
	}
	for k := range a.KeyValues {
		if _, ok := b.KeyValues[k]; !ok {
			out = append(out, change{delete: true, key: k})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func describe(cs []change) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		switch {
		case c.delete:
			parts = append(parts, "delete "+c.key)
		case c.lease != 0:
			parts = append(parts, fmt.Sprintf("put %s=%s with lease %x", c.key, showValue(c.value), c.lease))
		default:
			parts = append(parts, fmt.Sprintf("put %s=%s", c.key, showValue(c.value)))
		}
	}
	return strings.Join(parts, ", ")
}

func showValue(v model.ValueOrHash) string {
	if v.Value != "" || v.Hash == 0 {
		return fmt.Sprintf("%q", v.Value)
	}
	return fmt.Sprintf("(hash %x)", v.Hash)
}

// whyNot says what the requests that touch the revision's first key would
// have done instead.
func whyNot(state model.EtcdState, pool []*candidate, rev int64) string {
	if len(pool) == 0 {
		return "no client sent a write of that first change"
	}
	var parts []string
	for i, c := range pool {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(pool)-i))
			break
		}
		var what string
		switch {
		case c.used:
			what = "already matched to an earlier revision"
		case c.rev != 0 && c.rev != rev:
			what = fmt.Sprintf("answered revision %d", c.rev)
		default:
			next, _, ok := apply(state, c.req, rev)
			if !ok {
				what = fmt.Sprintf("would have left revision %d", next.Revision)
			} else {
				what = "would have made " + describe(diff(state, next))
			}
		}
		parts = append(parts, c.json+": "+what)
	}
	return strings.Join(parts, "; ")
}
