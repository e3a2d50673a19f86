package mysql

// The write batch (mvcc.ReplicaDialect): the lock every replica's batches take in
// turn, the read of the state they start from, and the writes, each sent
// as one multi-statement query (MySQL runs a query's statements in order
// and stops at the first that fails), in one round trip unless the
// writes outgrow a packet.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// splitKeys splits keys into lists of keyListSizes' lengths: lists of the
// longest, then the rest in the shortest that holds them, its last key
// repeated to fill it.
func splitKeys(keys [][]byte) [][]any {
	var out [][]any
	for len(keys) > 0 {
		n := keyListSizes[listIndex(len(keys))]
		list := make([]any, n)
		for i := range list {
			list[i] = keys[min(i, len(keys)-1)]
		}
		out = append(out, list)
		keys = keys[min(n, len(keys)):]
	}
	return out
}

// stateQuery is the query that takes the lock and reads the state of
// keys, beginning the transaction first with begin, and its arguments:
// keys past the longest list are read by statements of their own
// (stateKeysSQL), whose rows come as further result sets.
func stateQuery(begin bool, keys [][]byte) (string, []any) {
	lists := splitKeys(keys)
	if len(lists) == 0 {
		if begin {
			return beginLockStateMetaSQL, nil
		}
		return lockStateMetaSQL, nil
	}
	q := lockStateSQL[listIndex(len(lists[0]))]
	if begin {
		q = beginLockStateSQL[listIndex(len(lists[0]))]
	}
	args := lists[0]
	for _, l := range lists[1:] {
		q += ";\n" + stateKeysSQL[listIndex(len(l))]
		args = append(args, l...)
	}
	return q, args
}

// LockBatch takes the lock and reads the state, in one round trip.
func (d *Dialect) LockBatch(ctx context.Context, q mvcc.Querier, keys [][]byte) (mvcc.BatchStart, []*mvccpb.KeyValue, error) {
	query, args := stateQuery(false, keys)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return mvcc.BatchStart{}, nil, err
	}
	defer rows.Close()
	return scanState(rows)
}

// BeginBatch begins the transaction, takes the lock and reads the state
// in one round trip.
func (d *Dialect) BeginBatch(ctx context.Context, conn *sql.Conn, keys [][]byte) (mvcc.BatchStart, []*mvccpb.KeyValue, error) {
	query, args := stateQuery(true, keys)
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return mvcc.BatchStart{}, nil, err
	}
	defer rows.Close()
	return scanState(rows)
}

func scanState(rows *sql.Rows) (mvcc.BatchStart, []*mvccpb.KeyValue, error) {
	var st mvcc.BatchStart
	var kvs []*mvccpb.KeyValue
	seen := false
	for more := true; more; more = rows.NextResultSet() {
		for rows.Next() {
			kv := &mvccpb.KeyValue{}
			var rev sql.NullInt64
			var compact, last int64
			if err := rows.Scan(&kv.Key, &kv.Value, &rev, &compact, &last, &kv.Version, &kv.Lease); err != nil {
				return st, nil, err
			}
			if kv.Key == nil {
				// The state's row carries the writer's mark where a row's
				// version goes.
				st = mvcc.BatchStart{Rev: rev.Int64, Compact: compact, LastUnixMs: last, Writer: kv.Version}
				seen = true
				continue
			}
			kv.CreateRevision, kv.ModRevision = compact, last
			kvs = append(kvs, kv)
		}
	}
	if err := rows.Err(); err != nil {
		return st, nil, err
	}
	if !seen {
		return st, nil, errors.New("mysql: the batch read no state")
	}
	return st, kvs, nil
}

// WriteBatch sends the writes inside the caller's transaction.
func (d *Dialect) WriteBatch(ctx context.Context, q mvcc.Querier, w *mvcc.BatchWrites) error {
	var s script
	d.addWrites(&s, w)
	for _, p := range s.packets(d.packetBudget()) {
		if _, err := q.ExecContext(ctx, p.sql, p.args...); err != nil {
			return err
		}
	}
	return nil
}

// CommitBatch sends the writes and COMMIT: one round trip unless the
// writes outgrow a packet. A server's error (*mysql.MySQLError) means it
// stopped at that statement, before the COMMIT that ends the last packet,
// or refused the COMMIT: either way nothing committed. So did a failure
// before the last packet was sent whole. A connection lost after that
// leaves the outcome unknown.
func (d *Dialect) CommitBatch(ctx context.Context, conn *sql.Conn, w *mvcc.BatchWrites) error {
	var s script
	if w != nil {
		d.addWrites(&s, w)
	}
	s.add(commitSQL)
	return d.send(ctx, conn, &s)
}

// MarksWriter: meta keeps the writer's mark (mvcc.WriterMarker).
func (d *Dialect) MarksWriter() {}

// CommitAssumed sends, in one round trip, BEGIN, the lock, the check of
// a's state that also sets meta to the batch's end state, a statement
// that fails unless it held (a duplicate of meta's rev row), the check of
// the keys assumed absent that the writes do not create, the writes and
// COMMIT. A key assumed present is proven by the state (its writer's mark
// is this replica's); one assumed absent and created is checked by its
// INSERT, which fails on a row that exists. After a failure the
// transaction is still open: it is rolled back in one more round trip, and
// the duplicate tells ErrAssumption (meta's rev row: meta did not hold)
// from ErrAssumedRows (a created key's row, or the absent keys' guard on
// meta's compact row: meta held).
func (d *Dialect) CommitAssumed(ctx context.Context, conn *sql.Conn, a *mvcc.Assumption, w *mvcc.BatchWrites) error {
	end := a.Start
	if w != nil {
		if w.SetRev {
			end.Rev, end.LastUnixMs, end.Writer = w.Rev, w.UnixMs, w.Writer
		}
		if w.SetCompact {
			end.Compact = w.Compact
		}
	}
	absent := map[string]bool{}
	for i, k := range a.Keys {
		if a.ModRevs[i] == 0 {
			absent[string(k)] = true
		}
	}
	created := map[string]bool{}
	if w != nil {
		for _, kv := range w.Put {
			if absent[string(kv.Key)] {
				created[string(kv.Key)] = true
			}
		}
	}
	var notCreated [][]byte
	for _, k := range a.Keys {
		if absent[string(k)] && !created[string(k)] {
			notCreated = append(notCreated, k)
		}
	}
	var s script
	s.add(startTransactionSQL)
	s.add(lockBatchSQL)
	s.add(assumedMetaSQL, end.Rev, end.Compact, end.LastUnixMs, end.Writer,
		a.Start.Rev, a.Start.Compact, a.Start.LastUnixMs, a.Start.Writer)
	s.add(assumedMetaHeldSQL)
	for _, l := range splitKeys(notCreated) {
		s.add(assumedAbsentSQL[listIndex(len(l))], l...)
	}
	if w != nil {
		d.addRows(&s, w, created)
	}
	s.add(commitSQL)
	err := d.send(ctx, conn, &s)
	var me *mysql.MySQLError
	if err == nil || !errors.As(err, &me) || me.Number != 1062 {
		return err
	}
	// A check failed: nothing was written. A user's key named rev reads
	// as meta's row, and forgets more than it needs to.
	missed := mvcc.ErrAssumedRows
	if strings.Contains(me.Message, "'rev'") {
		missed = mvcc.ErrAssumption
	}
	if _, rerr := conn.ExecContext(ctx, rollbackSQL); rerr != nil {
		return fmt.Errorf("%w (the ROLLBACK after it: %v)", missed, rerr)
	}
	return missed
}

// send runs s's packets on conn in order and classifies a failure (see
// CommitBatch).
func (d *Dialect) send(ctx context.Context, conn *sql.Conn, s *script) error {
	ps := s.packets(d.packetBudget())
	for i, p := range ps {
		_, err := conn.ExecContext(ctx, p.sql, p.args...)
		if err == nil {
			continue
		}
		var me *mysql.MySQLError
		if i < len(ps)-1 || errors.As(err, &me) || errors.Is(err, driver.ErrBadConn) {
			return fmt.Errorf("%w: %w", mvcc.ErrRolledBack, err)
		}
		return err
	}
	return nil
}

// packetBudget is the size a packet's statements are kept under: half the
// server's max_allowed_packet, as the sizes are estimated before escaping.
func (d *Dialect) packetBudget() int {
	return int(max(d.maxPacket.Load(), minPacket) / 2)
}

// addWrites adds w's statements to s: its rows (addRows) and meta.
func (d *Dialect) addWrites(s *script, w *mvcc.BatchWrites) {
	d.addRows(s, w, nil)
	switch {
	case w.SetRev && w.SetCompact:
		s.add(setRevCompactSQL, w.Rev, w.UnixMs, w.Writer, w.Compact)
	case w.SetRev:
		s.add(setRevSQL, w.Rev, w.UnixMs, w.Writer)
	case w.SetCompact:
		s.add(setCompactSQL, w.Compact)
	}
}

// addRows adds the statements of w's rows to s: the log rows, and the
// current rows put and deleted, those of the keys create names added by
// an INSERT that fails on a row that exists.
func (d *Dialect) addRows(s *script, w *mvcc.BatchWrites, create map[string]bool) {
	budget := d.packetBudget()
	s.rows(logHead, "", len(w.Log), budget, func(i int) (string, []any) {
		r := w.Log[i]
		var value any
		if !r.Deleted {
			value = nonNil(r.Value)
		}
		deleted := 0
		if r.Deleted {
			deleted = 1
		}
		return logRow, []any{r.Rev, r.Sub, r.Key, value, r.CreateRev, r.Version, r.Lease, deleted, w.UnixMs}
	})
	var puts, creates []*mvccpb.KeyValue
	for _, kv := range w.Put {
		if create[string(kv.Key)] {
			creates = append(creates, kv)
		} else {
			puts = append(puts, kv)
		}
	}
	putRows := func(kvs []*mvccpb.KeyValue) func(int) (string, []any) {
		return func(i int) (string, []any) {
			kv := kvs[i]
			return putRow, []any{kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
		}
	}
	if len(creates) > 0 {
		s.rows(createHead, "", len(creates), budget, putRows(creates))
	}
	if len(puts) > 0 {
		s.rows(putHead, putTail, len(puts), budget, putRows(puts))
	}
	if len(w.Delete) > 0 {
		s.rows(deleteHead, deleteTail, len(w.Delete), budget, func(i int) (string, []any) {
			return "?", []any{w.Delete[i]}
		})
	}
}

// nonNil keeps an empty value from being stored as NULL, which marks a
// deletion's row.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// script is statements to send in order.
type script struct {
	stmts []stmt
}

type stmt struct {
	sql  string
	args []any
	size int // estimated size once the arguments are written in
}

func (s *script) add(q string, args ...any) {
	s.stmts = append(s.stmts, stmt{sql: q, args: args, size: len(q) + argsSize(args)})
}

// rows adds head, n rows separated by commas, and tail, as several
// statements when the rows outgrow budget.
func (s *script) rows(head, tail string, n, budget int, row func(int) (string, []any)) {
	var b strings.Builder
	var args []any
	size := 0
	flush := func() {
		if b.Len() == 0 {
			return
		}
		s.stmts = append(s.stmts, stmt{sql: head + b.String() + tail, args: args, size: size + len(head) + len(tail)})
		b.Reset()
		args, size = nil, 0
	}
	for i := range n {
		q, a := row(i)
		sz := len(q) + 2 + argsSize(a)
		if b.Len() > 0 && size+sz > budget {
			flush()
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q)
		args = append(args, a...)
		size += sz
	}
	flush()
}

// argsSize is what the arguments may take once written into the text: a
// byte string escaped, at worst twice its length, with its quotes.
func argsSize(args []any) int {
	n := 0
	for _, a := range args {
		if b, ok := a.([]byte); ok {
			n += 2*len(b) + 10
		} else {
			n += 21
		}
	}
	return n
}

type packet struct {
	sql  string
	args []any
}

// packets groups the statements, in order, into multi-statement queries
// of at most budget estimated bytes (a statement larger than that alone).
func (s *script) packets(budget int) []packet {
	var out []packet
	var cur packet
	size := 0
	for _, st := range s.stmts {
		if cur.sql != "" && size+st.size > budget {
			out = append(out, cur)
			cur, size = packet{}, 0
		}
		if cur.sql != "" {
			cur.sql += ";\n"
		}
		cur.sql += st.sql
		cur.args = append(cur.args, st.args...)
		size += st.size + 2
	}
	if cur.sql != "" {
		out = append(out, cur)
	}
	return out
}
