package redlease

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease/internal/wire"
)

// How an acquire call that returns no leases ends: what it may have left in
// Redis (a queue entry, a lease taken by an attempt of unknown outcome) is
// released, and its error says why it stopped.

// giveUp ends an acquisition that will not return leases: it leaves the
// queues and releases any lease that an attempt of unknown outcome may have
// taken (see undo). cause is why it stops (nil when retries ran out);
// unknown, if not nil, the error that left an attempt's outcome unknown.
//
// Model: model/redlease.pml, inline again.
func (a *acquisition) giveUp(ctx context.Context, cause, unknown error) error {
	ended := unknown != nil && (errors.Is(unknown, context.DeadlineExceeded) || errors.Is(unknown, context.Canceled))
	if a.queued || unknown != nil {
		a.undo(ctx)
	}
	if ended && a.c.conn.MayArriveLate(unknown) {
		a.undoLate(ctx)
	}
	if ended {
		unknown = errorf("no reply before the context ended: %w", unknown)
	}
	switch {
	case unknown == nil:
		return notAcquired(a.resources[0], cause)
	case cause == nil:
		return a.unavailable(nil, errorf("%w: %w", ErrOutcomeUnknown, unknown))
	case errors.Is(cause, ErrUnavailable):
	case a.heard: // Redis answered an attempt: not unavailable, whatever the last did
		return notAcquired(a.resources[0], errorf("%w: %w: %w", cause, ErrOutcomeUnknown, unknown))
	default:
		cause = a.unavailable(cause, nil)
	}
	return errorf("%w: %w: %w", cause, ErrOutcomeUnknown, unknown)
}

// unavailable is the error of an acquire that Redis answered none of the
// requests of (ErrUnavailable): cause is why the acquire stops (its
// context's end, or nil for the last error alone), last the last request's
// error, if there was one.
func (a *acquisition) unavailable(cause, last error) error {
	where := ""
	if addr := a.c.conn.Addr(); addr != "" {
		where = " at " + addr
	}
	switch {
	case cause == nil:
		return errorf("%w%s: %s not acquired: %w", ErrUnavailable, where, quote(a.resources[0]), last)
	case last == nil:
		return errorf("%w%s: %s not acquired: %w", ErrUnavailable, where, quote(a.resources[0]), cause)
	}
	return errorf("%w%s: %s not acquired: %w (last attempt: %w)", ErrUnavailable, where, quote(a.resources[0]), cause, last)
}

// undo leaves the queues and releases any lease the owner token may hold
// (leave), bounded by the release timeout. It waits for that, so that the
// caller's next acquire does not find its own lease, unless ctx's deadline
// is nearer than the release timeout: then the release goes on in the
// background, and the acquire call returns on time.
func (a *acquisition) undo(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < a.cfg.releaseTimeout {
		a.c.background(ctx, a.cfg.releaseTimeout, func(ctx context.Context) { a.leave(ctx) })
		return
	}
	rctx, cancel := context.WithTimeout(detach(ctx), a.cfg.releaseTimeout)
	defer cancel()
	a.leave(rctx)
}

// undoLate releases what an attempt that its caller stopped waiting for
// takes if it reaches Redis after undo's release did: a client that is a
// driver.LateSender writes a request it has queued even after its caller
// gave up, and may write a later one first on another connection; so may
// the call that sends a combined batch, which the attempt left. The
// release is sent again, on a goroutine of the Client's, after each of
// lateUndoAfter, until one of them finds the owner's lease and deletes it
// (the attempt has reached Redis then), or the Client is closed (Close
// releases once more). So such a lease lasts until the next of those
// releases, not its TTL, if it is taken within the last of them: a request
// still held after that (a connection stuck for longer than rueidis's and
// valkey-go's default write timeout of 10 s) may keep its lease for the
// TTL.
func (a *acquisition) undoLate(ctx context.Context) {
	a.c.spawn(func() {
		for _, d := range lateUndoAfter {
			t := a.c.clk.NewTimer(d)
			closing := false
			select {
			case <-t.C():
			case <-a.c.closing:
				closing = true
			}
			t.Stop()
			rctx, cancel := context.WithTimeout(detach(ctx), a.cfg.releaseTimeout)
			deleted := a.leave(rctx)
			cancel()
			if deleted || closing {
				return
			}
		}
	})
}

// lateUndoAfter are the pauses before undoLate's releases: the first soon
// after the give-up, where a request that was still queued then is written
// in the next moments; the last past the clients' default write timeout.
var lateUndoAfter = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 11 * time.Second}

// leave runs the release script for the owner token on every resource: it
// deletes a lease the owner may hold and takes it out of the queue, waking
// the next waiter if the lease is free. It is best effort: the lease's TTL
// and the waiter timeout clean up after it.
//
// Model: model/redlease.pml, macro LEAVE.
func (a *acquisition) leave(ctx context.Context) (deleted bool) {
	for i := range a.resources {
		ok, err := wire.Done(a.c.conn.Run(ctx, releaseCallOf(a.kind, &a.names[i], a.sk, a.owner, a.member, "", a.c.conn.Sharded())))
		deleted = deleted || (err == nil && ok)
	}
	return deleted
}
