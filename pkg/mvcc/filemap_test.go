package mvcc_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package doc's file map (kv.go) names every file of the package, so
// that a newcomer finds each concern from it.
func TestPackageDocNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("kv.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if !regexp.MustCompile(`(?m)^//\t\s*` + regexp.QuoteMeta(f) + `\s`).Match(doc) {
			t.Errorf("the package doc's file map (kv.go) does not name %s", f)
		}
	}
}
