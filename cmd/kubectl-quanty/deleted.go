package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

var deletedCmd = &command{
	name:  "deleted",
	usage: "[TYPE] [-n NS | -A] [--since TIME] [-o table|json|yaml]",
	short: "List objects deleted within the retention window (or since TIME)",
	long: `Lists the objects that were deleted and are still gone: their type and name,
when they were deleted, the last revision they existed at, and the newest
revision from before their deletion began (what restore --rev takes).
Without TYPE, every type in the namespace (every type everywhere with -A),
except events, which expire by themselves. A type whose history you may not
list is skipped, and named.
`,
	examples: `
  # What was deleted from the current namespace
  kubectl quanty deleted

  # ConfigMaps deleted in the last hour, in every namespace
  kubectl quanty deleted configmaps -A --since 1h

  # As JSON, for a script
  kubectl quanty deleted -n shop -o json
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		all := fs.BoolP("all-namespaces", "A", false, "every namespace, and cluster-scoped types")
		since := fs.String("since", "", "only deletions at or after TIME (or a duration: 1h means an hour ago)")
		out := outputFlag(fs, "table", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if len(args) > 1 {
				return errors.New("want at most one TYPE")
			}
			if *all && s.kubectlOptions.namespace() != "" {
				return errors.New("-A and -n exclude each other")
			}
			req := &historypb.Request{}
			if *since != "" {
				ms, err := parseSince("since", *since, s.now())
				if err != nil {
					return err
				}
				req.UnixMs = ms
			}
			ns := ""
			if !*all {
				var err error
				if ns, err = s.namespace(ctx); err != nil {
					return err
				}
			}
			scopes, err := s.scopes(ctx, args, *all, ns)
			if err != nil {
				return err
			}
			scopes = s.scan(ctx, scopes, req)
			if req.UnixMs != 0 {
				s.rescanWindow(ctx, scopes)
			}
			var rows []deletedRow
			for _, sc := range scopes {
				if sc.err != nil {
					if !errors.Is(sc.err, errForbidden) {
						return sc.err
					}
					fmt.Fprintf(s.errOut, "Skipped %s: %v\n", sc.res.Resource, sc.err)
					continue
				}
				rows = append(rows, deletedRows(s.table(), sc)...)
			}
			return s.printDeleted(rows, out.format)
		}
	},
}

// scope is every object of one resource in one namespace, or everywhere;
// after a scan, the log of its keys.
type scope struct {
	res     apiResource
	ns      string
	entries []*historypb.LogEntry
	err     error
}

// expiring are resources whose objects expire by themselves (kube-apiserver
// gives events a lease): neither listed as deleted nor restored.
func expiring(r apiResource) bool {
	return r.Resource.Resource == "events" && (r.Group == "" || r.Group == "events.k8s.io")
}

// scopes are the resources to scan: TYPE's, or every one (namespaced
// ones only, unless all), in namespace ns (every namespace when empty).
func (s *session) scopes(ctx context.Context, args []string, all bool, ns string) ([]scope, error) {
	var rs []apiResource
	if len(args) == 1 {
		r, err := s.disc.resolve(ctx, args[0])
		if err != nil {
			return nil, err
		}
		rs = []apiResource{r}
	} else {
		every, err := s.disc.all(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range every {
			if !expiring(r) && (all || r.Namespaced) {
				rs = append(rs, r)
			}
		}
	}
	return s.scopesOf(rs, ns), nil
}

// scopesOf are the scopes of resources rs in namespace ns (every
// namespace when empty), each storage prefix once.
func (s *session) scopesOf(rs []apiResource, ns string) []scope {
	var scopes []scope
	seen := map[string]bool{}
	for _, r := range rs {
		sc := scope{res: r}
		if r.Namespaced {
			sc.ns = ns
		}
		p, err := sc.prefix(s.table())
		if err != nil || seen[p] {
			continue // not stored by kube-apiserver, or already scanned
		}
		seen[p] = true
		scopes = append(scopes, sc)
	}
	return scopes
}

func (sc scope) prefix(tab *storagekey.Table) (string, error) {
	return tab.ScopePrefix(storagekey.Scope{Resource: sc.res.Resource, Namespace: sc.ns})
}

// scan reads the log of every scope from req's revision or time on, a few
// at once.
func (s *session) scan(ctx context.Context, scopes []scope, from *historypb.Request) []scope {
	sem := make(chan struct{}, discoveryParallelism)
	var wg sync.WaitGroup
	for i := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sc := &scopes[i]
			p, err := sc.prefix(s.table())
			if err != nil {
				sc.err = err
				return
			}
			// Every key with the prefix, which ends in '/': up to the next
			// character, '0'.
			sc.entries, sc.err = s.api.log(ctx, &historypb.Request{
				Key: []byte(p), RangeEnd: []byte(strings.TrimSuffix(p, "/") + "0"),
				Revision: from.GetRevision(), UnixMs: from.GetUnixMs(),
			})
		}()
	}
	wg.Wait()
	return scopes
}

// rescanWindow reads again, whole, the scopes whose log QuantyKube refused
// because --since is before their retention window (which may be shorter
// than others'): a --since older than what is retained asks for all of it.
func (s *session) rescanWindow(ctx context.Context, scopes []scope) {
	var at []int
	var again []scope
	for i, sc := range scopes {
		if errors.Is(sc.err, errOutsideRetention) {
			at = append(at, i)
			again = append(again, scope{res: sc.res, ns: sc.ns})
		}
	}
	for i, sc := range s.scan(ctx, again, &historypb.Request{}) {
		scopes[at[i]] = sc
	}
}

// byKey splits a scope's log into each key's, in the order the keys first
// appear.
func byKey(entries []*historypb.LogEntry) (keys []string, logs map[string][]*historypb.LogEntry) {
	logs = map[string][]*historypb.LogEntry{}
	for _, e := range entries {
		k := string(e.GetKv().GetKey())
		if _, ok := logs[k]; !ok {
			keys = append(keys, k)
		}
		logs[k] = append(logs[k], e)
	}
	return keys, logs
}

// deletedRow is one object that was deleted and is still gone.
type deletedRow struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	// DeletedRevision and DeletedTime are the delete's.
	DeletedRevision int64  `json:"deletedRevision"`
	DeletedUnixMs   int64  `json:"deletedUnixMs"`
	DeletedTime     string `json:"deletedTime"`
	// LastRevision is the last state it had, 0 when no longer retained.
	LastRevision int64 `json:"lastRevision,omitempty"`
	// RestoreRevision is the newest state from before its deletion began.
	RestoreRevision int64 `json:"restoreRevision,omitempty"`
}

func deletedRows(tab *storagekey.Table, sc scope) []deletedRow {
	keys, logs := byKey(sc.entries)
	var rows []deletedRow
	for _, k := range keys {
		l := logs[k]
		last := l[len(l)-1]
		if last.GetDeleted() == 0 {
			continue
		}
		o, _ := tab.Parse([]byte(k))
		r := deletedRow{
			Namespace: o.Namespace, Name: o.Name, Type: sc.res.typeName(), Kind: sc.res.Kind, Key: k,
			DeletedRevision: last.GetRevision(), DeletedUnixMs: last.GetUnixMs(),
			LastRevision: last.GetPrevKv().GetModRevision(),
		}
		r.RestoreRevision, _, _ = restorable(l, last.GetRevision())
		rows = append(rows, r)
	}
	return rows
}

func (s *session) printDeleted(rows []deletedRow, format string) error {
	slices.SortStableFunc(rows, func(a, b deletedRow) int { return cmp.Compare(a.DeletedRevision, b.DeletedRevision) })
	for i := range rows {
		rows[i].DeletedTime = s.when(rows[i].DeletedUnixMs)
	}
	if format != "table" {
		if rows == nil {
			rows = []deletedRow{}
		}
		b, err := render(map[string]any{"deleted": rows}, format)
		if err != nil {
			return err
		}
		_, err = s.out.Write(b)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(s.errOut, "No deleted objects found.")
		return nil
	}
	tw := newTabular(s.out, 3)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tDELETED\tTIME\tLAST REVISION\tRESTORE --rev")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s ago\t%s\t%s\t%s\n", dash(r.Namespace), r.Type, r.Name, s.age(r.DeletedUnixMs), r.DeletedTime,
			revOrDash(r.LastRevision), revOrDash(r.RestoreRevision))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func revOrDash(r int64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprint(r)
}
