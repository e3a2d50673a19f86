package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Batches that assume answer exactly what the database says: random
// creates, updates, deletes and puts over a few keys, sent one at a time
// through two replicas in turn (so that each one's remembered rows go
// stale) and to a SQLite store, answer the same on both sides, and both
// PostgreSQL replicas assume in many of them.
func TestAssumingMatchesSQLite(t *testing.T) {
	a, dsn := openStore(t)
	b := openReplica(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sd, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "mirror.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := mvcc.Open(ctx, sd, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mirror.Close()

	trips0, missed0 := assumed(t, "one_trip"), assumed(t, "missed")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	keys := []string{"k/0", "k/1", "k/2", "k/3", "k/4", "k/5"}
	// rev is each key's mod_revision as the answers told it (0: absent).
	rev := map[string]int64{}
	replica := a
	// 1,500 requests, and on (up to 4,000) until both paths have run
	// enough: how often an assumption misses depends on the seed.
	exercised := func() bool {
		return assumed(t, "one_trip")-trips0 >= 300 && assumed(t, "missed")-missed0 >= 5
	}
	for i := 0; i < 4000; i++ {
		if i >= 1500 && i%100 == 0 && exercised() {
			break
		}
		// Runs of writes through one replica, then the other.
		if rng.IntN(40) == 0 {
			if replica == a {
				replica = b
			} else {
				replica = a
			}
			// The other replica's tailer must have caught up before it is
			// read from; its writer reads the database regardless.
			for deadline := time.Now().Add(10 * time.Second); replica.Rev() < mirror.Rev(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the replica is at %d, the writes at %d", replica.Rev(), mirror.Rev())
				}
			}
		}
		k := keys[rng.IntN(len(keys))]
		at := rev[k]
		if rng.IntN(4) == 0 {
			at = rng.Int64N(int64(i) + 2) // often stale, or absent when 0
		}
		get := []*pb.RequestOp{rangeOp(k, "")}
		var r *pb.TxnRequest
		switch rng.IntN(5) {
		case 0: // create
			r = &pb.TxnRequest{Compare: modIs(k, 0), Success: []*pb.RequestOp{putOp(k, fmt.Sprint(i))}, Failure: get}
		case 1, 2: // update
			r = &pb.TxnRequest{Compare: modIs(k, at), Success: []*pb.RequestOp{putOp(k, fmt.Sprint(i))}, Failure: get}
		case 3: // delete, with its prev_kv
			del := delOp(k, "")
			del.GetRequestDeleteRange().PrevKv = true
			r = &pb.TxnRequest{Compare: modIs(k, at), Success: []*pb.RequestOp{del}, Failure: get}
		default: // two keys, one compared on its version, the other put with prev_kv
			other := keys[rng.IntN(len(keys))]
			put := putOp(other, fmt.Sprint(i))
			put.GetRequestPut().PrevKv = true
			cmp := []*pb.Compare{{Key: []byte(k), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}}
			r = &pb.TxnRequest{Compare: cmp, Success: []*pb.RequestOp{put}, Failure: []*pb.RequestOp{putOp(k, fmt.Sprint(i))}}
		}
		got, err := replica.Txn(ctx, r)
		if err != nil {
			t.Fatalf("request %d, %v: %v", i, r, err)
		}
		want, err := mirror.Txn(ctx, r)
		if err != nil {
			t.Fatalf("request %d on SQLite: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("request %d, %v:\nPostgreSQL answered %v\nSQLite answered     %v", i, r, got, want)
		}
		// Learn the keys' revisions from what the request did.
		for j, op := range map[bool][]*pb.RequestOp{true: r.Success, false: r.Failure}[got.Succeeded] {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				rev[string(v.RequestPut.Key)] = got.Header.Revision
			case *pb.RequestOp_RequestDeleteRange:
				rev[string(v.RequestDeleteRange.Key)] = 0
			case *pb.RequestOp_RequestRange:
				if kvs := got.Responses[j].GetResponseRange().Kvs; len(kvs) == 1 {
					rev[k] = kvs[0].ModRevision
				}
			}
		}
	}
	checkTables(t, dsn)
	trips, misses := assumed(t, "one_trip")-trips0, assumed(t, "missed")-missed0
	t.Logf("%.0f batches in one round trip, %.0f missed", trips, misses)
	if trips < 300 || misses < 5 {
		t.Fatalf("%.0f batches in one round trip and %.0f missed: the test did not exercise both", trips, misses)
	}
}

// assumed is quantykube_write_batch_assumed_total{result} in this process.
func assumed(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "quantykube_write_batch_assumed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
