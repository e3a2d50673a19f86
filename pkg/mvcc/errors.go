package mvcc

import (
	"errors"
	"fmt"
)

// refusal is a request that etcd's rules turn down: nothing was written,
// and the same request against the same state is refused again. Every
// other error the store returns is a failure of the store itself (the
// database, a closed store), which the writer never confuses with a
// refusal: a refusal fails one request, a failure its whole batch.
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }

// Refused reports whether err is a refusal: one of the Err values below
// but ErrClosed.
func Refused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// The refusals, with etcd's texts; pkg/server maps each to etcd's exact
// gRPC error, which clients such as kube-apiserver match by text.
var (
	// A revision outside what the etcd API can read.
	ErrCompacted error = &refusal{"mvcc: required revision has been compacted"}
	ErrFutureRev error = &refusal{"mvcc: required revision is a future revision"}
	// ignore_value and ignore_lease with a value or lease of their own.
	ErrValueProvided, ErrLeaseProvided error = &refusal{"value is provided"}, &refusal{"lease is provided"}
	ErrEmptyKey                        error = &refusal{"key is not provided"}
	ErrInvalidSort                     error = &refusal{"invalid sort option"}
	ErrDuplicateKey                    error = &refusal{"duplicate key given in txn request"}
	ErrTooManyOps                      error = &refusal{"too many operations in txn request"}
	ErrKeyNotFound                     error = &refusal{"key not found"}
	ErrLeaseNotFound, ErrLeaseExists   error = &refusal{"requested lease not found"}, &refusal{"lease already exists"}
	ErrLeaseTTLTooBig                  error = &refusal{"too large lease TTL"}
	// A write that would grow the store past its quota, or any while the
	// NOSPACE alarm is active (quota.go).
	ErrNoSpace error = &refusal{"mvcc: database space exceeded"}
)

// ErrClosed is any request to a store that is closing or closed.
var ErrClosed = errors.New("store is closed")

// BelowFloorError is a watch that fell below the retention floor: the
// history it needs is gone, and etcd's answer is to cancel it with the
// compact revision.
type BelowFloorError struct{ Floor int64 }

func (e *BelowFloorError) Error() string {
	return fmt.Sprintf("history below revision %d has been pruned", e.Floor)
}

// OutOfRangeError is a History request outside what is retained: older
// than the retention floor, or in the future.
type OutOfRangeError struct{ Msg string }

func (e *OutOfRangeError) Error() string { return e.Msg }

// errCommitUnknown wraps a failed COMMIT whose outcome cannot be known (a
// connection to a database across the network broke during it, or SQLite's
// commit failed after writing): the batch may have committed, so its
// requests must not be retried.
type errCommitUnknown struct{ err error }

func (e *errCommitUnknown) Error() string {
	return "commit outcome unknown: " + e.err.Error()
}
func (e *errCommitUnknown) Unwrap() error { return e.err }
