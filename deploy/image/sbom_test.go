package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// checkSPDX checks what SPDX 2.3 requires of the fields this tool writes,
// and returns the document.
func checkSPDX(t *testing.T, b []byte) spdxDocument {
	t.Helper()
	var doc spdxDocument
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.Name == "" {
		t.Errorf("SBOM header: %+v", doc)
	}
	if !strings.HasPrefix(doc.DocumentNamespace, "https://") || strings.Contains(doc.DocumentNamespace, "#") {
		t.Errorf("documentNamespace %q: want an absolute URI without a fragment", doc.DocumentNamespace)
	}
	if _, err := time.Parse(time.RFC3339, doc.CreationInfo.Created); err != nil || !strings.HasSuffix(doc.CreationInfo.Created, "Z") {
		t.Errorf("created %q: want YYYY-MM-DDThh:mm:ssZ", doc.CreationInfo.Created)
	}
	if len(doc.CreationInfo.Creators) == 0 || !strings.HasPrefix(doc.CreationInfo.Creators[0], "Tool: ") {
		t.Errorf("creators %q", doc.CreationInfo.Creators)
	}
	valid := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	ids := map[string]bool{doc.SPDXID: true}
	for _, p := range doc.Packages {
		if !valid.MatchString(p.SPDXID) || ids[p.SPDXID] {
			t.Errorf("package %s: SPDXID %q is invalid or taken", p.Name, p.SPDXID)
		}
		ids[p.SPDXID] = true
		if p.Name == "" || p.DownloadLocation == "" || p.LicenseConcluded == "" || p.LicenseDeclared == "" || p.CopyrightText == "" {
			t.Errorf("package %+v: a required field is empty", p)
		}
	}
	describes := 0
	for _, r := range doc.Relationships {
		if !ids[r.SPDXElementID] || !ids[r.RelatedSPDXElement] {
			t.Errorf("relationship %+v names an element the document lacks", r)
		}
		if r.SPDXElementID == doc.SPDXID && r.RelationshipType == "DESCRIBES" {
			describes++
		}
	}
	if describes != 1 {
		t.Errorf("%d DESCRIBES relationships, want 1 (the image)", describes)
	}
	return doc
}

// The SBOM of a Go binary (this test's own) lists the binary with its
// digest, Go's standard library and every module the toolchain recorded
// in it, and each Debian package with its version; the same input gives
// the same bytes.
func TestSBOM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	in := sbomInput{
		meta:     imageMeta{name: "quantykube", version: "v1.2.3+meta", revision: "abc", source: "https://example.invalid/q", licenses: "Apache-2.0", created: time.Unix(1700000000, 0)},
		platform: platform{"linux", "arm", "v7"},
		binary:   bin,
		debs:     []*debPackage{{Name: "tzdata", Version: "2026f-0+deb12u1", Arch: "all", SHA256: "00ff"}},
	}
	b, err := sbom(in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sbom(in)
	if err != nil || !bytes.Equal(b, again) {
		t.Fatalf("a second SBOM of the same input differs (%v)", err)
	}
	doc := checkSPDX(t, b)
	if doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %s, want SOURCE_DATE_EPOCH's time", doc.CreationInfo.Created)
	}
	byName := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		byName[p.Name] = p
	}
	bi, _ := debug.ReadBuildInfo()
	own := byName[bi.Main.Path]
	sum := sha256.Sum256(bin)
	if own.VersionInfo != "v1.2.3+meta" || len(own.Checksums) != 1 || own.Checksums[0].ChecksumValue != hex.EncodeToString(sum[:]) || own.LicenseDeclared != "Apache-2.0" {
		t.Errorf("the binary's package: %+v", own)
	}
	if got := own.ExternalRefs[0].ReferenceLocator; got != "pkg:golang/"+bi.Main.Path+"@v1.2.3%2Bmeta" {
		t.Errorf("the binary's purl %s: want its + escaped", got)
	}
	if std := byName["stdlib"]; std.VersionInfo != bi.GoVersion {
		t.Errorf("stdlib: %+v, want %s", std, bi.GoVersion)
	}
	for _, d := range bi.Deps {
		if p, ok := byName[d.Path]; !ok || p.VersionInfo != d.Version {
			t.Errorf("module %s %s: listed as %+v", d.Path, d.Version, p)
		}
	}
	if len(bi.Deps) == 0 {
		t.Error("this test's binary records no module: nothing was checked")
	}
	tz := byName["tzdata"]
	if tz.VersionInfo != "2026f-0+deb12u1" || tz.Checksums[0].ChecksumValue != "00ff" || tz.ExternalRefs[0].ReferenceLocator != "pkg:deb/debian/tzdata@2026f-0%2Bdeb12u1?arch=all" {
		t.Errorf("tzdata: %+v", tz)
	}

	if _, err := sbom(sbomInput{meta: in.meta, binary: []byte("#!/bin/sh\n")}); err == nil {
		t.Error("a binary without Go build information: want an error")
	}
}

func TestSPDXIDs(t *testing.T) {
	ids := spdxIDs{}
	for _, c := range []struct{ in, want string }{
		{"go-github.com/a/b_c", "SPDXRef-go-github.com-a-b-c"},
		{"go-github.com/a/b-c", "SPDXRef-go-github.com-a-b-c-2"},
		{"go-github.com/a/b~c", "SPDXRef-go-github.com-a-b-c-3"},
	} {
		if got := ids.next(c.in); got != c.want {
			t.Errorf("%s: %s, want %s", c.in, got, c.want)
		}
	}
}
