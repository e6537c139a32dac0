package redlease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/wire"
)

// Lease is a lease held on one resource. Its methods are safe for concurrent
// use. A Lease must not be copied.
type Lease struct {
	c        *Client
	cfg      *config                // shared; never modified
	tm       atomic.Pointer[config] // after an Extend, cfg with the new TTL; see timing
	resource string
	keys     wire.Keys
	owner    string
	fence    int64        // set before the lease is handed out; then read-only
	shared   *sharedLease // nil for an exclusive lease
	ctx      context.Context
	cancel   context.CancelCauseFunc

	// The lease's state (lifecycle.go).
	mu        sync.Mutex
	state     leaseState
	out       bool      // handed out by its acquire call; only then are observers told of it
	acquired  time.Time // send time of the acquire request
	confirmed time.Time // send time of the last confirmed acquire or renew
	deadline  time.Time // local deadline, with a monotonic reading
	holdUntil time.Time // WithMaxHold's limit; zero if none
	timer     clock.Timer
	group     *deadlineGroup // keeps the deadline instead of timer, if not nil (deadline_group.go)

	// renewing lets one renew request of the lease be on its way at a time
	// (a semaphore: takeRenewal, or the watchdog's beginRenewal, takes it,
	// endRenewal gives it back), so that Redis applies their TTLs in the
	// order the local deadline assumes: with Extend, two renewals may ask
	// for different TTLs. A flag under mu rather than a channel, as the
	// watchdog takes it with the lease's other state: one lock per renewal,
	// and no channel per lease. renewFree is made by a Refresh or Extend
	// that waits for it, and closed when it is given back.
	renewing  bool
	renewFree chan struct{}

	// Guarded by c.wd.mu (watchdog.go).
	index int  // in the watchdog's queue; -1 when not queued
	ended bool // never queue again

	// Release's own state, under relMu.
	relMu    sync.Mutex // serialises Release
	relBegun bool       // Release was called
	quiet    bool       // not handed out when Release began: no event
	overran  bool       // the lease had ended before the first Release call
	relDone  bool       // a Release reached a verdict
	relErr   error      // that verdict
}

// Resource returns the resource name the lease was taken on.
func (l *Lease) Resource() string {
	if l == nil {
		return ""
	}
	return l.resource
}

// Owner returns the lease's ownership token: a UUID (v4), unique to this
// acquisition, whose first 8 hex digits are its Client's id (random per
// Client; Break tells the holder's Client by it) and whose other 90 bits are
// random. Renew and release act only while Redis stores this token.
func (l *Lease) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Fence returns the lease's fencing token, > 0. On one Redis that neither
// fails over nor restarts without persistence, each new holder of a resource
// gets a larger fence than every earlier holder. Pass it with every write to
// the protected resource and let the resource reject a fence older than the
// newest it accepted (package fencing): that, not the lease, is what stops a
// holder that paused past its TTL.
func (l *Lease) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Holder returns the lease's holder description (WithHolder; for an
// election's term, the value it campaigned with).
func (l *Lease) Holder() string {
	if l == nil {
		return ""
	}
	return l.cfg.holder
}

// Context returns a context that is done once the lease is lost, is about to
// lapse without a confirmed renewal, reached its maximum hold, or was
// released or handed off. context.Cause tells which: ErrLeaseLost (wrapped
// with the reason), ErrReleased or ErrHandedOff. It carries the values of
// the acquire call's context. Do the protected work under this context, and
// check it between steps that cannot be undone.
func (l *Lease) Context() context.Context {
	if l == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(invalidf("nil Lease"))
		return ctx
	}
	return l.ctx
}

// Deadline returns the local deadline of the lease: the monotonic-clock
// moment at which its context ends unless a renewal is confirmed first. It is
// the send time of the last confirmed acquire or renew plus the local lifetime
// (TTL less the drift allowance and the safety margin).
func (l *Lease) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Refresh renews the lease to its full TTL, only while Redis still stores our
// owner token (compare-and-renew). On success the local deadline moves to the
// send time of this request plus the local lifetime. If the lease is no longer
// ours, Refresh returns an error matching ErrLeaseLost and ends the lease
// context. If the lease has already ended it returns that end's error without
// a round trip: a lost lease is never renewed. A request error (matching
// ErrOutcomeUnknown when the request may have been executed) leaves the lease
// as it was; the local deadline still applies.
//
// Model: model/redlease.pml, proctype Watchdog (actions renew, send, renewed).
func (l *Lease) Refresh(ctx context.Context) error {
	if l == nil {
		return invalidf("nil Lease")
	}
	return l.renewTaking(ctx, nil)
}

// Extend renews the lease for ttl, which from now on is its TTL: the period
// that this renewal starts lasts ttl, and so does each later one, by the
// watchdog (at ttl/3, or the WithRenewInterval interval) or Refresh. The
// lease is then as if it had been taken WithTTL(ttl) with its other
// options: ttl must be valid with them (an explicit WithSafetyMargin or
// WithRenewInterval must still leave room), or Extend returns an error
// matching ErrInvalidArgument and changes nothing. ttl may be shorter than
// the TTL before. It works for every kind of lease, and WithMaxHold still
// bounds the whole hold.
//
// The local deadline follows the new TTL: on success it is the send time of
// this request plus the new local lifetime, earlier than before if ttl is
// shorter. If the request fails, Redis may or may not have applied ttl, so
// the local deadline is the earlier of the two, and the lease keeps the new
// TTL: the context still ends before Redis could hand the lease on. Errors
// are those of Refresh: ErrLeaseLost ends the lease; a request error
// (ErrOutcomeUnknown if the renewal may have run) leaves it to its local
// deadline and to the watchdog, which renews with the new TTL.
//
// Model: model/redlease.pml, proctype Watchdog (actions extend, send, renewed).
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return invalidf("nil Lease")
	}
	tm := *l.cfg // the options of the acquire call, with the new TTL
	tm.ttl = ttl
	if err := tm.validate(); err != nil {
		return err
	}
	return l.renewTaking(ctx, &tm)
}

// renewTaking is renew, once the watchdog's renewal of the lease, or
// another Refresh or Extend, is done with it, or ctx ends first.
func (l *Lease) renewTaking(ctx context.Context, tm *config) error {
	if err := l.takeRenewal(ctx); err != nil {
		return err
	}
	defer l.endRenewal()
	return l.renew(ctx, tm)
}

// takeRenewal takes l.renewing, waiting for it until ctx ends.
func (l *Lease) takeRenewal(ctx context.Context) error {
	for {
		l.mu.Lock()
		if !l.renewing {
			l.renewing = true
			l.mu.Unlock()
			return nil
		}
		if l.renewFree == nil {
			l.renewFree = make(chan struct{})
		}
		free := l.renewFree
		l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return errorf("renew %s: %w", quote(l.resource), context.Cause(ctx))
		}
	}
}

// endRenewal gives l.renewing back.
func (l *Lease) endRenewal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endRenewalLocked()
}

func (l *Lease) endRenewalLocked() {
	l.renewing = false
	if l.renewFree != nil {
		close(l.renewFree)
		l.renewFree = nil
	}
}

// renew sends one compare-and-renew of the lease (l.renewing taken): with the
// TTL of tm from now on, if tm is not nil.
//
// Model: model/redlease.pml, proctype Watchdog (actions renew, send, renewed).
func (l *Lease) renew(ctx context.Context, tm *config) error {
	sent := l.c.clk.Now() // before the check, as in the watchdog (S4)
	deadline, live := l.liveUntil()
	if !live {
		return l.activeErr()
	}
	if tm != nil {
		if deadline = l.retime(sent, tm); !deadline.After(l.c.clk.Now()) {
			return l.activeErr() // the new, shorter lifetime has already run out
		}
	}
	// As in the watchdog: no request (nor a client library's retry of one)
	// is sent once the lease has ended locally, so a renewal never extends
	// in Redis a lease whose holder has been told it is lost.
	rctx, cancel := context.WithTimeout(ctx, deadline.Sub(l.c.clk.Now()))
	defer cancel()
	n, err := wire.Int(l.c.conn.Run(rctx, l.refreshCall()))
	events, err := l.renewed(sent, n, err)
	for _, p := range events {
		p.emit(ctx)
	}
	if err != nil {
		return err
	}
	// The watchdog may have given up on the lease (its renewals failed until
	// the deadline was near), or renews it at another interval now: it
	// renews again from here.
	if next := sent.Add(l.timing().interval()); l.cfg.autoRenew && l.renewsUntil(next) {
		l.c.wd.schedule(l, next)
	}
	return nil
}

// Release ends the lease: it ends the lease context with cause ErrReleased,
// stops the watchdog, and deletes the lease in Redis only if it is still ours
// (compare-and-delete). It never touches the fence counter.
//
// Release ignores the cancellation of ctx (it is often the lease's own
// context, ended by the time a deferred Release runs) but keeps its values,
// and is bounded by the release timeout instead.
//
// It returns nil if it deleted our lease, and an error matching ErrLeaseLost
// if the lease had expired or belonged to another owner by then: a sign that
// the TTL is too short for the work. A request error is returned as is (matching
// ErrOutcomeUnknown when the delete may have happened); the lease may still
// exist until its TTL, and Release may be called again to retry. A retry
// that finds an earlier attempt's delete done returns nil: Redis keeps the
// deleted lease under <prefix>{R}:released for the time it had left, until
// the next holder's release replaces it. A retry later than that returns
// ErrLeaseLost.
//
// After Handoff, Release returns an error matching ErrHandedOff without a
// round trip: the lease is another process's to release.
//
// Once a Release has reached a verdict (nil or ErrLeaseLost), later calls
// return the same verdict without a round trip, so an explicit Release and a
// deferred one can both be written.
//
// Model: model/redlease.pml, proctype Client, label release.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return invalidf("nil Lease")
	}
	ev, err := l.release(ctx)
	ev.emit(ctx) // after relMu: an observer may call the lease
	return err
}

// release is Release, holding relMu; it returns the event to emit.
func (l *Lease) release(ctx context.Context) (pending, error) {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.relDone {
		return pending{}, l.relErr
	}
	var start time.Time // for the observers only
	if len(l.cfg.observers) > 0 {
		start = l.c.clk.Now()
	}
	if !l.beginRelease() {
		return l.releaseEvent(start, l.relErr), l.relErr
	}
	rctx, cancel := context.WithTimeout(detach(ctx), l.cfg.releaseTimeout)
	defer cancel()
	// The acquire script took the owner out of the queue when it granted the
	// lease: a holder is never queued.
	deleted, err := wire.Done(l.c.conn.Run(rctx, l.releaseCall("")))
	return l.endRelease(start, deleted, err)
}

// beginRelease ends the lease locally for a Release (l.relMu held). It
// reports whether Redis is still to be asked; if not, relErr is the verdict.
//
// Model: model/redlease.pml, proctype Client, label release.
func (l *Lease) beginRelease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.relBegun {
		l.relBegun, l.overran, l.quiet = true, l.state != stateActive, !l.out
	}
	switch l.state {
	case stateLost, stateHandedOff: // Redis already said it is not ours; or it is another process's
		l.relDone, l.relErr = true, l.errorLocked()
		return false
	case stateLapsed: // Close need not release it any more
		l.untrackLocked()
	}
	l.endLocked(stateReleased, ErrReleased) // no event: Release reports
	return true
}

// endRelease records the outcome of a release request (l.relMu held) and
// returns the event that reports it.
//
// Model: model/redlease.pml, proctype Client, label releasing.
func (l *Lease) endRelease(start time.Time, deleted bool, err error) (pending, error) {
	if err != nil {
		err = requestError("release", l.resource, l.c.conn.Classify(err), err)
	} else {
		l.relDone = true
		if !deleted {
			l.relErr = errorf("%w: %s had expired or was taken by another owner before release", ErrLeaseLost, quote(l.resource))
		}
		err = l.relErr
	}
	return l.releaseEvent(start, err), err
}

// releaseEvent is the EventRelease of a Release that ended with err.
func (l *Lease) releaseEvent(start time.Time, err error) pending {
	if len(l.cfg.observers) == 0 || l.quiet {
		return pending{}
	}
	now := l.c.clk.Now()
	return pending{cfg: l.cfg, e: Event{Kind: EventRelease, Outcome: outcomeOf(err), Resource: l.resource,
		Owner: l.owner, Fence: l.fence, Start: start, End: now, Held: now.Sub(l.acquired),
		Overran: l.overran, Err: err}}
}
