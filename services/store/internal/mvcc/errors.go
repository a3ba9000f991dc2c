package mvcc

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the server maps them to gRPC
// codes in one table.
var (
	// ErrCompacted is wrapped by *CompactedError: the revision asked for has
	// been compacted.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev is wrapped by *FutureRevError: the revision asked for is
	// above the current revision.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrInvalidArgument is wrapped by every error caused by a malformed
	// request.
	ErrInvalidArgument = errors.New("mvcc: invalid argument")

	// ErrEmptyKey: a key is empty.
	ErrEmptyKey = fmt.Errorf("%w: key is empty", ErrInvalidArgument)
	// ErrInvalidRange: range_end is neither empty, "\x00" nor above key.
	ErrInvalidRange = fmt.Errorf("%w: range_end must be empty, \"\\x00\" or greater than key", ErrInvalidArgument)
	// ErrDuplicateKey: a transaction writes the same key twice.
	ErrDuplicateKey = fmt.Errorf("%w: duplicate key given in txn request", ErrInvalidArgument)
	// ErrInvalidCompare: a compare has no valid result or target, or its
	// operand does not match its target.
	ErrInvalidCompare = fmt.Errorf("%w: invalid compare", ErrInvalidArgument)
	// ErrInvalidOp: a request op is empty or has a negative field.
	ErrInvalidOp = fmt.Errorf("%w: invalid request op", ErrInvalidArgument)
	// ErrValueTooLarge: a value exceeds the configured limit (checked at the
	// API boundary, never while applying, because limits are per node).
	ErrValueTooLarge = fmt.Errorf("%w: value is too large", ErrInvalidArgument)
	// ErrRequestTooLarge: a request exceeds the configured size limit.
	ErrRequestTooLarge = fmt.Errorf("%w: request is too large", ErrInvalidArgument)
	// ErrLeaseNotFound: a put, revoke or renewal names a lease that does
	// not exist.
	ErrLeaseNotFound = errors.New("mvcc: requested lease not found")
	// ErrLeaseExists: a grant names a lease id already in use.
	ErrLeaseExists = errors.New("mvcc: lease already exists")
	// ErrCorrupt: stored bytes do not decode.
	ErrCorrupt = errors.New("mvcc: corrupt stored data")
	// ErrIncompleteRestore: a snapshot restore was interrupted; the state
	// must be restored again from the raft snapshot before use.
	ErrIncompleteRestore = errors.New("mvcc: snapshot restore was interrupted")
)

// CompactedError reports a read or watch below the compacted revision.
type CompactedError struct {
	// CompactRev is the compacted revision (the lowest readable one).
	CompactRev int64
	// Requested is the revision that was asked for.
	Requested int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v (requested %d, compacted %d)", ErrCompacted, e.Requested, e.CompactRev)
}

// Unwrap makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Unwrap() error { return ErrCompacted }

// FutureRevError reports a read at a revision the store has not reached.
type FutureRevError struct {
	// CurrentRev is the store's current revision.
	CurrentRev int64
	// Requested is the revision that was asked for.
	Requested int64
}

func (e *FutureRevError) Error() string {
	return fmt.Sprintf("%v (requested %d, current %d)", ErrFutureRev, e.Requested, e.CurrentRev)
}

// Unwrap makes errors.Is(err, ErrFutureRev) hold.
func (e *FutureRevError) Unwrap() error { return ErrFutureRev }

// checkRev validates a read revision (0 = current) and returns the revision
// to read at.
func checkRev(rev, current, compacted int64) (int64, error) {
	switch {
	case rev < 0:
		return 0, fmt.Errorf("%w: negative revision %d", ErrInvalidArgument, rev)
	case rev == 0:
		return current, nil
	case rev > current:
		return 0, &FutureRevError{CurrentRev: current, Requested: rev}
	case rev < compacted:
		return 0, &CompactedError{CompactRev: compacted, Requested: rev}
	}
	return rev, nil
}
