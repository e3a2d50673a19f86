//go:build linux

package sqlite

import (
	"os"
	"regexp"
	"testing"
)

// The gathering VFS reaches into modernc.org/sqlite's and libc's
// translated method tables through unsafe (walvfs.go): an upgrade of
// either may change what it relies on without failing to compile, and
// only the power-cut suite shows a database that a cut left corrupt.
func TestWALVFSVerified(t *testing.T) {
	mod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for path, verified := range walVFSVerified {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + `\s+(v\S+)`).FindSubmatch(mod)
		if m == nil {
			t.Errorf("go.mod does not require %s", path)
			continue
		}
		if got := string(m[1]); got != verified {
			t.Errorf("go.mod requires %s %s, but the gathered WAL writes (walvfs.go) last passed the power-cut suite with %s: "+
				"run make chaos (its power cuts run with and without --sqlite-plain-wal), then set walVFSVerified", path, got, verified)
		}
	}
}
