// Package crash holds QuantyKube's crash test: concurrent writers through the
// real etcd client, kill -9 of the server at a random moment under load,
// restart on the same database, repeated, checking after every restart that
// nothing acknowledged was lost, that revisions never repeat and that a
// watcher resumes with neither a gap nor a duplicate. It runs on SQLite,
// PostgreSQL and MariaDB, each a test/framework target of quantykube processes
// (Options.Process) that Target.Kill sends SIGKILL.
//
// QUANTY_CRASH_ROUNDS (kills per backend, default 5) and QUANTY_CRASH_SEED
// repeat or lengthen a run by hand; .ci/run unsets both. The test is
// skipped with -short.
package crash
