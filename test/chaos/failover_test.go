//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// TestFailoverToStaleStandby is issue 36 on real replication: two
// replicas on a two-host endpoint (target_session_attrs=read-write), a
// streaming standby that stops receiving at revision N, commits past it
// on the primary, the primary crashed and the standby promoted. The
// replicas follow the endpoint to the promoted standby and hand out no
// revision twice: the first write takes one past every revision
// acknowledged before, and both replicas' watchers from before are
// cancelled at the new floor.
func TestFailoverToStaleStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := os.Getenv(pgtest.EnvBin)
	if bin == "" {
		bin = pgtest.DefaultBin
	}
	primary, err := pgtest.StartCluster(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Destroy)
	dsn, err := pgtest.CreateDatabase(ctx, primary.DSN("postgres"), "failover")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	standby, err := primary.Standby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(standby.Destroy)
	t.Logf("standby made and started in %v", time.Since(began).Round(time.Millisecond))
	host := fmt.Sprintf("127.0.0.1:%d", primary.Port)
	both := strings.Replace(dsn, host, fmt.Sprintf("%s,127.0.0.1:%d", host, standby.Port), 1) + "&target_session_attrs=read-write"

	open := func() *mvcc.Store {
		d, err := postgres.New(both, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := mvcc.Open(ctx, d, mvcc.Options{PruneInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	put := func(s *mvcc.Store, key string) (int64, error) {
		r, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}}}})
		if err != nil {
			return 0, err
		}
		return r.Header.Revision, nil
	}
	var replicated int64
	for i := range 20 {
		if replicated, err = put(a, fmt.Sprintf("/s/kept/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The standby has replayed all of it; then it stops receiving.
	waitReplayed(t, ctx, primary.DSN("postgres"), standby.DSN("postgres"))
	if err := standby.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	var acked int64
	for i := range 30 {
		s := a
		if i%2 == 1 {
			s = b
		}
		r, err := put(s, fmt.Sprintf("/s/lost/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		acked = max(acked, r)
	}
	for _, s := range []*mvcc.Store{a, b} {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got, _, _ := s.Published(); got >= acked {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a replica did not publish %d", acked)
			}
		}
	}

	if err := primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	var rev int64
	for {
		if rev, err = put(a, "/s/after"); err == nil {
			break
		}
		if time.Since(promoted) > time.Minute {
			t.Fatalf("no write after the promotion: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resumed := time.Since(promoted)
	t.Logf("first write %v after the promotion: revision %d (the standby had %d, %d were acknowledged)", resumed.Round(time.Millisecond), rev, replicated, acked)
	appendReport(t, fmt.Sprintf("| failover to a standby behind the primary | revisions acknowledged | on the standby | first revision after | first write after the promotion |\n|---|---:|---:|---:|---:|\n| two replicas, two-host endpoint | %d | %d | %d | %v |\n",
		acked, replicated, rev, resumed.Round(10*time.Millisecond)))
	if resumed > 5*time.Second {
		t.Errorf("the first write came %v after the promotion: want under 5 s", resumed)
	}
	if rev <= acked+mvcc.RevisionBump {
		t.Fatalf("a write after the failover got revision %d: want one past %d", rev, acked+mvcc.RevisionBump)
	}
	for i, s := range []*mvcc.Store{a, b} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got, _, _ := s.Published(); got >= rev {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d did not follow to %d", i, rev)
			}
		}
		_, _, err := s.Events(ctx, acked+1, rev-1, mvcc.NewKeyRange([]byte("/s/"), []byte("/s0")))
		if below := (*mvcc.BelowFloorError)(nil); !errors.As(err, &below) || below.Floor != rev-1 {
			t.Errorf("replica %d: a watcher from before the failover reads %v, want it below the floor %d", i, err, rev-1)
		}
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), CountOnly: true})
		if err != nil || r.Count != 21 {
			t.Errorf("replica %d counts %v keys (%v), want the 20 replicated and the new one", i, r, err)
		}
	}
}

// waitReplayed waits until the standby has replayed everything the
// primary has written.
func waitReplayed(t *testing.T, ctx context.Context, primary, standby string) {
	t.Helper()
	p, err := pgx.Connect(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	s, err := pgx.Connect(ctx, standby)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	var lsn string
	if err := p.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var done bool
		if err := s.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby did not replay the primary's WAL")
		}
	}
}
