// Package linearizability records concurrent histories of etcd client
// operations (Put, Get, Range with count and limit, Delete, DeleteRange of
// a prefix, and Txn comparing a key's mod_revision or value), watches of
// every endpoint alongside, and judges them: linearizability with
// porcupine against a model of etcd's key-value store and its single
// revision counter, and etcd's watch guarantees (ordered, no duplicate, no
// gap, one response per revision, prev_kv right, progress never ahead of
// what was delivered, the same events on every replica), all on the same
// history.
//
// Writes whose outcome the client never learnt (a timeout, a killed
// server) are resolved with the watch before porcupine runs: every put
// writes a value of its own, so the watch shows whether and at which
// revision it took effect; a revision of deletes no acknowledged write
// took goes to the earliest unknown delete that could have made it. The
// chaos suite (test/chaos) runs the same recorder and checks under faults.
package linearizability
