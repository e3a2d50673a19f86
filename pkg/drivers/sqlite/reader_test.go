package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
)

// TestReaderCache checks that every reader connection, not only the first,
// has its share of the readers' page cache, and never less than SQLite's
// default.
func TestReaderCache(t *testing.T) {
	for _, tc := range []struct{ readers, wantKiB int }{
		{4, 8 << 10},
		{8, 4 << 10},
		{64, 2000},
	} {
		d, err := New("sqlite://"+filepath.Join(t.TempDir(), "state.db"), Options{Pool: generic.ConnectionPoolConfig{MaxOpen: tc.readers}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		writer, reader, err := d.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Connections held at once are distinct connections.
		var kib int
		for i := range 3 {
			conn, err := reader.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&kib); err != nil {
				t.Fatal(err)
			}
			if kib != -tc.wantKiB {
				t.Errorf("%d readers: connection %d has cache_size %d, want %d (KiB)", tc.readers, i, kib, -tc.wantKiB)
			}
		}
		t.Cleanup(func() {
			reader.Close()
			writer.Close()
			d.Close()
		})
	}
}
