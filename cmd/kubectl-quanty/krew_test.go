package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's v1alpha2 Plugin that krew checks.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// The manifest template, filled in as scripts/dist.sh fills it, is a krew
// plugin manifest for every platform make dist builds.
func TestKrewManifest(t *testing.T) {
	tmpl, err := os.ReadFile("../../plugins/quanty.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../scripts/dist.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`PLATFORMS=\$\{PLATFORMS:-([^}]*)\}`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/dist.sh has no default PLATFORMS")
	}
	platforms := strings.Fields(string(m[1]))
	if len(platforms) != 6 {
		t.Fatalf("make dist builds %q, want linux, darwin and windows on amd64 and arm64", platforms)
	}
	// What dist.sh substitutes, and nothing else is left.
	filled := strings.ReplaceAll(strings.ReplaceAll(string(tmpl), "@VERSION@", "v1.2.3"), "@URL@", "https://example.com/v1.2.3")
	for _, p := range platforms {
		filled = strings.ReplaceAll(filled, "@SHA256_"+strings.ReplaceAll(p, "/", "_")+"@", strings.Repeat("ab", 32))
	}
	if strings.Contains(filled, "@") {
		t.Fatalf("placeholders dist.sh does not fill:\n%s", filled)
	}
	var k krewPlugin
	if err := yaml.UnmarshalStrict([]byte(filled), &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || k.Kind != "Plugin" || k.Metadata.Name != "quanty" {
		t.Fatalf("not a krew plugin named quanty: %+v", k)
	}
	if k.Spec.Version != "v1.2.3" || k.Spec.Homepage == "" || k.Spec.Description == "" || len(k.Spec.ShortDescription) > 50 {
		t.Fatalf("spec: %+v", k.Spec)
	}
	// krew puts bin alone on PATH: the caveats say how the completion
	// script the archives hold (dist_test.go) gets there.
	if !strings.Contains(k.Spec.Caveats, `cp "${KREW_ROOT:-$HOME/.krew}/store/quanty/v1.2.3/kubectl_complete-quanty" "${KREW_ROOT:-$HOME/.krew}/bin/"`) {
		t.Errorf("the caveats do not put kubectl_complete-quanty on PATH:\n%s", k.Spec.Caveats)
	}
	var seen []string
	for _, p := range k.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		seen = append(seen, os+"/"+arch)
		bin := "kubectl-quanty"
		if os == "windows" {
			bin += ".exe"
		}
		if p.Bin != bin || p.URI != "https://example.com/v1.2.3/kubectl-quanty_v1.2.3_"+os+"_"+arch+".tar.gz" || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.Sha256) {
			t.Errorf("platform %s/%s: %+v", os, arch, p)
		}
	}
	slices.Sort(seen)
	slices.Sort(platforms)
	if !slices.Equal(seen, platforms) {
		t.Errorf("the manifest's platforms %q, make dist's %q", seen, platforms)
	}
}
