package mvcc

import (
	"context"
	"errors"
	"testing"
)

// A batch that could not begin its transaction runs nothing more on the
// writer's connection: every statement through q fails with why.
func TestFailedQuerierRunsNothing(t *testing.T) {
	why := errors.New("the lock was not taken")
	tx := &bufferedTx{failed: why}
	q := tx.q()
	ctx := context.Background()
	var one int
	if err := q.QueryRowContext(ctx, "SELECT 1").Scan(&one); !errors.Is(err, why) {
		t.Errorf("QueryRowContext: %v, want %v", err, why)
	}
	if _, err := q.QueryContext(ctx, "SELECT 1"); !errors.Is(err, why) {
		t.Errorf("QueryContext: %v, want %v", err, why)
	}
	if _, err := q.ExecContext(ctx, "DELETE FROM current"); !errors.Is(err, why) {
		t.Errorf("ExecContext: %v, want %v", err, why)
	}
}
