package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is: where the binary goes, who runs it, where its data
// lives, what it serves by default.
const (
	binaryPath = "/usr/local/bin/quantykube"
	docDir     = "usr/share/doc/quantykube"
	sbomPath   = docDir + "/sbom.spdx.json"
	dataDir    = "/var/lib/quantykube"
	// uid and gid 65532, distroless's nonroot: no user of a usual host
	// has it, so files the container writes on a mounted volume belong to
	// nobody there.
	userID = 65532
)

// defaultArgs serve SQLite from the data directory on every interface
// (a container's own network) at etcd's ports: the etcd API on 2379, the
// metrics and health endpoints on 2381.
var defaultArgs = []string{
	"serve",
	"--listen-address=0.0.0.0:2379",
	"--endpoint=sqlite://" + dataDir + "/state.db",
	"--metrics-listen-address=0.0.0.0:2381",
}

// imageMeta names the build: the OCI labels and annotations, and the SBOM.
type imageMeta struct {
	name     string // the image's repository name, and the binary's
	version  string
	revision string // the commit
	source   string // the repository's URL
	licenses string // an SPDX expression, or "" when the repository has no LICENSE
	created  time.Time
}

// labels are the OCI annotations (image-spec annotations.md) every
// manifest, the index and each config's labels carry.
func (m imageMeta) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    m.name,
		"org.opencontainers.image.source":   m.source,
		"org.opencontainers.image.revision": m.revision,
		"org.opencontainers.image.version":  m.version,
		"org.opencontainers.image.created":  m.created.UTC().Format(time.RFC3339),
	}
	if m.licenses != "" {
		l["org.opencontainers.image.licenses"] = m.licenses
	}
	return l
}

// platform is an image's os/arch[/variant].
type platform struct{ os, arch, variant string }

func parsePlatform(s string) (platform, error) {
	f := strings.Split(s, "/")
	if len(f) < 2 || len(f) > 3 || f[0] == "" || f[1] == "" || (len(f) == 3 && f[2] == "") {
		return platform{}, fmt.Errorf("platform %q: want os/arch or os/arch/variant (linux/arm/v7)", s)
	}
	if f[0] != "linux" {
		return platform{}, fmt.Errorf("platform %q: the image is for linux only", s)
	}
	p := platform{os: f[0], arch: f[1]}
	if len(f) == 3 {
		p.variant = f[2]
	}
	return p, nil
}

func (p platform) String() string {
	if p.variant != "" {
		return p.os + "/" + p.arch + "/" + p.variant
	}
	return p.os + "/" + p.arch
}

// dashed is the platform in a file name: linux_arm_v7.
func (p platform) dashed() string { return strings.ReplaceAll(p.String(), "/", "_") }

func (p platform) v1() *v1.Platform {
	return &v1.Platform{OS: p.os, Architecture: p.arch, Variant: p.variant}
}

// buildConfig is one `build` run.
type buildConfig struct {
	meta        imageMeta
	binaries    []platformBinary // in the index's order
	debs        []string         // .deb files
	licenseFile string           // copied into the image when set
	layoutDir   string           // the OCI image layout written
	tarFile     string           // the docker-archive written
	tarPlatform platform         // the platform in tarFile
	sbomDir     string           // where each platform's SBOM is written too
	workDir     string           // scratch space (the unpacked .debs)
}

type platformBinary struct {
	platform platform
	path     string
}

// built is what a build made: the index's digest and each platform's.
type built struct {
	index     v1.Hash
	manifests []v1.Hash // in binaries' order
	tarTag    string
	tarConfig v1.Hash // the image ID docker and podman show
	sboms     []string
}

// build assembles the image of every platform and writes the outputs.
func build(c buildConfig) (*built, error) {
	if len(c.binaries) == 0 {
		return nil, fmt.Errorf("no --binary given")
	}
	var debs []*debPackage
	for i, f := range c.debs {
		p, err := readDeb(f, filepath.Join(c.workDir, fmt.Sprintf("deb-%d", i)))
		if err != nil {
			return nil, err
		}
		debs = append(debs, p)
	}
	base, err := baseLayer(c.meta, debs)
	if err != nil {
		return nil, err
	}
	var license []byte
	if c.licenseFile != "" {
		if license, err = os.ReadFile(c.licenseFile); err != nil {
			return nil, fmt.Errorf("license: %w", err)
		}
	}
	out := &built{}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var tarImage v1.Image
	seen := map[platform]bool{}
	for _, b := range c.binaries {
		if seen[b.platform] {
			return nil, fmt.Errorf("platform %s given twice", b.platform)
		}
		seen[b.platform] = true
		img, sb, err := platformImage(c.meta, b, base, debs, license)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.platform, err)
		}
		if c.sbomDir != "" {
			f := filepath.Join(c.sbomDir, fmt.Sprintf("%s-image_%s.spdx.json", c.meta.name, b.platform.dashed()))
			if err := os.WriteFile(f, sb, 0o644); err != nil {
				return nil, fmt.Errorf("SBOM: %w", err)
			}
			out.sboms = append(out.sboms, f)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.platform, err)
		}
		out.manifests = append(out.manifests, d)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: b.platform.v1()}})
		if b.platform == c.tarPlatform {
			tarImage = img
		}
	}
	idx = mutate.Annotations(idx, c.meta.labels()).(v1.ImageIndex)
	if out.index, err = idx.Digest(); err != nil {
		return nil, err
	}
	if c.layoutDir != "" {
		if err := writeLayout(c.layoutDir, idx, c.meta.version); err != nil {
			return nil, fmt.Errorf("OCI layout %s: %w", c.layoutDir, err)
		}
	}
	if c.tarFile != "" {
		if tarImage == nil {
			return nil, fmt.Errorf("--tar-platform %s is not among the platforms built", c.tarPlatform)
		}
		tag, err := name.NewTag(c.meta.name + ":" + c.meta.version)
		if err != nil {
			return nil, fmt.Errorf("version %q as an image tag: %w", c.meta.version, err)
		}
		if err := tarball.WriteToFile(c.tarFile, tag, tarImage); err != nil {
			return nil, fmt.Errorf("docker archive %s: %w", c.tarFile, err)
		}
		out.tarTag = tag.String()
		if out.tarConfig, err = tarImage.ConfigName(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// baseLayer is what every platform shares: Debian's files, the users,
// /tmp and the data directory, owned by the user the image runs as and
// open to it alone (the database holds every Secret of a cluster).
func baseLayer(m imageMeta, debs []*debPackage) (v1.Layer, error) {
	files, err := debianFiles(debs)
	if err != nil {
		return nil, err
	}
	t := tree{}
	if err := t.add(files...); err != nil {
		return nil, err
	}
	data := dir(dataDir, 0o700)
	data.uid, data.gid = userID, userID
	err = t.add(
		file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n", m.name, userID, userID, m.name, dataDir)),
		file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\nnobody:x:65534:\n", m.name, userID)),
		dir("tmp", 0o1777),
		data,
	)
	if err != nil {
		return nil, err
	}
	return t.layer(m.created)
}

// platformImage is one platform's image: the base layer, then a layer of
// the binary, its SBOM and the license; the config runs the binary as the
// unprivileged user.
func platformImage(m imageMeta, b platformBinary, base v1.Layer, debs []*debPackage, license []byte) (v1.Image, []byte, error) {
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, nil, fmt.Errorf("the binary: %w", err)
	}
	sb, err := sbom(sbomInput{meta: m, platform: b.platform, binary: bin, debs: debs})
	if err != nil {
		return nil, nil, fmt.Errorf("SBOM of %s: %w", b.path, err)
	}
	t := tree{}
	if err := t.add(file(binaryPath, 0o755, bin), file(sbomPath, 0o644, sb)); err != nil {
		return nil, nil, err
	}
	if license != nil {
		if err := t.add(file(docDir+"/LICENSE", 0o644, license)); err != nil {
			return nil, nil, err
		}
	}
	top, err := t.layer(m.created)
	if err != nil {
		return nil, nil, err
	}
	created := v1.Time{Time: m.created.UTC()}
	cfg := &v1.ConfigFile{
		Created:      created,
		OS:           b.platform.os,
		Architecture: b.platform.arch,
		Variant:      b.platform.variant,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:         fmt.Sprintf("%d:%d", userID, userID),
			Entrypoint:   []string{binaryPath},
			Cmd:          defaultArgs,
			Env:          []string{"PATH=/usr/local/bin"},
			WorkingDir:   dataDir,
			ExposedPorts: map[string]struct{}{"2379/tcp": {}, "2381/tcp": {}},
			Labels:       m.labels(),
			StopSignal:   "SIGTERM",
		},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: m.name + "-image: Debian's CA certificates and time zones, users, /tmp, " + dataDir}},
		mutate.Addendum{Layer: top, History: v1.History{Created: created, CreatedBy: m.name + "-image: " + binaryPath + " " + m.version + ", its SBOM"}},
	)
	if err != nil {
		return nil, nil, err
	}
	return mutate.Annotations(img, m.labels()).(v1.Image), sb, nil
}

// writeLayout writes the index as a fresh OCI image layout, the index
// named by the version (org.opencontainers.image.ref.name), as skopeo's
// oci:DIR:VERSION and go-containerregistry's layout read it.
func writeLayout(dir string, idx v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version}))
}

// report prints what was built, for the operator to pin and load.
func (b *built) report(w io.Writer, c buildConfig) {
	fmt.Fprintf(w, "%s-image %s (created %s)\n", c.meta.name, c.meta.version, c.meta.created.UTC().Format(time.RFC3339))
	if c.layoutDir != "" {
		fmt.Fprintf(w, "OCI layout     %s (%s:%s)\n", c.layoutDir, c.layoutDir, c.meta.version)
	}
	fmt.Fprintf(w, "index          %s\n", b.index)
	for i, bin := range c.binaries {
		fmt.Fprintf(w, "%-14s %s\n", bin.platform, b.manifests[i])
	}
	if c.tarFile != "" {
		fmt.Fprintf(w, "docker archive %s: %s (%s), image ID %s\n", c.tarFile, b.tarTag, c.tarPlatform, b.tarConfig)
	}
	for _, s := range b.sboms {
		fmt.Fprintf(w, "SBOM           %s\n", s)
	}
}
