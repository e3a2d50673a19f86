package replicate

import (
	"context"
	"fmt"
	"time"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// segment ships one segment: the rows committed since the last one
// shipped (readBatch), encoded (encoder) and PUT under a name that says
// what it covers. A backlog past retention's floor asks for a base
// instead.
func (r *Replicator) segment(ctx context.Context) error {
	shipped := r.Status().Shipped
	b, err := readBatch(ctx, r.db, shipped, r.cfg.SegmentBytes, &r.sc)
	defer r.sc.release()
	if err != nil {
		return err
	}
	// Past retention's floor, rows not shipped may be gone: the chain
	// cannot go on without a gap, so a fresh base (the next step) starts
	// a new one.
	gap := b.floor > shipped+1
	r.mu.Lock()
	r.st.StoreRev = b.rev
	if b.rev > shipped && r.st.Behind.IsZero() {
		r.st.Behind = time.Now()
		r.behindSize, r.overBytes = storeSize(r.cfg.Dialect.Path), false
	}
	r.needBase = r.needBase || gap
	r.mu.Unlock()
	if gap {
		r.cfg.Logger.Error("replicate: the backlog outlived the store's retention; rows not shipped may be pruned: taking a fresh base, the replica has a gap before it",
			"shipped", shipped, "retention_floor", b.floor)
		return nil
	}
	if b.data == nil {
		return nil
	}
	d := b.data
	d.Lineage = r.lineage
	body, sum, err := r.enc.encode(d)
	defer r.enc.release()
	if err != nil {
		return fmt.Errorf("encode segment %d-%d: %w", d.First, d.Last, err)
	}
	t0, t1 := time.Now().UnixMilli(), int64(0)
	for _, row := range d.Rows {
		t0, t1 = min(t0, row.UnixMs), max(t1, row.UnixMs)
	}
	if t1 == 0 {
		t1 = t0
	}
	name := segmentName(r.lineage, d.First, d.Last, t0, t1, sum)
	if err := r.cfg.Store.Put(ctx, name, bytesReader(body), int64(len(body))); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	metrics.ReplicateBytes.Add(float64(len(body)))
	metrics.ReplicateObjects.WithLabelValues("segment").Inc()
	r.mu.Lock()
	r.st.Shipped = d.Last
	r.st.Bytes += int64(len(body))
	r.st.Objects++
	if d.Last >= b.rev {
		r.st.Behind = time.Time{}
	}
	r.mu.Unlock()
	return nil
}
