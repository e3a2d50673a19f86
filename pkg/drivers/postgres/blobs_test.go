package postgres_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

var _ mvcc.OwnedBlobs = (*postgres.Dialect)(nil)

// driverBytes keeps what the driver returned for a column, as mvcc does
// under OwnedBlobs.
type driverBytes struct{ b []byte }

func (d *driverBytes) Scan(src any) error {
	d.b, _ = src.([]byte)
	return nil
}

// The store keeps the slices the driver returns for bytea values
// (mvcc.OwnedBlobs): each row's value, read through a prepared statement
// on the readers' pool, is a slice of its own, which reading the next
// rows and closing them leaves as it was.
func TestDriverBlobsAreOwned(t *testing.T) {
	ctx := context.Background()
	d, err := postgres.New(framework.PostgresDatabase(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, r, err := d.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	if _, err := w.Exec(`CREATE TABLE blobs (n integer PRIMARY KEY, v bytea)`); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i, size := range []int{3, 5000, 1 << 20, 7, 300 << 10, 1} {
		v := bytes.Repeat([]byte{byte('a' + i)}, size)
		if _, err := w.Exec(`INSERT INTO blobs (n, v) VALUES ($1, $2)`, i, v); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	st, err := r.Prepare(`SELECT v FROM blobs ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for range 2 { // the statement again: its buffers, if any, reused
		rows, err := st.Query()
		if err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for rows.Next() {
			var v driverBytes
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v.b)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d rows, want %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("row %d's value, kept after the rows that followed: %d bytes, %.10q..., want %d bytes of %q", i, len(got[i]), got[i], len(want[i]), want[i][0])
			}
		}
	}
}
