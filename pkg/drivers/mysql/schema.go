package mysql

// keyType holds a key: compared and sorted byte by byte, as etcd's keys
// are. An InnoDB index holds at most 3072 bytes per entry (ROW_FORMAT
// DYNAMIC), so a key is at most 3000 bytes, with the revision beside it in
// (key, rev); Kubernetes' keys are far shorter (an object's name is at
// most 253 bytes). A longer key fails its write (strict mode).
const keyType = `VARBINARY(3000)`

// tableOptions: InnoDB for transactions and row locks; DYNAMIC rows for
// the 3072-byte index entries, and values kept off the row.
const tableOptions = ` ENGINE=InnoDB ROW_FORMAT=DYNAMIC`

// Migrations are the PostgreSQL dialect's schema (the same tables,
// columns and indexes, schema version 3) made in its first step: MySQL
// commits before and after each DDL statement, so the steps are not
// transactions, and each statement is one that can run again after a
// crash (IF NOT EXISTS, indexes declared with their tables). The two later
// steps made changes that a new MySQL store never needs: History's index
// and retention's table are in step 1, and current never had a value
// column (ADR-014).
func (d *Dialect) Migrations() [][]string {
	return [][]string{{
		// log: one row per key change. id identifies a row (prev_kv joins
		// on it, retention walks it); revisions never come from it: they
		// come from meta.rev, updated under the batch lock, which also
		// makes id grow with the revision.
		`CREATE TABLE IF NOT EXISTS log (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			rev BIGINT NOT NULL,
			sub BIGINT NOT NULL,
			` + "`key`" + ` ` + keyType + ` NOT NULL,
			value LONGBLOB,
			create_rev BIGINT NOT NULL,
			version BIGINT NOT NULL,
			lease BIGINT NOT NULL,
			deleted SMALLINT NOT NULL,
			unix_ms BIGINT NOT NULL,
			UNIQUE INDEX log_rev (rev, sub),
			INDEX log_key_rev (` + "`key`" + `, rev),
			INDEX log_unix_ms (unix_ms, rev))` + tableOptions,
		`CREATE TABLE IF NOT EXISTS current (
			` + "`key`" + ` ` + keyType + ` NOT NULL PRIMARY KEY,
			create_rev BIGINT NOT NULL,
			mod_rev BIGINT NOT NULL,
			version BIGINT NOT NULL,
			lease BIGINT NOT NULL,
			INDEX current_lease (lease))` + tableOptions,
		// renewed_ms is the database clock at the last grant or renewal:
		// every replica reads deadlines from one clock.
		`CREATE TABLE IF NOT EXISTS leases (
			id BIGINT NOT NULL PRIMARY KEY,
			ttl BIGINT NOT NULL,
			renewed_ms BIGINT NOT NULL DEFAULT ` + nowMs + `)` + tableOptions,
		`CREATE TABLE IF NOT EXISTS retention (
			prefix ` + keyType + ` NOT NULL PRIMARY KEY,
			floor BIGINT NOT NULL,
			floor_unix_ms BIGINT NOT NULL,
			` + "`cursor`" + ` BIGINT NOT NULL)` + tableOptions,
		`INSERT IGNORE INTO meta (name, value) VALUES ('retain_floor', 0)`,
	}, {}, {}}
}
