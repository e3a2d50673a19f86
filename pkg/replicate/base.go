package replicate

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/metrics"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// baseTempPattern names the directories a base is copied into, beside
// the store.
const baseTempPattern = ".replicate-base-*"

// base takes a consistent copy of the store (sqlite's Backup: VACUUM INTO,
// checked), uploads it compressed, and prunes what it makes unneeded. A
// forced base (the first, or after a gap) starts the chain of segments
// anew after it; a scheduled one leaves the chain going on from the last
// segment, so that every revision after the older bases stays restorable
// (the next segment may straddle the base: a restore from it skips the
// rows the base holds). A scheduled base of a store whose revision has
// not moved since the newest base is not taken: it would be the same
// copy again, by the same name, a whole upload each interval and each
// restart for nothing.
func (r *Replicator) base(ctx context.Context, forced bool) error {
	if !forced {
		var rev int64
		if err := r.db.QueryRowContext(ctx, readRevSQL).Scan(&rev); err != nil {
			return fmt.Errorf("base: read the revision: %w", err)
		}
		r.mu.Lock()
		idle := rev == r.baseRev
		if idle {
			r.lastBase = time.Now()
		}
		r.mu.Unlock()
		if idle {
			return nil
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(r.cfg.Dialect.Path), baseTempPattern[:len(baseTempPattern)-1])
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "base.db")
	info, err := r.cfg.Dialect.Backup(ctx, file)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	unixMs, err := lastUnixMs(ctx, file)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	sum, err := fileSHA256(file)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	name := baseName(r.lineage, info.Rev, unixMs, sum)
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		_, err := io.Copy(zw, f)
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	cr := &countReader{r: pr}
	err = r.cfg.Store.Put(ctx, name, cr, -1)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	r.mu.Lock()
	r.needBase = false
	r.lastBase, r.baseRev = time.Now(), info.Rev
	if forced {
		r.st.Shipped = info.Rev
	}
	r.st.Bytes += cr.n
	r.st.Objects++
	r.mu.Unlock()
	metrics.ReplicateBytes.Add(float64(cr.n))
	metrics.ReplicateObjects.WithLabelValues("base").Inc()
	r.cfg.Logger.Info("replicate: base shipped", "object", name, "revision", info.Rev, "bytes", cr.n)
	return r.prune(ctx)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func lastUnixMs(ctx context.Context, file string) (int64, error) {
	db, err := sqlite.OpenReadOnly(file)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var ms int64
	err = db.QueryRowContext(ctx, readMetaSQL, "last_unix_ms").Scan(&ms)
	return ms, err
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// baseTime is when l's base i holds the store as of: its last commit,
// or, for a store with no commit yet (UnixMs 0 in its name), the first
// commit after it, or now when none followed. Counted from 1970, such a
// base (the first base of a new store) would be due again at every
// restart and pruned by age at once, with every segment before the next
// base: the history since the store's first commit could no longer be
// restored.
func baseTime(l Listing, i int, now time.Time) time.Time {
	b := l.Bases[i]
	if b.UnixMs != 0 {
		return time.UnixMilli(b.UnixMs)
	}
	for _, s := range l.Segments {
		if s.First <= b.Rev+1 && s.Last > b.Rev {
			return time.UnixMilli(s.T0)
		}
	}
	return now
}

// prune removes bases beyond the newest RetainBases or older than
// RetainAge (the newest always stays), then the segments that end at or
// before the oldest base kept: no restore from a kept base needs them.
func (r *Replicator) prune(ctx context.Context) error {
	l, err := List(ctx, r.cfg.Store)
	if err != nil {
		return err
	}
	keep := 0 // index of the oldest base kept
	if n := len(l.Bases); n > r.cfg.RetainBases {
		keep = n - r.cfg.RetainBases
	}
	for keep < len(l.Bases)-1 && r.cfg.RetainAge > 0 && time.Since(baseTime(l, keep, time.Now())) > r.cfg.RetainAge {
		keep++
	}
	if len(l.Bases) == 0 {
		return nil
	}
	oldest := l.Bases[keep].Rev
	for _, b := range l.Bases[:keep] {
		if err := r.cfg.Store.Delete(ctx, b.Name); err != nil {
			return fmt.Errorf("prune %s: %w", b.Name, err)
		}
	}
	for _, s := range l.Segments {
		if s.Last > oldest {
			break
		}
		if err := r.cfg.Store.Delete(ctx, s.Name); err != nil {
			return fmt.Errorf("prune %s: %w", s.Name, err)
		}
	}
	return nil
}
