package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// checkChartRun: no kubelet runs the chart's pods here, so the store's
// container is run as its pod would run it, with this checkout's
// quantykube: for each profile that runs a store, its arguments as the
// chart renders them, `$(VAR)`s expanded from its environment as the
// kubelet expands them (the database's URL: a PostgreSQL database of the
// test's own), its mount paths and ports moved to the test's, and its
// volumes' files in place (the serving certificate, the cluster's
// front-proxy CA, a kubeconfig of this cluster for the access checks).
// Each probe the container declares must answer 200 on the path and port
// it names, the etcd API must serve where --listen-address says, and
// SIGTERM must stop it within terminationGracePeriodSeconds.
func checkChartRun(t *testing.T, c *Cluster) {
	for _, name := range []string{"sqlite", "replicas", "sidecar"} {
		t.Run(name, func(t *testing.T) {
			args := []string{"-f", chartProfiles(t)[name]}
			if name != "sidecar" {
				// The store asks this cluster about callers with a
				// kubeconfig: outside a pod there is no service account.
				args = append(args, "--set", "apiService.kubeconfigSecret=reviewer", "--set", "rbac.storeSubject.name=e2e-admin")
			}
			objs, err := parseObjects(renderChart(t, "quantykube", "quantykube", args...))
			if err != nil {
				t.Fatal(err)
			}
			var pod *corev1.Pod
			for _, o := range objs {
				if p := podOf(t, o); p != nil {
					pod = p
				}
			}
			if pod == nil {
				t.Fatalf("no workload among %s", kinds(objs))
			}
			runStoreContainer(t, c, pod)
		})
	}
}

// runStoreContainer runs the pod's quantykube container as a process.
func runStoreContainer(t *testing.T, c *Cluster, pod *corev1.Pod) {
	var ctr *corev1.Container
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == "quantykube" {
				ctr = &cs[i]
			}
		}
	}
	if ctr == nil {
		t.Fatal("no quantykube container in the pod")
	}
	// The files of each mount, by the mount's path.
	// Short: a unix socket's path holds at most 107 bytes.
	root, err := os.MkdirTemp("", "qkrun")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	apiDir := filepath.Join(root, "apiservice")
	if _, err := c.QuantyKubeCLI(t, "apiservice", "--address", "192.0.2.10", "--service", "quantykube", "--namespace", "quantykube", "--dir", apiDir); err != nil {
		t.Fatal(err)
	}
	files := map[string]map[string]string{
		"/etc/quantykube/api":         {"tls.crt": filepath.Join(apiDir, "apiserver.crt"), "tls.key": filepath.Join(apiDir, "apiserver.key")},
		"/etc/quantykube/front-proxy": {"ca.crt": c.PKI.FrontProxyCACert},
		"/etc/quantykube/reviewer":    {"kubeconfig": c.Kubeconfig},
	}
	var paths []string
	for _, m := range ctr.VolumeMounts {
		dir := filepath.Join(root, "mounts", strings.ReplaceAll(strings.Trim(m.MountPath, "/"), "/", "_"))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, src := range files[m.MountPath] {
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		paths = append(paths, m.MountPath+"/", dir+"/")
	}
	moved := strings.NewReplacer(paths...)
	// Ports: each 0.0.0.0:PORT the arguments listen on, on a free loopback
	// port instead, and the container's named ports with them.
	ports := map[int32]string{}
	listen := regexp.MustCompile(`0\.0\.0\.0:(\d+)`)
	// Every key of the database's Secret is a URL of the one database
	// (the endpoint, and the direct one for LISTEN).
	env := map[string]string{}
	var dsn string
	for _, e := range ctr.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("env %s: want a Secret's key", e.Name)
		}
		if dsn == "" {
			dsn = framework.PostgresDatabase(t)
		}
		env[e.Name] = dsn
	}
	var argv []string
	for _, a := range ctr.Args {
		for name, v := range env {
			a = strings.ReplaceAll(a, "$("+name+")", v)
		}
		a = moved.Replace(a)
		a = listen.ReplaceAllStringFunc(a, func(s string) string {
			p, _ := strconv.Atoi(listen.FindStringSubmatch(s)[1])
			addr := framework.FreeAddr(t)
			ports[int32(p)] = addr
			return addr
		})
		argv = append(argv, a)
	}
	if strings.Contains(strings.Join(argv, " "), "$(") {
		t.Fatalf("an argument is left unexpanded: %q", argv)
	}
	var out framework.LogBuffer
	cmd := exec.Command(framework.Binary(t), argv...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("quantykube %s:\n%s", strings.Join(argv, " "), out.Tail(6000))
		}
	})

	portOf := func(name string) string {
		for _, p := range ctr.Ports {
			if p.Name == name {
				if addr, ok := ports[p.ContainerPort]; ok {
					return addr
				}
			}
		}
		t.Fatalf("port %q of the probes is not one the arguments listen on (%v)", name, ctr.Ports)
		return ""
	}
	for _, pr := range []*corev1.Probe{ctr.StartupProbe, ctr.LivenessProbe, ctr.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Fatalf("a probe is missing or not an HTTP GET: %+v", pr)
		}
		url := "http://" + portOf(pr.HTTPGet.Port.StrVal) + pr.HTTPGet.Path
		eventually(t, t.Context(), time.Minute, 200*time.Millisecond, "GET "+url, func(ctx context.Context) (bool, error) {
			select {
			case err := <-exited:
				stopped = true
				t.Fatalf("quantykube exited: %v", err)
			default:
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Errorf("%s", resp.Status)
		})
	}

	// The etcd API where --listen-address says: TCP, or the socket.
	var endpoint string
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--listen-address="); ok {
			endpoint = v
		}
	}
	if !strings.HasPrefix(endpoint, "unix://") {
		if _, _, err := net.SplitHostPort(endpoint); err != nil {
			t.Fatalf("--listen-address=%s: %v", endpoint, err)
		}
		endpoint = "http://" + endpoint
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/chart-run", "v"); err != nil {
		t.Fatalf("put through %s: %v", endpoint, err)
	}
	if got, err := cli.Get(ctx, "/registry/chart-run"); err != nil || len(got.Kvs) != 1 || !bytes.Equal(got.Kvs[0].Value, []byte("v")) {
		t.Fatalf("get through %s: %v %v", endpoint, got, err)
	}

	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("quantykube after SIGTERM: %v", err)
		}
	case <-time.After(grace):
		t.Errorf("quantykube still runs %s after SIGTERM (the pod's terminationGracePeriodSeconds)", grace)
	}
}
