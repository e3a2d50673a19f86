package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/quantyroot/quantykube/test/framework"
)

// Options shape a cluster.
type Options struct {
	// Backend is QuantyKube's database: framework.SQLite or
	// framework.Postgres.
	Backend framework.Backend
	// Replicas is how many QuantyKube processes serve the database
	// (Postgres only); kube-apiserver's --etcd-servers names them all.
	Replicas int
	// AggregatedAPI puts QuantyKube in a network namespace of the test's
	// own, serving `--api-listen` there, and registers the aggregated API
	// with kube-apiserver (apiagg.go). It needs root.
	AggregatedAPI bool
	// Datastore, when set, is what kube-apiserver runs on instead of a
	// QuantyKube StartCluster starts: an etcd or a kine that a test moves
	// from (import_test.go).
	Datastore *framework.Target
	// EtcdServers, when set, are kube-apiserver's --etcd-servers: a
	// datastore the suite does not run as a process of its own (a
	// container, image_test.go). Cluster.QuantyKube is nil then.
	EtcdServers []string
	// Args are extra `quantykube serve` flags (a quota).
	Args []string
}

// EventTTL is kube-apiserver's --event-ttl: short, so that a check can
// watch an Event's lease expire.
const EventTTL = 20 * time.Second

// UncachedResource is the resource kube-apiserver serves without its watch
// cache (--watch-cache-sizes=podtemplates#0): every list, get and watch of
// it is answered by QuantyKube itself.
const UncachedResource = "podtemplates"

// Cluster is kube-apiserver and kube-controller-manager on QuantyKube
// processes, with an admin's clients. A check gets one and must leave it
// running.
type Cluster struct {
	Backend framework.Backend
	// QuantyKube is the datastore: its replicas' endpoints, restarts and
	// logs, and etcd clients of each replica.
	QuantyKube *framework.Target
	// Config is the admin's (system:masters) client configuration;
	// Kubeconfig the same as a file for kubectl and the controller
	// manager.
	Config     *rest.Config
	Kubeconfig string
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	// PKI holds the cluster's certificates and keys.
	PKI *PKI
	// API is the aggregated API, when Options.AggregatedAPI is set.
	API *AggregatedAPI

	dir       string
	host      string // the address kube-apiserver listens on
	kubectl   string
	port      int // kube-apiserver's secure port, kept across restarts
	kcmPort   int
	apiserver *process
	kcm       *process
	pluginDir string // pluginBin's, once made
	// etcdServers are Options.EtcdServers.
	etcdServers []string
}

// StartCluster starts QuantyKube, then kube-apiserver on it, then
// kube-controller-manager, and stops them all when t ends. A missing part
// (kubectl, the Kubernetes binaries, PostgreSQL) fails t: this suite is
// run on purpose, and a skip would read as a pass.
func StartCluster(t *testing.T, o Options) *Cluster {
	t.Helper()
	apiserverBin, kcmBin, _, err := kubernetesBinaries()
	if err != nil {
		t.Fatalf("e2e needs kube-apiserver, kube-controller-manager and kubectl %s: %v", KubernetesVersion, err)
	}
	kubectl, err := Kubectl()
	if err != nil {
		t.Fatalf("e2e needs kubectl: %v", err)
	}
	if o.Backend == framework.Postgres {
		if _, err := framework.PostgresServer(); err != nil {
			t.Fatalf("e2e on PostgreSQL needs a server: %v", err)
		}
	}
	c := &Cluster{Backend: o.Backend, dir: t.TempDir(), kubectl: kubectl, host: "127.0.0.1"}
	var netns *Netns
	var extraIPs []net.IP
	if o.AggregatedAPI {
		netns = NewNetns(t)
		c.host = netns.HostIP.String()
		extraIPs = append(extraIPs, netns.HostIP)
	}
	pkiDir := filepath.Join(c.dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if c.PKI, err = NewPKI(pkiDir, extraIPs...); err != nil {
		t.Fatalf("certificates: %v", err)
	}
	if c.port, err = fixedPort(); err != nil {
		t.Fatal(err)
	}
	for c.kcmPort == 0 || c.kcmPort == c.port {
		if c.kcmPort, err = fixedPort(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.writeKubeconfig(); err != nil {
		t.Fatal(err)
	}
	qo := framework.Options{Process: true, Replicas: o.Replicas}
	if netns != nil {
		c.API = prepareAggregatedAPI(t, c, netns)
		qo.Netns, qo.Host, qo.Args = netns.Name, netns.NSIP.String(), c.API.serveArgs(c)
	}
	qo.Args = append(qo.Args, o.Args...)
	c.QuantyKube, c.etcdServers = o.Datastore, o.EtcdServers
	if c.QuantyKube == nil && len(c.etcdServers) == 0 {
		c.QuantyKube = framework.Start(t, o.Backend, qo)
	}
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	c.apiserver = newProcess("kube-apiserver", apiserverBin, c.dir)
	c.kcm = newProcess("kube-controller-manager", kcmBin, c.dir)
	// Registered after framework.Start's cleanup, so it runs first:
	// kube-apiserver stops before its datastore does.
	t.Cleanup(func() {
		// A Kubernetes process that died on its own is reported by stop.
		c.stopKubernetes(t)
		for i := range c.replicas() {
			if c.QuantyKube.Exited(i) {
				t.Errorf("QuantyKube replica %d exited during the test", i)
			}
		}
		if t.Failed() {
			for _, p := range []*process{c.apiserver, c.kcm} {
				t.Logf("%s log (tail):\n%s", p.name, p.tail(8000))
			}
		}
	})
	c.startKubernetes(t)
	if c.API != nil {
		c.API.register(t, c)
	}
	return c
}

// fixedPort is a free loopback port below the kernel's ephemeral range
// (32768 and up by default), so that no outgoing connection takes it
// while kube-apiserver is down for a restart.
func fixedPort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port in 20000-31999")
}

func (c *Cluster) server() string { return "https://" + net.JoinHostPort(c.host, strconv.Itoa(c.port)) }

func (c *Cluster) writeKubeconfig() error {
	var err error
	read := func(path string) []byte {
		b, rerr := os.ReadFile(path)
		if rerr != nil && err == nil {
			err = rerr
		}
		return b
	}
	ca, cert, key := read(c.PKI.CACert), read(c.PKI.AdminCert), read(c.PKI.AdminKey)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.server(), CertificateAuthorityData: ca}
	kc.AuthInfos["e2e-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e-admin"}
	kc.CurrentContext = "e2e"
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	c.Config = &rest.Config{
		Host:            c.server(),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key},
		// The checks make bursts of writes; client-go's default of 5 per
		// second would make them wait, not test anything more.
		QPS:   200,
		Burst: 400,
	}
	return nil
}

// replicas is the number of QuantyKube processes the suite runs (none
// for Options.EtcdServers).
func (c *Cluster) replicas() int {
	if c.QuantyKube == nil {
		return 0
	}
	return c.QuantyKube.Replicas()
}

func (c *Cluster) apiserverArgs() []string {
	p := c.PKI
	servers := c.etcdServers
	if c.QuantyKube != nil {
		servers = c.QuantyKube.Endpoints()
	}
	return []string{
		"--etcd-servers=" + strings.Join(servers, ","),
		"--bind-address=" + c.host,
		"--advertise-address=" + c.host,
		"--secure-port=" + strconv.Itoa(c.port),
		"--tls-cert-file=" + p.APIServerCert,
		"--tls-private-key-file=" + p.APIServerKey,
		"--client-ca-file=" + p.CACert,
		"--requestheader-client-ca-file=" + p.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.FrontProxyClientCert,
		"--proxy-client-key-file=" + p.FrontProxyClientKey,
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--event-ttl=" + EventTTL.String(),
		"--watch-cache-sizes=" + UncachedResource + "#0",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// QuantyKube has no Service IP that kube-proxy routes: the
		// aggregator dials the EndpointSlice's address itself.
		"--enable-aggregator-routing=true",
		"--v=1",
	}
}

func (c *Cluster) kcmArgs() []string {
	return []string{
		"--kubeconfig=" + c.Kubeconfig,
		// The namespace controller finishes a namespace's deletion: it
		// deletes the content it finds through discovery, then removes
		// the "kubernetes" finalizer. The aggregation controller fills the
		// view, edit and admin roles, which the aggregated API's checks
		// bind. The Deployment, ReplicaSet and garbage collector
		// controllers make and remove what kubectl quanty leaves to them
		// (a Deployment's ReplicaSet and Pods, which stay Pending: there
		// is no scheduler nor kubelet), and finish a foreground deletion.
		"--controllers=namespace-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller,garbage-collector-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.kcmPort),
		"--authentication-skip-lookup=true",
		"--v=1",
	}
}

// startKubernetes starts kube-apiserver, waits for /readyz, then starts
// kube-controller-manager and waits for its /healthz.
func (c *Cluster) startKubernetes(t testing.TB) {
	t.Helper()
	if err := c.apiserver.start(c.apiserverArgs()); err != nil {
		t.Fatal(err)
	}
	if err := c.waitAPIServer(3 * time.Minute); err != nil {
		t.Fatalf("kube-apiserver: %v (its log follows)", err)
	}
	if err := c.kcm.start(c.kcmArgs()); err != nil {
		t.Fatal(err)
	}
	if err := c.waitControllerManager(time.Minute); err != nil {
		t.Fatalf("kube-controller-manager: %v (its log follows)", err)
	}
}

func (c *Cluster) stopKubernetes(t testing.TB) {
	t.Helper()
	for _, p := range []*process{c.kcm, c.apiserver} {
		if err := p.stop(); err != nil {
			t.Error(err)
		}
	}
}

func (c *Cluster) waitAPIServer(timeout time.Duration) error {
	rc := c.Kube.Discovery().RESTClient()
	deadline := time.Now().Add(timeout)
	for {
		if early, err := c.apiserver.exitedEarly(); early {
			return fmt.Errorf("exited while starting: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			verbose, _ := rc.Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
			return fmt.Errorf("not ready after %s: %v\n%s", timeout, err, verbose)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitControllerManager polls the controller manager's /healthz, which it
// serves without authentication on its own self-signed certificate.
func (c *Cluster) waitControllerManager(timeout time.Duration) error {
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer hc.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(c.kcmPort) + "/healthz"
	deadline := time.Now().Add(timeout)
	for {
		if early, err := c.kcm.exitedEarly(); early {
			return fmt.Errorf("exited while starting: %v", err)
		}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %s: %v", timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Restart stops kube-controller-manager and kube-apiserver, restarts every
// QuantyKube replica on the same database, and starts Kubernetes again
// (on the replicas' new addresses, should one have moved).
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.stopKubernetes(t)
	c.QuantyKube.Restart(t)
	c.startKubernetes(t)
}

// Ctx bounds a check's calls: cancelled when t ends or after three
// minutes, whichever is first.
func (c *Cluster) Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace of its own for t, deleted (without
// waiting) when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ns, err := c.Kube.CoreV1().Namespaces().Create(c.Ctx(t),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// Kubectl runs kubectl against the cluster, bounded, and returns its
// standard output; a failure carries its standard error.
func (c *Cluster) Kubectl(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return run(t, c.kubectl, append(c.kubectlFlags(), args...)...)
}

// kubectlFlags point kubectl at the cluster, with a discovery cache of
// the cluster's own rather than the user's home directory's.
func (c *Cluster) kubectlFlags() []string {
	return []string{"--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(c.dir, "kubectl-cache"), "--request-timeout=30s"}
}

// KubectlIn is Kubectl with stdin.
func (c *Cluster) KubectlIn(t testing.TB, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	return runIn(t, stdin, c.kubectl, append(c.kubectlFlags(), args...)...)
}

// QuantyKubeCLI runs the quantykube binary the replicas run (for example
// `history log`), bounded, and returns its standard output.
func (c *Cluster) QuantyKubeCLI(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return run(t, framework.Binary(t), args...)
}

func run(t testing.TB, bin string, args ...string) ([]byte, error) {
	return runIn(t, nil, bin, args...)
}

func runIn(t testing.TB, stdin []byte, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
