package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// alarmSeen bounds how long a replica takes to see an alarm another
// raised or cleared: each reads the database's alarms every second
// (docs/adr/049).
const alarmSeen = 5 * time.Second

// TestReplicasShareAlarms: a NOSPACE alarm raised through one replica
// refuses puts on the other, which lists it and can disarm it, after
// which the first writes again, as etcd's members share their alarms.
func TestReplicasShareAlarms(t *testing.T) {
	framework.Run(t, framework.Replicated, func(t *testing.T, b framework.Backend) {
		x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
		ca, cb := x.ReplicaClient(t, 0), x.ReplicaClient(t, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := ca.Status(ctx, x.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		raised, err := pb.NewMaintenanceClient(ca.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE,
		})
		if err != nil || len(raised.Alarms) != 1 {
			t.Fatalf("activate NOSPACE through replica 0: %v %v", raised, err)
		}
		took := waitPut(t, ctx, cb, "replica 1", true)
		t.Logf("replica 1 refused puts %v after replica 0 raised the alarm", took.Round(time.Millisecond))
		list, err := cb.AlarmList(ctx)
		if err != nil || len(list.Alarms) != 1 || list.Alarms[0].Alarm != pb.AlarmType_NOSPACE || list.Alarms[0].MemberID != st.Header.MemberId {
			t.Fatalf("replica 1's alarm list: %v %v", list, err)
		}
		if _, err := ca.Delete(ctx, "k"); err != nil {
			t.Fatalf("a delete under the alarm: %v", err)
		}
		if _, err := cb.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Fatalf("disarm through replica 1: %v", err)
		}
		took = waitPut(t, ctx, ca, "replica 0", false)
		t.Logf("replica 0 wrote again %v after replica 1 disarmed", took.Round(time.Millisecond))
	})
}

// waitPut puts until the put is refused with NOSPACE (refused) or
// succeeds (!refused), for at most alarmSeen; any other error fails.
func waitPut(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, refused bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, err := cli.Put(ctx, "k", "v")
		switch {
		case err != nil && !errors.Is(err, rpctypes.ErrNoSpace):
			t.Fatalf("%s: put: %v", name, err)
		case (err != nil) == refused:
			return time.Since(start)
		case time.Since(start) > alarmSeen:
			t.Fatalf("%s: put refused %v, still not %v after %v", name, err != nil, refused, alarmSeen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
