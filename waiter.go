package redlease

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease/driver"
)

// An Acquire that finds a lease busy waits (see hub.go for how the waiters
// of one Client share their wake-ups). waitFor is its loop: attempt, and
// after a busy lease sleep until woken, until the holder's lease would
// expire, or until a backoff timer fires; after an error, retry with
// backoff, riding out an outage. The observers hear once that Redis cannot
// be reached and once that it answers again, not on every retry.

// waitFor attempts until the leases are ours or ctx ends.
//
// Model: model/redlease.pml, inline again.
func (a *acquisition) waitFor(ctx context.Context) ([]*Lease, error) {
	a.c.hub.calls.Add(1)
	defer a.c.hub.calls.Add(-1)
	w := &waitState{
		retry: backoff{min: minBackoff, max: maxBackoff},         // after errors
		poll:  backoff{min: waitBackoffMin, max: waitBackoffMax}, // between wake-ups
	}
	defer w.leave()
	if a.asksHandoff() {
		a.base = a.c.clk.Now()
	}
	for {
		ls, err := a.claim(ctx, w)
		if err == nil || errors.Is(err, ErrClientClosed) {
			a.answered(ctx, w)
			return ls, err
		}
		delay, final := a.next(ctx, w, err)
		switch {
		case final && w.outageOver:
			return nil, a.giveUp(ctx, a.unavailable(errorf("no answer from Redis for %v (WithMaxOutage)",
				a.cfg.outage()), w.last), w.unknown)
		case final:
			return nil, a.giveUp(ctx, err, nil)
		case delay < 0:
			continue // at once
		}
		if serr := a.c.hub.sleep(ctx, w.wake, delay); serr != nil {
			if !w.down.IsZero() { // the wait ended during an outage
				return nil, a.giveUp(ctx, a.unavailable(serr, w.last), w.unknown)
			}
			return nil, a.giveUp(ctx, w.cause(serr), w.unknown)
		}
	}
}

// A direct handoff: a waiter for one exclusive lease asks, with each
// attempt that may find the lease busy, that a release hand it the lease
// over (acquire.lua, release.lua). The release then gives it the lease in
// the same step as it deletes its own, with a new fence, and tells it so in
// the wake-up; the waiter holds the lease without another round trip.
//
// The lease's TTL runs from the release, which the waiter cannot time; it
// can time the send of its attempt that asked, which Redis ran before the
// release. The wake-up carries that attempt's stamp, and the local
// deadline counts from its send, as an attempt's reply's would (S3). A
// handoff older than half the lease's lifetime, whose lease would have
// little left, is confirmed by an attempt instead, which finds the lease
// the owner's own and renews it; so is one whose wake-up was lost.

// asksHandoff reports whether the acquire may be handed its lease over: a
// wait for one exclusive lease, whose grant needs nothing more from Redis
// (a fence source, replica acknowledgements) and no election's term.
func (a *acquisition) asksHandoff() bool {
	return a.kind == kindExclusive && len(a.resources) == 1 && !a.cfg.term && a.cfg.fences == nil && a.cfg.replicas == 0
}

// claim is one step of a wait: the lease a release handed over, if a
// wake-up since the last step said so and the handoff is fresh, or else an
// attempt.
//
// Model: model/redlease.pml, proctype Client, label waiting (inline handed).
func (a *acquisition) claim(ctx context.Context, w *waitState) ([]*Lease, error) {
	if a.base.IsZero() || len(w.waiters) != 1 {
		return a.attempt(ctx)
	}
	ho, ok := w.waiters[0].handoff()
	if !ok {
		return a.attempt(ctx)
	}
	sent := a.base.Add(time.Duration(ho.stamp) * time.Microsecond)
	if age := a.c.clk.Now().Sub(sent); age < 0 || age > a.cfg.lifetime()/2 {
		return a.attempt(ctx)
	}
	a.fence[0] = ho.fence
	return a.grant(ctx, sent, a.fence[:])
}

// waitState is what a wait keeps between its attempts.
type waitState struct {
	// The waiter joins the hub only once an attempt found a lease busy: an
	// uncontended acquire costs nothing here.
	wake    chan struct{}
	waiters []*waiter

	retry, poll backoff
	unknown     error     // the last error after which our lease may exist
	failed      error     // the last error that was neither contention nor unknown
	last        error     // the last error, whatever it was
	down        time.Time // since when Redis has not answered; zero while it does
	outageOver  bool      // Redis has not answered for longer than WithMaxOutage allows
}

// cause is why a wait that ends with serr (ctx's cause, or ErrClientClosed)
// did not get the lease: with the last error of an attempt that failed
// otherwise than by contention.
func (w *waitState) cause(serr error) error {
	switch {
	case w.failed == nil:
		return serr
	case w.last == w.failed:
		return errorf("%w (last attempt: %w)", serr, w.failed)
	}
	return errorf("%w (an earlier attempt: %w)", serr, w.failed)
}

func (w *waitState) leave() {
	for _, wt := range w.waiters {
		wt.leave()
	}
}

// next decides what follows a failed attempt: how long to sleep (< 0: try
// again at once), or whether the failure is final.
func (a *acquisition) next(ctx context.Context, w *waitState, err error) (delay time.Duration, final bool) {
	var ue *unreachableError
	if errors.As(err, &ue) && ctx.Err() != nil && (!errors.Is(err, errNoAnswer) || w.failed != nil) {
		// The wait ended during the check: that says nothing of Redis, or
		// less than the failure before it.
		return 0, false
	}
	w.last = err
	var busy *BusyError
	if errors.As(err, &busy) {
		a.answered(ctx, w)
		w.unknown, w.failed = nil, nil // someone else holds it, so no attempt of ours does
		if w.waiters == nil {
			w.wake = make(chan struct{}, 1)
			for i := range a.resources {
				w.waiters = append(w.waiters, a.c.hub.join(a.names[i].WakeChannel(a.c.hub.id), a.owner, w.wake))
			}
		}
		if wt := w.waiters[busy.index]; !wt.subscribed(ctx) && wt.subscribe(ctx) {
			return -1, false // the lease may have been freed before the subscription
		}
		delay = w.poll.next()
		if busy.first && busy.Remaining >= 0 {
			delay = min(delay, busy.Remaining+time.Millisecond)
		}
		return delay, false
	}
	switch class := a.classify(err); {
	case class == driver.Refused, errors.Is(err, ErrInvalidArgument):
		// Redis answered; a refused request is final, and so is a semaphore
		// in use with another number of permits.
		a.answered(ctx, w)
		return 0, true
	case errors.Is(err, ErrNotAcquired):
		// Known not taken: the reply came too late and the lease was given
		// back, or too few replicas acknowledged it.
		a.answered(ctx, w)
		w.failed = err
	case class == driver.NotSent:
		a.unreachable(ctx, w, err)
		w.failed = err
	case ctx.Err() != nil || endedBy(ctx, err):
		w.unknown = err // the wait's own deadline cut the attempt off: no outage
	default:
		a.unreachable(ctx, w, err)
		w.unknown = err
	}
	if bound := a.cfg.outage(); bound > 0 && !w.down.IsZero() && a.c.clk.Now().Sub(w.down) >= bound {
		w.outageOver = true
		return 0, true
	}
	return w.retry.next(), false
}

// unreachable records that an attempt got no answer from Redis; the first
// of an outage is reported.
func (a *acquisition) unreachable(ctx context.Context, w *waitState, err error) {
	if !w.down.IsZero() {
		return
	}
	w.down = a.c.clk.Now()
	if len(a.cfg.observers) > 0 {
		a.cfg.observe(ctx, Event{Kind: EventOutage, Outcome: outcomeOf(err), Resource: a.resources[0],
			Start: w.down, End: w.down, Err: err})
	}
}

// answered records that Redis answered; the end of an outage is reported.
func (a *acquisition) answered(ctx context.Context, w *waitState) {
	if w.down.IsZero() {
		return
	}
	if len(a.cfg.observers) > 0 {
		a.cfg.observe(ctx, Event{Kind: EventRecovered, Outcome: OutcomeOK, Resource: a.resources[0],
			Start: w.down, End: a.c.clk.Now()})
	}
	w.down = time.Time{}
}

// waiter is one Acquire call's registration with the hub for one resource.
type waiter struct {
	h       *hub
	ch      *wakeChannel // stays the hub's while the waiter is registered
	channel string
	owner   string
}

// leave unregisters the waiter. The channel stays subscribed for linger.
func (w *waiter) leave() {
	h, ch := w.h, w.ch
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(ch.waiters, w.owner)
	delete(ch.handed, w.owner)
	h.leftLocked(w.channel, ch)
}

// handoff returns, and forgets, the lease that a release handed the waiter
// over, if a message said so since the last call.
func (w *waiter) handoff() (handoff, bool) {
	h, ch := w.h, w.ch
	h.mu.Lock()
	defer h.mu.Unlock()
	ho, ok := ch.handed[w.owner]
	if ok {
		delete(ch.handed, w.owner)
	}
	return ho, ok
}

// subscribed reports whether Redis confirmed the subscription of the
// waiter's channel and it still receives the channel's messages. A waiter
// that finds it is not calls subscribe, which also drops a subscription that
// stays unconfirmed; a subscription that has ended (on Cluster: the
// channel's slot moved, or its node is no longer the slot's master) is
// dropped here.
func (w *waiter) subscribed(ctx context.Context) bool {
	h := w.h
	s := h.subOf(w.ch)
	switch {
	case s == nil || !isClosed(s.Ready()):
		return false
	case isClosed(s.Done()): // outside h.mu: the driver may look at the cluster's slots
		h.drop(ctx, w.channel, w.ch, s)
		return false
	}
	return true
}

// subscribe subscribes the waiter's channel if it is not, and waits up to
// subscribeWait (or until ctx ends) for Redis to confirm. It reports whether
// the subscription is confirmed. A failure only costs latency: the waiter's
// timers still run.
func (w *waiter) subscribe(ctx context.Context) bool {
	h := w.h
	for range 2 { // once more after an unsubscribe on its way
		subscribing, dropping := h.startSubscribe(w.channel, w.ch)
		if dropping != nil {
			if isClosed(h.closed) || !waitReady(ctx, dropping) {
				return false
			}
			continue
		}
		if subscribing != nil && !waitReady(ctx, subscribing) {
			return false
		}
		break
	}
	s := h.subOf(w.ch)
	if s == nil {
		return false
	}
	if waitReady(ctx, s.Ready()) {
		return true
	}
	if ctx.Err() == nil {
		// Not confirmed in time (on Cluster the slot may have moved, and the
		// node answered MOVED): drop it, so that a later attempt subscribes
		// again instead of waiting for a confirmation that will not come.
		h.drop(ctx, w.channel, w.ch, s)
	}
	return false
}

// waitReady waits up to subscribeWait for c to close, or until ctx ends.
func waitReady(ctx context.Context, c <-chan struct{}) bool {
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
