package redlease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/wire"
)

// The watchdog renews the auto-renewed leases of one Client. One goroutine
// keeps every lease in a queue ordered by its next renewal time and sends the
// renewals that fall due together, in pipelines, where the server is not
// Redis Cluster up to wire.RefreshManyMax exclusive leases to a script call
// (see send): the cost per lease is a queue entry and a timer, not a
// goroutine. The goroutine starts with the first
// lease and ends watchdogLinger after no lease is left to renew.
//
// Lock order: a lease's mu before the watchdog's mu; the watchdog never
// takes a lease's mu while holding its own.
//
// The watchdog only extends leases. What ends a lease context on time is each
// lease's own deadline timer, which runs whether or not a renewal is stuck on
// the network.
//
// This is where a renewal is decided: renew sends one only for a lease that
// is active and before its local deadline at the send time (S4), and
// Lease.renewed (lifecycle.go) turns the reply into a longer deadline or a
// loss.
type watchdog struct {
	conn *wire.Conn
	clk  clock.Clock

	mu         sync.Mutex
	queue      renewQueue
	inflight   int       // batches being sent
	running    bool      // the loop goroutine exists
	stopped    bool      // Client.Close: end the loop once nothing is left, without lingering
	sleepUntil time.Time // when the loop wakes by itself; zero: only when signalled
	asleep     bool      // the loop waits for its timer, armed for sleepUntil, or a signal (see quiet)
	wake       chan struct{}

	// apart: refresh.lua renewed a lease that a refresh_many.lua call had
	// not (see send); each lease is renewed by a call of its own from then
	// on.
	apart atomic.Bool

	goroutines sync.WaitGroup // the loop and the batches; see Client.Close
}

const (
	// maxInflight bounds the batches in flight at once, so that a slow or
	// unreachable node delays, but does not stop, the renewal of the others.
	maxInflight = 4
)

// schedule queues l for renewal at at.
func (w *watchdog) schedule(l *Lease, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.ended {
		return
	}
	if l.index >= 0 {
		w.queue.move(l, at)
	} else {
		w.queue.push(l, at)
	}
	switch {
	case !w.running:
		if w.wake == nil {
			w.wake = make(chan struct{}, 1)
		}
		w.running = true
		w.goroutines.Add(1)
		go w.loop()
	case w.sleepUntil.IsZero() || at.Before(w.sleepUntil):
		// The loop sleeps past this renewal: wake it. (Most leases fall due
		// after the loop's next wake-up and need no signal.)
		w.signalLocked()
	}
}

// unschedule removes l from the queue for good: its lease has ended.
func (w *watchdog) unschedule(l *Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.ended = true
	if l.index < 0 {
		return
	}
	w.queue.remove(l.index)
	if w.queue.len() == 0 && w.inflight == 0 && w.sleepUntil.Sub(w.clk.Now()) > watchdogLinger {
		w.signalLocked() // so that the loop lingers, then ends, on time
	}
}

func (w *watchdog) signalLocked() {
	w.asleep = false
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watchdogLinger is how long the watchdog goroutine stays after the last
// lease is gone: a Client that takes one short lease after another keeps one
// goroutine instead of starting one per lease.
const watchdogLinger = 50 * time.Millisecond

func (w *watchdog) loop() {
	defer w.goroutines.Done()
	timer := w.clk.NewTimer(time.Hour)
	defer timer.Stop()
	var idleSince time.Time
	for {
		batch, wait, done := w.due(&idleSince)
		switch {
		case done:
			return
		case len(batch) > 0:
			w.goroutines.Add(1)
			go w.renew(batch)
		case wait >= 0:
			timer.Reset(wait)
			w.sleeping()
			select {
			case <-timer.C():
			case <-w.wake:
			}
		default:
			<-w.wake
		}
	}
}

// due takes the next batch of renewals off the queue, or says how long the
// loop may sleep (wait < 0: until woken), or that it is done: no lease to
// renew since *idleSince for watchdogLinger.
func (w *watchdog) due(idleSince *time.Time) (batch []dueLease, wait time.Duration, done bool) {
	now := w.clk.Now()
	wait = -1
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asleep = false
	switch {
	case w.queue.len() == 0 && w.inflight == 0:
		if idleSince.IsZero() {
			*idleSince = now
		}
		if wait = watchdogLinger - now.Sub(*idleSince); wait <= 0 || w.stopped {
			w.running, w.sleepUntil = false, time.Time{}
			return nil, 0, true
		}
	case w.inflight < maxInflight && w.queue.len() > 0:
		*idleSince = time.Time{}
		// Everything due within a tenth of its interval goes now, so
		// leases taken at nearly the same time share a pipeline.
		for w.queue.len() > 0 && len(batch) < driver.MaxBatch {
			next, in := w.queue.first(now)
			if in > next.timing().interval()/10 {
				if len(batch) == 0 {
					wait = in
				}
				break
			}
			l, at := w.queue.pop()
			batch = append(batch, dueLease{l, at})
		}
		if len(batch) > 0 {
			w.inflight++
		}
	default:
		*idleSince = time.Time{}
	}
	w.sleepUntil = time.Time{}
	if len(batch) == 0 && wait >= 0 {
		w.sleepUntil = now.Add(wait)
	}
	return batch, wait, false
}

// dueLease is a lease taken off the watchdog's queue, and when it fell due.
type dueLease struct {
	l   *Lease
	due time.Time
}

// renew sends one batch of renewals and requeues each lease that stays
// active: after its interval when renewed, after a short pause when the
// request failed (until its local deadline ends it). It emits the batch's
// events once it no longer counts in goroutines, so that an observer may
// even call Client.Close, which waits for them.
//
// Model: model/redlease.pml, proctype Watchdog, action renew.
func (w *watchdog) renew(batch []dueLease) {
	events := w.renewBatch(batch)
	w.goroutines.Done()
	for _, p := range events {
		p.emit(context.Background()) // renewal events carry the lease's own context
	}
}

// renewBatch is renew's work; it returns the events to emit.
func (w *watchdog) renewBatch(batch []dueLease) []pending {
	// The send time is taken before the check: a renewal goes out only for a
	// lease that was still active at its send time (S4).
	sent := w.clk.Now()
	live := batch[:0]
	var first time.Time // the earliest local deadline among them
	type requeue struct {
		l  *Lease
		at time.Time
	}
	again := make([]requeue, 0, len(batch)) // nearly every lease, in one allocation
	var events []pending
	for _, b := range batch {
		l := b.l
		// A lease past its local deadline is about to end: its timer has
		// fired or will at once. Renewing it could only extend in Redis a
		// lease that its holder is told it has lost.
		d, ok, busy := l.beginRenewal(sent)
		switch {
		case busy:
			// A Refresh or Extend renews it now, and queues it again when
			// it succeeds; should it fail, this is the watchdog's next try.
			again = append(again, requeue{l, sent.Add(max(l.timing().interval()/4, time.Millisecond))})
		case ok:
			live = append(live, b)
			if first.IsZero() || d.Before(first) {
				first = d
			}
		}
	}
	replies, errs := w.send(live, first)
	g := new(deadlineGroup) // the renewed leases' deadline, sent + lifetime, for most or all of them
	for i, b := range live {
		l := b.l
		tm := l.timing() // this renewal's: an Extend changes it only once the renewal has ended
		evs, err := l.renewedEnding(sent, replies[i], errs[i], g)
		for _, p := range evs {
			if p.cfg != nil {
				events = append(events, p)
			}
		}
		if err == nil {
			if next := tm.nextRenewal(sent, b.due); l.renewsUntil(next) {
				again = append(again, requeue{l, next})
			}
		} else if errs[i] != nil { // request failed: try again while time is left
			at := w.clk.Now().Add(max(tm.interval()/4, time.Millisecond))
			if at.Before(l.Deadline()) {
				again = append(again, requeue{l, at})
			}
		}
	}
	g.arm(w.clk)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	for _, r := range again {
		if !r.l.ended && r.l.index < 0 {
			w.queue.push(r.l, r.at)
		}
	}
	w.signalLocked()
	return events
}

// send renews leases, whose earliest local deadline is first, and returns,
// per lease, the reply of Redis (see Lease.renewed) and the request error.
//
// Model: model/redlease.pml, proctype Watchdog, action send.
func (w *watchdog) send(leases []dueLease, first time.Time) (replies []int64, errs []error) {
	replies, errs = make([]int64, len(leases)), make([]error, len(leases))
	if len(leases) == 0 {
		return replies, errs
	}
	// A renewal is worth sending only while every lease in the batch is
	// still alive locally: go-redis retries a failed request only while ctx
	// allows, so a retry never renews in Redis a lease whose holder has
	// already been told it is lost (S4). go-redis's own timeouts may end it
	// sooner.
	ctx, cancel := context.WithTimeout(context.Background(), first.Sub(w.clk.Now())) // first is on w.clk
	defer cancel()
	var plan renewalPlan
	if w.together() {
		plan = planRenewals(leases)
	} else {
		plan = renewEach(leases)
	}
	// alone: the leases of refresh_many.lua calls that Redis refused, or
	// that it said are not ours, which refresh.lua renews or gives up alone.
	var alone []int
	for j, r := range w.conn.RunMany(ctx, len(plan.calls), func(j int) wire.Call { return plan.calls[j] }) {
		of := plan.leases[plan.from[j]:plan.from[j+1]]
		if j >= plan.many {
			replies[of[0]], errs[of[0]] = wire.Int(r)
			continue
		}
		if r.Err != nil && w.conn.Classify(r.Err) == driver.Refused {
			alone = append(alone, of...)
			continue
		}
		ns, err := wire.ParseRefreshMany(r, len(of))
		for i, x := range of {
			switch {
			case err != nil:
				errs[x] = err
			case ns[i] == 1:
				replies[x] = 1
			default:
				alone = append(alone, x)
			}
		}
	}
	if len(alone) > 0 {
		// Something between here and Redis may take the server for Redis
		// Cluster and refuse a call on keys of many slots, or route a
		// script by its first key (a proxy) and run it where the other
		// keys are not. So only refresh.lua says that a lease is lost. A
		// lease it renews is one that refresh_many.lua could not: from now
		// on each lease goes alone.
		for i, r := range w.conn.RunMany(ctx, len(alone), func(i int) wire.Call { return leases[alone[i]].l.refreshCall() }) {
			x := alone[i]
			replies[x], errs[x] = wire.Int(r)
			if errs[x] == nil && replies[x] == 1 {
				w.apart.Store(true)
			}
		}
	}
	return replies, errs
}

// together reports whether the watchdog may renew many leases in one
// refresh_many.lua call: not on Redis Cluster, whose scripts touch one
// hash slot each, and not once a call on keys of many slots was refused.
func (w *watchdog) together() bool {
	return !w.conn.Sharded() && !w.apart.Load()
}

// renewalPlan is how a batch of renewals goes out: calls[j] renews the
// leases at the indexes leases[from[j]:from[j+1]] of the batch; the first
// many calls are refresh_many.lua's, the others a lease's refreshCall.
type renewalPlan struct {
	calls  []wire.Call
	leases []int
	from   []int
	many   int
}

// renewEach plans a refresh call per lease.
func renewEach(batch []dueLease) renewalPlan {
	p := renewalPlan{calls: make([]wire.Call, len(batch)), leases: make([]int, len(batch)), from: make([]int, len(batch)+1)}
	for i, b := range batch {
		p.calls[i], p.leases[i], p.from[i+1] = b.l.refreshCall(), i, i+1
	}
	return p
}

// planRenewals plans refresh_many.lua calls of up to wire.RefreshManyMax
// leases for the exclusive leases of batch, and a call of their own for the
// others (terms, semaphore permits, read and write leases: their scripts
// differ).
func planRenewals(batch []dueLease) renewalPlan {
	var p renewalPlan
	p.leases = make([]int, 0, len(batch))
	for i, b := range batch {
		if b.l.plainRenewal() {
			p.leases = append(p.leases, i)
		}
	}
	plain := len(p.leases)
	if plain < 2 {
		return renewEach(batch)
	}
	for i, b := range batch {
		if !b.l.plainRenewal() {
			p.leases = append(p.leases, i)
		}
	}
	calls := (plain+wire.RefreshManyMax-1)/wire.RefreshManyMax + len(batch) - plain
	p.calls, p.from = make([]wire.Call, 0, calls), make([]int, 1, calls+1)
	for lo := 0; lo < plain; lo += wire.RefreshManyMax {
		of := p.leases[lo:min(plain, lo+wire.RefreshManyMax)]
		p.calls = append(p.calls, wire.RefreshMany(len(of), func(i int) (string, string, string) {
			l := batch[of[i]].l
			return l.keys.Lease, l.owner, l.timing().ttlArg
		}))
		p.from = append(p.from, lo+len(of))
	}
	p.many = len(p.calls)
	for k := plain; k < len(p.leases); k++ {
		p.calls = append(p.calls, batch[p.leases[k]].l.refreshCall())
		p.from = append(p.from, k+1)
	}
	return p
}

// sleeping records that the loop, its timer armed, waits for it or for a
// signal, unless a signal is already there.
func (w *watchdog) sleeping() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asleep = len(w.wake) == 0
}

// quiet reports whether no renewal is on its way and the loop, if it runs,
// sleeps with its timer armed: then it does nothing before the timer fires
// or it is signalled. (Once the clock reaches the timer, the loop is awake
// until it has sent what fell due and armed the timer again.)
func (w *watchdog) quiet() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inflight == 0 && (!w.running || w.asleep)
}

// stop makes the loop end as soon as no lease is left to renew, instead of
// lingering: Close has released them all.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.wake != nil {
		w.signalLocked()
	}
}
