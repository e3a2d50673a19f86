package replicate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// Defaults of serve's --replicate-* flags.
const (
	DefaultInterval     = time.Second
	DefaultBaseInterval = 24 * time.Hour
	DefaultRetainBases  = 7
	DefaultRetainAge    = 7 * 24 * time.Hour
	// DefaultSegmentBytes bounds one segment's keys and values: a backlog
	// drains in segments of this size, one per interval.
	DefaultSegmentBytes = 32 << 20
	// DefaultHold is how long history not yet shipped outlives the
	// store's retention rules (the shortest is 10 min, for leases) while
	// the bucket cannot be reached: at k3s's write rates, an hour of
	// history is tens of MB of disk.
	DefaultHold = time.Hour
	// DefaultHoldBytes bounds how much the store's files may grow while
	// the hold keeps history not yet shipped: an outage at a high write
	// rate fills no disk.
	DefaultHoldBytes = 1 << 30
)

// Config says what to replicate where.
type Config struct {
	// Dialect is the SQLite store (its Path and Backup).
	Dialect *sqlite.Dialect
	Store   objstore.Store
	// Interval is the RPO: at most one segment PUT per Interval.
	Interval time.Duration
	// BaseInterval is how often a fresh base is taken.
	BaseInterval time.Duration
	// RetainBases and RetainAge: bases beyond the newest RetainBases, or
	// older than RetainAge, are pruned with the segments before the
	// oldest base kept; the newest base is always kept.
	RetainBases  int
	RetainAge    time.Duration
	SegmentBytes int
	// Hold bounds how long Hold keeps retention from the revisions not
	// shipped (0: DefaultHold; negative: not at all), and HoldBytes how
	// much the store's database and WAL files may grow meanwhile (0:
	// DefaultHoldBytes; negative: no bound in bytes).
	Hold      time.Duration
	HoldBytes int64
	Logger    *slog.Logger
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.BaseInterval <= 0 {
		c.BaseInterval = DefaultBaseInterval
	}
	if c.RetainBases <= 0 {
		c.RetainBases = DefaultRetainBases
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.HoldBytes == 0 {
		c.HoldBytes = DefaultHoldBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Status is what the replicator has done, for logs, metrics and health.
type Status struct {
	Shipped  int64     // the last revision in the bucket
	StoreRev int64     // the store's revision when last read
	Behind   time.Time // when the oldest revision not shipped was first seen; zero when none
	Bytes    int64     // bytes PUT
	Objects  int64     // objects PUT
	LastErr  error     // the last failure; nil after a success
	BaseDue  bool      // a base comes before any segment: at the first start, or after the backlog outlived retention
}

// Replicator ships a store to its bucket until closed.
type Replicator struct {
	cfg     Config
	lineage string
	db      *sql.DB
	cancel  context.CancelFunc
	done    chan struct{}

	loggedAt  time.Time     // the last failure logged (run's goroutine only)
	unchecked bool          // the bucket not yet listed: nothing is shipped (run's goroutine, then Close)
	baseWait  time.Time     // no base attempt before this, after failed ones
	baseDelay time.Duration // the last wait
	sc        scratch       // rows read for the next segment (run's goroutine only)
	enc       encoder       // that segment's body (run's goroutine only)

	mu       sync.Mutex
	st       Status
	lastBase time.Time
	baseRev  int64 // the newest base's revision
	needBase bool
	// The store's size when the oldest revision not shipped was first
	// seen (Status.Behind), and whether the hold went past HoldBytes.
	behindSize int64
	overBytes  bool
}

// Start checks the bucket against the store (one lineage; the bucket not
// ahead of the store), then ships in the background: it never touches the
// store's write path, only reads it. A bucket that cannot be listed (the
// object store down or unreachable) does not keep the server from
// starting: the replicator lists it every interval, with the failure as
// its status, and checks it as above once it answers; until then it ships
// nothing, and Hold keeps the whole log for up to Config.Hold.
func Start(ctx context.Context, cfg Config) (*Replicator, error) {
	cfg.defaults()
	id, err := EnsureLineage(ctx, cfg.Dialect.Path)
	if err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	r := &Replicator{cfg: cfg, lineage: LineageString(id), done: make(chan struct{})}
	// Bases a killed server was copying: the server's lock on the store
	// says no other replicator is.
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg.Dialect.Path), baseTempPattern))
	for _, d := range stale {
		os.RemoveAll(d)
	}
	if r.db, err = sqlite.OpenReadOnly(cfg.Dialect.Path); err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	l, err := List(ctx, cfg.Store)
	var unreachable listError
	switch {
	case errors.As(err, &unreachable):
		r.unchecked = true
		r.st.LastErr, r.st.Behind, r.behindSize = err, time.Now(), storeSize(cfg.Dialect.Path)
		r.loggedAt = time.Now()
		cfg.Logger.Warn("replicate: the object store cannot be listed; serving, and trying it every interval", "to", cfg.Store.String(), "lineage", r.lineage, "err", err)
	case err == nil:
		err = r.resume(ctx, l)
	}
	if err != nil && !r.unchecked {
		r.db.Close()
		return nil, fmt.Errorf("replicate: %w", err)
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go r.run(ctx)
	return r, nil
}

// resume checks the bucket's listing against the store and goes on from
// the end of its chain, or from a base when it holds none.
func (r *Replicator) resume(ctx context.Context, l Listing) error {
	if l.Lineage != "" && l.Lineage != r.lineage {
		return fmt.Errorf("%s holds the replica of lineage %s, this store is lineage %s (another store, or this one before a restore): give --replicate a prefix of its own", r.cfg.Store, l.Lineage, r.lineage)
	}
	shipped, baseAt, ok := resumePoint(l, time.Now())
	if !ok {
		r.mu.Lock()
		r.needBase = true
		r.mu.Unlock()
		r.cfg.Logger.Info("replicate: starting with a base", "to", r.cfg.Store.String(), "lineage", r.lineage)
		return nil
	}
	var rev int64
	if err := r.db.QueryRowContext(ctx, readRevSQL).Scan(&rev); err != nil {
		return fmt.Errorf("read the revision: %w", err)
	}
	if rev < shipped {
		return fmt.Errorf("%s holds revisions up to %d, past this store's %d (a store put back from a backup keeps its lineage): give --replicate a prefix of its own, or take the newer state it holds: quantykube restore --from (this --replicate URL) --force", r.cfg.Store, shipped, rev)
	}
	r.mu.Lock()
	r.st.Shipped, r.lastBase, r.baseRev = shipped, baseAt, l.Bases[len(l.Bases)-1].Rev
	r.mu.Unlock()
	r.cfg.Logger.Info("replicate: resuming", "to", r.cfg.Store.String(), "lineage", r.lineage, "shipped", shipped)
	return nil
}

// resumePoint is the last revision of the chain from the newest base,
// and that base's time (baseTime), from which the next scheduled base is
// counted; ok is false without a base.
func resumePoint(l Listing, now time.Time) (shipped int64, baseAt time.Time, ok bool) {
	if len(l.Bases) == 0 {
		return 0, time.Time{}, false
	}
	b := l.Bases[len(l.Bases)-1]
	shipped = b.Rev
	for _, s := range l.Segments {
		if s.First <= shipped+1 && s.Last > shipped {
			shipped = s.Last
		}
	}
	return shipped, baseTime(l, len(l.Bases)-1, now), true
}

// Close stops shipping, after one last segment (within FlushTimeout) of
// what the store committed since the last: after a graceful stop of the
// server, the bucket holds everything. What is still not shipped is
// shipped at the next start.
func (r *Replicator) Close() error {
	r.cancel()
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	defer cancel()
	r.mu.Lock()
	pending := r.needBase || r.unchecked
	r.mu.Unlock()
	if !pending {
		if err := r.segment(ctx); err != nil {
			r.cfg.Logger.Warn("replicate: the last segment was not shipped; it will be at the next start", "to", r.cfg.Store.String(), "err", err)
		}
	}
	return r.db.Close()
}

// FlushTimeout bounds Close's last segment.
const FlushTimeout = 5 * time.Second

// Check is the warning /readyz?verbose shows: revisions waiting longer
// than lagWarn intervals, or the last interval's work failed. It never
// names the bucket's credentials (Store.String has none) nor the error's
// text, which the log holds.
func (r *Replicator) Check(context.Context) error {
	st := r.Status()
	behind := time.Duration(0)
	if !st.Behind.IsZero() {
		behind = time.Since(st.Behind)
	}
	switch {
	case st.LastErr != nil:
		return fmt.Errorf("%d revisions (%s) not in %s: the last attempt failed (see the log)", max(0, st.StoreRev-st.Shipped), behind.Round(time.Millisecond), r.cfg.Store)
	case behind > lagWarn*r.cfg.Interval:
		return fmt.Errorf("%d revisions (%s) not yet in %s", st.StoreRev-st.Shipped, behind.Round(time.Millisecond), r.cfg.Store)
	}
	return nil
}

// logEvery is how often a failure that goes on is logged again.
const logEvery = 30 * time.Second

// maxBaseBackoff bounds the wait between failed base attempts: a base
// copies the whole store, which is not redone every interval while the
// object store is down.
const maxBaseBackoff = time.Minute

// baseBackoff doubles the wait before the next base attempt after a
// failure, from one interval up to maxBaseBackoff, and clears it after a
// success.
func (r *Replicator) baseBackoff(err error) {
	if err == nil {
		r.baseDelay, r.baseWait = 0, time.Time{}
		return
	}
	r.baseDelay = min(max(2*r.baseDelay, r.cfg.Interval), maxBaseBackoff)
	r.baseWait = time.Now().Add(r.baseDelay)
}

// lagWarn is how many intervals a revision may wait before Check warns.
const lagWarn = 5

// Status returns the replicator's status.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.BaseDue = r.needBase
	return st
}

// Hold is the revision from which the store's retention must keep every
// row (mvcc.Options.Hold): the first not shipped, so that a bucket out of
// reach for longer than the shortest retention rule leaves no gap. Past
// Config.Hold of waiting, or once the store's files have grown by
// Config.HoldBytes since, it is 0 (no hold): retention prunes as it
// would, the replicator finds the gap and takes a fresh base. Also 0
// while a fresh base is due: the chain restarts from it.
func (r *Replicator) Hold() int64 {
	r.mu.Lock()
	st := r.st
	st.BaseDue = r.needBase
	since, over := r.behindSize, r.overBytes
	r.mu.Unlock()
	if st.BaseDue || r.cfg.Hold < 0 || !st.Behind.IsZero() && time.Since(st.Behind) >= r.cfg.Hold {
		return 0
	}
	if !st.Behind.IsZero() && r.cfg.HoldBytes > 0 {
		if over {
			return 0
		}
		if grown := storeSize(r.cfg.Dialect.Path) - since; grown > r.cfg.HoldBytes {
			r.mu.Lock()
			first := !r.overBytes && r.st.Behind.Equal(st.Behind)
			r.overBytes = r.overBytes || first
			r.mu.Unlock()
			if first {
				r.cfg.Logger.Error("replicate: the history not shipped grew the store past --replicate-hold-bytes; retention prunes it now, and a fresh base follows: the replica will have a gap before it",
					"grown_bytes", grown, "hold_bytes", r.cfg.HoldBytes, "shipped", st.Shipped, "behind_since", st.Behind)
			}
			return 0
		}
	}
	return st.Shipped + 1
}

// storeSize is the bytes of the SQLite database at path and its WAL, what
// a hold makes grow; 0 for what cannot be read.
func storeSize(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Lineage is the lineage id the store and its bucket share.
func (r *Replicator) Lineage() string { return r.lineage }

func (r *Replicator) run(ctx context.Context) {
	defer close(r.done)
	gauged := make(chan struct{})
	go func() { defer close(gauged); r.gaugeLag(ctx) }()
	defer func() { <-gauged }()
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		r.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gaugeLag sets the lag gauges every interval (at most every second)
// until ctx ends, besides each step's end: a PUT to a slow or silent
// object store can take minutes, and meanwhile the gauges a step sets
// when it ends would show the lag from before it, 0 under steady load.
func (r *Replicator) gaugeLag(ctx context.Context) {
	t := time.NewTicker(min(r.cfg.Interval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := r.Status()
		lag := 0.0
		if !st.Behind.IsZero() {
			lag = time.Since(st.Behind).Seconds()
		}
		metrics.ReplicateLagSeconds.Set(lag)
		var rev int64
		if err := r.db.QueryRowContext(ctx, readRevSQL).Scan(&rev); err == nil {
			metrics.ReplicateLagRevisions.Set(float64(max(0, rev-st.Shipped)))
		}
	}
}

// step does one interval's work: a base when one is due, else at most one
// segment. A failure is kept in the status and tried again next interval.
// While a failed base waits out its backoff, a scheduled one lets
// segments go on (the chain does not need it); a forced one does not
// (the chain cannot go on without it).
func (r *Replicator) step(ctx context.Context) {
	if r.unchecked {
		l, err := List(ctx, r.cfg.Store)
		if err == nil {
			err = r.resume(ctx, l)
		}
		if err != nil {
			r.record(ctx, err)
			return
		}
		r.unchecked = false
	}
	r.mu.Lock()
	forced := r.needBase
	due := forced || time.Since(r.lastBase) >= r.cfg.BaseInterval
	r.mu.Unlock()
	backoff := time.Now().Before(r.baseWait)
	var err error
	switch {
	case forced && backoff:
		return
	case due && !backoff:
		err = r.base(ctx, forced)
		r.baseBackoff(err)
	default:
		err = r.segment(ctx)
	}
	r.record(ctx, err)
}

// record keeps an interval's outcome as the status, in the metrics and,
// for a failure, in the log (once, then every logEvery).
func (r *Replicator) record(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	prev := r.st.LastErr
	r.st.LastErr = err
	st := r.st
	r.mu.Unlock()
	failing := 0.0
	if err != nil {
		metrics.ReplicateErrors.Inc()
		failing = 1
	}
	metrics.ReplicateFailing.Set(failing)
	metrics.ReplicateShippedRevision.Set(float64(st.Shipped))
	metrics.ReplicateLagRevisions.Set(float64(max(0, st.StoreRev-st.Shipped)))
	lag := 0.0
	if !st.Behind.IsZero() {
		lag = time.Since(st.Behind).Seconds()
	}
	metrics.ReplicateLagSeconds.Set(lag)
	switch {
	case err != nil && (prev == nil || time.Since(r.loggedAt) >= logEvery):
		r.loggedAt = time.Now()
		r.cfg.Logger.Warn("replicate: failed; retrying every interval, writes go on", "to", r.cfg.Store.String(), "err", err)
	case err == nil && prev != nil:
		r.cfg.Logger.Info("replicate: shipping again", "to", r.cfg.Store.String())
	}
}
