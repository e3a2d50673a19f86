package sqlite

// OwnStatements are the statements the dialect sends itself, beside the
// engine's (Statements) and the schema's (Migrations): the statement-list
// test's (statements_test.go).
var OwnStatements = []string{
	checkpointSQL, autoCheckpointOnSQL, autoCheckpointOffSQL,
	vacuumIntoSQL, integrityCheckSQL, describeSQL, revSQL, checkpointTruncateSQL,
	sizeSQL, defragmentSQL, tablesSQL,
}
