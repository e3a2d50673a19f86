package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// imagePlatforms are the platforms TestImage builds: the build machine's
// alone unless QUANTY_IMAGE_PLATFORMS names more (all three, twice, take
// minutes more on two cores: a cross-compilation of quantykube each).
func imagePlatforms() string {
	if p := os.Getenv("QUANTY_IMAGE_PLATFORMS"); p != "" {
		return p
	}
	return imagePlatformHost()
}

// need fails the test (under CI=true) or skips it when a tool make image
// runs is missing.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("make image needs %s: %v (CI=true: a missing part fails the run)", tool, err)
			}
			t.Skipf("make image needs %s: %v", tool, err)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", repoRoot(t)}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// makeImage runs scripts/image.sh (make image) into out and returns what
// it printed.
func makeImage(t *testing.T, out, platforms string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "scripts", "image.sh"))
	// The commit names the build: nothing of the caller's may.
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "VERSION" && k != "SOURCE_DATE_EPOCH" && !strings.HasPrefix(k, "IMAGE_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "IMAGE_OUT="+out, "IMAGE_PLATFORMS="+platforms)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s\n%s", err, stdout, stderr.Bytes())
	}
	t.Logf("scripts/image.sh (%s) took %s:\n%s", platforms, time.Since(start).Round(time.Second), stdout)
	return string(stdout)
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// TestImage builds the image twice, into two directories, and checks that
// the builds are the same to the byte (the index, every platform's
// manifest, the docker archive, the SBOMs), that the image holds what
// docs/image.md says, and that push writes it whole to a registry.
func TestImage(t *testing.T) {
	need(t, "git", "apt-get", "dpkg-deb", "sha256sum")
	platforms := imagePlatforms()
	a, b := t.TempDir(), t.TempDir()
	printedA, printedB := makeImage(t, a, platforms), makeImage(t, b, platforms)
	// What each build printed, but for the directory it wrote to.
	if strings.ReplaceAll(printedA, a, "OUT") != strings.ReplaceAll(printedB, b, "OUT") {
		t.Errorf("two builds of one commit printed different digests:\n%s\n%s", printedA, printedB)
	}
	files := []string{"quantykube-image/index.json", "quantykube-image.tar"}
	var plats []platform
	for _, p := range strings.Fields(platforms) {
		pl, err := parsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		plats = append(plats, pl)
		files = append(files, "quantykube-image_"+pl.dashed()+".spdx.json")
	}
	for _, f := range files {
		if sha(t, filepath.Join(a, f)) != sha(t, filepath.Join(b, f)) {
			t.Errorf("%s differs between two builds of one commit", f)
		}
	}

	idx, err := layoutIndex(filepath.Join(a, "quantykube-image"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(printedA, "index          "+d.String()) {
		t.Errorf("make image printed no index digest %s:\n%s", d, printedA)
	}
	epoch, err := strconv.ParseInt(git(t, "log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := imageMeta{
		name: "quantykube", revision: git(t, "rev-parse", "HEAD"), source: "https://github.com/quantyroot/quantykube",
		version: "v0.0.0-g" + git(t, "rev-parse", "--short", "HEAD"), created: time.Unix(epoch, 0).UTC(),
	}
	if tag := git(t, "tag", "--points-at", "HEAD"); tag != "" {
		want.version = strings.Fields(tag)[0]
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(im.Annotations, want.labels()) {
		t.Errorf("the index's annotations %v, want %v", im.Annotations, want.labels())
	}
	if len(im.Manifests) != len(plats) {
		t.Fatalf("the index lists %d images, want %d", len(im.Manifests), len(plats))
	}
	for i, m := range im.Manifests {
		if got := (platform{m.Platform.OS, m.Platform.Architecture, m.Platform.Variant}); got != plats[i] {
			t.Errorf("manifest %d is for %s, want %s", i, got, plats[i])
		}
		if !strings.Contains(printedA, fmt.Sprintf("%-14s %s", plats[i], m.Digest)) {
			t.Errorf("make image printed no digest %s for %s", m.Digest, plats[i])
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		sbom, err := os.ReadFile(filepath.Join(a, "quantykube-image_"+plats[i].dashed()+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(plats[i].dashed(), func(t *testing.T) { checkImage(t, img, plats[i], want, sbom) })
	}

	t.Run("push", func(t *testing.T) {
		// go-containerregistry's registry, in memory, on loopback: what
		// push sends is read back through the registry API.
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer srv.Close()
		ref := strings.TrimPrefix(srv.URL, "http://") + "/quantykube:" + want.version
		pushed, err := push(t.Context(), filepath.Join(a, "quantykube-image"), ref, authn.DefaultKeychain)
		if err != nil {
			t.Fatal(err)
		}
		if pushed.DigestStr() != d.String() {
			t.Errorf("pushed %s, want the index's digest %s", pushed, d)
		}
		tagged, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Index(tagged)
		if err != nil {
			t.Fatal(err)
		}
		if gd, _ := got.Digest(); gd != d {
			t.Errorf("the registry's %s is %s, want %s", ref, gd, d)
		}
		for _, m := range im.Manifests {
			img, err := remote.Image(pushed.Context().Digest(m.Digest.String()))
			if err != nil {
				t.Fatalf("%s: %v", m.Platform, err)
			}
			ls, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				// Reading a layer through checks its digest.
				rc, err := l.Compressed()
				if err == nil {
					_, err = io.Copy(io.Discard, rc)
					rc.Close()
				}
				if err != nil {
					t.Errorf("%s: a layer: %v", m.Platform, err)
				}
			}
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkImage checks one platform's image: its config, and every file.
func checkImage(t *testing.T, img v1.Image, p platform, want imageMeta, sbom []byte) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.os || cf.Architecture != p.arch || cf.Variant != p.variant || !cf.Created.Equal(want.created) {
		t.Errorf("config: %s/%s/%s created %s, want %s created %s", cf.OS, cf.Architecture, cf.Variant, cf.Created, p, want.created)
	}
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{binaryPath}) || !slices.Equal(c.Cmd, defaultArgs) || c.WorkingDir != dataDir {
		t.Errorf("config: user %q, entrypoint %q, cmd %q, working dir %q", c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	if !mapsEqual(c.Labels, want.labels()) {
		t.Errorf("labels %v, want %v", c.Labels, want.labels())
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(m.Annotations, want.labels()) {
		t.Errorf("manifest annotations %v, want %v", m.Annotations, want.labels())
	}
	for _, h := range cf.History {
		if !h.Created.Equal(want.created) {
			t.Errorf("history %q created %s, want %s", h.CreatedBy, h.Created, want.created)
		}
	}

	files := map[string]tarEntry{}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range readTar(t, b) {
			files[strings.TrimSuffix(e.hdr.Name, "/")] = e
			if !e.hdr.ModTime.Equal(want.created) {
				t.Errorf("%s: time %s, want SOURCE_DATE_EPOCH's %s", e.hdr.Name, e.hdr.ModTime, want.created)
			}
		}
	}
	get := func(n string) tarEntry {
		e, ok := files[n]
		if !ok {
			t.Fatalf("the image has no %s", n)
		}
		return e
	}

	bin := get(strings.TrimPrefix(binaryPath, "/"))
	bi, err := buildinfo.Read(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatalf("the binary: %v", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	goarm := ""
	if p.variant != "" {
		goarm = strings.TrimPrefix(p.variant, "v")
	}
	if bi.Path != "github.com/quantyroot/quantykube/cmd/quantykube" || settings["GOOS"] != p.os || settings["GOARCH"] != p.arch || settings["CGO_ENABLED"] != "0" ||
		settings["-tags"] != "grpcnotrace" || settings["-trimpath"] != "true" || (goarm != "" && settings["GOARM"] != goarm) || bin.hdr.Mode != 0o755 {
		t.Errorf("the binary is not built as make dist builds it for %s: %s %v, mode %#o", p, bi.Path, settings, bin.hdr.Mode)
	}
	if p.String() == imagePlatformHost() {
		exe := filepath.Join(t.TempDir(), "quantykube")
		if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "quantykube "+want.version+"\n") {
			t.Errorf("quantykube version: %v\n%s\nwant version %s stamped", err, out, want.version)
		}
	}

	if got := get(sbomPath).data; !bytes.Equal(got, sbom) {
		t.Error("the image's SBOM is not the one written beside it")
	}
	doc := checkSPDX(t, sbom)
	names := map[string]string{}
	for _, pk := range doc.Packages {
		names[pk.Name] = pk.VersionInfo
	}
	if names[caPackage] == "" || names[tzPackage] == "" || names["google.golang.org/grpc"] == "" || names[bi.Main.Path] != want.version {
		t.Errorf("the SBOM lacks Debian's packages, a Go module or the binary: %v", names)
	}

	bundle := get(caBundle).data
	n := 0
	for rest := bundle; ; n++ {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
	}
	if n < 100 {
		t.Errorf("%s holds %d certificates: not Debian's bundle", caBundle, n)
	}
	if _, err := time.LoadLocationFromTZData("Europe/Berlin", get(zoneinfo+"/Europe/Berlin").data); err != nil {
		t.Errorf("zoneinfo: %v", err)
	}
	if e := get("etc/passwd"); !strings.Contains(string(e.data), "quantykube:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532:\n%s", e.data)
	}
	if e := get(strings.TrimPrefix(dataDir, "/")); e.hdr.Typeflag != tar.TypeDir || e.hdr.Uid != 65532 || e.hdr.Gid != 65532 || e.hdr.Mode != 0o700 {
		t.Errorf("%s: %d:%d %#o, want a directory 65532:65532 0700", dataDir, e.hdr.Uid, e.hdr.Gid, e.hdr.Mode)
	}
	if e := get("tmp"); e.hdr.Mode != 0o1777 {
		t.Errorf("/tmp: mode %#o, want 01777", e.hdr.Mode)
	}
}

func imagePlatformHost() string {
	if runtime.GOARCH == "arm" {
		return "linux/arm/v7"
	}
	return "linux/" + runtime.GOARCH
}
