package mvcc

import (
	"fmt"
	"strings"
)

// migrateSQL are the statements Migrate runs on either end. They touch
// only the columns every dialect's schema (version 3) shares, so one text
// serves all three; a dialect differs only in its placeholders ($n on
// PostgreSQL) and in quoting the column names that are reserved words on
// MySQL (key, cursor).
type migrateSQL struct {
	pg, my bool
}

func newMigrateSQL(d Dialect) migrateSQL {
	return migrateSQL{pg: d.Name() == "postgres", my: d.Name() == "mysql"}
}

// text replaces ? with the dialect's placeholders and `x` with its quoting.
func (m migrateSQL) text(q string) string {
	if m.my {
		return q
	}
	q = strings.ReplaceAll(q, "`", "")
	if !m.pg {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// The columns Migrate copies: the log rows exactly, and the tables a
// store keeps beside them. log.id is not copied: each database numbers its
// own rows, and the one reference to an id (retention's cursor) is carried
// as the (rev, sub) of its row.
const (
	migLogCols       = "rev, sub, `key`, value, create_rev, version, lease, deleted, unix_ms"
	migCurrentCols   = "`key`, create_rev, mod_rev, version, lease"
	migRetentionCols = "prefix, floor, floor_unix_ms, `cursor`"
)

// Which of migLogCols and migCurrentCols hold bytes.
var (
	migLogBytes     = []bool{false, false, true, true, false, false, false, false, false}
	migCurrentBytes = []bool{true, false, false, false, false}
)

func (m migrateSQL) readLog() string {
	return m.text("SELECT " + migLogCols + " FROM log ORDER BY rev, sub")
}

func (m migrateSQL) readCurrent() string {
	return m.text("SELECT " + migCurrentCols + " FROM current ORDER BY `key`")
}

func (m migrateSQL) readRetention() string {
	return m.text("SELECT " + migRetentionCols + " FROM retention ORDER BY prefix")
}

func (m migrateSQL) count(table string) string {
	return "SELECT COUNT(*) FROM " + table
}

// cursorRow is the (rev, sub) of the row a retention cursor (a log id)
// points at or, when retention removed it, of the row before it.
func (m migrateSQL) cursorRow() string {
	return m.text("SELECT rev, sub FROM log WHERE id <= ? ORDER BY id DESC LIMIT 1")
}

// cursorID is the id of the target's row at or before (rev, sub).
func (m migrateSQL) cursorID() string {
	return m.text("SELECT COALESCE(MAX(id), 0) FROM log WHERE rev < ? OR (rev = ? AND sub <= ?)")
}

// insert is a multi-row INSERT of n rows into table's cols.
func (m migrateSQL) insert(table, cols string, ncols, n int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", ncols), ", ") + ")"
	return m.text("INSERT INTO " + table + " (" + cols + ") VALUES " + strings.TrimSuffix(strings.Repeat(row+", ", n), ", "))
}

func (m migrateSQL) deleteAll(table string) string { return "DELETE FROM " + table }

func (m migrateSQL) deleteMeta() string { return m.text("DELETE FROM meta WHERE name = ?") }

func (m migrateSQL) insertMeta() string {
	return m.text("INSERT INTO meta (name, value) VALUES (?, ?)")
}

func (m migrateSQL) readMeta() string { return "SELECT name, value FROM meta" }
