package postgres

import "time"

// SetProbeTimeout shortens the LISTEN probe's wait for a test; the
// returned function restores it.
func SetProbeTimeout(d time.Duration) func() {
	old := probeTimeout
	probeTimeout = d
	return func() { probeTimeout = old }
}

// OwnStatements are the statements the dialect sends itself, beside the
// engine's (Statements) and the schema's (Migrations), with no statement
// timeout set: the statement-list test's (statements_test.go).
var OwnStatements = func() []string {
	own := []string{
		lockBatchSQL, lockedStateSQL, writeBatchSQL, backendPIDSQL, beginSQL, commitSQL, rollbackSQL,
		leasesSQL, renewLeaseSQL, leaseExpiredSQL, startLeasesSQL,
		migrateLockSQL, serveLockSharedSQL, serveLockImportSQL, serveLockHoldSQL, hasMetaSQL,
		serverRowDeleteSQL, serverRowUpsertSQL, serverRowsPruneUpsertSQL, serverRowsLiveSQL, serverAppliedUpsertSQL,
		notifySQL, probeNotifySQL, listenSQL(channel), sizeSQL, defragmentSQL, tablesSQL,
	}
	for _, q := range newBeginStatements(0) {
		own = append(own, q)
	}
	return own
}()
