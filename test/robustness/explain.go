package robustness

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
)

// Regressions finds, in the answers clients saw, the simplest kind of
// linearizability violation: an answer that reports an older revision than
// another answer had reported before the request was sent. Every answer's
// header is the store's revision when it was served, so in real time the
// revisions must never go back. It returns at most limit of them, in
// words, to say why porcupine rejected a history (porcupine itself only
// says that it did).
func Regressions(reports []report.ClientReport, limit int) []string {
	type answer struct {
		client int
		op     porcupine.Operation
		rev    int64
	}
	var all []answer
	for _, r := range reports {
		for _, op := range r.KeyValue {
			resp := op.Output.(model.MaybeEtcdResponse)
			// Compact answers carry no revision the model checks.
			if resp.Error != "" || resp.Persisted || resp.Revision <= 0 || op.Input.(model.EtcdRequest).Type == model.Compact {
				continue
			}
			all = append(all, answer{r.ClientID, op, resp.Revision})
		}
	}
	byReturn := append([]answer(nil), all...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].op.Return < byReturn[j].op.Return })
	sort.Slice(all, func(i, j int) bool { return all[i].op.Call < all[j].op.Call })
	var out []string
	var best *answer // the highest revision returned so far
	next := 0
	for _, b := range all {
		for next < len(byReturn) && byReturn[next].op.Return < b.op.Call {
			if best == nil || byReturn[next].rev > best.rev {
				best = &byReturn[next]
			}
			next++
		}
		if best != nil && b.rev < best.rev {
			out = append(out, fmt.Sprintf("client %d %s, sent at %v, answered revision %d after client %d's %s had answered revision %d at %v",
				b.client, describeOp(b.op), at(b.op.Call), b.rev, best.client, describeOp(best.op), best.rev, at(best.op.Return)))
			if len(out) == limit {
				break
			}
		}
	}
	return out
}

func describeOp(op porcupine.Operation) string {
	return model.NonDeterministicModel.DescribeOperation(op.Input, op.Output)
}

func at(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }
