// Package history tests quantykube.History through its generated client
// (proto/historypb) against an in-process QuantyKube on SQLite, PostgreSQL
// and MariaDB (test/framework's QuantyKube backends, as subtests), with the
// etcd client beside it on the same socket: time travel by revision and by
// time, Restore seen by etcd watchers, Log paging, OUT_OF_RANGE at both
// edges, and retention pruning that keeps every state inside the window
// exact and raises the etcd API's floor. Tests that move time run the store
// on a test clock (Options.Config sets endpoint.Config.Now). cli_test.go
// runs the built quantykube binary's `history` commands against a server.
package history
