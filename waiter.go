package redlease

import (
	"context"
	"errors"
	"time"
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
	for {
		ls, err := a.attempt(ctx)
		if err == nil || errors.Is(err, ErrClientClosed) {
			a.answered(ctx, w)
			return ls, err
		}
		delay, final := a.next(ctx, w, err)
		if final {
			return nil, a.giveUp(ctx, err, nil)
		}
		if delay < 0 {
			continue // at once
		}
		if serr := a.c.hub.sleep(ctx, w.wake, delay); serr != nil {
			return nil, a.giveUp(ctx, w.cause(serr), w.unknown)
		}
	}
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
				w.waiters = append(w.waiters, a.c.hub.join(a.names[i].wakeChannel(a.c.hub.id), a.owner, w.wake))
			}
		}
		if wt := w.waiters[busy.index]; !wt.subscribed() && wt.subscribe(ctx) {
			return -1, false // the lease may have been freed before the subscription
		}
		delay = w.poll.next()
		if busy.first && busy.Remaining >= 0 {
			delay = min(delay, busy.Remaining+time.Millisecond)
		}
		return delay, false
	}
	switch class := a.classify(err); {
	case class == refused, errors.Is(err, ErrInvalidArgument):
		// Redis answered; a refused request is final, and so is a semaphore
		// in use with another number of permits.
		a.answered(ctx, w)
		return 0, true
	case errors.Is(err, ErrNotAcquired):
		// Known not taken: the reply came too late and the lease was given
		// back, or too few replicas acknowledged it.
		a.answered(ctx, w)
		w.failed = err
	case class == notSent:
		a.unreachable(ctx, w, err)
		w.failed = err
	case ctx.Err() != nil:
		w.unknown = err // the wait's own deadline cut the attempt off: no outage
	default:
		a.unreachable(ctx, w, err)
		w.unknown = err
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
	channel string
	owner   string
}

// join registers owner as a waiter on channel: a message naming owner is
// signalled on wake. It does no I/O: messages arrive once the channel is
// subscribed (see subscribe).
func (h *hub) join(channel, owner string, wake chan struct{}) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		ch = &wakeChannel{waiters: map[string]chan struct{}{}}
		h.chans[channel] = ch
	}
	if ch.idle != nil {
		ch.idle.Stop()
		ch.idle = nil
	}
	ch.waiters[owner] = wake
	for i, m := range ch.missed {
		if m == owner {
			ch.missed[i] = ""
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	return &waiter{h: h, channel: channel, owner: owner}
}

// leave unregisters the waiter. The channel stays subscribed for linger.
func (w *waiter) leave() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[w.channel]
	delete(ch.waiters, w.owner)
	if len(ch.waiters) > 0 {
		return
	}
	if ch.sub == nil {
		h.forgetLocked(w.channel, ch)
		return
	}
	ch.idle = time.AfterFunc(linger, func() { h.dropIdle(w.channel, ch) })
}

// subscribed reports whether Redis confirmed the subscription of the
// waiter's channel, through the node that serves it now. A waiter that finds
// it is not calls subscribe, which also drops a subscription that stays
// unconfirmed; and on Cluster it drops one through a node that no longer
// serves the channel's slot: after a failover, or a migration whose
// sunsubscribe was lost with its connection, the client keeps subscribing
// through the old node's address, and no message would come.
func (w *waiter) subscribed() bool {
	h := w.h
	var addr string
	if n, err := h.b.nodeOf(context.Background(), w.channel); err == nil {
		addr = n.addr
	}
	h.mu.Lock()
	ch := h.chans[w.channel]
	switch {
	case ch.sub == nil || !isClosed(ch.ready):
		h.mu.Unlock()
		return false
	case addr != "" && ch.sub.addr != addr:
		h.unsubscribeLocked(w.channel, ch)
		return false
	}
	h.mu.Unlock()
	return true
}

// subscribe subscribes the waiter's channel if it is not, and waits up to
// subscribeWait (or until ctx ends) for Redis to confirm. It reports whether
// the subscription is confirmed. A failure only costs latency: the waiter's
// timers still run.
func (w *waiter) subscribe(ctx context.Context) bool {
	h := w.h
	// On Cluster, find the channel's node before taking h.mu: it may have
	// to load the cluster's slots, and deliveries must not wait for that.
	n, err := h.b.nodeOf(ctx, w.channel)
	if err != nil {
		return false
	}
	h.mu.Lock()
	ch := h.chans[w.channel]
	if sub := ch.sub; sub != nil { // subscribed, or being subscribed
		ready := ch.ready
		h.mu.Unlock()
		if waitReady(ctx, ready) {
			return true
		}
		if ctx.Err() == nil {
			h.abandon(w.channel, ch, sub, ready)
		}
		return false
	}
	if dropping := ch.dropping; dropping != nil {
		h.mu.Unlock()
		if !waitReady(ctx, dropping) {
			return false
		}
		return w.subscribe(ctx) // once: dropIdle is done with the channel
	}
	select {
	case <-h.closed:
		h.mu.Unlock()
		return false
	default:
	}
	ch.ready = make(chan struct{})
	ready := ch.ready
	sub := h.subscriptionLocked(ctx, n)
	ch.sub = sub
	sub.count++
	h.mu.Unlock()

	// Sent outside h.mu: the connection may be slow.
	if err = sub.conn.add(ctx, w.channel); err == nil && waitReady(ctx, ready) {
		return true
	}
	if err != nil || ctx.Err() == nil {
		h.abandon(w.channel, ch, sub, ready)
	}
	return false
}
