package redlease

import (
	"context"
	"time"

	"github.com/redlease/redlease/internal/wire"
)

// Passing a lease between processes: a holder hands it off (Lease.Token,
// Handoff), another process takes it up (Client.Resume). The lease stays
// the same lease in Redis, with the same owner token and fence; only the
// process that renews it changes.

// Resume takes up, in this process, the lease that t names: a lease taken
// by another process (or another Client) and passed on by its token, as a
// parent passes its lease to the child it starts (see Lease.Handoff). In
// one script and one round trip, Redis checks that t's owner still holds
// the lease with t's fence, and renews it to t.TTL; the lease never goes
// unrenewed between the check and the renewal. The Lease returned is as
// one that Acquire returned: its local deadline counts from the send time
// of that request, the watchdog renews it (unless WithAutoRenew(false)),
// and Refresh, Release, Handoff and Client.Close work on it. Its fence,
// owner and resource are t's, its holder description the one Redis keeps
// for the lease, and its context has the values of ctx but not its
// cancellation.
//
// If the lease has expired, was released or broken, or is another owner's
// (or another fence's), Resume returns an error matching ErrLeaseLost and
// changes nothing in Redis. So does a Client whose key prefix is not the one
// the lease was taken with: the prefix does not travel in the token. A
// malformed token returns an error matching ErrInvalidArgument, before any
// round trip, and so does a semaphore permit's token that names another
// number of permits than the semaphore has. A request error is returned as
// Refresh returns it (matching ErrOutcomeUnknown when the renewal may have
// happened); Resume may be called again, as taking up a lease twice is no
// different from taking it up once.
//
// Of opts, those that shape a held lease apply: WithAutoRenew,
// WithRenewInterval, WithSafetyMargin, WithReleaseTimeout, WithMaxHold
// (counted from this call) and WithPrefix. The others do not: the TTL is
// t.TTL, whatever WithTTL says (every process that holds the lease renews it
// to the same TTL); the lease keeps the holder description Redis has
// (WithHolder); and WithFair, WithReplicaAck and WithFenceSource concern
// taking a lease, not renewing one.
//
// The lease is not moved but shared: until the process that handed it off
// calls Handoff (or exits), both hold it, and so do two processes that
// resume one token. Each holds a *Lease of its own on the same owner token
// and fence, and renews it. The first Release deletes the lease in Redis;
// every other holder's next renewal (the watchdog's or Refresh) then returns
// ErrLeaseLost and ends its lease context. Only one of them should do the
// work: hand off, do not share.
//
// A renewal of the lease is an EventRenew to the observers; Resume is one
// too, whatever its outcome, once its request was made.
//
// Model: model/redlease.pml, proctype Client (the resumer), inline resumed.
func (c *Client) Resume(ctx context.Context, t Token, opts ...LeaseOption) (*Lease, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	cfg := c.cfg // a copy: the lease keeps its own, with t's TTL and Redis's holder
	applyAll(&cfg, opts)
	cfg.ttl, cfg.fair, cfg.replicas, cfg.fences = t.TTL, false, 0, nil
	if err := cfg.validate(); err != nil {
		return nil, errorf("resume %s: %w", quote(t.Resource), err)
	}
	if ctx.Err() != nil {
		return nil, errorf("resume %s: %w", quote(t.Resource), context.Cause(ctx))
	}
	keys := wire.KeysOf(cfg.prefix, t.Resource)
	// Every kind's keys are sent, so that the script's keys are the same
	// for each kind (and all in the resource's slot).
	sk := wire.SharedKeysOf(cfg.prefix, t.Resource)
	kind := leaseKind(t.Kind)

	sent := c.clk.Now() // the lease's deadline counts from here (S3)
	// No reply after the local lifetime could start the lease: give up then.
	rctx, cancel := context.WithTimeout(ctx, cfg.lifetime())
	got, err := wire.ParseResume(c.conn.Run(rctx, wire.Resume(&keys, sk, resumeKinds[kind], t.Owner, t.Fence,
		cfg.ttlArg, t.Permit, t.Permits)))
	cancel()
	var l *Lease
	if err == nil {
		l, err = c.takeUp(ctx, &cfg, t, keys, sk, sent, got)
	} else {
		err = requestError("resume", t.Resource, c.conn.Classify(err), err)
	}
	if len(cfg.observers) > 0 {
		ectx := ctx
		if l != nil {
			ectx = l.ctx // as the watchdog's renewals: the lease's own context
		}
		cfg.observe(ectx, Event{Kind: EventRenew, Outcome: outcomeOf(err), Resource: t.Resource, Owner: t.Owner,
			Fence: t.Fence, Start: sent, End: c.clk.Now(), Err: err})
	}
	return l, err
}

// resumeKinds are resume.lua's kinds, by leaseKind.
var resumeKinds = [...]string{
	kindExclusive: wire.ResumeExclusive, kindPermit: wire.ResumePermit,
	kindRead: wire.ResumeRead, kindWrite: wire.ResumeWrite,
}

// takeUp turns resume.lua's reply got, to a request sent at sent, into a
// lease handed out, in the steps of acquisition.grant (grant.go): start,
// track, schedule, hand out. A lease that it does not hand out stays in
// Redis: it is not this call's to release.
func (c *Client) takeUp(ctx context.Context, cfg *config, t Token, keys wire.Keys, sk *wire.SharedKeys, sent time.Time, got wire.Resumed) (*Lease, error) {
	switch {
	case got.Permits != 0:
		return nil, invalidf("resume %s: the token names permit %d of %d permits; the semaphore has %d",
			quote(t.Resource), t.Permit, t.Permits, got.Permits)
	case !got.OK:
		return nil, errorf("%w: resume %s: no %s lease of fence %d held by the token's owner: it expired, was released "+
			"or passed on (or the Client's key prefix is not the holder's)", ErrLeaseLost, quote(t.Resource), t.Kind, t.Fence)
	}
	if owner, fence, holder, ok := wire.ParseLease(got.Value); ok && owner == t.Owner && fence == t.Fence {
		cfg.holder = holder
	}
	l := c.newLease(ctx, cfg, t.Resource, keys, t.Owner, t.Fence, leaseKind(t.Kind), sk, t.Permit, t.Permits)
	if !l.start(sent) {
		err := errorf("%w: resume %s: the reply arrived after the lease's local deadline", ErrLeaseLost, quote(t.Resource))
		l.discard(err)
		return nil, err
	}
	if !c.trackAll([]*Lease{l}) { // Close began while the request was on its way
		l.discard(ErrClientClosed)
		return nil, ErrClientClosed
	}
	if next := sent.Add(cfg.interval()); cfg.autoRenew && l.renewsUntil(next) {
		c.wd.schedule(l, next)
	}
	if err := l.handOut(); err != nil {
		if c.closed.Load() {
			err = ErrClientClosed
		}
		return nil, errorf("resume %s: %w", quote(t.Resource), err)
	}
	return l, nil
}

// Handoff ends the lease in this process without releasing it in Redis, so
// that another process can take it up: pass it the lease's Token
// (Token().String(), in an environment variable say), let it call
// Client.Resume, and call Handoff.
// Handoff stops the watchdog and the deadline timer, ends the lease context
// with cause ErrHandedOff, and takes the lease out of what Client.Close
// releases. From then on Release, Refresh and Handoff return an error
// matching ErrHandedOff without a round trip: a deferred Release of a lease
// that was handed off does not end the lease its new holder runs under.
//
// Redis keeps the lease for the TTL from its last renewal; the new holder
// must resume it before that. Handing off before the new holder has resumed
// leaves the lease unrenewed meanwhile; handing off after it leaves both
// renewing it for a while, which is harmless (see Client.Resume). A parent
// that starts a child with the token may call Handoff once the child runs,
// or before, if the child starts well within the lease's local lifetime.
//
// Handoff returns nil if the lease was active. One whose local deadline had
// passed without a confirmed renewal is handed off all the same (Redis may
// hold it a little longer, for at most the safety margin and the drift
// allowance), and Handoff returns the cause of its end (ErrLeaseLost, or
// ErrMaxHold): its resumer is likely to find it gone. A lease that was
// lost, released (or being released) or handed off stays as it is, and
// Handoff returns the error of its end.
func (l *Lease) Handoff() error {
	if l == nil {
		return invalidf("nil Lease")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	switch l.state {
	case stateActive:
		l.endLocked(stateHandedOff, errorf("%s: %w", quote(l.resource), ErrHandedOff)) // no event: not a loss
	case stateLapsed:
		if l.relBegun { // a Release is deleting it
			return errorf("%s: %w", quote(l.resource), ErrReleased)
		}
		l.state = stateHandedOff // its context ended with the lapse
		l.untrackLocked()
		err = context.Cause(l.ctx)
	default:
		return l.errorLocked()
	}
	// The observers hear of no end of the lease here, as it goes on
	// elsewhere, nor of a later Release, which does nothing.
	l.out = false
	return err
}
