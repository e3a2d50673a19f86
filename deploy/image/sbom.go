package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// An SPDX 2.3 document (https://spdx.github.io/spdx-spec/v2.3/) of one
// platform's image, written with encoding/json: the fields this tool
// fills, in the specification's names.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string         `json:"name"`
	SPDXID                string         `json:"SPDXID"`
	VersionInfo           string         `json:"versionInfo,omitempty"`
	Supplier              string         `json:"supplier,omitempty"`
	DownloadLocation      string         `json:"downloadLocation"`
	FilesAnalyzed         bool           `json:"filesAnalyzed"`
	Checksums             []spdxChecksum `json:"checksums,omitempty"`
	LicenseConcluded      string         `json:"licenseConcluded"`
	LicenseDeclared       string         `json:"licenseDeclared"`
	CopyrightText         string         `json:"copyrightText"`
	ExternalRefs          []spdxRef      `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// sbomInput is what one platform's SBOM describes.
type sbomInput struct {
	meta     imageMeta
	platform platform
	binary   []byte // the quantykube executable
	debs     []*debPackage
}

// sbom is the SPDX document of one platform's image: the image, the
// quantykube binary in it (its Go modules and Go's standard library, read
// from the build information the toolchain records in the binary), and
// the Debian packages its files came from. Everything in it comes from
// the inputs, the time from SOURCE_DATE_EPOCH: the same build writes the
// same bytes.
func sbom(in sbomInput) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(in.binary))
	if err != nil {
		return nil, fmt.Errorf("the binary's Go build information: %w", err)
	}
	sum := sha256.Sum256(in.binary)
	m := in.meta
	plat := in.platform.String()
	ids := spdxIDs{}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        fmt.Sprintf("%s-image %s %s", m.name, m.version, plat),
		// Unique per document, as SPDX asks, without randomness: the
		// binary's digest names this build.
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s-image/%s/%s/%s", m.source, m.name, m.version, in.platform.dashed(), hex.EncodeToString(sum[:])),
		CreationInfo: spdxCreationInfo{
			Created:  m.created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: " + m.name + "-image"},
		},
	}
	license := m.licenses
	if license == "" {
		license = noAssertion
	}
	image := ids.next("image-" + m.name)
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: m.name + "-image", SPDXID: image, VersionInfo: m.version,
		DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
		CopyrightText: noAssertion, PrimaryPackagePurpose: "CONTAINER",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", image})
	binary := ids.next("go-" + m.name)
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: bi.Main.Path, SPDXID: binary, VersionInfo: m.version,
		DownloadLocation: "git+" + m.source + "@" + m.revision,
		Checksums:        []spdxChecksum{{"SHA256", hex.EncodeToString(sum[:])}},
		LicenseConcluded: license, LicenseDeclared: license, CopyrightText: noAssertion,
		ExternalRefs:          []spdxRef{purl("golang", bi.Main.Path, m.version, "")},
		PrimaryPackagePurpose: "APPLICATION",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{image, "CONTAINS", binary})
	stdlib := ids.next("go-stdlib")
	doc.Packages = append(doc.Packages, goPackage(stdlib, "stdlib", bi.GoVersion))
	doc.Relationships = append(doc.Relationships, spdxRelationship{binary, "DEPENDS_ON", stdlib})
	for _, d := range bi.Deps {
		mod := d
		if d.Replace != nil {
			mod = d.Replace
		}
		if mod.Version == "" {
			return nil, fmt.Errorf("module %s has no version in the binary's build information (a replace with a local path?)", d.Path)
		}
		id := ids.next("go-" + mod.Path)
		doc.Packages = append(doc.Packages, goPackage(id, mod.Path, mod.Version))
		doc.Relationships = append(doc.Relationships, spdxRelationship{binary, "DEPENDS_ON", id})
	}
	for _, p := range in.debs {
		id := ids.next("deb-" + p.Name)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: p.Name, SPDXID: id, VersionInfo: p.Version, Supplier: "Organization: Debian",
			DownloadLocation: noAssertion,
			Checksums:        []spdxChecksum{{"SHA256", p.SHA256}},
			LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
			ExternalRefs: []spdxRef{purl("deb", "debian/"+p.Name, p.Version, "arch="+p.Arch)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{image, "CONTAINS", id})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func goPackage(id, path, version string) spdxPackage {
	return spdxPackage{
		Name: path, SPDXID: id, VersionInfo: version, DownloadLocation: noAssertion,
		LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		ExternalRefs: []spdxRef{purl("golang", path, version, "")},
	}
}

// purl is a package URL (github.com/package-url/purl-spec) reference.
func purl(typ, name, version, qualifiers string) spdxRef {
	loc := "pkg:" + typ + "/" + name + "@" + purlEscape(version)
	if qualifiers != "" {
		loc += "?" + qualifiers
	}
	return spdxRef{"PACKAGE-MANAGER", "purl", loc}
}

// purlEscape percent-encodes all but purl's unreserved characters (a
// version's + and : must be, a Debian version's ~ need not).
func purlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// spdxIDs hands out SPDX identifiers, which allow letters, digits, . and
// - only: every other character becomes -, and a name that then collides
// with an earlier one gets a number.
type spdxIDs map[string]bool

var spdxInvalid = regexp.MustCompile(`[^A-Za-z0-9.-]`)

func (ids spdxIDs) next(name string) string {
	base := "SPDXRef-" + spdxInvalid.ReplaceAllString(name, "-")
	id := base
	for i := 2; ids[id]; i++ {
		id = fmt.Sprintf("%s-%d", base, i)
	}
	ids[id] = true
	return id
}
