package replica

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// Many clusters on one server: thirty stores, each its own database, all
// through one PgBouncer in transaction mode with 3 server connections per
// database (90 in all, under PostgreSQL's default 100), write and read
// concurrently, and each reads back exactly its own writes
// (docs/postgresql.md, "Many clusters on one server").
func TestThirtyStoresOnePooler(t *testing.T) {
	const stores, writes, poolSize = 30, 20, 3
	srv, err := framework.PostgresServer()
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	u, err := url.Parse(srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pgb, err := pgtest.StartPgBouncerPool(ctx, u.Hostname(), port, "transaction", poolSize)
	if errors.Is(err, pgtest.ErrNoPgBouncer) {
		framework.Unavailable(t, "PgBouncer", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pgb.Destroy)

	s := make([]*mvcc.Store, stores)
	for i := range s {
		dsn, err := pgb.Through(framework.PostgresDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		d, err := postgres.New(dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s[i], err = mvcc.Open(ctx, d, mvcc.Options{}); err != nil {
			t.Fatalf("store %d through a pooler of %d connections per database: %v\n%s", i, poolSize, err, pgb.Log())
		}
		t.Cleanup(func() { s[i].Close() })
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, stores)
	for i, st := range s {
		wg.Go(func() {
			for j := range writes {
				key := []byte(fmt.Sprintf("/registry/configmaps/ns/k%02d", j))
				if _, err := st.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
					RequestPut: &pb.PutRequest{Key: key, Value: fmt.Appendf(nil, "store %d", i)}}}}}); err != nil {
					errs <- fmt.Errorf("store %d, write %d: %w", i, j, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d stores wrote %d keys each through %d server connections per database in %v",
		stores, writes, poolSize, time.Since(start).Round(time.Millisecond))
	for i, st := range s {
		r, err := st.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/configmaps/ns/"), RangeEnd: []byte("/registry/configmaps/ns0")})
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		want := fmt.Sprintf("store %d", i)
		if len(r.Kvs) != writes || r.Rev != writes+1 {
			t.Errorf("store %d: %d keys at revision %d, want %d at %d", i, len(r.Kvs), r.Rev, writes, writes+1)
		}
		for _, kv := range r.Kvs {
			if string(kv.Value) != want {
				t.Errorf("store %d: %s = %q, want %q", i, kv.Key, kv.Value, want)
			}
		}
	}
}
