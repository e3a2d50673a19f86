package linearizability

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of the workload.
type Kind int

const (
	Get Kind = iota
	// Range reads a group's prefix with a limit (0: none): count, more and
	// the first limit keys.
	Range
	Put
	Delete
	// DeleteRange deletes a group's prefix.
	DeleteRange
	// Txn compares Key's mod_revision (or value) and puts Value if it
	// holds, else reads Key: kube-apiserver's update.
	Txn
)

var kindNames = [...]string{"get", "range", "put", "delete", "delete-range", "txn"}

func (k Kind) String() string { return kindNames[k] }

func (k Kind) writes() bool { return k != Get && k != Range }

// Request is one operation's input.
type Request struct {
	Kind  Kind
	Key   string // Get, Put, Delete, Txn; the prefix for Range and DeleteRange
	Value string // Put, and Txn's put: unique in a history
	Limit int64  // Range
	// Txn's compare: ModRev == the key's mod_revision (0: absent), or,
	// with ByValue, Expect == its value (false for an absent key, as etcd).
	ByValue bool
	ModRev  int64
	Expect  string
}

func (r Request) String() string {
	switch r.Kind {
	case Get, Delete:
		return fmt.Sprintf("%s(%s)", r.Kind, r.Key)
	case Range:
		return fmt.Sprintf("range(%s*, limit %d)", r.Key, r.Limit)
	case DeleteRange:
		return fmt.Sprintf("delete-range(%s*)", r.Key)
	case Put:
		return fmt.Sprintf("put(%s=%s)", r.Key, r.Value)
	}
	cmp := fmt.Sprintf("mod=%d", r.ModRev)
	if r.ByValue {
		cmp = fmt.Sprintf("value=%q", r.Expect)
	}
	return fmt.Sprintf("txn(if %s %s then put %s else get)", r.Key, cmp, r.Value)
}

// KV is a key's state as the workload sees it.
type KV struct {
	Key, Value                 string
	ModRev, CreateRev, Version int64
}

func (kv KV) String() string {
	return fmt.Sprintf("%s=%s@%d(c%d,v%d)", kv.Key, kv.Value, kv.ModRev, kv.CreateRev, kv.Version)
}

// Response is one operation's output. Unknown is a write whose outcome the
// client never learnt (an error, a timeout, a killed server).
type Response struct {
	Unknown   bool
	Rev       int64 // the header's revision
	KVs       []KV  // Get, Range, and Txn's else branch
	Count     int64 // Range
	More      bool  // Range
	Deleted   int64 // Delete, DeleteRange
	Succeeded bool  // Txn
}

func (r Response) String() string {
	if r.Unknown {
		return "unknown"
	}
	s := fmt.Sprintf("rev %d", r.Rev)
	if r.KVs != nil {
		s += fmt.Sprintf(" %v", r.KVs)
	}
	if r.Count != 0 || r.More {
		s += fmt.Sprintf(" count %d more %v", r.Count, r.More)
	}
	if r.Deleted != 0 {
		s += fmt.Sprintf(" deleted %d", r.Deleted)
	}
	if r.Succeeded {
		s += " succeeded"
	}
	return s
}

// State is the model's state: etcd's key-value store with its single
// revision counter. A State is never changed once made.
type State struct {
	Rev int64
	KVs map[string]KV
}

func (s State) keys(prefix string) []string {
	var ks []string
	for k := range s.KVs {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (s State) with(rev int64, set *KV, del []string) State {
	n := State{Rev: rev, KVs: make(map[string]KV, len(s.KVs)+1)}
	for k, v := range s.KVs {
		n.KVs[k] = v
	}
	for _, k := range del {
		delete(n.KVs, k)
	}
	if set != nil {
		n.KVs[set.Key] = *set
	}
	return n
}

func (s State) put(key, value string) State {
	rev := s.Rev + 1
	kv := KV{Key: key, Value: value, ModRev: rev, CreateRev: rev, Version: 1}
	if old, ok := s.KVs[key]; ok {
		kv.CreateRev, kv.Version = old.CreateRev, old.Version+1
	}
	return s.with(rev, &kv, nil)
}

// Apply is what the operation does to s, and the answer a correct store
// gives.
func (s State) Apply(r Request) (State, Response) {
	switch r.Kind {
	case Get:
		resp := Response{Rev: s.Rev, KVs: []KV{}}
		if kv, ok := s.KVs[r.Key]; ok {
			resp.KVs = append(resp.KVs, kv)
		}
		return s, resp
	case Range:
		ks := s.keys(r.Key)
		resp := Response{Rev: s.Rev, KVs: []KV{}, Count: int64(len(ks))}
		if r.Limit > 0 && int64(len(ks)) > r.Limit {
			ks, resp.More = ks[:r.Limit], true
		}
		for _, k := range ks {
			resp.KVs = append(resp.KVs, s.KVs[k])
		}
		return s, resp
	case Put:
		n := s.put(r.Key, r.Value)
		return n, Response{Rev: n.Rev}
	case Delete, DeleteRange:
		ks := []string{r.Key}
		if r.Kind == DeleteRange {
			ks = s.keys(r.Key)
		} else if _, ok := s.KVs[r.Key]; !ok {
			ks = nil
		}
		if len(ks) == 0 {
			return s, Response{Rev: s.Rev}
		}
		n := s.with(s.Rev+1, nil, ks)
		return n, Response{Rev: n.Rev, Deleted: int64(len(ks))}
	case Txn:
		kv, ok := s.KVs[r.Key]
		holds := kv.ModRev == r.ModRev
		if r.ByValue {
			holds = ok && kv.Value == r.Expect
		}
		if holds {
			n := s.put(r.Key, r.Value)
			return n, Response{Rev: n.Rev, Succeeded: true}
		}
		resp := Response{Rev: s.Rev, KVs: []KV{}}
		if ok {
			resp.KVs = append(resp.KVs, kv)
		}
		return s, resp
	}
	panic(fmt.Sprintf("linearizability: unknown operation %d", r.Kind))
}

func (s State) equal(o State) bool {
	if s.Rev != o.Rev || len(s.KVs) != len(o.KVs) {
		return false
	}
	for k, v := range s.KVs {
		if ov, ok := o.KVs[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

func (s State) hash() uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, s.Rev)
	for _, k := range s.keys("") {
		kv := s.KVs[k]
		fmt.Fprint(h, "|", k, "=", kv.Value, "@", kv.ModRev)
	}
	return h.Sum64()
}

func (s State) String() string {
	parts := []string{fmt.Sprintf("rev %d", s.Rev)}
	for _, k := range s.keys("") {
		parts = append(parts, s.KVs[k].String())
	}
	return strings.Join(parts, " ")
}

// sameResponse compares a store's answer with the model's. Only what the
// workload asked for is compared: a Txn that took its else branch is
// judged by its read, one that succeeded by its revision.
func sameResponse(got, want Response) bool {
	if got.Rev != want.Rev || got.Succeeded != want.Succeeded || got.Deleted != want.Deleted ||
		got.Count != want.Count || got.More != want.More || len(got.KVs) != len(want.KVs) {
		return false
	}
	for i := range got.KVs {
		if got.KVs[i] != want.KVs[i] {
			return false
		}
	}
	return true
}

// Model is etcd's key-value store for porcupine. Every operation it is
// given has a known answer: unknown outcomes are resolved before the check
// (resolve), because an operation that may or may not have happened at any
// moment after its call multiplies the states porcupine must explore.
func Model(init State) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			s := state.(State)
			next, want := s.Apply(input.(Request))
			return sameResponse(output.(Response), want), next
		},
		Equal: func(a, b any) bool { return a.(State).equal(b.(State)) },
		Hash:  func(s any) uint64 { return s.(State).hash() },
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(s any) string { return s.(State).String() },
	}
}
