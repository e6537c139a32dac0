package redlease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// One attempt of an acquire call: send the acquire script (send), read its
// reply (decode), and turn the fences it drew into leases (grant).

// attempt runs the acquire script once and grants the leases it took.
//
// Model: model/redlease.pml, macro ATTEMPT (the send) and proctype Client, label acquiring (the reply).
func (a *acquisition) attempt(ctx context.Context) ([]*Lease, error) {
	sent := a.c.clk.Now() // the leases' deadlines count from here (S3)
	r, acked := a.send(ctx)
	if r.err == nil || a.classify(r.err) != notSent { // the script ran, or may have
		a.sent = true
		a.queued = a.queued || a.wait
	}
	if r.err != nil {
		return nil, r.err
	}
	decode := a.decode
	if a.kind == kindPermit || a.kind == kindRead {
		decode = a.decodeShared
	}
	fences, err := decode(r)
	if err != nil {
		return nil, err
	}
	if a.cfg.replicas > 0 && acked < int64(a.cfg.replicas) {
		a.undo(ctx)
		return nil, errorf("%w: %w: %s: %d of %d replicas acknowledged within %v",
			ErrNotAcquired, ErrNotReplicated, quote(a.resources[0]), acked, a.cfg.replicas, a.cfg.replicaTimeout)
	}
	return a.grant(ctx, sent, fences)
}

// call is the attempt's script call.
func (a *acquisition) call() call {
	timeout := any(0)
	if a.wait {
		timeout = waiterTimeoutArg
	}
	if a.kind != kindExclusive {
		return a.sharedCall(timeout)
	}
	if len(a.resources) == 1 {
		return acquireCall(&a.names[0], &a.owner, &a.member, a.cfg.ttlArg, a.wait, a.cfg.fair, a.sent, &a.cfg.holder)
	}
	return acquireAllCall(a.names, &a.owner, &a.member, a.cfg.ttlArg, timeout, a.sent, &a.cfg.holder)
}

// run sends the attempt's call c, with WAIT when WithReplicaAck asks.
func (a *acquisition) run(ctx context.Context, c call) (reply, int64) {
	if a.cfg.replicas > 0 {
		return a.c.b.evalAcked(ctx, c, a.cfg.replicas, a.cfg.replicaTimeout)
	}
	return a.c.b.eval(ctx, c), 0
}

// send runs the attempt, returning within abandonSlack of ctx's deadline,
// after making sure that Redis can be reached (see backend.connect): an
// attempt is not sent into an outage, where its outcome could only be
// unknown. A failure of that check is an unreachableError: nothing of the
// acquire was sent.
//
// A client that bounds requests by their context keeps the deadline itself,
// and so do the client's own timeouts for a deadline further away than they
// reach (go-redis: about 2.5 min by default). Otherwise (go-redis without
// ContextTimeoutEnabled, a nearer deadline) a silent Redis could hold the
// request past the deadline, so the request goes on a goroutine of the
// Client's and send returns at the deadline: the request is then of unknown
// outcome, and whatever it did is undone by a release once it returns.
func (a *acquisition) send(ctx context.Context) (reply, int64) {
	c := a.call() // here: the goroutine below must not read a
	if d, ok := ctx.Deadline(); !ok || a.c.b.bounded(d) {
		return a.checkAndRun(ctx, c, nil)
	}
	f := &inflight{done: make(chan struct{})}
	started := a.c.spawn(func() {
		r, acked := a.checkAndRun(ctx, c, f.sending)
		if f.finish(r, acked) && (r.err == nil || a.classify(r.err) != notSent) {
			lctx, cancel := context.WithTimeout(detach(ctx), a.cfg.releaseTimeout)
			a.leave(lctx)
			cancel()
		}
	})
	if !started { // Close is under way: no goroutine of the Client's may start
		return a.checkAndRun(ctx, c, nil)
	}
	select {
	case <-f.done:
		return f.r, f.acked
	case <-ctx.Done():
		return f.abandon(ctx)
	}
}

// inflight is an acquire attempt on a goroutine of its own, which its
// caller stops waiting for at its context's end.
type inflight struct {
	mu        sync.Mutex
	isSending bool // the check is done: the acquire is on its way
	abandoned bool
	r         reply // set before done is closed
	acked     int64
	done      chan struct{}
}

// sending reports, once the attempt's checks are done, whether it may still
// send: not if its caller has stopped waiting.
func (f *inflight) sending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isSending = !f.abandoned
	return f.isSending
}

// finish records the attempt's reply, and reports whether the attempt was
// sent after its caller had stopped waiting: then nobody will take what it
// may have acquired, and the attempt must give it back.
func (f *inflight) finish(r reply, acked int64) (late bool) {
	f.mu.Lock()
	f.r, f.acked = r, acked
	late = f.abandoned && f.isSending
	f.mu.Unlock()
	close(f.done)
	return late
}

// abandon stops waiting for the attempt, whose caller's ctx has ended.
func (f *inflight) abandon(ctx context.Context) (reply, int64) {
	// A Redis that answers at all answers within microseconds: give it a
	// moment, so that a deadline that falls while the reply is on its way
	// does not turn a plain busy or granted reply into an unknown outcome.
	t := time.NewTimer(abandonSlack)
	select {
	case <-f.done:
	case <-t.C:
	}
	t.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.done: // the reply won the race after all
		return f.r, f.acked
	default:
	}
	f.abandoned = true
	if !f.isSending {
		return reply{err: &unreachableError{errorf("%w: %w", errNoAnswer, context.Cause(ctx))}}, 0
	}
	return reply{err: context.Cause(ctx)}, 0
}

// abandonSlack is how long past its context's deadline send waits for a
// reply on its way before it gives the request up.
const abandonSlack = 50 * time.Millisecond

// checkAndRun checks that Redis can be reached and then, if proceed (nil:
// always) agrees, runs the attempt.
func (a *acquisition) checkAndRun(ctx context.Context, c call, proceed func() bool) (reply, int64) {
	if err := a.c.b.connect(ctx, a.names[0].lease); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = errorf("%w: %w", errNoAnswer, err)
		}
		return reply{err: &unreachableError{err}}, 0
	}
	if proceed != nil && !proceed() {
		return reply{err: &unreachableError{context.Cause(ctx)}}, 0
	}
	return a.run(ctx, c)
}

// decode reads an acquire script's reply (see lua/acquire.lua and
// lua/acquire_all.lua): the fences of the new leases, or a *BusyError.
//
// Model: model/redlease.pml, proctype Client, label acquiring (TAKE).
func (a *acquisition) decode(r reply) ([]int64, error) {
	if r.vals == nil {
		if r.n <= 0 {
			return nil, errorf("acquire script replied %d", r.n)
		}
		a.fence[0] = r.n
		return a.fence[:], nil
	}
	v := r.vals
	n := len(a.resources)
	switch {
	case n == 1 && (len(v) == 3 || len(v) == 4): // {pttl, first, holder[, 'readers']}
		if x, ok := int64s(v[:2]); ok {
			holder, _ := v[2].(string)
			busy := a.busy(0, x[0], x[1] == 1, holder)
			if len(v) == 4 {
				busy.why = busyReaders
			}
			return nil, busy
		}
	case n > 1 && len(v) == n+1: // {1, fence...}
		if x, ok := int64s(v); ok && x[0] == 1 {
			return x[1:], nil
		}
	case n > 1 && len(v) == 5: // {0, pttl, first, i, holder}
		if x, ok := int64s(v[:4]); ok && x[0] == 0 && x[3] >= 1 && int(x[3]) <= n {
			holder, _ := v[4].(string)
			return nil, a.busy(int(x[3])-1, x[1], x[2] == 1, holder)
		}
	}
	return nil, errorf("acquire script replied %v", v)
}

// int64s returns vals as integers, and false if one is not.
func int64s(vals []any) ([]int64, bool) {
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// busy is the error for resource i, held by another owner (holder) whose
// lease has pttl ms left (-1: no TTL).
func (a *acquisition) busy(i int, pttl int64, first bool, holder string) *BusyError {
	busy := &BusyError{Resource: a.resources[i], Remaining: time.Duration(pttl) * time.Millisecond, Holder: holder,
		first: first, index: i}
	if pttl < 0 {
		busy.Remaining = -1
	}
	return busy
}

// grant turns the fences that one attempt drew, its request sent at sent,
// into leases handed out. The order of its steps is what Close, the
// deadline timers and the observers rely on:
//
//  1. Complete: every lease gets its local deadline, counted from sent, and
//     its fence (one from WithFenceSource is drawn now, and recorded in
//     Redis while the lease is still ours) before anyone else can see it.
//     A lease whose deadline passed before the reply arrived is never
//     handed out (S3).
//  2. Track: the Client records the leases, all or none, so that Close
//     either releases them or they are never handed out.
//  3. Schedule: the watchdog may renew them from here on.
//  4. Hand out: only if none has ended meanwhile (Close, or the deadline
//     during a slow fence source); from here on the observers hear of
//     their end.
//
// A step that fails gives every lease back (giveBack): it ends them without
// an event and releases them by owner in Redis.
func (a *acquisition) grant(ctx context.Context, sent time.Time, fences []int64) ([]*Lease, error) {
	leases := a.lease[:]
	if len(a.resources) > 1 {
		leases = make([]*Lease, len(a.resources))
	}
	for i := range a.resources {
		leases[i] = a.newLease(ctx, i, fences[i])
	}
	for _, l := range leases { // 1
		if !l.start(sent) {
			return nil, a.giveBack(ctx, leases, errorf("%w: %s: the reply arrived after the lease's local deadline", ErrNotAcquired, quote(l.resource)))
		}
	}
	if a.cfg.fences != nil {
		if err := a.drawFences(ctx, leases); err != nil {
			return nil, a.giveBack(ctx, leases, err)
		}
	}
	if !a.c.trackAll(leases) { // 2: Close began while the request was on its way
		return nil, a.giveBack(ctx, leases, notAcquired(a.resources[0], ErrClientClosed))
	}
	for _, l := range leases { // 3
		if next := sent.Add(l.cfg.interval()); a.cfg.autoRenew && l.renewsUntil(next) {
			a.c.wd.schedule(l, next)
		}
	}
	for i, l := range leases { // 4
		if err := l.handOut(); err != nil {
			if a.c.closed.Load() {
				err = ErrClientClosed
			}
			for _, l := range leases[:i] {
				l.takeBack()
			}
			return nil, a.giveBack(ctx, leases, notAcquired(l.resource, err))
		}
	}
	return leases, nil
}

// giveBack ends leases that the acquire call will not hand out, releases
// them in Redis by owner token (see undo), and returns err.
//
// Model: model/redlease.pml, inline start (its DISCARDED branch), then LEAVE.
func (a *acquisition) giveBack(ctx context.Context, leases []*Lease, err error) error {
	for _, l := range leases {
		l.discard(err)
	}
	a.undo(ctx)
	return err
}

// drawFences gives each new lease a fence from the configured source, and
// records it in the lease in Redis while the lease is still ours; that also
// renews the lease, whose local deadline moves on as a renewal's would.
func (a *acquisition) drawFences(ctx context.Context, leases []*Lease) error {
	for _, l := range leases {
		fence, err := a.cfg.fences.NextFence(ctx, l.resource)
		if err == nil && fence <= 0 {
			err = errorf("fence source returned %d", fence)
		}
		sent := a.c.clk.Now()
		if err == nil {
			r := a.c.b.eval(ctx, confirmCall(&l.keys, &l.owner, fence, l.cfg.ttlArg))
			if err = r.err; err == nil && r.n != 1 {
				err = ErrLeaseLost
			}
		}
		if err != nil {
			return errorf("%w: %s: drawing its fence: %w", ErrNotAcquired, quote(l.resource), err)
		}
		l.mu.Lock() // the deadline timer's observers read the fence
		l.fence = fence
		if l.state == stateActive {
			l.extendLocked(sent)
		}
		l.mu.Unlock()
	}
	return nil
}
