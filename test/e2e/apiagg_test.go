package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// apiChecks run on the cluster whose QuantyKube serves the aggregated API
// (docs/AGGREGATED-API.md), after the checks every cluster runs but
// namespace deletion, which they come before: a namespace deletion must
// complete with the APIService registered (a failing discovery stalls it).
var apiChecks = []Check{
	{"api-discovery", checkAPIDiscovery},
	{"api-read-access", checkAPIReadAccess},
	{"api-changes", checkAPIChanges},
	{"api-restore-access", checkAPIRestoreAccess},
	{"api-restore-guard", checkAPIRestoreGuard},
	{"api-errors", checkAPIErrors},
	{"api-front-proxy-only", checkAPIFrontProxyOnly},
	{"api-storage-layout", checkStorageLayout},
	// What a caller could read or write beyond kube-apiserver's own
	// checks (security_test.go).
	{"api-forged-token", checkForgedToken},
	{"api-restore-status", checkRestoreStatus},
	{"api-restore-terminating", checkRestoreTerminating},
	{"api-changes-reviews", checkChangesReviews},
	{"api-service-allocations", checkServiceAllocations},
	{"api-reused-namespace", checkReusedNamespace},
}

// checkAPIDiscovery: the APIService is Available and `kubectl
// api-resources` lists the three resources with their verbs, printing
// nothing on stderr. kube-apiserver merges an aggregated server's
// discovery into its own in the background, so after a restart the group
// can be missing for a moment: the check waits for it, bounded, with a
// kubectl cache of its own each time (kubectl keeps the document it read).
func checkAPIDiscovery(t *testing.T, c *Cluster) {
	if err := waitAPIServiceAvailable(c.Ctx(t), c, APIServiceName); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var stderr bytes.Buffer
	deadline := time.Now().Add(90 * time.Second)
	for {
		stderr.Reset()
		var err error
		out, err = runCapture(t, &stderr, c.kubectl, "--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir(), "api-resources", "--api-group=quanty.quantyroot.io", "-o", "wide")
		if err != nil {
			t.Fatalf("kubectl api-resources: %v\n%s", err, stderr.String())
		}
		if stderr.Len() != 0 {
			t.Errorf("kubectl api-resources wrote to stderr: %s", stderr.String())
		}
		if bytes.Contains(out, []byte("restores")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	verbs := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[1] == "quanty.quantyroot.io/v1alpha1" {
			verbs[f[0]] = f[4]
		}
	}
	if verbs["logs"] != "list" || verbs["objects"] != "list" || verbs["changes"] != "list" || verbs["restores"] != "create" {
		groups, _ := c.Kubectl(t, "get", "--raw", "/apis")
		t.Errorf("api-resources shows %v, want list on logs, objects and changes, create on restores:\n%s\nkube-apiserver's /apis: %s", verbs, out, groups)
	}
	// The whole discovery, every group: nothing on stderr either.
	stderr.Reset()
	if _, err := runCapture(t, &stderr, c.kubectl, "--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir(), "api-resources"); err != nil || stderr.Len() != 0 {
		t.Errorf("kubectl api-resources (all groups): %v: %s", err, stderr.String())
	}
}

// checkAPIReadAccess: history is never wider than access to the object.
// A user with the reader role and view reads a ConfigMap's log and its
// older state, through kubectl get --raw too; without the reader role,
// 403 from kube-apiserver; with view, not a Secret's history nor a
// ClusterRoleBinding's (view cannot get them), 403 from QuantyKube; with
// edit, the Secret's.
func checkAPIReadAccess(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	rita, nora, ed := c.NewUser(t, "rita"), c.NewUser(t, "nora"), c.NewUser(t, "ed")
	c.Bind(t, rita, "quanty-history-reader", "")
	c.Bind(t, rita, "view", ns)
	c.Bind(t, nora, "view", ns)
	c.Bind(t, ed, "quanty-history-reader", "")
	c.Bind(t, ed, "edit", ns)

	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := rv(t, cm)
	cm.Data["color"] = "green"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmKey := "/registry/configmaps/" + ns + "/app"

	code, logr, body := rita.Log(t, &historypb.Request{Key: []byte(cmKey)})
	if code != 200 || len(logr.Entries) != 2 || logr.Entries[0].Revision != first {
		t.Fatalf("rita's log of the ConfigMap: %d %s", code, body)
	}
	code, got, body := rita.Get(t, &historypb.Request{Key: []byte(cmKey), Revision: first})
	if code != 200 || !bytes.Contains(got.GetKv().GetValue(), []byte("blue")) {
		t.Fatalf("rita's ConfigMap at %d: %d %s", first, code, body)
	}
	// The same through kubectl, as kubectl-quanty does it: bytes unchanged.
	raw, err := run(t, c.kubectl, "--kubeconfig", rita.Kubeconfig, "get", "--raw",
		apiBase+"/objects?q="+q(&historypb.Request{Key: []byte(cmKey), Revision: first}))
	if err != nil {
		t.Fatal(err)
	}
	viaKubectl := &historypb.GetResponse{}
	if err := proto.Unmarshal(raw, viaKubectl); err != nil || !bytes.Contains(viaKubectl.GetKv().GetValue(), []byte("blue")) {
		t.Fatalf("kubectl get --raw as rita: %v %v", err, viaKubectl)
	}
	// A namespace's ConfigMaps: list in the namespace.
	if code, _, body := rita.Log(t, &historypb.Request{Key: []byte("/registry/configmaps/" + ns + "/"), RangeEnd: []byte("/registry/configmaps/" + ns + "0")}); code != 200 {
		t.Errorf("rita's log of the namespace's ConfigMaps: %d %s", code, body)
	}

	if code, _, body := nora.Log(t, &historypb.Request{Key: []byte(cmKey)}); code != 403 || !bytes.Contains(body, []byte("logs")) {
		t.Errorf("nora (view, no reader role): %d %s, want 403 on logs", code, body)
	}

	sec, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secKey := "/registry/secrets/" + ns + "/pw"
	code, _, body = rita.Get(t, &historypb.Request{Key: []byte(secKey), Revision: rv(t, sec)})
	if code != 403 || !bytes.Contains(body, []byte(`cannot get resource \"secrets\"`)) {
		t.Errorf("rita on a Secret's history: %d %s, want 403 naming get secrets", code, body)
	}
	if code, _, _ := rita.Log(t, &historypb.Request{Key: []byte(secKey)}); code != 403 {
		t.Errorf("rita on a Secret's log: %d, want 403", code)
	}
	code, got, body = ed.Get(t, &historypb.Request{Key: []byte(secKey), Revision: rv(t, sec)})
	if code != 200 || !bytes.Contains(got.GetKv().GetValue(), []byte("hunter2")) {
		t.Errorf("ed (edit) on the Secret's history: %d %s", code, body)
	}
	// Old RBAC bindings: view cannot read them, so their history neither.
	if code, _, body := rita.Log(t, &historypb.Request{Key: []byte("/registry/clusterrolebindings/cluster-admin")}); code != 403 || !bytes.Contains(body, []byte("clusterrolebindings")) {
		t.Errorf("rita on a ClusterRoleBinding's log: %d %s, want 403", code, body)
	}
	// Every namespace's Secrets at once: list cluster-wide, which ed has not.
	if code, _, _ := ed.Log(t, &historypb.Request{Key: []byte("/registry/secrets/"), RangeEnd: []byte("/registry/secrets0")}); code != 403 {
		t.Errorf("ed on every namespace's Secrets: %d, want 403", code)
	}
}

// checkAPIRestoreAccess: a restorer with edit brings a deleted ConfigMap
// back, with its uid, visible through kube-apiserver, and the restore is
// audited with their name; a reader cannot restore (403 from
// kube-apiserver); a restorer with only view cannot (403 from QuantyKube:
// create on configmaps).
func checkAPIRestoreAccess(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	rosa, ray, rita := c.NewUser(t, "rosa"), c.NewUser(t, "ray"), c.NewUser(t, "rita-r")
	c.Bind(t, rosa, "quanty-history-restorer", "")
	c.Bind(t, rosa, "edit", ns)
	c.Bind(t, ray, "quanty-history-restorer", "")
	c.Bind(t, ray, "view", ns)
	c.Bind(t, rita, "quanty-history-reader", "")
	c.Bind(t, rita, "edit", ns)

	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "undo-me"}, Data: map[string]string{"state": "precious"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "undo-me", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	key := "/registry/configmaps/" + ns + "/undo-me"
	req := &historypb.Request{Key: []byte(key), Revision: rv(t, cm)}

	if code, _, body := rita.Restore(t, req); code != 403 || !bytes.Contains(body, []byte("restores")) {
		t.Errorf("a reader's restore: %d %s, want 403 on restores", code, body)
	}
	if code, _, body := ray.Restore(t, req); code != 403 || !bytes.Contains(body, []byte(`cannot create resource \"configmaps\"`)) {
		t.Errorf("a restorer with view: %d %s, want 403 naming create configmaps", code, body)
	}
	if _, err := cms.Get(ctx, "undo-me", metav1.GetOptions{}); err == nil {
		t.Fatal("a refused restore brought the ConfigMap back")
	}
	code, resp, body := rosa.Restore(t, req)
	if code != 200 || resp.NewRevision == 0 {
		t.Fatalf("rosa's restore: %d %s", code, body)
	}
	back, err := waitConfigMap(t, c, ns, "undo-me", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if back.UID != cm.UID || back.Data["state"] != "precious" || back.ResourceVersion != strconv.FormatInt(resp.NewRevision, 10) {
		t.Errorf("restored: uid %s (want %s), data %v, resourceVersion %s (want %d)", back.UID, cm.UID, back.Data, back.ResourceVersion, resp.NewRevision)
	}
	audit := c.auditLog()
	if !strings.Contains(audit, "audit: restore") || !strings.Contains(audit, "user=rosa") || !strings.Contains(audit, key) {
		t.Errorf("the restore is not in QuantyKube's audit log with rosa's name and the key")
	}
	if !strings.Contains(audit, "user=ray") {
		t.Errorf("ray's denial is not in the audit log")
	}
}

// waitConfigMap reads a ConfigMap through kube-apiserver until it is there
// (its watch cache follows QuantyKube's write within moments).
func waitConfigMap(t *testing.T, c *Cluster, ns, name string, d time.Duration) (*corev1.ConfigMap, error) {
	deadline := time.Now().Add(d)
	for {
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(c.Ctx(t), name, metav1.GetOptions{})
		if err == nil || time.Now().After(deadline) {
			return cm, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAPIErrors: a revision older than the retention window is 410
// Expired; an undecodable q is 400; a request over the limit is 413.
func checkAPIErrors(t *testing.T, c *Cluster) {
	admin := c.NewUser(t, "api-admin")
	c.Bind(t, admin, "cluster-admin", "")
	code, _, body := admin.Get(t, &historypb.Request{Key: []byte("/registry/configmaps/default/x"), Revision: 1 << 40})
	if code != http.StatusGone || !bytes.Contains(body, []byte(`"reason":"Expired"`)) {
		t.Errorf("a future revision: %d %s, want 410 Expired", code, body)
	}
	if code, body := admin.Do(t, "GET", apiBase+"/objects?q=%25%25", nil); code != http.StatusBadRequest {
		t.Errorf("an undecodable q: %d %s, want 400", code, body)
	}
	big := strings.Repeat("A", 90<<10)
	if code, body := admin.Do(t, "GET", apiBase+"/objects?q="+big, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a q over the limit: %d %.300s, want 413", code, body)
	}
	if code, body := admin.Do(t, "POST", apiBase+"/restores", bytes.Repeat([]byte{0}, 90<<10)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d %.300s, want 413", code, body)
	}

	// The ConfigMap written when the cluster started, under a retention of
	// RetainedFor: once its first revision is older than that, and pruning
	// (every 2 s) has run, asking for it is 410.
	c.API.waitRetainedExpired(t)
	r := c.API.retained
	code, _, body = admin.Get(t, &historypb.Request{Key: []byte(r.key), Revision: r.first})
	if code != http.StatusGone || !bytes.Contains(body, []byte("older than the oldest retained revision")) {
		t.Errorf("a revision older than the retention window: %d %s, want 410", code, body)
	}
}

// checkAPIFrontProxyOnly: a direct connection to --api-listen without the
// front-proxy certificate is refused, and so is one with another client
// certificate (the cluster admin's, from another CA) and forged
// X-Remote-* headers.
func checkAPIFrontProxyOnly(t *testing.T, c *Cluster) {
	apiCA, err := os.ReadFile(filepath.Join(c.API.Dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(apiCA)
	url := "https://" + net.JoinHostPort(c.API.Netns.NSIP.String(), strconv.Itoa(c.API.Port)) + apiBase + "/objects?q=" +
		q(&historypb.Request{Key: []byte("/registry/secrets/kube-system/anything")})
	send := func(cert []tls.Certificate) (int, error) {
		tc := &tls.Config{RootCAs: roots, ServerName: "quantykube.kube-system.svc"}
		if cert != nil {
			// Sent whatever CAs the server lists, as a forger would.
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Remote-User", "system:admin")
		req.Header.Add("X-Remote-Group", "system:masters")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := send(nil); err != nil || code != http.StatusUnauthorized {
		t.Errorf("no client certificate, forged headers: %d %v, want 401", code, err)
	}
	admin, err := tls.LoadX509KeyPair(c.PKI.AdminCert, c.PKI.AdminKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := send([]tls.Certificate{admin}); err == nil {
		t.Errorf("the admin's certificate (another CA) with forged headers: %d, want the handshake refused", code)
	}
	// The health checks answer anyone: probes have no certificate.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "quantykube.kube-system.svc"}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + net.JoinHostPort(c.API.Netns.NSIP.String(), strconv.Itoa(c.API.Port)) + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/readyz: %v %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if !strings.Contains(c.auditLog(), "refused an unauthenticated request") {
		t.Error("the refusals are not in QuantyKube's audit log")
	}
}

// runCapture runs bin, bounded, with its standard error in stderr.
func runCapture(t *testing.T, stderr *bytes.Buffer, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	err := cmd.Run()
	return stdout.Bytes(), err
}

// checkAPIChanges: the changes of the whole cluster through kubectl get
// --raw, as kubectl quanty changes asks for them: a user with view in one
// namespace (and the reader role) sees that namespace's ConfigMap changes
// and no Secret's, nothing of another namespace; an admin sees the
// Secret's too.
func checkAPIChanges(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	vic := c.NewUser(t, "vic")
	c.Bind(t, vic, "quanty-history-reader", "")
	c.Bind(t, vic, "view", ns)
	root := c.NewUser(t, "changes-root", "system:masters")

	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "changed"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := rv(t, cm)
	const value = "tr0ub4dor-and-3"
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "changed-secret"}, StringData: map[string]string{"password": value}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "w"
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmKey, secKey := "/registry/configmaps/"+ns+"/changed", "/registry/secrets/"+ns+"/changed-secret"

	// Every change since start, newest first, a page at a time.
	changes := func(u *User) (keys []string, raw [][]byte) {
		req := &historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Revision: start, Descending: true, Limit: 100}
		for range 50 {
			b, err := run(t, c.kubectl, "--kubeconfig", u.Kubeconfig, "get", "--raw", apiBase+"/changes?q="+q(req)+"&exclude=events&exclude=leases.coordination.k8s.io")
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, b)
			var lr historypb.LogResponse
			if err := proto.Unmarshal(b, &lr); err != nil {
				t.Fatal(err)
			}
			for _, e := range lr.Entries {
				keys = append(keys, string(e.Kv.Key))
			}
			if lr.Continue == "" {
				return keys, raw
			}
			req.Continue = lr.Continue
		}
		t.Fatal("more than 50 pages")
		return nil, nil
	}
	count := func(keys []string, k string) int {
		n := 0
		for _, x := range keys {
			if x == k {
				n++
			}
		}
		return n
	}
	keys, raw := changes(vic)
	if count(keys, cmKey) != 2 {
		t.Errorf("vic (view in %s): %d changes of the ConfigMap, want 2; saw %q", ns, count(keys, cmKey), keys)
	}
	for _, k := range keys {
		if !strings.Contains(k, "/"+ns+"/") || strings.HasPrefix(k, "/registry/secrets/") {
			t.Errorf("vic (view in %s) sees a change of %s", ns, k)
		}
	}
	for _, b := range raw {
		if bytes.Contains(b, []byte("changed-secret")) || bytes.Contains(b, []byte(value)) {
			t.Errorf("an answer to vic names the Secret or holds its value")
		}
	}
	keys, _ = changes(root)
	if count(keys, cmKey) != 2 || count(keys, secKey) != 1 {
		t.Errorf("root: %d changes of the ConfigMap and %d of the Secret, want 2 and 1", count(keys, cmKey), count(keys, secKey))
	}
}
