package mvcc_test

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Without a live index, a batch reads the current rows of every key it
// names before its first request, in statements of many keys (more keys
// than one statement takes, and a remainder), and each request still sees
// the requests before it: the answers are the live index's, taken in the
// same batch.
func TestBatchReadsItsRowsAtOnce(t *testing.T) {
	indexed := openStore(t, mvcc.Options{})
	sql := openStore(t, mvcc.Options{DisableLiveIndex: true})
	key := func(i int) []byte { return fmt.Appendf(nil, "/b/k%03d", i) }
	for _, s := range []*mvcc.Store{indexed, sql} {
		for i := range 200 {
			put(t, s, string(key(i)), []byte(fmt.Sprint("v", i)))
		}
	}
	var reqs []*pb.TxnRequest
	for i := range 300 {
		// Creates: they fail on the 200 keys that exist.
		reqs = append(reqs, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key(i), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}},
			Success: []*pb.RequestOp{putOp(key(i), "created", 0)},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key(i)}}}},
		})
	}
	for i := 150; i < 260; i += 7 {
		// Updates of keys the batch created or found, each seeing the
		// version the requests before it left.
		reqs = append(reqs, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key(i), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 1}}},
			Success: []*pb.RequestOp{putOp(key(i), "updated", 0)},
		})
	}
	reads := sql.WriterRowReads()
	want, wantErrs := inOneBatch(t, indexed, reqs)
	got, gotErrs := inOneBatch(t, sql, reqs)
	if n := sql.WriterRowReads() - reads; n != 0 {
		t.Errorf("the writer read %d rows one at a time, want none", n)
	}
	for i := range reqs {
		if (wantErrs[i] == nil) != (gotErrs[i] == nil) || !proto.Equal(want[i], got[i]) {
			t.Fatalf("request %d: without the index %v (%v), with it %v (%v)", i, got[i], gotErrs[i], want[i], wantErrs[i])
		}
	}
	if want[0].Succeeded || !want[250].Succeeded || !want[300].Succeeded {
		t.Fatal("the requests did not take the branches the test means")
	}
}
