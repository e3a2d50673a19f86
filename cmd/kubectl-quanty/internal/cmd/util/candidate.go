package util

import (
	"cmp"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Candidate is an object a command over a namespace (undelete, revert)
// may write back: its resource, key and name, and a state of it.
type Candidate struct {
	Resource discovery.Resource
	Key      string
	Object   storagekey.Object
	KV       *mvccpb.KeyValue
}

// Value is the state's value, decoded.
func (c Candidate) Value() objects.Value { return objects.Decode(c.KV.Value) }

// String is kubectl's TYPE/NAME of it.
func (c Candidate) String() string { return c.Resource.TypeName() + "/" + c.Object.Name }

// SkipReason says why a controller, not the command, brings c back, or why
// c must not come back; "" to write it (objects.SkipReason).
func (c Candidate) SkipReason(services map[string]bool) string {
	return objects.SkipReason(c.Resource.Resource, c.Object.Name, c.KV, services)
}

// Skipped is a candidate left out, and why.
type Skipped struct {
	Candidate
	Reason string
}

// SkipReport is a skipped candidate as -o json prints it.
type SkipReport struct {
	Object string `json:"object"`
	Reason string `json:"reason"`
}

// Order splits the candidates into those to restore, in rank order
// (objects.Rank, then by type and name), and those skipped.
func Order(cands []Candidate) ([]Candidate, []Skipped) {
	services := map[string]bool{}
	for _, c := range cands {
		if c.Resource.String() == "services" && objects.BeingDeleted(c.KV) == "" {
			services[c.Object.Name] = true
		}
	}
	var restore []Candidate
	var skips []Skipped
	for _, c := range cands {
		if why := c.SkipReason(services); why != "" {
			skips = append(skips, Skipped{c, why})
			continue
		}
		restore = append(restore, c)
	}
	slices.SortStableFunc(restore, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(objects.Rank(a.Resource.Resource), objects.Rank(b.Resource.Resource)),
			cmp.Compare(a.Resource.String(), b.Resource.String()), cmp.Compare(a.Object.Name, b.Object.Name))
	})
	return restore, skips
}
