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

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
