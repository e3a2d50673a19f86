//go:build linux

package sqlite

import (
	"path/filepath"
	"testing"
)

// --sqlite-plain-wal opens the writer without the gathering VFS: its WAL
// is never one of walVFS's files, as it is otherwise.
func TestPlainWAL(t *testing.T) {
	for _, plain := range []bool{false, true} {
		d, err := New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), Options{PlainWAL: plain})
		if err != nil {
			t.Fatal(err)
		}
		writer, reader, err := d.Open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writer.ExecContext(t.Context(), `CREATE TABLE t (v BLOB)`); err != nil {
			t.Fatal(err)
		}
		if _, err := writer.ExecContext(t.Context(), `INSERT INTO t VALUES (randomblob(10000))`); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		gathered := len(walFiles)
		mu.Unlock()
		if plain && gathered != 0 || !plain && gathered == 0 {
			t.Errorf("PlainWAL %v: %d WAL files open through the gathering VFS", plain, gathered)
		}
		reader.Close()
		writer.Close()
		d.Close()
	}
}
