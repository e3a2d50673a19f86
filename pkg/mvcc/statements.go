package mvcc

import (
	"fmt"
	"reflect"
	"strings"
)

// Statements is every statement the engine runs, by area: each dialect
// writes them out in its own syntax in its sql.go (Dialect.Statements),
// and the engine runs them by name, never writing SQL of its own nor
// building any per request (ADR-039). A query whose shape differs with
// the request (one key or a range, keys only, a limit, a past revision)
// is one named statement per shape. Each field's comment says the
// arguments the engine passes, in order, and the columns it scans; "key
// range" stands for the arguments of the statement's KeyShape (KeyRange's
// key, or key and end).
//
// The statements a request runs are prepared when the store opens, on
// the pool that runs them (stmt.go); the others (the migration's, an
// import's, retention's passes) are run by their text.
type Statements struct {
	Schema SchemaSQL // schema.go: the migration, and what a store loads as it opens
	Meta   MetaSQL   // meta's revision and floors, read outside a batch
	Batch  BatchSQL  `only:"single"` // batch_sqlite.go, delete_sqlite.go: the one writer's batch
	// batch_replica.go: the replicas' batch, the rest of whose SQL is the
	// ReplicaDialect's own
	ReplicaBatch ReplicaBatchSQL `only:"replica"`
	Current      CurrentSQL      // the current table, as batches and the live index read it
	Lease        LeaseSQL        // lease.go
	Range        RangeSQL        // range.go, range_sql.go
	Watch        WatchSQL        // logread.go: watch catch-up and the tailer
	History      HistorySQL      // history.go: History's reads of one row
	LogPage      LogPageSQL      // logpage.go, logscan.go: History's Log pages
	RangeAt      RangeAtSQL      // rangeat.go: History's range at a revision
	Retention    RetentionSQL    // retention.go
	Budget       BudgetSQL       // budget.go
	Usage        UsageSQL        // usage.go
	Import       ImportSQL       // import.go
	Regress      RegressSQL      // regress.go
	Alarm        AlarmSQL        // quota.go
}

// KeyShape is the form of a key range in a statement: one key (= ?), every
// key from one on (>= ?), or the keys between two (>= ? AND < ?). Its
// arguments are the range's Key, and End for KeyBetween.
type KeyShape int

const (
	OneKey KeyShape = iota
	FromKey
	KeyBetween
)

// Shaped is one statement for each KeyShape.
type Shaped struct{ One, From, Between string }

// Spans is one statement for each KeyShape of more than one key: where
// the engine runs it, a single key takes another path.
type Spans struct{ From, Between string }

// of is the statement for kr's shape.
func (s *Shaped) of(kr KeyRange) string {
	switch kr.shape() {
	case OneKey:
		return s.One
	case FromKey:
		return s.From
	}
	return s.Between
}

// of is the statement for kr's shape; kr is not a single key.
func (s *Spans) of(kr KeyRange) string {
	if kr.Unbounded {
		return s.From
	}
	return s.Between
}

// IDLists is a statement ending in id IN (...) for each of IDListSizes.
type IDLists [3]string

// IDListSizes are the lengths of the id lists of reads by id: a handful
// of statements serve every page size, each prepared once.
var IDListSizes = [3]int{16, 128, 1024}

// PrefetchSizes are the lengths of the key lists a SQLite batch reads
// its current rows with (BatchSQL.Prefetch).
var PrefetchSizes = [3]int{8, 64, 256}

// SchemaSQL is the migration's, and what a store loads as it opens.
type SchemaSQL struct {
	// CreateMeta makes meta (name, value BIGINT), where the schema's
	// version is, unless it exists.
	CreateMeta string
	// Version: the schema version. Columns: value.
	Version string
	// InsertMeta adds a row. Args: name, value.
	InsertMeta string
	// InsertVersion adds the version's row. Args: version.
	InsertVersion string
	// SetVersion sets it. Args: version.
	SetVersion string
	// State is every meta row. Columns: name, value.
	State string
	// Leases is every lease. Columns: id, ttl.
	Leases string
	// FirstWithoutValue and CountWithoutValue find the current rows that
	// have no log row at (key, mod_rev) (schema 3's check). Columns: key;
	// a count.
	FirstWithoutValue, CountWithoutValue string
}

// MetaSQL reads meta's revision and floors outside a write batch.
type MetaSQL struct {
	// Rev: the committed revision. Columns: value.
	Rev string
	// RevCompact: the revision and Compact's floor. Columns: rev, compact.
	RevCompact string
	// RevFloor: the revision and the etcd API's floor, the higher of
	// Compact's and retention's. Columns: rev, floor.
	RevFloor string
	// LogFloor: the floor below which the log no longer tells every
	// change, the higher of retention's and the last bump's (regress.go).
	// Columns: floor.
	LogFloor string
}

// BatchSQL is the single writer's batch (a dialect that is not a
// ReplicaDialect): each row written as it is made.
type BatchSQL struct {
	// Start: the state a batch starts from. Columns: rev, compact,
	// last_unix_ms.
	Start string
	// SetRev, SetLastUnixMs, SetCompact set meta's row. Args: value.
	SetRev, SetLastUnixMs, SetCompact string
	// InsertPut adds a put's log row. Args: rev, sub, key, value,
	// create_rev, version, lease, unix_ms.
	InsertPut string
	// InsertDelete adds a delete's log row. Args: rev, sub, key, unix_ms.
	InsertDelete string
	// UpsertCurrent puts a current row. Args: key, create_rev, mod_rev,
	// version, lease.
	UpsertCurrent string
	// DeleteCurrent deletes a current row. Args: key.
	DeleteCurrent string
	// InsertDeletes adds the delete rows of every current key in
	// [first, last], numbered in key order from sub; DeleteCurrents
	// deletes those keys. Args: rev, sub, unix_ms, first, last; first,
	// last.
	InsertDeletes, DeleteCurrents string
	// Prefetch reads the current rows of PrefetchSizes keys, as
	// CurrentSQL's. Args: the keys.
	Prefetch [3]string
}

// ReplicaBatchSQL is what the engine runs on a replica batch's connection
// beyond CurrentSQL's and LeaseSQL's reads: the dialect begins and commits
// the transaction itself (ReplicaDialect).
type ReplicaBatchSQL struct {
	// Rollback ends the transaction of a batch that failed.
	Rollback string
}

// CurrentSQL reads current rows, each with its value from its log row.
// Columns: key, value, create_rev, mod_rev, version, lease.
type CurrentSQL struct {
	// Get: one key's row, its key left out. Args: key. Columns: value,
	// create_rev, mod_rev, version, lease.
	Get string
	// Range: the rows of a key range, in key order. Args: key range.
	Range Shaped
	// ByLease: the rows attached to a lease, in key order. Args: lease.
	ByLease string
	// All: every row, in key order (the live index).
	All string
}

// LeaseSQL is the leases table's.
type LeaseSQL struct {
	// Keys: a lease's keys, in order. Args: lease. Columns: key.
	Keys string
	// Exists: one row when the lease exists. Args: id.
	Exists string
	// Insert adds a lease. Args: id, ttl.
	Insert string
	// Delete removes one. Args: id.
	Delete string
}

// RangeSQL is Range's, when the live index does not answer it.
type RangeSQL struct {
	// Latest and LatestKeys (no value) read one key at the latest
	// revision, with meta's revision, in one statement. Args: key.
	// Columns: rev, then CurrentSQL's (NULL when the key is absent).
	Latest, LatestKeys string
	// Count counts the live keys of a range; CountAt those live at a
	// past revision. Args: key range; CountAt: key range, at, at, at, key
	// range.
	Count, CountAt Shaped
	// List reads the rows of a range; Keys the same without their values
	// (NULL).
	List, Keys ListSQL
}

// ListSQL reads a range's rows in key order, as CurrentSQL's columns.
// Latest reads them at the latest revision; At at a past one, from the
// current rows not changed since and the log rows of those that were.
// Args: Latest: key range; At: key range, at, at, at, key range. The Limit
// forms take the most rows to return last.
type ListSQL struct {
	Latest, LatestLimit, At, AtLimit Shaped
}

// WatchSQL reads changes back from the log (watch catch-up, the tailer).
type WatchSQL struct {
	// Events: the changes of a key range in [from, to], in (rev, sub)
	// order, each with its prev_kv's row. Args: from, to, key range.
	// Columns: rev, sub, key, value, create_rev, version, lease, deleted,
	// unix_ms, then prev's rev, value, create_rev, version, lease, deleted
	// (NULL without one).
	Events Shaped
}

// HistorySQL is History's reads of one row.
type HistorySQL struct {
	// LogStart: the commit time of the oldest log row. Columns: unix_ms.
	LogStart string
	// RevAtTime: the newest revision committed at or before a time.
	// Args: unix_ms. Columns: rev.
	RevAtTime string
	// KeyAtTime: RevAtTime's revision and a key's row as of it. Args:
	// unix_ms, key. Columns: rev, then the row's rev, value, create_rev,
	// version, lease, deleted (NULL without one).
	KeyAtTime string
	// RevFromTime: the oldest revision committed at or after a time.
	// Args: unix_ms. Columns: rev.
	RevFromTime string
	// RevBeforeTime: the newest revision committed before a time. Args:
	// unix_ms. Columns: rev.
	RevBeforeTime string
	// KeyAsOf: a key's newest row at or before a revision. Args: key,
	// rev. Columns: rev, value, create_rev, version, lease, deleted.
	KeyAsOf string
}

// LogPageSQL is History's Log pages (logpage.go) and their scans by row
// header (logscan.go).
type LogPageSQL struct {
	// KeyPage: one key's rows from its newest before a revision on, in
	// revision order; a value of more than inline bytes is NULL. Args:
	// inline, key, key, rev, limit. Columns: rev, sub, the value's size,
	// value, create_rev, version, lease, deleted, unix_ms.
	KeyPage string
	// KeyValues: one key's values of more than inline bytes in [from,
	// to]. Args: key, from, to, inline. Columns: rev, value.
	KeyValues string
	// Narrow: how many log rows a range holds, counted up to a bound.
	// Args: key range, bound. Columns: a count.
	Narrow Spans
	// Page reads a range's rows after a cursor and up to another (both in
	// (rev, sub) order, the second inclusive), in that order, each with
	// its prev_kv's; values and prev values of more than inline bytes are
	// NULL. ByKey reads them through the (key, rev) index (a narrow
	// range), Page through (rev, sub). Args: inline, inline, rev, sub,
	// end rev, end sub, key range, limit. Columns: rev, sub, key, size,
	// value, create_rev, version, lease, deleted, unix_ms, then prev's
	// rev, size, value, create_rev, version, lease, deleted.
	Page, PageByKey Spans
	// Window is the row a number of rows after a cursor in (rev, sub)
	// order (Desc: before it, in reverse order), through the (rev, sub)
	// index and reading nothing else: where a page that reads the log in
	// revision order stops. Args: rev, sub, rows. Columns: rev, sub (no
	// row: the log ends sooner).
	Window, WindowDesc string
	// Values reads the values and prev values of more than inline bytes
	// of a range's rows in [(rev, sub), (rev, sub)]. Args: inline, inline,
	// rev, sub, rev, sub, key range. Columns: rev, sub, value, prev value.
	Values, ValuesByKey Spans
	// KeyHeads reads one key's row headers with rev in [from, to], by
	// revision (Desc: newest first). Args: key, from, to, limit. Columns:
	// id, rev, sub, key, the value's size.
	KeyHeads, KeyHeadsDesc string
	// Heads reads a range's row headers strictly between two cursors in
	// (rev, sub) order (Desc: newest first), through (rev, sub), or
	// (key, rev) for ByKey. Args: rev, sub, rev, sub, key range, limit.
	// Columns: KeyHeads'.
	Heads, HeadsDesc, HeadsByKey, HeadsByKeyDesc Spans
	// PrevHeads reads rows' prev_kv headers by id. Args: ids. Columns: id,
	// deleted, prev's id, size, deleted.
	PrevHeads IDLists
	// Entries reads rows by id. Args: ids. Columns: id, rev, value,
	// create_rev, version, lease, deleted, unix_ms.
	Entries IDLists
}

// RangeAtSQL is History's range at a revision.
type RangeAtSQL struct {
	// Keys walks the keys of the log from one on, each with its row at a
	// revision; From has no end, Between stops before one. Args: from,
	// [end,] [end,] n, rev. Columns: key, then the row's id, size,
	// deleted (NULL without one).
	Keys Spans
	// Values reads rows by id. Args: ids. Columns: id, rev, value,
	// create_rev, version, lease.
	Values IDLists
}

// RetentionSQL is the pruning loop's.
type RetentionSQL struct {
	// Floor: a rule's floor. Args: prefix. Columns: floor, floor_unix_ms.
	Floor string
	// AtTime: the newest revision at or before a time. Args: unix_ms.
	// Columns: rev, unix_ms.
	AtTime string
	// AtRev: the oldest revision at or after one. Args: rev. Columns:
	// rev, unix_ms.
	AtRev string
	// LastBelow: the last row's id below a revision. Args: rev. Columns:
	// id.
	LastBelow string
	// Cursor: a rule's cursor and floor. Args: prefix. Columns: cursor,
	// floor.
	Cursor string
	// InsertRule adds a rule's row. Args: prefix.
	InsertRule string
	// Rows: log rows by id in (after, upTo]. Args: after, upTo, limit.
	// Columns: id, key, rev, deleted.
	Rows string
	// DeleteBelow deletes a key's rows below a revision. Args: key, rev.
	DeleteBelow string
	// DeleteRow deletes a row. Args: id.
	DeleteRow string
	// SetRule sets a rule's row. Args: floor, floor_unix_ms, cursor,
	// prefix.
	SetRule string
	// SetFloor raises meta's retain_floor. Args: floor, floor.
	SetFloor string
	// Imported: an import's revision and time. Columns: rev, unix_ms
	// (NULL without an import).
	Imported string
	// RetainFloor: meta's retain_floor. Columns: value.
	RetainFloor string
	// Floors: every rule's floor. Columns: prefix, floor, floor_unix_ms.
	Floors string
}

// BudgetSQL is the byte budgets' accounting.
type BudgetSQL struct {
	// History: the rows in (after, upTo], in (rev, sub) order. Args:
	// after, upTo. Columns: rev, key, the row's bytes, version, deleted.
	History string
}

// UsageSQL is what each key's history weighs.
type UsageSQL struct {
	// Usage: per key, in key order. Args: recent unix_ms. Columns: key,
	// rows, bytes, rows since, oldest unix_ms, newest unix_ms.
	Usage string
}

// ImportSQL is an import's, into a new store. A ReplicaDialect's rows and
// revision go through its WriteBatch instead of InsertPut, InsertCurrent,
// SetRev and SetLastUnixMs.
type ImportSQL struct {
	// Size counts what the target holds. Columns: current rows, log rows,
	// leases, imported_rev rows.
	Size string
	// InsertPut is BatchSQL's. InsertCurrent adds a current row and fails
	// on one that exists. Args: key, create_rev, mod_rev, version, lease.
	InsertPut     string `only:"single"`
	InsertCurrent string `only:"single"`
	// SetRev, SetLastUnixMs, SetRetainFloor set meta's row. Args: value.
	SetRev         string `only:"single"`
	SetLastUnixMs  string `only:"single"`
	SetRetainFloor string
	// InsertMeta adds a row; DeleteMeta removes one. Args: name, value;
	// name.
	InsertMeta, DeleteMeta string
}

// RegressSQL moves a database that lost revisions past them (ADR-027).
type RegressSQL struct {
	// SetRev sets meta's rev and compact. Args: rev.
	SetRev string
	// SetReset puts meta's reset row. Args: rev.
	SetReset string
	// LockRev takes the lock every write batch takes first, and reads the
	// revision. Columns: rev.
	LockRev string `only:"replica"`
}

// AlarmSQL keeps the alarms in meta, rows named alarm/TYPE/MEMBER.
type AlarmSQL struct {
	// List: every alarm row. Columns: name, value.
	List string
	// Activate adds an alarm's row unless it exists. Args: name, unix_ms.
	Activate string
	// Deactivate removes it. Args: name.
	Deactivate string
}

// check reports the first statement d's Statements leave empty.
func (st *Statements) check(replica bool) error {
	for _, n := range st.List() {
		if n.Text == "" && !(n.only == "replica" && !replica) && !(n.only == "single" && replica) {
			return fmt.Errorf("the dialect has no statement %s", n.Name)
		}
	}
	return nil
}

// NamedStatement is one of Statements', by its field path.
type NamedStatement struct {
	Name, Text string
	only       string // "single", "replica": what only such a dialect needs
}

// List is every statement, named by its field path (Range.Count.Between).
func (st *Statements) List() []NamedStatement {
	var out []NamedStatement
	collect(reflect.ValueOf(st).Elem(), "", "", &out)
	return out
}

func collect(v reflect.Value, name, only string, out *[]NamedStatement) {
	switch v.Kind() {
	case reflect.String:
		*out = append(*out, NamedStatement{Name: name, Text: v.String(), only: only})
	case reflect.Array:
		for i := range v.Len() {
			collect(v.Index(i), fmt.Sprintf("%s[%d]", name, i), only, out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			o := only
			if t := f.Tag.Get("only"); t != "" {
				o = t
			}
			collect(v.Field(i), strings.TrimPrefix(name+"."+f.Name, "."), o, out)
		}
	}
}

// texts is every statement of the areas given (pointers into a
// Statements), once each.
func texts(areas ...any) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range areas {
		var ns []NamedStatement
		collect(reflect.ValueOf(a).Elem(), "", "", &ns)
		for _, n := range ns {
			if n.Text != "" && !seen[n.Text] {
				seen[n.Text] = true
				out = append(out, n.Text)
			}
		}
	}
	return out
}
