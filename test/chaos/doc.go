// Package chaos is QuantyKube's fault suite, run by `make chaos` (its tests
// build with the chaos tag): each scenario runs the linearizability
// recorder of test/linearizability under load, injects its fault
// repeatedly, and after the last round checks the whole history (porcupine
// and the watch guarantees), that no acknowledged write is lost, and what
// the fault itself must leave intact:
//
//   - power cut: QuantyKube on SQLite on a lazyfs mount (test/lazyfs), killed
//     and its unsynced writes thrown away, 20 times; after each cut the
//     database passes PRAGMA integrity_check, and at the end History's log
//     is the watch's stream, revision for revision. The same run with
//     SQLite's synchronous=NORMAL (a switch only this test binary has) is
//     the negative control: it must lose acknowledged writes;
//   - kill -9 of QuantyKube on SQLite, and of one of two replicas on
//     PostgreSQL;
//   - PostgreSQL stopped hard (immediate) and started again, two replicas;
//   - PostgreSQL's primary crashed and its synchronous standby promoted,
//     two replicas on a two-host endpoint, three times: nothing
//     acknowledged is lost, and writes resume within 5 s of a promotion;
//   - the disk filling up under SQLite (a small tmpfs): writes fail with a
//     clear error, reads go on, the database stays whole, and writing
//     resumes once space returns;
//   - PostgreSQL connections reset mid-batch by a TCP proxy (toxiproxy);
//   - replication to object storage (TestReplicationDrill): the machine
//     lost under load and restored from the bucket, and power cuts while
//     replicating, with synchronous=NORMAL as the negative control.
//
// It prints one table (scenario, rounds, operations checked, acknowledged
// writes lost, violations), also written to $QUANTY_CHAOS_REPORT when set.
// The abuse tests (TestAbuse) measure QuantyKube and etcd side by side.
package chaos
