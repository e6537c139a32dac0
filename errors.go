package redlease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/shared"
	"github.com/redlease/redlease/internal/wire"
)

// Errors returned by this package. Test for them with errors.Is: they are
// usually wrapped with the resource name, and joined with ctx.Err() or the
// Redis error that caused them.
var (
	// ErrNotAcquired means the lease was not taken because another owner
	// holds it: TryAcquire's *BusyError, or the end of the caller's context
	// (or of WithMaxWait) while Acquire waited for the holder (then the
	// error also matches ctx.Err()). It also comes with ErrNotReplicated,
	// and with ErrClientClosed for an acquire that Close interrupted. It
	// never means that Redis could not be asked: that is ErrUnavailable.
	ErrNotAcquired = errors.New("redlease: lease not acquired")

	// ErrUnavailable means Redis could not be reached, or answered none of
	// an acquire's requests: TryAcquire's request was not sent (a refused
	// or unresolvable address, no connection), or an Acquire rode out an
	// outage longer than WithMaxOutage allows, or its context ended during
	// one (then the error also matches ctx.Err()). The message names the
	// address, when the client says it, and the last request's error, which
	// the error matches too (syscall.ECONNREFUSED, say). An acquire whose
	// reply was lost matches ErrOutcomeUnknown as well; the lease it may
	// have taken was released by owner. It does not match ErrNotAcquired:
	// nobody is known to hold the lease.
	ErrUnavailable = errors.New("redlease: Redis unavailable")

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

	// ErrHandover is the context.Cause of an election term's context that
	// ended because Election.Handover asked its leader to step down for
	// another campaigner: the term's renewal found the handover and was not
	// renewed. Release (or Resign) frees the name at once; otherwise the
	// term's lease expires in Redis within a TTL. It is not a loss: the term
	// was still this process's until its context ended.
	ErrHandover = errors.New("redlease: term handed over")

	// ErrReleased is the context.Cause of a lease context that ended because
	// Release was called, and the error of Refresh on a released lease.
	ErrReleased = errors.New("redlease: lease released")

	// ErrHandedOff is the context.Cause of a lease context that ended
	// because Lease.Handoff passed the lease on to another process, and the
	// error of Refresh, Release and Handoff on that Lease: the lease lives
	// on in Redis, for the process that resumes it (Client.Resume).
	ErrHandedOff = errors.New("redlease: lease handed off")

	// ErrOutcomeUnknown means a request reached, or may have reached, Redis
	// but its reply did not come back (timeout, connection reset). The
	// operation may or may not have taken effect. It is always joined with
	// the network error that caused it. A request that could not be sent
	// (a refused connection) is not of unknown outcome.
	ErrOutcomeUnknown = errors.New("redlease: outcome unknown")

	// ErrNotReplicated means fewer replicas than WithReplicaAck asked for
	// acknowledged a new lease in time; the lease was released. It comes
	// joined with ErrNotAcquired.
	ErrNotReplicated = errors.New("redlease: lease not acknowledged by enough replicas")

	// ErrClientClosed is returned by the calls of a Client after Close,
	// before any round trip: the acquire calls, the admin calls (Inspect,
	// Scan, LastFence, AdvanceFence, Break) and an Election's Campaign,
	// Leader and Run. Acquire calls that were waiting when Close was called
	// return it too.
	ErrClientClosed = errors.New("redlease: client closed")

	// ErrInvalidArgument is returned, before any round trip to Redis, for
	// input that cannot work: an empty resource, a nil client, a TTL below
	// 1 ms, a renew interval not below the lease's lifetime, and the like.
	// The guards of package fencing return it too.
	ErrInvalidArgument = errors.New("redlease: invalid argument")

	// ErrNoLeader is returned by Election.Leader when nobody leads.
	ErrNoLeader = errors.New("redlease: no leader")

	// ErrUnhealthy is returned by Election.Healthy (and shown by its
	// HealthHandler) when this process leads but its term's renewal is
	// overdue by more than it allows: Redis has not confirmed the term for
	// a while, and the term may be about to end. The message names the
	// election and says how late the renewal is.
	ErrUnhealthy = errors.New("redlease: election unhealthy")

	// ErrWrongKind means an acquire asked for a kind of lease (exclusive,
	// semaphore, read/write) on a name that another kind holds or waits
	// for: one name is one kind's at a time, enforced by Redis in the same
	// step as the acquire. The message names both kinds. A name is free for
	// another kind once the leases and waiters of its kind are gone.
	ErrWrongKind = errors.New("redlease: wrong kind of lease for this name")

	// ErrStaleFence means a fence is not that of a lease that holds its
	// resource now: Client.CheckFence found none with it, or a guard of
	// package fencing refused a write with it (fencing.ErrStaleFence is
	// this error).
	ErrStaleFence = errors.New("redlease: stale fence")
)

// errNoAnswer means that Redis did not answer whether it can be reached
// before the acquire call's context ended; nothing of the acquire was sent.
var errNoAnswer = errors.New("redlease: Redis did not answer in time")

// BusyError is returned by TryAcquire when another owner holds the lease.
// It matches ErrNotAcquired with errors.Is.
type BusyError struct {
	Resource string
	// Remaining is how long the current holder's lease had left when Redis
	// answered, or -1 if the lease key has no expiry (it was not written by
	// redlease; an operator must remove it). A holder that renews its lease
	// keeps it longer.
	Remaining time.Duration
	// Holder is the holder's description (WithHolder), "" if it has none.
	Holder string

	first bool           // the acquirer is the first live waiter in the queue
	index int            // of Resource among the resources asked for
	why   wire.BusyCause // what a shared lease waits for
}

func (e *BusyError) Error() string {
	r := quote(e.Resource)
	by := "another owner"
	if e.Holder != "" {
		by += " (" + printable(shared.Cut(e.Holder)) + ")"
	}
	switch {
	case e.why == wire.BusyPermits:
		return fmt.Sprintf("redlease: every permit of %s is held; the first lapses in %v unless its holder renews it", r, e.Remaining)
	case e.why == wire.BusyReaders:
		return fmt.Sprintf("redlease: %s has readers; the last read lease lapses in %v unless renewed", r, e.Remaining)
	case e.why == wire.BusyWriter:
		return "redlease: " + r + " has a writer waiting, and writers go first"
	case e.Remaining == 0:
		return "redlease: " + r + " is busy: its lease is about to expire, or earlier waiters come first (fair lease)"
	case e.Remaining < 0:
		return "redlease: " + r + " is held by " + by + " (lease key has no TTL)"
	}
	return fmt.Sprintf("redlease: %s is held by %s; its lease lapses in %v unless the holder renews it",
		r, by, e.Remaining)
}

// Unwrap makes errors.Is(err, ErrNotAcquired) true.
func (e *BusyError) Unwrap() error { return ErrNotAcquired }

// printable is s with its control characters escaped, so that a holder's
// description cannot break a message into lines.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// quote shows a resource name in a message, cut to a bounded length.
func quote(resource string) string { return shared.Quote(resource) }

// errorf formats as fmt.Errorf does and says "redlease:" once (see
// shared.Errorf).
func errorf(format string, args ...any) error { return shared.Errorf(format, args...) }

func invalidf(format string, args ...any) error {
	return errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// notAcquired is the error of an acquire of resource that ended with err.
func notAcquired(resource string, err error) error {
	if errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrWrongKind) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return errorf("%w: %s: %w", ErrNotAcquired, quote(resource), err)
}

// requestError describes the failed request op on resource; class is what
// the driver made of its error.
func requestError(op, resource string, class driver.ErrorClass, err error) error {
	if class == driver.Unknown {
		return errorf("%s %s: %w: %w", op, quote(resource), ErrOutcomeUnknown, err)
	}
	return errorf("%s %s: %w", op, quote(resource), err)
}
