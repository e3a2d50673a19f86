package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// Podman is Debian's podman with Debian's runc, run as it runs on these
// machines (CONTRACTS.md §6): cgroups through cgroupfs (crun refuses the
// hybrid cgroup layout), runc as the runtime, and each container's
// ulimits within what the sandbox may set.
type Podman struct {
	bin, runc string
}

// RuncPath is where Debian's runc package puts runc.
const RuncPath = "/usr/sbin/runc"

// NewPodman finds podman and runc; a missing one fails t (.ci/run installs
// both; this suite is run on purpose, and a skip would read as a pass).
func NewPodman(t testing.TB) *Podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		t.Fatalf("the image test needs podman (apt-get install podman runc): %v", err)
	}
	if st, err := os.Stat(RuncPath); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("the image test needs Debian's runc at %s (apt-get install runc): %v", RuncPath, err)
	}
	return &Podman{bin: bin, runc: RuncPath}
}

// Run runs one podman command, bounded, and returns its standard output;
// a failure carries its standard error.
func (p *Podman) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--cgroup-manager=cgroupfs", "--runtime", p.runc}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p.bin, full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// Must is Run that fails t on an error.
func (p *Podman) Must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := p.Run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Image is the image make image built, as a docker archive.
type Image struct {
	Tar string
	// ID is its config's digest (sha256:...), which docker and podman
	// show as the image ID.
	ID  string
	Tag string // the tag in the archive: quantykube:VERSION
	// Layout is the OCI image layout of the same build, its image index
	// named VERSION; Index is that index's digest, the one make image
	// prints and docs/kubeadm.md pins.
	Layout, Index string
}

// BuildImage runs scripts/image.sh (make image) for the build machine's
// platform alone into a directory of t's, and reads the docker archive's
// manifest.
func BuildImage(t testing.TB) *Image {
	t.Helper()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	plat := "linux/" + runtime.GOARCH
	if runtime.GOARCH == "arm" {
		plat += "/v7"
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "image.sh"))
	cmd.Env = append(os.Environ(), "IMAGE_OUT="+out, "IMAGE_PLATFORMS="+plat)
	var stderr framework.LogBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	printed, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s%s", err, printed, stderr.Tail(4000))
	}
	t.Logf("make image (%s) in %s:\n%s", plat, time.Since(start).Round(time.Second), printed)
	img := &Image{Tar: filepath.Join(out, "quantykube-image.tar"), Layout: filepath.Join(out, "quantykube-image")}
	if img.ID, img.Tag, err = dockerArchive(img.Tar); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(img.Layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("%s/index.json: %v, %d entries, want the one image index", img.Layout, err, len(idx.Manifests))
	}
	img.Index = idx.Manifests[0].Digest
	if !strings.Contains(string(printed), "index          "+img.Index) {
		t.Errorf("make image did not print the layout's index digest %s", img.Index)
	}
	return img
}

// dockerArchive reads a docker archive's manifest.json: its one image's
// config digest and tag.
func dockerArchive(path string) (id, tag string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", "", fmt.Errorf("%s: no manifest.json", path)
		}
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct {
			Config   string
			RepoTags []string
		}
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return "", "", fmt.Errorf("%s: manifest.json: %w", path, err)
		}
		if len(m) != 1 || len(m[0].RepoTags) != 1 || !strings.HasPrefix(m[0].Config, "sha256:") {
			return "", "", fmt.Errorf("%s: manifest.json %+v: want one image with one tag", path, m)
		}
		return m[0].Config, m[0].RepoTags[0], nil
	}
}

// ImageConfig is what podman image inspect shows of an image's config.
type ImageConfig struct {
	ID          string `json:"Id"`
	RepoTags    []string
	RepoDigests []string
	Config      struct {
		User       string
		Entrypoint []string
		Cmd        []string
		WorkingDir string
		Labels     map[string]string
	}
}

// Load loads the archive into podman's storage and returns its config as
// podman sees it. The image is removed when t ends, unless it was there
// before (a developer's make image of the same commit).
func (p *Podman) Load(t testing.TB, img *Image) ImageConfig {
	t.Helper()
	_, missing := p.Run(t, "image", "exists", img.ID)
	out := p.Must(t, "load", "-i", img.Tar)
	if missing != nil {
		t.Cleanup(func() {
			if _, err := p.Run(t, "rmi", "-f", img.ID); err != nil {
				t.Errorf("remove the image: %v", err)
			}
		})
	}
	if !strings.Contains(out, img.Tag) {
		t.Errorf("podman load printed %q, want the archive's tag %s", out, img.Tag)
	}
	var cfgs []ImageConfig
	if err := json.Unmarshal([]byte(p.Must(t, "image", "inspect", img.ID)), &cfgs); err != nil || len(cfgs) != 1 {
		t.Fatalf("podman image inspect %s: %v (%d images)", img.ID, err, len(cfgs))
	}
	return cfgs[0]
}

// PullLayout pulls the build's OCI image layout into podman's storage
// (oci:DIR:VERSION), as docs/image.md loads an image to pin by digest, and
// returns the reference by the index's digest: name@sha256:INDEX. The
// layout's image is the archive's (one config, one ID), so Load's cleanup
// removes it; the name podman derives from the directory goes at once.
func (p *Podman) PullLayout(t testing.TB, img *Image) string {
	t.Helper()
	_, version, _ := strings.Cut(img.Tag, ":")
	// podman names the image after the directory, which must then be a
	// valid repository name: lowercase, unlike t.TempDir's.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("quantykube-e2e-oci-%d", os.Getpid()))
	if err := os.Symlink(img.Layout, dir); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	p.Must(t, "pull", "oci:"+dir+":"+version)
	var pulled []ImageConfig
	if err := json.Unmarshal([]byte(p.Must(t, "image", "inspect", img.ID)), &pulled); err != nil || len(pulled) != 1 {
		t.Fatalf("podman image inspect %s: %v", img.ID, err)
	}
	for _, n := range pulled[0].RepoTags {
		if strings.Contains(n, filepath.Base(dir)) {
			p.Must(t, "untag", img.ID, n)
		}
	}
	name, _, _ := strings.Cut(img.Tag, ":")
	return name + "@" + img.Index
}

// Container is one `podman run -d` of the image.
type Container struct {
	p    *Podman
	Name string
}

// Start runs the image in a container named name on the host's network
// (no bridge, no port mapping: it serves where args say, on loopback),
// with extra podman flags (volumes), and removes it when t ends.
func (p *Podman) Start(t testing.TB, name, image string, flags, args []string) *Container {
	t.Helper()
	run := []string{"run", "-d", "--name", name, "--network", "host",
		"--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096"}
	run = append(append(append(run, flags...), image), args...)
	p.Must(t, run...)
	c := &Container{p: p, Name: name}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container %s log:\n%s", name, c.Logs(t))
		}
		if _, err := p.Run(t, "rm", "--force", "--ignore", "--time", "0", name); err != nil {
			t.Errorf("remove container %s: %v", name, err)
		}
	})
	return c
}

// Logs is what the container wrote (stdout and stderr).
func (c *Container) Logs(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.p.bin, "--cgroup-manager=cgroupfs", "--runtime", c.p.runc, "logs", c.Name).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(podman logs: %v)\n%s", err, out)
	}
	return string(out)
}

// State is the container's state as podman inspect reports it.
func (c *Container) State(t testing.TB) (status string, pid, exitCode int) {
	t.Helper()
	out := c.p.Must(t, "inspect", "--format", "{{.State.Status}} {{.State.Pid}} {{.State.ExitCode}}", c.Name)
	f := strings.Fields(out)
	if len(f) != 3 {
		t.Fatalf("podman inspect %s: %q", c.Name, out)
	}
	pid, err1 := strconv.Atoi(f[1])
	exitCode, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("podman inspect %s: %q: %v", c.Name, out, err)
	}
	return f[0], pid, exitCode
}

// WaitReady waits until the etcd API at url answers a Status call, and
// fails t if the container exits first.
func (c *Container) WaitReady(t testing.TB, url string) {
	t.Helper()
	cli, err := framework.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Status(ctx, url)
		cancel()
		if err == nil {
			return
		}
		if status, _, code := c.State(t); status != "running" {
			t.Fatalf("container %s is %s (exit code %d) before serving:\n%s", c.Name, status, code, c.Logs(t))
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: %s not ready after a minute: %v\n%s", c.Name, url, err, c.Logs(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
