package history_test

import (
	"context"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// A restore that puts a value is refused while the store's NOSPACE alarm
// is active, as a put through the etcd API is; one that deletes passes.
func TestRestoreUnderNoSpace(t *testing.T) {
	s, put := openTypeStore(t)
	ctx := context.Background()
	put("a", 10) // 2
	put("a", 20) // 3
	put("b", 10) // 4
	if _, err := s.ActivateAlarm(ctx, s.MemberID(), pb.AlarmType_NOSPACE); err != nil {
		t.Fatal(err)
	}
	svc := history.New(s)
	_, err := svc.Restore(ctx, &historypb.Request{Key: []byte("a"), Revision: 2})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "mvcc: database space exceeded") {
		t.Fatalf("restore of a put under NOSPACE: %v, want ResourceExhausted, database space exceeded", err)
	}
	resp, err := svc.Restore(ctx, &historypb.Request{Key: []byte("b"), Revision: 3})
	if err != nil || resp.NewRevision != 5 {
		t.Fatalf("restore of a delete under NOSPACE: %v %v, want it written at 5", resp, err)
	}
	if _, err := s.DeactivateAlarm(ctx, s.MemberID(), pb.AlarmType_NOSPACE); err != nil {
		t.Fatal(err)
	}
	if resp, err := svc.Restore(ctx, &historypb.Request{Key: []byte("a"), Revision: 2}); err != nil || resp.NewRevision != 6 {
		t.Fatalf("restore after disarm: %v %v, want it written at 6", resp, err)
	}
}
