package replicate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// Target is the point to restore: a revision, or a time (the newest
// revision committed at or before it); neither is the newest shipped.
type Target struct {
	Rev int64
	At  time.Time
	// Bump moves the restored revision a billion (mvcc.RevisionBump) past
	// the bucket's last revision and marks it compacted, as etcdutl's
	// snapshot restore --bump-revision --mark-compacted: the replicated
	// store handed out revisions up to the RPO past that one, which its
	// clients (kube-apiserver's watch cache, informers) hold, so that none
	// names two states and every watch is cancelled and relists (ADR-027).
	// Objects keep their revisions, and History its rows.
	Bump bool
}

// RestoreInfo describes a restore.
type RestoreInfo struct {
	sqlite.BackupInfo
	Base     string // the base object used
	Segments int    // segments replayed
	Rows     int    // log rows replayed
	Target   int64  // the revision restored
}

// Restore builds the store at d.Path from the bucket: the newest base at or
// before the target, then the log rows of the segments after it up to the
// target revision, each checked against its checksum. It is built in a
// file beside the store and put in place by sqlite's RestoreWith (the
// server's lock, --force, the revision moved past a replaced store's, and
// with t.Bump past the bucket's last), so an error leaves the store as it
// was. sqlite's restore drops the copy's lineage:
// `serve --replicate` gives it a new one, so the bucket it came from is
// refused, never mixed with its new history.
func Restore(ctx context.Context, st objstore.Store, d *sqlite.Dialect, t Target, force bool) (RestoreInfo, error) {
	var info RestoreInfo
	if _, err := os.Stat(d.Path); err == nil && !force {
		return info, fmt.Errorf("restore: %s exists: stop its server, back it up if it matters, and restore with --force to replace it", d.Path)
	}
	l, err := List(ctx, st)
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	plan, err := planRestore(l, t, st.String())
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	tmp, err := os.CreateTemp(dirOf(d.Path), ".replica-restore-*.db")
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		for _, f := range []string{tmpName, tmpName + "-wal", tmpName + "-shm", tmpName + "-journal"} {
			os.Remove(f)
		}
	}()
	err = download(ctx, st, plan.base, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	info.Base = plan.base.Name
	if err := replay(ctx, st, l.Lineage, tmpName, plan, &info); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	o := sqlite.RestoreOptions{Replace: force}
	if t.Bump {
		o.HandedOut = max(lastRev(l), info.Target)
	}
	bi, err := d.RestoreWith(ctx, tmpName, o)
	info.BackupInfo = bi
	if err != nil {
		return info, err
	}
	return info, nil
}

// lastRev is the newest revision the bucket holds, in a base or a segment.
func lastRev(l Listing) int64 {
	var rev int64
	for _, b := range l.Bases {
		rev = max(rev, b.Rev)
	}
	for _, s := range l.Segments {
		rev = max(rev, s.Last)
	}
	return rev
}

func dirOf(path string) string {
	dir := "."
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			dir = path[:i]
			if dir == "" {
				dir = "/"
			}
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "."
	}
	return dir
}

// download writes base b, inflated, to f and checks its checksum.
func download(ctx context.Context, st objstore.Store, b Base, f *os.File) error {
	rc, err := st.Get(ctx, b.Name)
	if err != nil {
		return fmt.Errorf("get %s: %w", b.Name, err)
	}
	defer rc.Close()
	zr, err := gunzip(rc, "base "+b.Name)
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), zr); err != nil {
		return fmt.Errorf("base %s is truncated or corrupted: %w", b.Name, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != b.SHA256 {
		return fmt.Errorf("base %s: checksum mismatch: its content is not what was written", b.Name)
	}
	return f.Sync()
}

// plan is what a restore reads: a base, the segments after it, and the
// revision (or time) where it stops.
type plan struct {
	base     Base
	segments []Segment
	rev      int64     // stop after this revision (0: use at)
	at       time.Time // stop before the first row committed after it
}

func planRestore(l Listing, t Target, where string) (plan, error) {
	var p plan
	if len(l.Bases) == 0 {
		return p, fmt.Errorf("%s holds no base to restore from", where)
	}
	oldest := l.Bases[0]
	bi := len(l.Bases) - 1
	switch {
	case t.Rev != 0:
		if t.Rev < oldest.Rev {
			return p, fmt.Errorf("revision %d is before what %s keeps: its oldest base is at revision %d (%s)", t.Rev, where, oldest.Rev, oldest.Name)
		}
		for bi > 0 && l.Bases[bi].Rev > t.Rev {
			bi--
		}
	case !t.At.IsZero():
		if t.At.UnixMilli() < oldest.UnixMs {
			return p, fmt.Errorf("%s is before what %s keeps: its oldest base is of %s (%s)", t.At.UTC().Format(timeFormat), where, time.UnixMilli(oldest.UnixMs).UTC().Format(timeFormat), oldest.Name)
		}
		if t.At.After(time.Now()) {
			return p, fmt.Errorf("%s is in the future", t.At.UTC().Format(timeFormat))
		}
		for bi > 0 && l.Bases[bi].UnixMs > t.At.UnixMilli() {
			bi--
		}
	}
	p.base, p.rev, p.at = l.Bases[bi], t.Rev, t.At
	cur := p.base.Rev
	for i, s := range l.Segments {
		if s.Last <= cur {
			continue
		}
		if p.rev != 0 && cur >= p.rev || !p.at.IsZero() && s.T0 > p.at.UnixMilli() {
			break
		}
		if s.First > cur+1 {
			prev := "the base " + p.base.Name
			if i > 0 {
				prev = l.Segments[i-1].Name
			}
			return p, fmt.Errorf("segment missing: revisions %d-%d are in no object between %s and %s", cur+1, s.First-1, prev, s.Name)
		}
		p.segments = append(p.segments, s)
		cur = s.Last
	}
	if p.rev > cur {
		for _, b := range l.Bases {
			if b.Rev > cur {
				return p, fmt.Errorf("segment missing: revisions %d-%d are in no object between %s and the base %s (the replica's backlog outlived the store's retention, or an object was deleted)", cur+1, b.Rev, lastName(p), b.Name)
			}
		}
		return p, fmt.Errorf("revision %d is past the last one %s holds, %d", p.rev, where, cur)
	}
	if p.rev == 0 && p.at.IsZero() {
		p.rev = cur
	}
	return p, nil
}

// lastName is the last object of p's chain.
func lastName(p plan) string {
	if n := len(p.segments); n > 0 {
		return p.segments[n-1].Name
	}
	return "the base " + p.base.Name
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// The statements a replay runs on the restored copy.
const (
	insertLogSQL      = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	deleteCurrentSQL  = `DELETE FROM current WHERE key = ?`
	upsertCurrentSQL  = `INSERT INTO current (key, create_rev, mod_rev, version, lease) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET create_rev = excluded.create_rev, mod_rev = excluded.mod_rev, version = excluded.version, lease = excluded.lease`
	setMetaSQL        = `UPDATE meta SET value = ? WHERE name = ?`
	raiseMetaSQL      = `UPDATE meta SET value = ? WHERE name = ? AND value < ?`
	deleteLeasesSQL   = `DELETE FROM leases`
	insertLeaseSQL    = `INSERT INTO leases (id, ttl) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`
	unseenLeasesSQL   = `INSERT INTO leases (id, ttl) SELECT DISTINCT lease, ? FROM current WHERE lease != 0 AND lease NOT IN (SELECT id FROM leases)`
	checkpointSQL     = `PRAGMA wal_checkpoint(TRUNCATE)`
	readBaseLineageOK = `SELECT 1 FROM meta WHERE name = 'rev'`
)

// replay applies the plan's segments to the base copy in file, in one
// transaction.
func replay(ctx context.Context, st objstore.Store, lineage, file string, p plan, info *RestoreInfo) error {
	db, err := openWrite(file)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, readBaseLineageOK).Scan(&one); err != nil {
		return fmt.Errorf("base %s is not a QuantyKube store: %w", p.base.Name, err)
	}
	stmts, err := prepareReplay(ctx, tx)
	if err != nil {
		return err
	}
	defer stmts.close()
	target, lastMs := p.base.Rev, p.base.UnixMs
	var prevLeases []Lease
	var last *Data
	for _, s := range p.segments {
		d, err := getSegment(ctx, st, lineage, s)
		if err != nil {
			return err
		}
		info.Segments++
		stop := false
		for _, r := range d.Rows {
			if r.Rev <= p.base.Rev {
				continue // the base holds it
			}
			if p.rev != 0 && r.Rev > p.rev || !p.at.IsZero() && r.UnixMs > p.at.UnixMilli() {
				stop = true
				break
			}
			if err := stmts.apply(ctx, r); err != nil {
				return fmt.Errorf("segment %s: revision %d: %w", s.Name, r.Rev, err)
			}
			info.Rows++
			target, lastMs = r.Rev, r.UnixMs
		}
		if last != nil {
			prevLeases = last.Leases
		}
		last = d
		if !stop {
			// Revisions with no rows at the segment's end are in it too.
			if p.rev != 0 {
				target = min(p.rev, d.Last)
			} else {
				target = d.Last
			}
		}
		if stop || p.rev != 0 && target >= p.rev {
			break
		}
	}
	if last != nil {
		if err := setLeases(ctx, tx, prevLeases, last.Leases, info.Segments == 1); err != nil {
			return err
		}
		// A lease granted and revoked between two of the replicator's
		// reads is in no segment's table, yet its keys are live at a
		// target between their put and the revoke's deletes. It is given
		// back with the shortest TTL: its keys go soon after the restored
		// server starts, as they went soon after the target.
		if _, err := tx.ExecContext(ctx, unseenLeasesSQL, mvcc.MinLeaseTTL); err != nil {
			return fmt.Errorf("give back the leases of live keys: %w", err)
		}
		for _, m := range []struct {
			name string
			v    int64
		}{{"compact", min(last.Compact, target)}, {"retain_floor", min(last.RetainFloor, target)}} {
			if _, err := tx.ExecContext(ctx, raiseMetaSQL, m.v, m.name, m.v); err != nil {
				return fmt.Errorf("set %s: %w", m.name, err)
			}
		}
	}
	for _, m := range []struct {
		name string
		v    int64
	}{{"rev", target}, {"last_unix_ms", lastMs}} {
		if _, err := tx.ExecContext(ctx, setMetaSQL, m.v, m.name); err != nil {
			return fmt.Errorf("set %s: %w", m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	info.Target = target
	_, err = db.ExecContext(ctx, checkpointSQL)
	return err
}

func getSegment(ctx context.Context, st objstore.Store, lineage string, s Segment) (*Data, error) {
	rc, err := st.Get(ctx, s.Name)
	if err != nil {
		if errors.Is(err, objstore.ErrNotExist) {
			return nil, fmt.Errorf("segment %s is missing: %w", s.Name, err)
		}
		return nil, fmt.Errorf("get %s: %w", s.Name, err)
	}
	defer rc.Close()
	return decodeSegment(rc, lineage, s)
}

// replayStmts are a replay's statements, prepared once for all its rows.
type replayStmts struct{ insert, del, upsert *sql.Stmt }

func prepareReplay(ctx context.Context, tx *sql.Tx) (*replayStmts, error) {
	var s replayStmts
	var err error
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&s.insert, insertLogSQL}, {&s.del, deleteCurrentSQL}, {&s.upsert, upsertCurrentSQL}} {
		if *p.stmt, err = tx.PrepareContext(ctx, p.sql); err != nil {
			s.close()
			return nil, fmt.Errorf("prepare the replay: %w", err)
		}
	}
	return &s, nil
}

func (s *replayStmts) close() {
	for _, st := range []*sql.Stmt{s.insert, s.del, s.upsert} {
		if st != nil {
			st.Close()
		}
	}
}

// apply writes row r as the store's writer wrote it: its log row, and
// current's row of its key updated or removed.
func (s *replayStmts) apply(ctx context.Context, r Row) error {
	var value any = r.Value
	if r.ValueNull {
		value = nil
	} else if r.Value == nil {
		value = []byte{}
	}
	if _, err := s.insert.ExecContext(ctx, r.Rev, r.Sub, r.Key, value, r.CreateRev, r.Version, r.Lease, r.Deleted, r.UnixMs); err != nil {
		return err
	}
	var err error
	if r.Deleted {
		_, err = s.del.ExecContext(ctx, r.Key)
	} else {
		_, err = s.upsert.ExecContext(ctx, r.Key, r.CreateRev, r.Rev, r.Version, r.Lease)
	}
	return err
}

// setLeases makes the leases table the union of the leases at the end of
// the last segment replayed and of the one before it: a segment says its
// leases at its end only, so a lease revoked inside it after the target
// (its keys live at the target) comes from the one before; one granted
// inside it too is in neither, and restore gives it back (unseenLeasesSQL).
// A lease granted after the target holds no key and expires. After one segment, the one
// before is the base's leases table, which stays.
func setLeases(ctx context.Context, tx *sql.Tx, a, b []Lease, keepBase bool) error {
	if !keepBase {
		if _, err := tx.ExecContext(ctx, deleteLeasesSQL); err != nil {
			return fmt.Errorf("set the leases: %w", err)
		}
	}
	for _, l := range append(a, b...) {
		if _, err := tx.ExecContext(ctx, insertLeaseSQL, l.ID, l.TTL); err != nil {
			return fmt.Errorf("set the leases: %w", err)
		}
	}
	return nil
}
