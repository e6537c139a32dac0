package redlease

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease/internal/wire"
)

// The life of a lease, under its mu:
//
//	active ──▶ lost      Redis said it is not ours (a renewal was refused)
//	       ──▶ lapsed    no renewal confirmed before the local deadline, max hold, or a handover
//	       ──▶ released  Release was called
//	       ──▶ discarded never handed out: its acquire call gave it back
//	       ──▶ handed off Handoff: it lives on in Redis, for a Resume elsewhere
//	lapsed ──▶ handed off (resume.go)
//
// The local deadline is the send time of the last confirmed acquire or renew
// plus the lease's local lifetime; a timer ends the context then, whether or
// not a renewal is stuck on the network (S3): the lease's own, or that of
// the deadline group of the watchdog batch that renewed it
// (deadline_group.go). Each transition
// ends the lease context once, with the cause, and takes the lease out of
// the watchdog's queue. Events are returned as pending and emitted by the
// caller once it has let go of the lease's locks, so that an observer may
// call the lease and the Client.
//
// Lock order: a lease's relMu, then its mu, then the watchdog's mu or the
// Client's mu.

type leaseState uint8

const (
	stateActive leaseState = iota
	stateLost
	stateLapsed
	stateReleased
	stateDiscarded
	stateHandedOff // Handoff (resume.go): Release and Close leave it in Redis
)

// newLease returns an active lease whose acquire request was just answered.
// Nobody else sees it until its acquire call has granted it (see
// acquisition.grant).
func (a *acquisition) newLease(ctx context.Context, i int, fence int64) *Lease {
	return a.c.newLease(ctx, a.cfg, a.resources[i], a.names[i], a.owner, fence, a.kind, a.sk, a.permit, a.permits)
}

// newLease returns an active lease of kind, not yet started, whose context
// has the values of ctx; sk are a shared lease's keys, permit and permits
// a semaphore permit's. (Client.Resume makes one without an acquisition.)
func (c *Client) newLease(ctx context.Context, cfg *config, resource string, keys wire.Keys, owner string, fence int64,
	kind leaseKind, sk *wire.SharedKeys, permit, permits int) *Lease {
	l := &Lease{
		c:        c,
		cfg:      cfg,
		resource: resource,
		keys:     keys,
		owner:    owner,
		fence:    fence,
		index:    -1,
	}
	if kind != kindExclusive {
		l.shared = &sharedLease{kind: kind, keys: sk}
		if kind == kindPermit {
			l.shared.permit, l.shared.permits, l.shared.permitArg = permit, permits, permitText(permit)
		}
	}
	l.ctx, l.cancel = context.WithCancelCause(detach(ctx))
	return l
}

// detach returns a context with the values of ctx but not its cancellation.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil { // never canceled: nothing to detach from
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// start sets the first local deadline from the send time of the acquire
// request. It reports false if that deadline has already passed.
//
// Model: model/redlease.pml, inline start.
func (l *Lease) start(sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired, l.confirmed = sent, sent
	if l.cfg.maxHold > 0 {
		l.holdUntil = sent.Add(l.cfg.maxHold)
	}
	l.deadline = l.capLocked(sent.Add(l.timing().lifetime()))
	left := l.deadline.Sub(l.c.clk.Now())
	if left <= 0 {
		return false
	}
	l.timer = l.c.clk.AfterFunc(left, l.onDeadline)
	return true
}

// onDeadline runs when the local deadline timer fires, and once more a TTL
// after the lease lapsed.
//
// Model: model/redlease.pml, proctype Timer, action deadline.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	var lost pending
	switch l.state {
	case stateActive:
		if l.group != nil { // stopped too late, when the lease joined a group that keeps its deadline
			break
		}
		if left := l.deadline.Sub(l.c.clk.Now()); left > 0 { // extended while this call waited for mu
			l.timer.Reset(left)
			break
		}
		lost = l.endLocked(stateLapsed, l.lapseCause())
	case stateLapsed:
		// Every renewal was sent before the lapse, so Redis has let the
		// lease expire by now: there is nothing left for Close to release.
		l.c.untrack(l)
	}
	l.mu.Unlock()
	lost.emit(context.Background()) // lease events carry the lease's own context
}

// capLocked limits a deadline to the maximum hold.
func (l *Lease) capLocked(d time.Time) time.Time {
	if !l.holdUntil.IsZero() && d.After(l.holdUntil) {
		return l.holdUntil
	}
	return d
}

// renewsUntil reports whether the watchdog should renew the lease at at: not
// at or after its maximum hold.
func (l *Lease) renewsUntil(at time.Time) bool {
	return l.holdUntil.IsZero() || at.Before(l.holdUntil)
}

func (l *Lease) lapseCause() error {
	if !l.holdUntil.IsZero() && !l.deadline.Before(l.holdUntil) {
		return errorf("%w: %s held for %v", ErrMaxHold, quote(l.resource), l.cfg.maxHold)
	}
	return errorf("%w: %s: no renewal confirmed before the local deadline", ErrLeaseLost, quote(l.resource))
}

// endLocked moves an active lease to its final state s and ends its
// context with cause. It returns the EventLost to emit, if s is a loss of a
// lease that was handed out.
//
// Model: model/redlease.pml, the state changes in Timer, Watchdog (renewed) and Client (release).
func (l *Lease) endLocked(s leaseState, cause error) pending {
	if l.state != stateActive {
		return pending{}
	}
	l.state = s
	l.cancel(cause)
	l.c.wd.unschedule(l)
	l.leaveGroupLocked()
	if s == stateLapsed && l.timer != nil {
		// Ended locally, but Redis may hold the lease for up to a TTL more:
		// until then Close still releases it, so that a process that shuts
		// down does not leave the resource blocked.
		l.timer.Reset(l.timing().ttl + l.timing().lockDelay)
	} else {
		l.untrackLocked()
	}
	if (s != stateLost && s != stateLapsed) || !l.out || len(l.cfg.observers) == 0 {
		return pending{}
	}
	now := l.c.clk.Now()
	outcome := OutcomeLost
	if s == stateLapsed {
		outcome = OutcomeExpired
		switch {
		case errors.Is(cause, ErrMaxHold):
			outcome = OutcomeMaxHold
		case errors.Is(cause, ErrHandover):
			outcome = OutcomeHandover
		}
	}
	return pending{cfg: l.cfg, ctx: l.ctx, e: Event{Kind: EventLost, Outcome: outcome, Resource: l.resource,
		Owner: l.owner, Fence: l.fence, Start: now, End: now, Held: now.Sub(l.acquired), Err: cause}}
}

// untrackLocked stops the lease's timer and takes it out of the set that
// Close releases: nothing of it is left for Close to do.
func (l *Lease) untrackLocked() {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.c.untrack(l)
}

// extendLocked moves the local deadline to a renewal's send time plus the
// local lifetime, if that is later; g, if not nil, is the deadline group of
// the watchdog batch that sent the renewal.
//
// Model: model/redlease.pml, proctype Watchdog, action renewed.
func (l *Lease) extendLocked(sent time.Time, g *deadlineGroup) {
	if sent.After(l.confirmed) {
		l.confirmed = sent
	}
	if d := l.capLocked(sent.Add(l.timing().lifetime())); d.After(l.deadline) {
		l.setDeadlineLocked(d, g)
	}
}

// timing is the configuration that the lease's TTL and the timings drawn
// from it come from: the acquire call's, or the last Extend's.
func (l *Lease) timing() *config {
	if tm := l.tm.Load(); tm != nil {
		return tm
	}
	return l.cfg
}

// retime makes tm the lease's timing, for a renewal sent at sent with its
// TTL, and returns the local deadline until that renewal is confirmed: the
// earlier of the deadline before and sent plus tm's lifetime, since Redis
// may apply the new TTL whether or not the reply comes back.
//
// Model: model/redlease.pml, proctype Watchdog, action extend.
func (l *Lease) retime(sent time.Time, tm *config) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tm.Store(tm)
	if d := l.capLocked(sent.Add(tm.lifetime())); d.Before(l.deadline) && l.state == stateActive {
		l.setDeadlineLocked(d, nil)
	}
	return l.deadline
}

// errorLocked is the error of an operation on a lease that has ended.
func (l *Lease) errorLocked() error {
	switch l.state {
	case stateReleased:
		return errorf("%s: %w", quote(l.resource), ErrReleased)
	case stateHandedOff: // whatever ended its context here
		return errorf("%s: %w", quote(l.resource), ErrHandedOff)
	}
	return context.Cause(l.ctx)
}

// activeErr returns nil for an active lease, else the error of an
// operation on it.
func (l *Lease) activeErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateActive {
		return l.errorLocked()
	}
	return nil
}

// beginRenewal takes l.renewing for the watchdog's renewal sent at sent, if
// it is free and the lease is active and before its local deadline: then it
// returns that deadline and true. busy reports that a Refresh or Extend
// holds it.
func (l *Lease) beginRenewal(sent time.Time) (deadline time.Time, ok, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewing {
		return time.Time{}, false, true
	}
	if l.state != stateActive || !sent.Before(l.deadline) {
		return time.Time{}, false, false
	}
	l.renewing = true
	return l.deadline, true, false
}

// liveUntil returns the local deadline of an active lease, and false for a
// lease that has ended.
func (l *Lease) liveUntil() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.state == stateActive
}

// renewed records the outcome of a renew request sent at sent, whose reply
// is n (see refresh.lua): nil if the lease was extended (its local deadline
// is then sent + lifetime), an error matching ErrLeaseLost if Redis said it
// is not ours, or ErrHandover if a term's handover refused it (the context
// is then ended), the lease's error if it had ended meanwhile, or the
// request error.
// It returns the events to emit: the renewal's, and a loss.
//
// Model: model/redlease.pml, proctype Watchdog, action renewed.
func (l *Lease) renewed(sent time.Time, n int64, err error) (events [2]pending, rerr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedLocked(sent, n, err, nil)
}

// renewedEnding is renewed and then endRenewal, in one hold of the lease's
// lock instead of two: the end of a watchdog's renewal, whose batch's
// deadline group is g.
func (l *Lease) renewedEnding(sent time.Time, n int64, err error, g *deadlineGroup) (events [2]pending, rerr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.endRenewalLocked()
	return l.renewedLocked(sent, n, err, g)
}

func (l *Lease) renewedLocked(sent time.Time, n int64, err error, g *deadlineGroup) (events [2]pending, rerr error) {
	if len(l.cfg.observers) > 0 && l.state == stateActive {
		defer func() {
			events[0] = pending{cfg: l.cfg, ctx: l.ctx, e: Event{Kind: EventRenew, Outcome: outcomeOf(rerr),
				Resource: l.resource, Owner: l.owner, Fence: l.fence, Start: sent, End: l.c.clk.Now(), Err: rerr}}
		}()
	}
	switch {
	case l.state != stateActive:
		return events, l.errorLocked()
	case err != nil:
		return events, requestError("renew", l.resource, l.c.conn.Classify(err), err)
	case n == wire.Handed:
		// Redis still holds the term, unrenewed: Release frees it, and so
		// does Close until its TTL has run out.
		events[1] = l.endLocked(stateLapsed, errorf("%w: election %s: another campaigner is to lead (Election.Handover)",
			ErrHandover, quote(l.resource)))
		return events, l.errorLocked()
	case n != 1:
		events[1] = l.endLocked(stateLost, errorf("%w: %s expired or was taken by another owner", ErrLeaseLost, quote(l.resource)))
		return events, l.errorLocked()
	}
	l.extendLocked(sent, g)
	return events, nil
}

// discard ends a lease that its acquire call does not hand out, without
// telling the observers of a loss: the caller never had it.
func (l *Lease) discard(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateLapsed { // while the acquire call was drawing its fence
		l.untrackLocked()
		return
	}
	l.endLocked(stateDiscarded, cause)
}

// handOut marks an active lease as handed out, from when on the observers
// hear of its end; it returns the cause of its end if it has already ended.
func (l *Lease) handOut() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateActive {
		return context.Cause(l.ctx)
	}
	l.out = true
	return nil
}

// takeBack undoes handOut for a lease that its acquire call gives back after
// all, because another of its leases had ended.
func (l *Lease) takeBack() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = false
}

// lastConfirmed returns the send time of the last confirmed acquire or
// renew of the lease, and whether the lease is still active.
func (l *Lease) lastConfirmed() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.confirmed, l.state == stateActive
}
