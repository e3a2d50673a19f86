package mvcc

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// refusals is every refusal the store gives.
var refusals = []error{
	ErrCompacted, ErrFutureRev, ErrValueProvided, ErrLeaseProvided, ErrEmptyKey, ErrInvalidSort,
	ErrDuplicateKey, ErrTooManyOps, ErrKeyNotFound, ErrLeaseNotFound, ErrLeaseExists, ErrLeaseTTLTooBig,
}

func TestRefused(t *testing.T) {
	for _, err := range refusals {
		if !Refused(err) {
			t.Errorf("Refused(%v) = false", err)
		}
		if wrapped := fmt.Errorf("txn: %w", err); !Refused(wrapped) {
			t.Errorf("Refused(%v) = false", wrapped)
		}
	}
	// Failures of the store, and answers that are not etcd refusals.
	for _, err := range []error{
		nil,
		ErrClosed,
		fmt.Errorf("write: %w", ErrClosed),
		errors.New("database is locked"),
		&errCommitUnknown{errors.New("connection reset")},
		&BelowFloorError{Floor: 5},
		&OutOfRangeError{Msg: "revision 3 is older than the oldest retained revision 5"},
		context.Canceled,
		context.DeadlineExceeded,
	} {
		if Refused(err) {
			t.Errorf("Refused(%v) = true", err)
		}
	}
}
