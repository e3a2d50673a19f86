package mysql

import (
	"regexp"
)

// OwnStatements are the statements the dialect sends itself, beside the
// engine's (Statements) and the schema's (Migrations), with no statement
// timeout set: the statement-list test's (statements_test.go).
var OwnStatements = func() []string {
	own := []string{
		strictModeSQL, readCommittedSQL, readOnlySQL, releaseLocksSQL, startTransactionSQL, commitSQL, rollbackSQL,
		maxPacketSQL, durabilitySQL, versionSQL, databaseExistsSQL,
		lockBatchSQL, stateMetaSQL, lockStateMetaSQL, beginLockStateMetaSQL,
		assumedMetaSQL, assumedMetaHeldSQL, setRevCompactSQL, setRevSQL, setCompactSQL,
		importLockFreeSQL, importLockSQL, hasMetaSQL, migrateLockSQL,
		leasesSQL, renewLeaseSQL, leaseExpiredSQL, startLeasesSQL,
		serverRowDeleteSQL, serverRowUpsertSQL, serverRowsPruneUpsertSQL, serverRowsLiveSQL, serverAppliedUpsertSQL,
		sizeSQL, defragmentSQL, tablesSQL,
	}
	for _, lists := range [][len(keyListSizes)]string{stateKeysSQL, stateSQL, lockStateSQL, beginLockStateSQL, assumedAbsentSQL} {
		own = append(own, lists[:]...)
	}
	return own
}()

// RowStatements match the statements a batch writes its rows into, as
// it writes them: a head, rows separated by commas, a tail.
var RowStatements = func() []*regexp.Regexp {
	var out []*regexp.Regexp
	for _, l := range [][3]string{{logHead, logRow, ""}, {putHead, putRow, putTail}, {createHead, putRow, ""}, {deleteHead, "?", deleteTail}} {
		row := regexp.QuoteMeta(l[1])
		out = append(out, regexp.MustCompile("^"+regexp.QuoteMeta(l[0])+row+"(, "+row+")*"+regexp.QuoteMeta(l[2])+"$"))
	}
	return out
}()

// Separator is what the dialect puts between the statements of a
// multi-statement query.
const Separator = ";\n"
