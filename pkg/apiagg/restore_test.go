package apiagg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// dryRuns is a fake kube-apiserver for restores' dry runs: it records each
// write and answers with refuse's verdict (nil: accepted).
type dryRuns struct {
	mu     sync.Mutex
	writes []apiagg.Write
	users  []string
	refuse func(w apiagg.Write) error
}

func (d *dryRuns) DryRun(_ context.Context, u user.Info, w apiagg.Write) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes = append(d.writes, w)
	d.users = append(d.users, u.GetName())
	if d.refuse != nil {
		return d.refuse(w)
	}
	return nil
}

func (d *dryRuns) methods() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var m []string
	for _, w := range d.writes {
		m = append(m, w.Method)
	}
	return m
}

func (d *dryRuns) last(t *testing.T) apiagg.Write {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.writes) == 0 {
		t.Fatal("no dry run was asked for")
	}
	return d.writes[len(d.writes)-1]
}

// cluster is a fake kube-apiserver for the store's own questions: the
// resources with a status subresource, and the ClusterIPs its allocator
// holds (ip -> owner, as "services ns/name").
type cluster struct {
	mu       sync.Mutex
	status   map[string]bool
	ips      map[string]string
	released []string
}

func (c *cluster) HasStatus(_ context.Context, _, resource string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[resource], nil
}

func (c *cluster) HoldIP(_ context.Context, ip, ns, name string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	owner := "services " + ns + "/" + name
	switch have, ok := c.ips[ip]; {
	case !ok:
		c.ips[ip] = owner
		return true, nil
	case have == owner:
		return false, nil
	default:
		return false, &apiagg.IPHeldError{IP: ip, Owner: have}
	}
}

func (c *cluster) ReleaseIP(_ context.Context, ip, ns, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ips[ip] == "services "+ns+"/"+name {
		delete(c.ips, ip)
		c.released = append(c.released, ip)
	}
	return nil
}

// configMap is a ConfigMap in ns1 in JSON, as kube-apiserver stores a
// custom resource (it stores ConfigMaps in protobuf: stored).
func configMap(name, v string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns1","uid":"uid-%s","creationTimestamp":"2026-01-02T03:04:05Z"},"data":{"v":%q}}`, name, name, v)
}

// stored is obj as kube-apiserver stores a built-in type: Kubernetes
// protobuf.
func stored(t *testing.T, obj runtime.Object) string {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func decodeBody(t *testing.T, w apiagg.Write) runtime.Object {
	t.Helper()
	if w.ContentType != "application/vnd.kubernetes.protobuf" {
		t.Fatalf("%s: Content-Type %q, want Kubernetes protobuf (as stored)", w, w.ContentType)
	}
	obj, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(w.Body, nil, nil)
	if err != nil {
		t.Fatalf("%s: the body does not decode: %v", w, err)
	}
	return obj
}

func (e *env) restore(user string, r *historypb.Request, groups ...string) (int, []byte) {
	e.t.Helper()
	body, err := proto.Marshal(r)
	if err != nil {
		e.t.Fatal(err)
	}
	code, b, _ := e.as(e.proxy, "POST", base+"/restores", body, user, groups...)
	return code, b
}

// A caller without access is refused before the revision or time is
// resolved: 403, not 410 (which would tell the store's floors) or 400.
func TestRestoreAuthorizesFirst(t *testing.T) {
	e := newEnv(t)
	key := "/registry/secrets/ns1/s"
	e.put(key, "x")
	for _, r := range []*historypb.Request{
		{Key: []byte(key), Revision: 1 << 40},
		{Key: []byte(key), UnixMs: 1},
		{Key: []byte(key), Revision: 1, UnixMs: 1},
		{Key: []byte("/registry/ranges/serviceips"), Revision: 1 << 40},
	} {
		code, b := e.restore("mallory", r)
		if code != http.StatusForbidden || bytes.Contains(b, []byte("revision")) {
			t.Errorf("restore %q at %d/%d by a caller without access: %d %s, want 403 naming no revision", r.Key, r.Revision, r.UnixMs, code, b)
		}
	}
	q := e.grants.questions()
	if len(q) != 3 {
		t.Errorf("asked %q, want get on the Secret for each object key", q)
	}
	for _, a := range q {
		if !strings.HasPrefix(a, "mallory: get secrets s in namespace ns1") {
			t.Errorf("asked %q, want get on the Secret", a)
		}
	}
}

// A restore needs get on the object: a caller who may update a Secret but
// not read it gets no value, even where nothing would be written.
func TestRestoreNeedsGet(t *testing.T) {
	e := newEnv(t)
	key := "/registry/secrets/ns1/s"
	secret := func(v string) string {
		return stored(t, &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns1", UID: "u1"}, Data: map[string][]byte{"password": []byte(v)}})
	}
	first := e.put(key, secret("hunter2"))
	deleted := e.del(key)
	e.grants.allow["upd"] = []string{"update secrets s in namespace ns1", "create secrets in namespace ns1"}
	for _, rev := range []int64{first, deleted} {
		code, b := e.restore("upd", &historypb.Request{Key: []byte(key), Revision: rev})
		if code != http.StatusForbidden || bytes.Contains(b, []byte("hunter2")) || !strings.Contains(status(t, b).Message, `cannot get resource "secrets"`) {
			t.Errorf("restore to %d without get: %d %s", rev, code, b)
		}
	}
	if e.store.Rev() != deleted {
		t.Fatal("a refused restore wrote")
	}
}

// The dry run is the very change: an update at the live resourceVersion
// with the restored content, a create without the identity kube-apiserver
// assigns, a delete with the live uid and resourceVersion as
// preconditions; kube-apiserver's refusal is the caller's answer, and
// nothing is written.
func TestRestoreDryRun(t *testing.T) {
	e := newEnv(t)
	key := "/registry/configmaps/ns1/app"
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns1", UID: "u1", Labels: map[string]string{"l": v},
				CreationTimestamp: metav1.Date(2026, 1, 2, 3, 4, 5, 0, metav1.Now().Location())},
			Data: map[string]string{"v": v}}
	}
	first := e.put(key, stored(t, cm("one")))
	second := e.put(key, stored(t, cm("two")))
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1", "update configmaps app in namespace ns1",
		"create configmaps in namespace ns1", "delete configmaps app in namespace ns1"}

	// Refused: kube-apiserver's own Status comes back as it is.
	e.dry.refuse = func(w apiagg.Write) error {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "app", nil)
	}
	code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first})
	if st := status(t, b); code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid || st.Details.Name != "app" {
		t.Fatalf("a refused dry run: %d %s, want kube-apiserver's 422", code, b)
	}
	if e.store.Rev() != second {
		t.Fatal("a restore whose dry run was refused wrote")
	}
	if !strings.Contains(e.audit.String(), "dry_run=\"PUT /api/v1/namespaces/ns1/configmaps/app\"") {
		t.Errorf("the refusal is not audited with its dry run:\n%s", e.audit.String())
	}
	e.dry.refuse = nil

	// Update: the old content at the live resourceVersion.
	code, b = e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first})
	if code != http.StatusOK {
		t.Fatalf("update: %d %s", code, b)
	}
	w := e.dry.last(t)
	got := decodeBody(t, w).(*corev1.ConfigMap)
	if w.Method != "PUT" || w.Path != "/api/v1/namespaces/ns1/configmaps/app" || got.ResourceVersion != fmt.Sprint(second) ||
		got.Data["v"] != "one" || got.Labels["l"] != "one" || got.UID != "u1" {
		t.Errorf("update's dry run: %s %+v", w, got.ObjectMeta)
	}

	// Delete: preconditions on the live object.
	restored := e.store.Rev()
	if code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: e.start}); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	w = e.dry.last(t)
	var opts metav1.DeleteOptions
	if err := json.Unmarshal(w.Body, &opts); err != nil || w.Method != "DELETE" || w.Path != "/api/v1/namespaces/ns1/configmaps/app" ||
		opts.Preconditions == nil || *opts.Preconditions.ResourceVersion != fmt.Sprint(restored) || *opts.Preconditions.UID != "u1" {
		t.Errorf("delete's dry run: %s %s (%v)", w, w.Body, err)
	}

	// Create: no uid, resourceVersion or creationTimestamp; the write keeps the uid.
	code, b = e.restore("carol", &historypb.Request{Key: []byte(key), Revision: second})
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, b)
	}
	w = e.dry.last(t)
	got = decodeBody(t, w).(*corev1.ConfigMap)
	if w.Method != "POST" || w.Path != "/api/v1/namespaces/ns1/configmaps" || got.UID != "" || got.ResourceVersion != "" ||
		!got.CreationTimestamp.IsZero() || got.Name != "app" || got.Data["v"] != "two" {
		t.Errorf("create's dry run: %s %+v", w, got.ObjectMeta)
	}
	var rr historypb.RestoreResponse
	if err := proto.Unmarshal(b, &rr); err != nil || !bytes.Contains(rr.Kv.GetValue(), []byte("u1")) {
		t.Errorf("the restored object lost its uid: %v", err)
	}
	if u := e.dry.users; len(u) != 4 || u[3] != "carol" {
		t.Errorf("dry runs as %v, want carol's", u)
	}

	// Over another object of that name, kube-apiserver judges the content
	// against the live object's identity; the write brings back the
	// restored state's uid.
	other := cm("three")
	other.UID = "u2"
	e.put(key, stored(t, other))
	code, b = e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first})
	if code != http.StatusOK || proto.Unmarshal(b, &rr) != nil {
		t.Fatalf("update over another object: %d %s", code, b)
	}
	if got := decodeBody(t, e.dry.last(t)).(*corev1.ConfigMap); got.UID != "u2" || got.Data["v"] != "one" {
		t.Errorf("update's dry run over another object: uid %s data %v, want the live uid u2 and the restored data", got.UID, got.Data)
	}
	if !bytes.Contains(rr.Kv.GetValue(), []byte("u1")) {
		t.Error("the restore did not bring back the restored state's uid")
	}
}

// A restore to absence of a Namespace, or of an object with finalizers,
// would skip what kube-apiserver's delete runs: refused but for the
// raw-access groups.
func TestRestoreToAbsenceRefused(t *testing.T) {
	e := newEnv(t)
	ns := "/registry/namespaces/team"
	e.put(ns, stored(t, &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "team"}}))
	cm := "/registry/configmaps/ns1/held"
	e.put(cm, stored(t, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "ns1", Finalizers: []string{"example.com/keep"}}}))
	e.grants.allow["del"] = []string{"get namespaces team", "delete namespaces team", "get configmaps held in namespace ns1", "delete configmaps held in namespace ns1"}
	e.grants.allow["root"] = e.grants.allow["del"]
	rev := e.store.Rev()
	for key, want := range map[string]string{ns: "kubectl delete namespace", cm: "example.com/keep"} {
		code, b := e.restore("del", &historypb.Request{Key: []byte(key), Revision: e.start})
		if code != http.StatusForbidden || !strings.Contains(status(t, b).Message, want) {
			t.Errorf("restore of %s to absence: %d %s, want 403 naming %q", key, code, b, want)
		}
	}
	if e.store.Rev() != rev || len(e.dry.methods()) != 0 {
		t.Fatal("a refused restore to absence wrote or asked for a dry run")
	}
	for _, key := range []string{ns, cm} {
		if code, b := e.restore("root", &historypb.Request{Key: []byte(key), Revision: e.start}, "system:masters"); code != http.StatusOK {
			t.Errorf("a raw-access group's restore of %s to absence: %d %s", key, code, b)
		}
	}
}

// A value that cannot be handed to kube-apiserver (encrypted at rest, or
// no object) cannot be dry-run: only the raw-access groups restore it.
func TestRestoreWithoutDryRun(t *testing.T) {
	e := newEnv(t)
	key := "/registry/secrets/ns1/sealed"
	first := e.put(key, "k8s:enc:aescbc:v1:key1:\x00\x01secret")
	e.put(key, "k8s:enc:aescbc:v1:key1:\x00\x02secret")
	e.grants.allow["carol"] = []string{"get secrets sealed in namespace ns1", "update secrets sealed in namespace ns1"}
	e.grants.allow["root"] = e.grants.allow["carol"]
	code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first})
	if msg := status(t, b).Message; code != http.StatusForbidden || !strings.Contains(msg, "encrypted at rest") || !strings.Contains(msg, "--api-raw-access-groups") {
		t.Fatalf("an encrypted value: %d %s", code, b)
	}
	if code, b := e.restore("root", &historypb.Request{Key: []byte(key), Revision: first}, "system:masters"); code != http.StatusOK {
		t.Fatalf("a raw-access group's restore of an encrypted value: %d %s", code, b)
	}
	if n := len(e.dry.methods()); n != 0 {
		t.Errorf("%d dry runs of a value kube-apiserver cannot take", n)
	}
}

// With --api-restore-check=none, restores of RBAC objects, admission
// configuration, Namespaces and Nodes are for the raw-access groups only;
// other objects are written after the reviews, with no dry run.
func TestRestoreCheckNone(t *testing.T) {
	e := newEnvWith(t, apiagg.Config{RestoreCheck: apiagg.RestoreCheckNone})
	rb := "/registry/rolebindings/ns1/admins"
	binding := func(role string) string {
		return stored(t, &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "admins", Namespace: "ns1"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role}})
	}
	first := e.put(rb, binding("cluster-admin"))
	e.put(rb, binding("view"))
	cm := "/registry/configmaps/ns1/app"
	cmFirst := e.put(cm, configMap("app", "v1"))
	e.put(cm, configMap("app", "v2"))
	e.grants.allow["adm"] = []string{"get rolebindings.rbac.authorization.k8s.io admins in namespace ns1", "update rolebindings.rbac.authorization.k8s.io admins in namespace ns1",
		"get configmaps app in namespace ns1", "update configmaps app in namespace ns1"}
	code, b := e.restore("adm", &historypb.Request{Key: []byte(rb), Revision: first})
	if code != http.StatusForbidden || !strings.Contains(status(t, b).Message, "--api-restore-check=none") {
		t.Fatalf("a RoleBinding's restore without a dry run: %d %s", code, b)
	}
	if code, b := e.restore("adm", &historypb.Request{Key: []byte(cm), Revision: cmFirst}); code != http.StatusOK {
		t.Fatalf("a ConfigMap's restore: %d %s", code, b)
	}
	if code, b := e.restore("adm", &historypb.Request{Key: []byte(rb), Revision: first}, "system:masters"); code != http.StatusOK {
		t.Fatalf("a raw-access group's restore of a RoleBinding: %d %s", code, b)
	}
	if n := len(e.dry.methods()); n != 0 {
		t.Errorf("%d dry runs with --api-restore-check=none", n)
	}
}

// What no dry run checks is for the raw-access groups: a state whose
// deletion had begun (its finalizers would delete it once written back),
// a CertificateSigningRequest (its approval is in its status), and, with
// --api-restore-check=none, a restore to absence of a value that cannot
// be read to find its finalizers.
func TestRestoreRawOnly(t *testing.T) {
	e := newEnvWith(t, apiagg.Config{RestoreCheck: apiagg.RestoreCheckNone})
	cmKey := "/registry/configmaps/ns1/going"
	going := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "going", Namespace: "ns1", Finalizers: []string{"example.com/x"}}}
	e.put(cmKey, stored(t, going))
	now := metav1.Now()
	going.DeletionTimestamp = &now
	terminating := e.put(cmKey, stored(t, going))
	going.DeletionTimestamp, going.Finalizers = nil, nil
	going.Data = map[string]string{"v": "2"}
	e.put(cmKey, stored(t, going))
	csrKey := "/registry/certificatesigningrequests/c1"
	first := e.put(csrKey, `{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"c1"},"status":{"conditions":[{"type":"Approved"}]}}`)
	e.put(csrKey, `{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"c1"}}`)
	sealed := "/registry/secrets/ns1/sealed"
	e.put(sealed, "k8s:enc:aescbc:v1:key1:\x00\x01")
	e.grants.allow["carol"] = []string{"get configmaps going in namespace ns1", "update configmaps going in namespace ns1",
		"get certificatesigningrequests.certificates.k8s.io c1", "update certificatesigningrequests.certificates.k8s.io c1",
		"get secrets sealed in namespace ns1", "delete secrets sealed in namespace ns1"}
	e.grants.allow["root"] = e.grants.allow["carol"]
	for _, c := range []struct {
		key  string
		rev  int64
		want string
	}{
		{cmKey, terminating, "its deletion had begun"},
		{csrKey, first, "approval subresource"},
		{sealed, e.start, "cannot be read to tell whether finalizers guard it"},
	} {
		rev := e.store.Rev()
		code, b := e.restore("carol", &historypb.Request{Key: []byte(c.key), Revision: c.rev})
		if code != http.StatusForbidden || !strings.Contains(status(t, b).Message, c.want) || e.store.Rev() != rev {
			t.Errorf("restore of %s to %d: %d %s, want 403 naming %q and nothing written", c.key, c.rev, code, b, c.want)
		}
		if code, b := e.restore("root", &historypb.Request{Key: []byte(c.key), Revision: c.rev}, "system:masters"); code != http.StatusOK {
			t.Errorf("a raw-access group's restore of %s to %d: %d %s", c.key, c.rev, code, b)
		}
	}
}

// A restore writes a status only as the caller may write it: a caller
// with update on the status subresource brings the old status back
// (dry-run as that write too); one without gets the old state with the
// live status, as kube-apiserver's own update would leave it, and a
// warning; a resource without a status subresource (kube-apiserver's
// discovery) has no status to guard.
func TestRestoreStatusNeedsTheSubresource(t *testing.T) {
	e := newEnv(t)
	key := "/registry/services/specs/ns1/web"
	svc := func(ip, selector string) *corev1.Service {
		s := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "u1"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": selector}, Type: corev1.ServiceTypeClusterIP}}
		if ip != "" {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		}
		return s
	}
	first := e.put(key, stored(t, svc("192.0.2.1", "old")))
	e.put(key, stored(t, svc("", "new")))
	e.cluster.status["services"] = true
	e.grants.allow["carol"] = []string{"get services web in namespace ns1", "update services web in namespace ns1"}
	e.grants.allow["dave"] = append(e.grants.allow["carol"], "update services/status web in namespace ns1")

	code, b, h := e.as(e.proxy, "POST", base+"/restores", mustMarshal(t, &historypb.Request{Key: []byte(key), Revision: first}), "carol")
	if code != http.StatusOK || !strings.Contains(h.Get("Warning"), "restored without its status") {
		t.Fatalf("carol's restore: %d %s, warning %q", code, b, h.Get("Warning"))
	}
	got := current(t, e, key).(*corev1.Service)
	if got.Spec.Selector["app"] != "old" || len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("carol's restore wrote selector %v and status %v, want the old spec with the live status", got.Spec.Selector, got.Status)
	}
	for _, w := range e.dry.writes {
		if strings.HasSuffix(w.Path, "/status") {
			t.Errorf("a status dry run for a restore that writes none: %s", w)
		}
	}

	// dave may write the status: it comes back as it was, dry-run as a
	// status write, whose refusal refuses the restore.
	e.dry.refuse = func(w apiagg.Write) error {
		if strings.HasSuffix(w.Path, "/status") {
			return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "web", nil)
		}
		return nil
	}
	rev := e.store.Rev()
	if code, b := e.restore("dave", &historypb.Request{Key: []byte(key), Revision: first}); code != http.StatusUnprocessableEntity || e.store.Rev() != rev {
		t.Fatalf("dave's restore with the status dry run refused: %d %s, want 422 and nothing written", code, b)
	}
	if w := e.dry.last(t); w.Method != "PUT" || w.Path != "/api/v1/namespaces/ns1/services/web/status" {
		t.Errorf("status dry run: %s", w)
	}
	e.dry.refuse = nil
	if code, b := e.restore("dave", &historypb.Request{Key: []byte(key), Revision: first}); code != http.StatusOK {
		t.Fatalf("dave's restore: %d %s", code, b)
	}
	if got := current(t, e, key).(*corev1.Service); len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("dave's restore wrote status %v, want the old one", got.Status)
	}

	// Deleted, then brought back: a create. carol may create but not
	// write the status: it comes back with none.
	e.del(key)
	e.grants.allow["carol"] = append(e.grants.allow["carol"], "create services in namespace ns1")
	if code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first}); code != http.StatusOK {
		t.Fatalf("carol's re-create: %d %s", code, b)
	}
	if got := current(t, e, key).(*corev1.Service); got.UID != "u1" || got.Spec.Selector["app"] != "old" || len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("carol's re-create wrote %v %v %v, want the old object, uid and spec, without its status", got.UID, got.Spec.Selector, got.Status)
	}

	// Without a status subresource, status is the resource's own field.
	e.cluster.status["services"] = false
	e.put(key, stored(t, svc("", "new")))
	if code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: first}); code != http.StatusOK {
		t.Fatalf("carol's restore without a status subresource: %d %s", code, b)
	}
	if got := current(t, e, key).(*corev1.Service); len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("without a status subresource: status %v, want the old one", got.Status)
	}
}

// A restore over an object whose deletion is in progress is refused when
// it would clear or change its deletionTimestamp (but for the raw-access
// groups): kube-apiserver's dry run of the update cannot see it.
func TestRestoreDoesNotCancelADeletion(t *testing.T) {
	e := newEnv(t)
	key := "/registry/configmaps/ns1/going"
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "going", Namespace: "ns1", UID: "u1", Finalizers: []string{"example.com/cleanup"}}, Data: map[string]string{"v": "1"}}
	before := e.put(key, stored(t, cm))
	now := metav1.Now()
	cm.DeletionTimestamp = &now
	e.put(key, stored(t, cm))
	e.grants.allow["carol"] = []string{"get configmaps going in namespace ns1", "update configmaps going in namespace ns1"}
	e.grants.allow["root"] = e.grants.allow["carol"]
	rev := e.store.Rev()
	code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: before})
	if code != http.StatusForbidden || !strings.Contains(status(t, b).Message, "its deletion is in progress") || e.store.Rev() != rev {
		t.Fatalf("a restore over a terminating object: %d %s, want 403 and nothing written", code, b)
	}
	if code, b := e.restore("root", &historypb.Request{Key: []byte(key), Revision: before}, "system:masters"); code != http.StatusOK {
		t.Fatalf("a raw-access group's restore over a terminating object: %d %s", code, b)
	}
}

// current decodes key's value now.
func current(t *testing.T, e *env, key string) runtime.Object {
	t.Helper()
	res, err := e.store.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)})
	if err != nil || len(res.Kvs) != 1 {
		t.Fatalf("%s: %v %v", key, res, err)
	}
	obj, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(res.Kvs[0].Value, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return obj
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Service brought back comes back with what kube-apiserver holds for
// it: its ClusterIPs held in the allocator first, its NodePorts set in
// kube-apiserver's NodePort allocation in the restore's own revision; one
// held by another object since refuses the restore (409), writes nothing,
// and releases what was held for it.
func TestRestoreHoldsAServicesAllocations(t *testing.T) {
	e := newEnv(t)
	ports := "/registry/ranges/servicenodeports"
	e.put(ports, stored(t, &corev1.RangeAllocation{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "RangeAllocation"}, Range: "30000-32767"}))
	key := "/registry/services/specs/ns1/web"
	web := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "u1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.10", ClusterIPs: []string{"10.0.0.10", "fd00::10"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 31000,
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}, {Port: 443, NodePort: 30443}}}}
	made := e.put(key, stored(t, web))
	e.del(key)
	e.grants.allow["carol"] = []string{"get services web in namespace ns1", "create services in namespace ns1"}

	// Another Service holds one of its ClusterIPs now.
	e.cluster.ips["fd00::10"] = "services ns2/other"
	rev := e.store.Rev()
	code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: made})
	if code != http.StatusConflict || !strings.Contains(status(t, b).Message, "fd00::10 is held by services ns2/other") || e.store.Rev() != rev {
		t.Fatalf("a restore whose ClusterIP is taken: %d %s, want 409 and nothing written", code, b)
	}
	if _, held := e.cluster.ips["10.0.0.10"]; held || !slices.Contains(e.cluster.released, "10.0.0.10") {
		t.Errorf("the ClusterIP held for the refused restore was not released: %v released %v", e.cluster.ips, e.cluster.released)
	}
	delete(e.cluster.ips, "fd00::10")

	// A NodePort allocated since.
	taken := &corev1.RangeAllocation{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "RangeAllocation"}, Range: "30000-32767", Data: bitmap(443)}
	e.put(ports, stored(t, taken))
	rev = e.store.Rev()
	code, b = e.restore("carol", &historypb.Request{Key: []byte(key), Revision: made})
	if code != http.StatusConflict || !strings.Contains(status(t, b).Message, "NodePort 30443") || e.store.Rev() != rev || len(e.cluster.ips) != 0 {
		t.Fatalf("a restore whose NodePort is taken: %d %s, held %v; want 409, nothing written or held", code, b, e.cluster.ips)
	}

	taken.Data = bitmap(7)
	e.put(ports, stored(t, taken))
	if code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: made}); code != http.StatusOK {
		t.Fatalf("the restore: %d %s", code, b)
	}
	if e.cluster.ips["10.0.0.10"] != "services ns1/web" || e.cluster.ips["fd00::10"] != "services ns1/web" {
		t.Errorf("ClusterIPs held: %v", e.cluster.ips)
	}
	alloc := current(t, e, ports).(*corev1.RangeAllocation)
	want := new(big.Int).SetBytes(bitmap(7, 80, 443, 1000))
	if got := new(big.Int).SetBytes(alloc.Data); got.Cmp(want) != 0 || alloc.Range != "30000-32767" {
		t.Errorf("NodePort allocation %s %x, want offsets 7, 80, 443 and 1000 set: %x", alloc.Range, got, want)
	}
	res, _ := e.store.Range(context.Background(), &pb.RangeRequest{Key: []byte(ports)})
	svc, _ := e.store.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)})
	if res.Kvs[0].ModRevision != svc.Kvs[0].ModRevision {
		t.Errorf("the allocation was written at %d, the Service at %d: want one revision", res.Kvs[0].ModRevision, svc.Kvs[0].ModRevision)
	}
}

// bitmap is a NodePort allocation's data with these offsets set.
func bitmap(offsets ...int) []byte {
	b := new(big.Int)
	for _, o := range offsets {
		b.SetBit(b, o, 1)
	}
	return b.Bytes()
}
