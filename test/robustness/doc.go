// Package robustness runs etcd's own robustness suite against a server it
// reaches by its endpoints: the traffic generators, the recording client
// and the validators of go.etcd.io/etcd/tests/v3/robustness at v3.6.16
// (traffic, client, model, validate), used unchanged. make chaos runs it
// on QuantyKube on every database, with and without faults, and on etcd
// (test/chaos, robustness_test.go, which starts the servers and injects
// the faults; ADR-037).
//
// etcd's validators need the requests the store persisted, in order.
// Upstream reads them from etcd's WAL; here Rebuild makes them from the
// store's own history, each revision matched to the client request that
// produced it (a revision no request explains is a failure). The history
// comes from History's Log of the whole key space on QuantyKube
// (HistoryChanges), and from a watch of the whole key space from the
// first revision on etcd (Recorder); on etcd the rebuilt list is also
// compared with the one etcd's WAL gives (CompareWithWAL).
//
// The suite itself runs as a test binary (drive_test.go, built with the
// chaos tag), since etcd's packages report through a *testing.T.
package robustness
