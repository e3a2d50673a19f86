package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

var undeleteCmd = &command{
	name:  "undelete",
	usage: "namespace NAME [--at TIME] [--dry-run] [--yes] [-o text|json|yaml]",
	short: "Undo a namespace deletion: the namespace and every object deleted with it",
	long: `Brings back a deleted namespace as it was just before its deletion began
(or at TIME, which must be before that), then every object deleted from it
since, as it was then, with its old uid: RBAC, ServiceAccounts, ConfigMaps
and Secrets first, then the rest, workloads and Pods last, so that what
each one refers to is back before the controllers and kubelets act on it.
Like every restore, the objects are written to the datastore, not through
kube-apiserver: its admission (webhooks, quotas, Pod Security) never sees
them, and they come back exactly as they were stored.

Objects a controller recreates by itself are skipped, and named: anything
with a controller owner (a ReplicaSet of a Deployment, the Pods of a
ReplicaSet, a Service's EndpointSlices), a Service's Endpoints, ServiceAccount
token Secrets, the default ServiceAccount and the kube-root-ca.crt ConfigMap.
Events are not restored: they expire by themselves. A resource QuantyKube
keeps for less time than has passed since the deletion (leases, by default)
is named as not read. --dry-run lists exactly what would be written.
`,
	examples: `
  # See what would come back
  kubectl quanty undelete namespace shop --dry-run

  # Bring it back, after confirming
  kubectl quanty undelete namespace shop

  # As it was at a time before the deletion, without asking (scripts)
  kubectl quanty undelete namespace shop --at 2026-05-01T12:00:00Z --yes
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		at := fs.String("at", "", "restore as at TIME, before the deletion began (default: just before it)")
		dryRun := fs.Bool("dry-run", false, "list what would be written, write nothing")
		yes := fs.Bool("yes", false, "do not ask")
		out := outputFlag(fs, "text", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if len(args) != 2 || (args[0] != "namespace" && args[0] != "ns" && args[0] != "namespaces") {
				return errors.New("want: undelete namespace NAME")
			}
			p, err := s.planUndelete(ctx, args[1], *at)
			if err != nil {
				return err
			}
			return s.undelete(ctx, p, restoreOpts{dryRun: *dryRun, yes: *yes}, out.format)
		}
	},
}

// candidate is an object deleted with the namespace, as it was at the
// restore point.
type candidate struct {
	res apiResource
	key string
	obj storagekey.Object
	kv  *mvccpb.KeyValue
}

func (c candidate) value() value { return decodeValue(c.kv.Value) }

func (c candidate) String() string { return c.res.typeName() + "/" + c.obj.Name }

// rank orders restores so that what an object needs exists before it:
// the namespace, its quotas and limits, Roles and their bindings,
// ServiceAccounts, ConfigMaps and Secrets, everything else (Services,
// claims, policies, custom resources), workload controllers, bare Pods,
// then what refers to workloads (autoscalers, disruption budgets).
func rank(r storagekey.Resource) int {
	switch r.String() {
	case "namespaces":
		return 0
	case "resourcequotas", "limitranges":
		return 1
	case "roles.rbac.authorization.k8s.io":
		return 2
	case "rolebindings.rbac.authorization.k8s.io":
		return 3
	case "serviceaccounts":
		return 4
	case "configmaps", "secrets":
		return 5
	case "deployments.apps", "statefulsets.apps", "daemonsets.apps", "replicasets.apps", "replicationcontrollers",
		"jobs.batch", "cronjobs.batch":
		return 7
	case "pods":
		return 8
	case "horizontalpodautoscalers.autoscaling", "poddisruptionbudgets.policy":
		return 9
	}
	return 6
}

// skipReason says why a controller, not the undelete, brings c back, or
// why c must not come back; "" to restore it. services are the names of
// the Services being restored.
func skipReason(c candidate, services map[string]bool) string {
	if why := beingDeleted(c.kv); why != "" {
		return "it was already being deleted (" + why + ")"
	}
	v := c.value()
	if v.Object == nil {
		return ""
	}
	u := v.u()
	for _, ref := range u.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return fmt.Sprintf("its controller recreates it (owner %s/%s)", ref.Kind, ref.Name)
		}
	}
	switch c.res.String() {
	case "endpoints":
		if services[c.obj.Name] {
			return "the endpoints controller recreates it for its Service"
		}
	case "secrets":
		if t, _, _ := unstructured.NestedString(u.Object, "type"); t == string(corev1.SecretTypeServiceAccountToken) {
			return "a ServiceAccount token: kube-controller-manager's token controller manages it"
		}
	case "configmaps":
		if c.obj.Name == "kube-root-ca.crt" {
			return "kube-controller-manager publishes it in every namespace"
		}
	case "serviceaccounts":
		if c.obj.Name == "default" {
			return "kube-controller-manager creates it in every namespace"
		}
	}
	return ""
}

// skipped is a candidate left out, and why.
type skipped struct {
	candidate
	reason string
}

// order splits the candidates into those to restore, in rank order (then
// by type and name), and those skipped.
func order(cands []candidate) ([]candidate, []skipped) {
	services := map[string]bool{}
	for _, c := range cands {
		if c.res.String() == "services" && beingDeleted(c.kv) == "" {
			services[c.obj.Name] = true
		}
	}
	var restore []candidate
	var skips []skipped
	for _, c := range cands {
		if why := skipReason(c, services); why != "" {
			skips = append(skips, skipped{c, why})
			continue
		}
		restore = append(restore, c)
	}
	slices.SortStableFunc(restore, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(rank(a.res.Resource), rank(b.res.Resource)),
			cmp.Compare(a.res.String(), b.res.String()), cmp.Compare(a.obj.Name, b.obj.Name))
	})
	return restore, skips
}

// undeletePlan is what undelete writes.
type undeletePlan struct {
	ns        candidate // the namespace
	at        int64     // the revision restored to
	deletedAt int64     // the namespace's delete
	restore   []candidate
	skipped   []skipped
	// unread are the resources whose history could not be read.
	unread []string
	// orphans warns of objects whose owners are not coming back.
	orphans []string
}

// planUndelete finds the namespace's last deletion and what went with it.
func (s *session) planUndelete(ctx context.Context, name, at string) (*undeletePlan, error) {
	nsRes, err := s.disc.resolve(ctx, "namespaces")
	if err != nil {
		return nil, err
	}
	t, err := targetIn(s.table(), nsRes, name, "")
	if err != nil {
		return nil, err
	}
	entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(t.key)})
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("no history of namespace %s: it was never there, or its deletion is older than the retention window", name)
	}
	last := entries[len(entries)-1]
	if last.GetDeleted() == 0 {
		phase := "it exists"
		if beingDeleted(last.GetKv()) != "" {
			phase = "it is still being deleted: wait until it is gone"
		}
		return nil, fmt.Errorf("namespace %s is not deleted: %s", name, phase)
	}
	// The restore point: by default the revision just before the first
	// change that marked the namespace as being deleted.
	rev, kv, ok := restorable(entries, last.GetRevision())
	if !ok {
		return nil, fmt.Errorf("the history holds no state of namespace %s from before its deletion began", name)
	}
	point := last.GetRevision() - 1
	for _, e := range entries {
		if e.GetRevision() > rev && e.GetDeleted() == 0 && beingDeleted(e.GetKv()) != "" {
			point = e.GetRevision() - 1
			break
		}
	}
	if at != "" {
		ms, err := parseAt(at, s.now())
		if err != nil {
			return nil, err
		}
		r, k, err := s.state(ctx, &historypb.Request{Key: []byte(t.key), UnixMs: ms})
		if err != nil {
			return nil, err
		}
		if r > point {
			return nil, fmt.Errorf("--at %s is revision %d, after the deletion of namespace %s began (revision %d)", at, r, name, point+1)
		}
		if k == nil {
			return nil, fmt.Errorf("namespace %s did not exist at --at %s (revision %d)", name, at, r)
		}
		point, kv = r, k
	}
	p := &undeletePlan{ns: candidate{res: nsRes, key: t.key, obj: t.obj, kv: kv}, at: point, deletedAt: last.GetRevision()}
	return p, s.collect(ctx, p, name)
}

// collect finds the objects of the namespace that existed at the restore
// point and are gone now.
func (s *session) collect(ctx context.Context, p *undeletePlan, ns string) error {
	scopes, err := s.scopes(ctx, nil, false, ns)
	if err != nil {
		return err
	}
	var cands []candidate
	for _, sc := range s.scan(ctx, scopes, &historypb.Request{Revision: p.at + 1}) {
		if sc.err != nil {
			// A resource kept for less than the time since the restore
			// point (leases, by default) cannot be restored as it was;
			// the rest can.
			if !errors.Is(sc.err, errForbidden) && !errors.Is(sc.err, errOutsideRetention) {
				return sc.err
			}
			p.unread = append(p.unread, fmt.Sprintf("%s: %v", sc.res.Resource, sc.err))
			continue
		}
		keys, logs := byKey(sc.entries)
		for _, k := range keys {
			l := logs[k]
			// Gone now, and existed at the restore point: the state then is
			// the one before its first change after it.
			if l[len(l)-1].GetDeleted() == 0 || l[0].GetPrevKv() == nil {
				continue
			}
			o, _ := s.table().Parse([]byte(k))
			cands = append(cands, candidate{res: sc.res, key: k, obj: o, kv: l[0].GetPrevKv()})
		}
	}
	p.restore, p.skipped = order(cands)
	uids := map[string]bool{string(p.ns.value().u().GetUID()): true}
	for _, c := range p.restore {
		uids[string(c.value().u().GetUID())] = true
	}
	for _, c := range p.restore {
		for _, ref := range c.value().u().GetOwnerReferences() {
			if !uids[string(ref.UID)] {
				p.orphans = append(p.orphans, fmt.Sprintf("%s: its owner %s/%s is not restored with it; if it is gone, the garbage collector deletes %s again", c, ref.Kind, ref.Name, c))
			}
		}
	}
	return nil
}

// undeleteReport is what undelete prints with -o json or yaml.
type undeleteReport struct {
	Namespace string          `json:"namespace"`
	Revision  int64           `json:"revision"`
	DryRun    bool            `json:"dryRun,omitempty"`
	Restored  []restoreResult `json:"restored"`
	Skipped   []skipReport    `json:"skipped"`
	Unread    []string        `json:"unread,omitempty"`
	Warnings  []string        `json:"warnings,omitempty"`
}

type skipReport struct {
	Object string `json:"object"`
	Reason string `json:"reason"`
}

func (s *session) undelete(ctx context.Context, p *undeletePlan, o restoreOpts, format string) error {
	rep := undeleteReport{Namespace: p.ns.obj.Name, Revision: p.at, DryRun: o.dryRun, Unread: p.unread, Warnings: p.orphans, Skipped: []skipReport{}}
	all := append([]candidate{p.ns}, p.restore...)
	tw := newTabular(s.errOut, 2)
	fmt.Fprintf(tw, "Namespace %s was deleted at revision %d; restoring it and %d objects as they were at revision %d:\n", p.ns.obj.Name, p.deletedAt, len(p.restore), p.at)
	for i, c := range all {
		fmt.Fprintf(tw, "  %d.\t%s\t%s\n", i+1, c, dash(c.obj.Namespace))
	}
	if len(p.skipped) > 0 {
		fmt.Fprintln(tw, "Skipped:")
	}
	for _, sk := range p.skipped {
		fmt.Fprintf(tw, "  -\t%s\t%s\n", sk.candidate, sk.reason)
		rep.Skipped = append(rep.Skipped, skipReport{Object: sk.candidate.String(), Reason: sk.reason})
	}
	for _, u := range p.unread {
		fmt.Fprintf(tw, "Not read (so not restored): %s\n", u)
	}
	for _, w := range p.orphans {
		fmt.Fprintf(tw, "Warning: %s\n", w)
	}
	tw.Flush()
	if !o.dryRun {
		ok, err := s.confirm(fmt.Sprintf("Restore namespace %s and %d objects?", p.ns.obj.Name, len(p.restore)), false, o.yes)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not restored")
		}
	}
	var failed []string
	for _, c := range all {
		r := restoreResult{Object: c.String(), Key: c.key, Revision: p.at, Action: "create", DryRun: o.dryRun}
		if !o.dryRun {
			// Only where the object is still gone, as listed: one created
			// again since is not overwritten.
			resp, err := s.api.restore(ctx, &historypb.Request{Key: []byte(c.key), Revision: p.at, IfModRevision: proto.Int64(0)})
			if errors.Is(err, errConflict) {
				err = fmt.Errorf("created again since the list above, so not overwritten (%w)", err)
			}
			if err != nil {
				if c.key == p.ns.key {
					return fmt.Errorf("restoring namespace %s: %w", p.ns.obj.Name, err)
				}
				failed = append(failed, fmt.Sprintf("%s: %v", c, err))
				fmt.Fprintf(s.errOut, "error: restoring %s: %v\n", c, err)
				continue
			}
			r.NewRevision = resp.GetNewRevision()
		}
		rep.Restored = append(rep.Restored, r)
		if format == "text" {
			fmt.Fprintln(s.out, r.line())
		}
	}
	if format != "text" {
		b, err := render(rep, format)
		if err != nil {
			return err
		}
		if _, err := s.out.Write(b); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d objects were not restored", len(failed), len(p.restore))
	}
	return nil
}
