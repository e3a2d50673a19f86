package mvcc_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// CheckWriter answers only when the writer gets to it: not while a commit
// is stuck on the database's lock, and again once it is released.
func TestCheckWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openAt(t, "sqlite://"+path, mvcc.Options{})
	if err := s.CheckWriter(ctx); err != nil {
		t.Fatalf("idle writer: %v", err)
	}
	// Another connection takes SQLite's write lock: the writer's next
	// batch waits for it.
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64)
	go func() { done <- put(t, s, "/k", []byte("v")) }()
	// A check may get in before the put does; once the put holds the
	// writer, every check waits until its deadline.
	stuck := false
	for range 200 {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := s.CheckWriter(short)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			stuck = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !stuck {
		t.Fatal("the writer check kept answering while a commit waited for the database's lock")
	}
	select {
	case <-done:
		t.Fatal("the put committed while another connection held the write lock")
	default:
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if rev := <-done; rev != 2 {
		t.Fatalf("the write that waited: revision %d", rev)
	}
	if err := s.CheckWriter(ctx); err != nil {
		t.Fatalf("writer after the lock: %v", err)
	}
	for name, check := range map[string]func(context.Context) error{"database": s.CheckDatabase, "schema": s.CheckSchema} {
		if err := check(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	s.Close()
	for name, check := range map[string]func(context.Context) error{"writer": s.CheckWriter, "database": s.CheckDatabase, "schema": s.CheckSchema} {
		if err := check(ctx); !errors.Is(err, mvcc.ErrClosed) {
			t.Errorf("%s check of a closed store: %v", name, err)
		}
	}
}
