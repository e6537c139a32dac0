package redlease

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by this package. Test for them with errors.Is: they are
// usually wrapped with the resource name, and joined with ctx.Err() or the
// Redis error that caused them.
var (
	// ErrNotAcquired means the lease was not taken: another owner holds it
	// (TryAcquire, see *BusyError), or the caller's context ended while
	// Acquire was waiting (then the error also matches ctx.Err()).
	ErrNotAcquired = errors.New("redlease: lease not acquired")

	// ErrLeaseLost means the lease is no longer ours, or may no longer be:
	// Redis said it expired or belongs to another owner, or no renewal was
	// confirmed before the local deadline. It is the context.Cause of a lease
	// context that ended for either reason. A holder that sees it must stop
	// and must not commit; only a fenced write is still safe.
	ErrLeaseLost = errors.New("redlease: lease lost")

	// ErrMaxHold is the context.Cause of a lease context that ended because
	// the lease reached its maximum hold time (WithMaxHold). The watchdog
	// stops renewing then, so unless released the lease expires in Redis at
	// most one TTL later.
	ErrMaxHold = errors.New("redlease: maximum hold time reached")

	// ErrReleased is the context.Cause of a lease context that ended because
	// Release was called, and the error of Refresh on a released lease.
	ErrReleased = errors.New("redlease: lease released")

	// ErrOutcomeUnknown means a request reached, or may have reached, Redis
	// but its reply did not come back (timeout, connection reset). The
	// operation may or may not have taken effect. It is always joined with
	// the network error that caused it.
	ErrOutcomeUnknown = errors.New("redlease: outcome unknown")

	// ErrNotReplicated means fewer replicas than WithReplicaAck asked for
	// acknowledged a new lease in time; the lease was released. It comes
	// joined with ErrNotAcquired.
	ErrNotReplicated = errors.New("redlease: lease not acknowledged by enough replicas")

	// ErrClientClosed is returned by the calls of a Client after Close,
	// before any round trip: the acquire calls, the admin calls (Inspect,
	// Scan, LastFence, AdvanceFence, Break) and an Election's Campaign and
	// Leader. Acquire calls that were waiting when Close was called return it
	// too.
	ErrClientClosed = errors.New("redlease: client closed")

	// ErrInvalidArgument is returned, before any round trip to Redis, for
	// input that cannot work: an empty resource, a nil client, a TTL below
	// 1 ms, a renew interval not below the lease's lifetime, and the like.
	ErrInvalidArgument = errors.New("redlease: invalid argument")

	// ErrStaleFence means a guard refused a write because its fence is older
	// than the newest the resource has accepted, or equal to it but presented
	// by another owner. The write did not happen. It is always carried by a
	// *StaleFenceError.
	ErrStaleFence = errors.New("redlease: stale fence")

	// ErrNoRowMatched means a fenced UPDATE of the per-row pattern (RowGuard)
	// changed no row and the fence was not the reason: the row is missing, or
	// its other conditions (its state) did not hold. The write did not happen.
	ErrNoRowMatched = errors.New("redlease: no row matched")
)

// BusyError is returned by TryAcquire when another owner holds the lease.
// It matches ErrNotAcquired with errors.Is.
type BusyError struct {
	Resource string
	// Remaining is how long the current holder's lease had left when Redis
	// answered, or -1 if the lease key has no expiry (it was not written by
	// redlease; an operator must remove it).
	Remaining time.Duration

	first bool // the acquirer is the first live waiter in the queue
	index int  // of Resource among the resources asked for
}

func (e *BusyError) Error() string {
	if e.Remaining == 0 {
		return fmt.Sprintf("redlease: %q is busy: its lease is about to expire, or earlier waiters come first (fair lease)", e.Resource)
	}
	if e.Remaining < 0 {
		return fmt.Sprintf("redlease: %q is held by another owner (lease key has no TTL)", e.Resource)
	}
	return fmt.Sprintf("redlease: %q is held by another owner for %v more", e.Resource, e.Remaining)
}

// Unwrap makes errors.Is(err, ErrNotAcquired) true.
func (e *BusyError) Unwrap() error { return ErrNotAcquired }

// StaleFenceError is returned by the guards when they refuse a write by the
// fencing rule: a write is accepted iff its fence is greater than the newest
// fence the resource has accepted, or equal to it and presented by the same
// owner. It matches ErrStaleFence with errors.Is.
//
// Newest above Client.LastFence means the fence counter went back (a Redis
// failover, a restart without persistence, a FLUSHALL): repair it with
// Client.AdvanceFence(ctx, resource, Newest), or every new holder is refused.
type StaleFenceError struct {
	// Resource names what refused the write: the guard's resource name, the
	// Redis data key, or the table row.
	Resource string
	Fence    int64  // the fence offered
	Owner    string // the owner token offered with it
	// Newest is the newest fence the resource has accepted, NewestOwner the
	// owner it was accepted from.
	Newest      int64
	NewestOwner string
}

func (e *StaleFenceError) Error() string {
	if e.Fence == e.Newest {
		from := ""
		if e.NewestOwner != "" && e.NewestOwner != e.Owner {
			from = " from another owner"
		}
		return fmt.Sprintf("redlease: stale fence %d for %q: it was already accepted%s", e.Fence, e.Resource, from)
	}
	return fmt.Sprintf("redlease: stale fence %d for %q: newest accepted is %d", e.Fence, e.Resource, e.Newest)
}

// Unwrap makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Unwrap() error { return ErrStaleFence }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
