//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
	lin "github.com/quantyroot/quantykube/test/linearizability"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// syncFailover is a failover as an HA manager with synchronous
// replication does it (Patroni's synchronous_mode, CloudNativePG's
// synchronous replicas): two replicas serve a two-host endpoint
// (target_session_attrs=read-write) over a primary whose commits wait for
// a synchronous standby. Each round crashes the primary under load
// (immediate stop), promotes the standby, and makes a new synchronous
// standby of it on the crashed server's port, so the endpoint stays the
// same. No acknowledged write may be lost and the history must stay
// linearizable; the note gives how long after each promotion began the
// first write was acknowledged (under 5 s, as operators expect of HA).
func syncFailover(t *testing.T) row {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := os.Getenv(pgtest.EnvBin)
	if bin == "" {
		bin = pgtest.DefaultBin
	}
	primary, err := pgtest.StartCluster(ctx, bin)
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	t.Cleanup(func() { primary.Destroy() })
	dsn, err := pgtest.CreateDatabase(ctx, primary.DSN("postgres"), "syncfailover")
	if err != nil {
		t.Fatal(err)
	}
	standby, err := primary.Standby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Destroy() })
	if err := primary.RequireSynchronous(ctx); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("127.0.0.1:%d", primary.Port)
	both := strings.Replace(dsn, host, fmt.Sprintf("%s,127.0.0.1:%d", host, standby.Port), 1) + "&target_session_attrs=read-write"
	x := framework.Start(t, framework.Postgres, framework.Options{Process: true, Replicas: 2, Endpoint: func(string) string { return both }})

	var resumed []string
	var worst time.Duration
	r, violations, lost := scenario(t, x, 3, func(t *testing.T, round int, rec *lin.Recorder) {
		if err := primary.Stop(ctx, "immediate"); err != nil {
			t.Fatal(err)
		}
		// Answers the old primary sent before it went may still be on
		// their way: the count starts once they have arrived.
		time.Sleep(100 * time.Millisecond)
		before := rec.Acked()
		promoting := time.Now()
		if err := standby.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		promoted := time.Since(promoting)
		for rec.Acked() == before {
			if time.Since(promoting) > time.Minute {
				t.Fatalf("round %d: no write acknowledged in a minute after the promotion", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(promoting)
		worst = max(worst, took)
		resumed = append(resumed, took.Round(10*time.Millisecond).String())
		t.Logf("round %d: the first write was acknowledged %v after the promotion began (pg_ctl promote took %v)", round, took.Round(time.Millisecond), promoted.Round(time.Millisecond))

		// The crashed server's place is taken by a synchronous standby of
		// the new primary, under the same port.
		port := primary.Port
		primary.Destroy()
		next, err := standby.StandbyOn(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { next.Destroy() })
		primary, standby = standby, next
		if err := primary.RequireSynchronous(ctx); err != nil {
			t.Fatal(err)
		}
	})
	r.note += "; first write acknowledged after each promotion began in " + strings.Join(resumed, ", ")
	if worst > 5*time.Second {
		t.Errorf("service resumed %v after a promotion: want under 5 s", worst)
	}
	return judge(t, r, violations, lost)
}
