package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// The image's defaults (deploy/image): the etcd API and the health
// endpoints on every interface at etcd's ports, SQLite in its data
// directory, as uid and gid 65532.
const (
	imageListen   = "0.0.0.0:2379"
	imageMetrics  = "0.0.0.0:2381"
	imageDataDir  = "/var/lib/quantykube"
	imageUser     = "65532:65532"
	imageUID      = 65532
	imageBinary   = "/usr/local/bin/quantykube"
	imageStopWait = 30 // seconds podman stop waits before SIGKILL
)

// TestImage runs the image make image builds (docs/image.md) under a real
// container runtime, Debian's podman with runc: loaded from its docker
// archive, it serves etcdctl and a real kube-apiserver on the host, runs
// as uid 65532 with no capabilities, stops cleanly on SIGTERM (podman
// stop: exit code 0 well before the SIGKILL, and the log says it shut
// down), and keeps its SQLite store on a mounted host directory: a new
// container on that directory reads what the first one wrote, through
// etcdctl and through kube-apiserver. That second container runs the
// image pinned by the index digest make image printed, pulled from the
// OCI layout.
//
// The containers use the host's network (no bridge, no address outside
// loopback) and serve the image's own command line with its two
// addresses moved to free loopback ports.
func TestImage(t *testing.T) {
	pm := NewPodman(t)
	etcdctl, err := framework.EtcdctlBinary()
	if err != nil {
		t.Fatalf("the image test needs etcdctl: %v", err)
	}
	img := BuildImage(t)
	cfg := pm.Load(t, img)
	if cfg.ID != strings.TrimPrefix(img.ID, "sha256:") {
		t.Errorf("podman loaded image %s, want the archive's %s", cfg.ID, img.ID)
	}
	c := cfg.Config
	if c.User != imageUser || !slices.Equal(c.Entrypoint, []string{imageBinary}) || c.Labels["org.opencontainers.image.revision"] == "" {
		t.Errorf("image config: user %q, entrypoint %q, labels %v", c.User, c.Entrypoint, c.Labels)
	}
	addr, metrics := framework.FreeAddr(t), framework.FreeAddr(t)
	args := slices.Clone(c.Cmd)
	moved := 0
	for i, a := range args {
		if r := strings.NewReplacer(imageListen, addr, imageMetrics, metrics).Replace(a); r != a {
			args[i] = r
			moved++
		}
	}
	if moved != 2 || !slices.Contains(args, "--endpoint=sqlite://"+imageDataDir+"/state.db") {
		t.Fatalf("the image's command %q: want serve on %s with metrics on %s and SQLite in %s", c.Cmd, imageListen, imageMetrics, imageDataDir)
	}

	// The volume: a host directory the container's user owns, as
	// docs/image.md says to make it.
	data := t.TempDir()
	if err := os.Chown(data, imageUID, imageUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o700); err != nil {
		t.Fatal(err)
	}
	volume := []string{"-v", data + ":" + imageDataDir}
	name := fmt.Sprintf("quantykube-e2e-%d-%d", os.Getpid(), rand.IntN(1e6))
	url := "http://" + addr
	first := pm.Start(t, name, img.ID, volume, args)
	first.WaitReady(t, url)

	ctl := func(args ...string) string {
		t.Helper()
		out, err := run(t, etcdctl, append([]string{"--endpoints", url, "--command-timeout=10s"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if out := ctl("put", "/image-e2e/key", "written-before"); strings.TrimSpace(out) != "OK" {
		t.Errorf("etcdctl put: %q", out)
	}
	if out := ctl("get", "--print-value-only", "/image-e2e/key"); out != "written-before\n" {
		t.Errorf("etcdctl get: %q, want written-before", out)
	}
	probe(t, "http://"+metrics+"/readyz")

	t.Run("non-root", func(t *testing.T) {
		_, pid, _ := first.State(t)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for l := range strings.Lines(string(status)) {
			k, v, _ := strings.Cut(l, ":")
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
		// Real, effective, saved and file-system IDs alike.
		want := fmt.Sprintf("%d %d %d %d", imageUID, imageUID, imageUID, imageUID)
		if fields["Name"] != "quantykube" || fields["Uid"] != want || fields["Gid"] != want {
			t.Errorf("the container's process %d: name %q, uid %q, gid %q, want quantykube as %s", pid, fields["Name"], fields["Uid"], fields["Gid"], want)
		}
		if fields["CapEff"] != "0000000000000000" || fields["CapPrm"] != "0000000000000000" {
			t.Errorf("the container's process has capabilities: effective %s, permitted %s", fields["CapEff"], fields["CapPrm"])
		}
	})

	// kube-apiserver on the host, its datastore the container.
	cl := StartCluster(t, Options{EtcdServers: []string{url}})
	ctx := cl.Ctx(t)
	// The cluster is the test's own, and its kube-apiserver is stopped
	// before the test ends: a namespace of its own could not be deleted.
	const ns = "default"
	cm, err := cl.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "in-the-container"},
		Data:       map[string]string{"written": "before the restart"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a ConfigMap through kube-apiserver: %v", err)
	}
	got, err := cl.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["written"] != "before the restart" {
		t.Fatalf("read the ConfigMap back: %v %+v", err, got)
	}
	key := "/registry/configmaps/" + ns + "/" + cm.Name
	if out := ctl("get", "--keys-only", key); strings.TrimSpace(out) != key {
		t.Errorf("etcdctl get %s in the container's store: %q", key, out)
	}

	// SIGTERM: podman stop sends the image's StopSignal, then SIGKILL
	// after imageStopWait seconds; a clean stop exits 0 long before.
	cl.stopKubernetes(t)
	start := time.Now()
	pm.Must(t, "stop", "-t", fmt.Sprint(imageStopWait), name)
	took := time.Since(start)
	status, _, code := first.State(t)
	if status != "exited" || code != 0 || took > imageStopWait*time.Second/2 {
		t.Errorf("podman stop: %s with exit code %d after %s, want exited 0 within %ds (137 is SIGKILL)", status, code, took.Round(time.Millisecond), imageStopWait/2)
	}
	if logs := first.Logs(t); !strings.Contains(logs, "shutting down") {
		t.Errorf("the log does not say it shut down:\n%s", logs)
	}
	db := filepath.Join(data, "state.db")
	if st, err := os.Stat(db); err != nil {
		t.Errorf("the store is not on the volume: %v", err)
	} else if sys := st.Sys().(*syscall.Stat_t); sys.Uid != imageUID || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: uid %d, mode %#o, want the container's user's (%d), 0600", db, sys.Uid, st.Mode().Perm(), imageUID)
	}

	// A new container on the same volume: the data is the volume's, not
	// the first container's. It runs the image pinned by the digest make
	// image printed, from the OCI layout (docs/kubeadm.md's pin): the
	// same image as the archive's.
	pm.Must(t, "rm", name)
	pinned := pm.PullLayout(t, img)
	var byDigest []ImageConfig
	if err := json.Unmarshal([]byte(pm.Must(t, "image", "inspect", pinned)), &byDigest); err != nil || len(byDigest) != 1 || byDigest[0].ID != cfg.ID {
		t.Fatalf("podman image inspect %s: %v, want the archive's image %s", pinned, err, cfg.ID)
	}
	second := pm.Start(t, name+"-again", pinned, volume, args)
	second.WaitReady(t, url)
	if out := ctl("get", "--print-value-only", "/image-e2e/key"); out != "written-before\n" {
		t.Errorf("etcdctl get after the restart: %q, want written-before", out)
	}
	cl.startKubernetes(t)
	ctx = cl.Ctx(t)
	after, err := cl.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ConfigMap after the restart: %v", err)
	}
	if after.Data["written"] != "before the restart" || after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("after the restart: %v at %s, want %v at %s", after.Data, after.ResourceVersion, cm.Data, cm.ResourceVersion)
	}
	// kube-apiserver stops before its datastore does.
	cl.stopKubernetes(t)
	pm.Must(t, "stop", "-t", fmt.Sprint(imageStopWait), second.Name)
	if status, _, code := second.State(t); status != "exited" || code != 0 {
		t.Errorf("the second container: %s with exit code %d, want exited 0", status, code)
	}
}

func probe(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
	}
}
