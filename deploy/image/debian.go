package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The image's files from Debian: the CA certificates Go's crypto/x509
// reads (/etc/ssl/certs/ca-certificates.crt, its first choice on Linux)
// and the time zones time.LoadLocation reads (/usr/share/zoneinfo), with
// each package's copyright file. Both packages are Architecture: all, so
// one download serves every platform.
const (
	caPackage     = "ca-certificates"
	tzPackage     = "tzdata"
	caBundle      = "etc/ssl/certs/ca-certificates.crt"
	caSource      = "usr/share/ca-certificates"
	zoneinfo      = "usr/share/zoneinfo"
	debianDocsDir = "usr/share/doc"
)

// debPackage is one Debian package the image takes files from.
type debPackage struct {
	Name, Version, Arch string
	SHA256              string // of the .deb file
	File                string // its path
	dir                 string // where dpkg-deb -x unpacked it
}

// readDeb reads a .deb's control fields and unpacks it into dir, both
// with dpkg-deb, Debian's own tool.
func readDeb(file, dir string) (*debPackage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	out, err := exec.Command("dpkg-deb", "--showformat=${Package}\\n${Version}\\n${Architecture}\\n", "--show", file).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --show %s: %w%s", file, err, stderrOf(err))
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(f) != 3 || f[0] == "" || f[1] == "" {
		return nil, fmt.Errorf("dpkg-deb --show %s: want package, version and architecture, got %q", file, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("dpkg-deb", "-x", file, dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %w\n%s", file, err, out)
	}
	return &debPackage{Name: f[0], Version: f[1], Arch: f[2], SHA256: hex.EncodeToString(sum[:]), File: file, dir: dir}, nil
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return "\n" + string(ee.Stderr)
	}
	return ""
}

// debianFiles are the entries the image takes from the unpacked packages:
// the CA bundle, the zoneinfo tree and both copyright files.
func debianFiles(pkgs []*debPackage) ([]entry, error) {
	byName := map[string]*debPackage{}
	for _, p := range pkgs {
		if _, dup := byName[p.Name]; dup {
			return nil, fmt.Errorf("package %s given twice", p.Name)
		}
		byName[p.Name] = p
	}
	var out []entry
	for _, name := range []string{caPackage, tzPackage} {
		p := byName[name]
		if p == nil {
			return nil, fmt.Errorf("no %s package given (--deb): the image needs %s and %s", name, caPackage, tzPackage)
		}
		copyright := path.Join(debianDocsDir, name, "copyright")
		b, err := os.ReadFile(filepath.Join(p.dir, copyright))
		if err != nil {
			return nil, fmt.Errorf("%s: its copyright file: %w", p.File, err)
		}
		out = append(out, file(copyright, 0o644, b))
	}
	bundle, err := caCertificates(filepath.Join(byName[caPackage].dir, caSource))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", byName[caPackage].File, err)
	}
	out = append(out, file(caBundle, 0o644, bundle))
	zones, err := zoneFiles(byName[tzPackage].dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", byName[tzPackage].File, err)
	}
	return append(out, zones...), nil
}

// caCertificates is the bundle update-ca-certificates would make of every
// certificate the package ships, built without running it: each .crt
// under dir, in byte order of its path, each checked to be one PEM
// certificate Go can parse, each ending in a newline.
func caCertificates(dir string) ([]byte, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".crt") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	slices.Sort(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("CA certificates: no .crt file under %s", dir)
	}
	var bundle bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		blk, rest := pem.Decode(b)
		if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("CA certificates: %s is not one PEM certificate", f)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("CA certificates: %s: %w", f, err)
		}
		bundle.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			bundle.WriteByte('\n')
		}
	}
	return bundle.Bytes(), nil
}

// zoneFiles is tzdata's zoneinfo tree under root: files as 0644,
// directories as 0755, symbolic links kept when they point inside the
// tree (zoneinfo/localtime, which points at the host's /etc/localtime,
// is left out: the image has none, and Go then uses UTC).
func zoneFiles(root string) ([]entry, error) {
	base := filepath.Join(root, zoneinfo)
	var out []entry
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			out = append(out, dir(name, 0o755))
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			resolved := path.Join(path.Dir(name), target)
			if path.IsAbs(target) || (resolved != zoneinfo && !strings.HasPrefix(resolved, zoneinfo+"/")) {
				return nil
			}
			out = append(out, symlink(name, target))
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, file(name, 0o644, b))
		default:
			return fmt.Errorf("%s: neither a file, a directory nor a symbolic link", p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("zoneinfo: %w", err)
	}
	if len(out) < 100 {
		return nil, fmt.Errorf("zoneinfo: %d entries under %s: not tzdata's tree", len(out), base)
	}
	return out, nil
}
