package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/framework"
)

// The files in deploy/ are checked as far as this machine can run them:
// systemd and kubeadm are not here, so their command lines are parsed by
// serve's own flags, run (with this test's paths and ports), and probed
// where the unit or manifest says.

// serveArgs parses a `quantykube serve` command line from deploy/, with
// the host's paths and ports replaced by the test's.
func serveArgs(t *testing.T, argv []string, replace *strings.Replacer) *serveFlags {
	t.Helper()
	if len(argv) < 2 || argv[0] != "/usr/local/bin/quantykube" || argv[1] != "serve" {
		t.Fatalf("command %q: want /usr/local/bin/quantykube serve ...", argv)
	}
	var args []string
	for _, a := range argv[2:] {
		args = append(args, replace.Replace(a))
	}
	f := newServeFlags(os.Stderr)
	if err := f.parse(args); err != nil {
		t.Fatalf("serve %q: %v", args, err)
	}
	return f
}

// startAsConfigured starts QuantyKube in this process with what the
// parsed flags set beyond the listener and database (which the framework
// chooses): TLS, the metrics and health listener.
func startAsConfigured(t *testing.T, f *serveFlags) *framework.Target {
	return framework.Start(t, framework.SQLite, framework.Options{Config: func(c *endpoint.Config) {
		c.ServerTLSConfig = f.cfg.ServerTLSConfig
		c.MetricsListenAddress = f.cfg.MetricsListenAddress
		c.Retain, c.RetainPrefixes, c.MaxRequestBytes = f.cfg.Retain, f.cfg.RetainPrefixes, f.cfg.MaxRequestBytes
	}})
}

func probeOK(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
	}
}

// deploy/systemd/quantykube.service: its ExecStart is a valid serve
// command; the datastore is served on a unix socket in the unit's
// RuntimeDirectory, only its owner may connect, or on TCP only with TLS and
// client certificates; the server it describes answers the etcd API there
// and its health endpoints where the unit says.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../deploy/systemd/quantykube.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(b), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^ExecStart=(.+)$`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("no ExecStart")
	}
	raw := serveArgs(t, strings.Fields(m[1]), strings.NewReplacer())
	tls := raw.cfg.ServerTLSConfig
	switch sock, ok := strings.CutPrefix(raw.cfg.Listener, "unix://"); {
	case ok:
		if !strings.Contains(unit, "\nRuntimeDirectory=quantykube\nRuntimeDirectoryMode=0700\n") || filepath.Dir(sock) != "/run/quantykube" {
			t.Errorf("the socket %s is not in the unit's 0700 RuntimeDirectory", sock)
		}
	case tls.CertFile == "" || tls.TrustedCAFile == "":
		t.Errorf("listener %s: TCP without TLS and client certificates serves every Secret to any local user", raw.cfg.Listener)
	}
	if !strings.Contains(unit, "\nStateDirectory=quantykube\n") || !strings.HasPrefix(raw.cfg.Endpoint, "sqlite:///var/lib/quantykube/") {
		t.Errorf("the database %s is not in the unit's StateDirectory", raw.cfg.Endpoint)
	}
	metrics := framework.FreeAddr(t)
	f := serveArgs(t, strings.Fields(m[1]), strings.NewReplacer("127.0.0.1:2381", metrics, "/var/lib/quantykube", t.TempDir(), "/run/quantykube", t.TempDir()))
	if f.cfg.MetricsListenAddress != metrics {
		t.Errorf("metrics on %q: want etcd's health port, 2381", raw.cfg.MetricsListenAddress)
	}
	x := framework.Start(t, framework.SQLite, framework.Options{Config: func(c *endpoint.Config) {
		c.Listener = f.cfg.Listener
		c.ServerTLSConfig = f.cfg.ServerTLSConfig
		c.MetricsListenAddress = f.cfg.MetricsListenAddress
	}})
	if sock, ok := strings.CutPrefix(f.cfg.Listener, "unix://"); ok {
		if st, err := os.Stat(sock); err != nil {
			t.Errorf("the socket: %v", err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("the socket has mode %#o, want 0600", st.Mode().Perm())
		}
	}
	if _, err := x.Client(t).Put(t.Context(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/livez", "/readyz", "/health"} {
		probeOK(t, "http://"+metrics+p)
	}
}

// imageUser is the uid and gid QuantyKube's image runs as (deploy/image,
// make image).
const imageUser = 65532

// deploy/kubeadm: the static Pod runs QuantyKube's own image, pinned by
// digest, as the image's unprivileged user; its command is a valid serve
// command (the image's binary) whose files are all mounted, whose probes
// hit its health endpoints, and which kube-apiserver reaches as
// kubeadm-config.yaml's etcd.external says: over TLS, with the client
// certificate signed by the CA QuantyKube trusts.
func TestKubeadmStaticPod(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubeadm/quantykube.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		t.Fatalf("quantykube.yaml: %v", err)
	}
	if len(pod.Spec.Containers) != 1 || !pod.Spec.HostNetwork {
		t.Fatalf("want one container on the host's network: %+v", pod.Spec)
	}
	c := pod.Spec.Containers[0]
	// The datastore must start when the registry is out of reach.
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q, want IfNotPresent", c.ImagePullPolicy)
	}
	// The project's image, the same bytes on every node: by digest (DIGEST
	// is the operator's to fill in, docs/kubeadm.md).
	if !regexp.MustCompile(`^quantykube@sha256:(DIGEST|[0-9a-f]{64})$`).MatchString(c.Image) {
		t.Errorf("image %q, want QuantyKube's own pinned by digest: quantykube@sha256:DIGEST", c.Image)
	}
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUser || psc.RunAsGroup == nil || *psc.RunAsGroup != imageUser {
		t.Errorf("pod securityContext %+v: want runAsNonRoot as the image's user, %d:%d", psc, imageUser, imageUser)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Capabilities == nil || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext %+v: want no privilege escalation and every capability dropped", csc)
	}
	// The binary is the image's: nothing of the host's replaces it.
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(c.Command[0], vm.MountPath) {
			t.Errorf("volume %s at %s covers the image's %s", vm.Name, vm.MountPath, c.Command[0])
		}
	}
	mounted := func(path string) bool {
		for _, vm := range c.VolumeMounts {
			if path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/") {
				return true
			}
		}
		return false
	}

	ca := framework.NewCA(t, "etcd-ca")
	serverCert, serverKey := ca.Issue(t, framework.CertSpec{CommonName: "quantykube", IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}})
	clientCert, clientKey := ca.Issue(t, framework.CertSpec{CommonName: "kube-apiserver-etcd-client", Client: true})
	metrics := framework.FreeAddr(t)
	raw := serveArgs(t, c.Command, strings.NewReplacer())
	// The database's directory is the operator's, made 0700 and owned by
	// the image's user: a hostPath the kubelet creates is root's, 0755.
	dbDir := filepath.Dir(strings.TrimPrefix(raw.cfg.Endpoint, "sqlite://"))
	dbVolumes := 0
	for _, v := range pod.Spec.Volumes {
		if hp := v.HostPath; hp != nil && hp.Path == dbDir {
			dbVolumes++
			if hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
				t.Errorf("volume %s mounts the database directory %s with type %v, want Directory", v.Name, dbDir, hp.Type)
			}
		}
	}
	if dbVolumes != 1 {
		t.Errorf("%d volumes mount the database directory %s, want 1", dbVolumes, dbDir)
	}
	for _, p := range []string{raw.cfg.ServerTLSConfig.CertFile, raw.cfg.ServerTLSConfig.KeyFile, raw.cfg.ServerTLSConfig.TrustedCAFile, strings.TrimPrefix(raw.cfg.Endpoint, "sqlite://")} {
		if !mounted(p) {
			t.Errorf("%s is not in a volume the container mounts", p)
		}
	}
	f := serveArgs(t, c.Command, strings.NewReplacer(
		"/etc/kubernetes/pki/etcd/server.crt", serverCert,
		"/etc/kubernetes/pki/etcd/server.key", serverKey,
		"/etc/kubernetes/pki/etcd/ca.crt", ca.CertFile,
		"/var/lib/quantykube", t.TempDir(),
		"127.0.0.1:2381", metrics,
	))

	var kc struct {
		Kind string
		Etcd struct {
			External struct {
				Endpoints                 []string
				CAFile, CertFile, KeyFile string
			}
		}
	}
	b, err = os.ReadFile("../../deploy/kubeadm/kubeadm-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatalf("kubeadm-config.yaml: %v", err)
	}
	ext := kc.Etcd.External
	if kc.Kind != "ClusterConfiguration" || len(ext.Endpoints) != 1 || ext.Endpoints[0] != "https://"+raw.cfg.Listener {
		t.Errorf("kubeadm's etcd.external.endpoints %v, want https://%s (the static Pod's listener)", ext.Endpoints, raw.cfg.Listener)
	}
	if ext.CAFile != raw.cfg.ServerTLSConfig.TrustedCAFile {
		t.Errorf("kubeadm verifies QuantyKube with %s, QuantyKube trusts clients of %s: one etcd CA signs both", ext.CAFile, raw.cfg.ServerTLSConfig.TrustedCAFile)
	}

	x := startAsConfigured(t, f)
	for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Fatalf("probe %+v: want an HTTP GET", pr)
		}
		g := pr.HTTPGet
		if addr := net.JoinHostPort(g.Host, g.Port.String()); addr != raw.cfg.MetricsListenAddress {
			t.Errorf("probe on %s, but health is served on %s", addr, raw.cfg.MetricsListenAddress)
		}
		probeOK(t, "http://"+metrics+g.Path)
	}
	// kube-apiserver's side: TLS, verified with the CA, with its client
	// certificate; without a certificate the handshake is refused.
	tc, err := qtls.Config{CAFile: ca.CertFile, CertFile: clientCert, KeyFile: clientKey}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	url := x.Endpoint()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/k", "v"); err != nil {
		t.Fatalf("kube-apiserver's client: %v", err)
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: tc.RootCAs, ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Error("a client without a certificate was served")
	}
}
