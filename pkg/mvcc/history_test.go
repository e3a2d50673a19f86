package mvcc_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Log's page bounds: a limit below one is the caller's mistake and says
// so (it used to index before the first entry), MaxBytes <= 0 bounds
// nothing, and a byte bound still returns one entry however large.
func TestLogPageBounds(t *testing.T) {
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for range 5 {
		put(t, s, "/k", make([]byte, 100))
	}
	kr := mvcc.NewKeyRange([]byte("/k"), nil)
	for _, limit := range []int{0, -1} {
		if page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: limit}); err == nil {
			t.Errorf("Log with limit %d: %d entries and no error", limit, len(page.Events))
		}
	}
	for _, tc := range []struct {
		limit, maxBytes int
		want            int
		more            bool
	}{
		{limit: 10, maxBytes: 0, want: 5},
		{limit: 3, maxBytes: 0, want: 3, more: true},
		{limit: 10, maxBytes: 1, want: 1, more: true},
		{limit: 10, maxBytes: -1, want: 5},
	} {
		page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: tc.limit, MaxBytes: tc.maxBytes})
		if err != nil {
			t.Fatalf("Log limit %d maxBytes %d: %v", tc.limit, tc.maxBytes, err)
		}
		if len(page.Events) != tc.want || page.More != tc.more {
			t.Errorf("Log limit %d maxBytes %d: %d entries, more %v; want %d, more %v", tc.limit, tc.maxBytes, len(page.Events), page.More, tc.want, tc.more)
		}
	}
}
