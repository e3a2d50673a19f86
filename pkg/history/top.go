package history

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	// DefaultTopLimit and MaxTopLimit bound the rows of each of Top's lists.
	DefaultTopLimit = 10
	MaxTopLimit     = 1000
)

// Top answers what fills the retained history: the resource types, the
// namespaces within them and the keys that hold the most of it, by bytes
// or by revisions, with each one's changes in the last hour (a lease
// storm's mark). It is one pass over the log (mvcc.Store.Usage); keys are
// named as kube-apiserver lays them out under /registry (pkg/storagekey),
// others by their first two path segments.
func (s *Service) Top(ctx context.Context, r *historypb.TopRequest) (*historypb.TopResponse, error) {
	var by func(u *historypb.Usage) int64
	switch r.By {
	case "", "bytes":
		by = func(u *historypb.Usage) int64 { return u.Bytes }
	case "revisions":
		by = func(u *historypb.Usage) int64 { return u.Revisions }
	default:
		return nil, invalid(fmt.Sprintf("by %q: want bytes or revisions", r.By))
	}
	limit := int(r.Limit)
	switch {
	case r.Limit < 0 || r.Limit > MaxTopLimit:
		return nil, invalid(fmt.Sprintf("limit %d: want 0 (%d) to %d", r.Limit, DefaultTopLimit, MaxTopLimit))
	case r.Limit == 0:
		limit = DefaultTopLimit
	}
	header := s.store.Rev()
	keys := storagekey.New(storagekey.DefaultPrefix)
	types, namespaces := map[string]*historypb.Usage{}, map[string]*historypb.Usage{}
	total := &historypb.Usage{Name: "all keys"}
	top := &topKeys{limit: limit, by: by}
	err := s.store.Usage(ctx, time.Now().Add(-time.Hour).UnixMilli(), func(k mvcc.KeyUsage) error {
		u := &historypb.Usage{Name: string(k.Key), Revisions: k.Revisions, Bytes: k.Bytes, RevisionsLastHour: k.RecentRevisions, OldestUnixMs: k.OldestUnixMs}
		typ, ns := groupsOf(keys, k.Key)
		add(types, typ, u)
		if ns != "" {
			add(namespaces, ns, u)
		}
		total.Revisions += u.Revisions
		total.Bytes += u.Bytes
		total.RevisionsLastHour += u.RevisionsLastHour
		if total.OldestUnixMs == 0 || u.OldestUnixMs < total.OldestUnixMs {
			total.OldestUnixMs = u.OldestUnixMs
		}
		top.offer(u)
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &historypb.TopResponse{
		Types:          largest(types, limit, by),
		Namespaces:     largest(namespaces, limit, by),
		Keys:           top.sorted(),
		Total:          total,
		HeaderRevision: header,
	}, nil
}

// groupsOf names key's resource type and, for a namespaced object, its
// namespace within the type.
func groupsOf(keys *storagekey.Table, key []byte) (typ, ns string) {
	if o, ok := keys.Parse(key); ok {
		typ = o.Resource.String()
		if o.Namespace != "" {
			ns = typ + " in " + o.Namespace
		}
		return typ, ns
	}
	// Not an object: its first two path segments ("/registry/masterleases/").
	parts := strings.SplitN(string(key), "/", 4)
	if len(parts) >= 3 {
		return strings.Join(parts[:3], "/") + "/", ""
	}
	return string(key), ""
}

func add(m map[string]*historypb.Usage, name string, u *historypb.Usage) {
	g := m[name]
	if g == nil {
		g = &historypb.Usage{Name: name, OldestUnixMs: u.OldestUnixMs}
		m[name] = g
	}
	g.Revisions += u.Revisions
	g.Bytes += u.Bytes
	g.RevisionsLastHour += u.RevisionsLastHour
	g.OldestUnixMs = min(g.OldestUnixMs, u.OldestUnixMs)
}

// largest is the limit largest groups of m by by, ties by name.
func largest(m map[string]*historypb.Usage, limit int, by func(*historypb.Usage) int64) []*historypb.Usage {
	out := make([]*historypb.Usage, 0, len(m))
	for _, u := range m {
		out = append(out, u)
	}
	sortUsage(out, by)
	return out[:min(limit, len(out))]
}

func sortUsage(us []*historypb.Usage, by func(*historypb.Usage) int64) {
	slices.SortFunc(us, func(a, b *historypb.Usage) int {
		if c := cmp.Compare(by(b), by(a)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// topKeys keeps the limit largest keys seen: memory for limit keys, not
// for the log's.
type topKeys struct {
	limit int
	by    func(*historypb.Usage) int64
	keys  []*historypb.Usage
}

func (t *topKeys) offer(u *historypb.Usage) {
	t.keys = append(t.keys, u)
	if len(t.keys) >= 2*t.limit+64 {
		sortUsage(t.keys, t.by)
		t.keys = t.keys[:t.limit]
	}
}

func (t *topKeys) sorted() []*historypb.Usage {
	sortUsage(t.keys, t.by)
	return t.keys[:min(t.limit, len(t.keys))]
}
