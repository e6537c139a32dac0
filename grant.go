package redlease

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/wire"
)

// One attempt of an acquire call: send the acquire script (send), read its
// reply (decode), and turn the fences it drew into leases (grant).

// attempt runs the acquire script once and grants the leases it took.
//
// Model: model/redlease.pml, macro ATTEMPT (the send) and proctype Client, label acquiring (the reply).
func (a *acquisition) attempt(ctx context.Context) ([]*Lease, error) {
	sent := a.c.clk.Now() // the leases' deadlines count from here (S3)
	if !a.base.IsZero() {
		a.stamp = strconv.FormatInt(sent.Sub(a.base).Microseconds(), 10)
	}
	r, acked := a.send(ctx)
	if r.Err == nil || a.classify(r.Err) != driver.NotSent { // the script ran, or may have
		a.sent = true
		a.queued = a.queued || a.wait
	}
	if r.Err == nil || a.classify(r.Err) == driver.Refused {
		a.heard = true
	}
	if kind, ok := wire.WrongKind(r.Err); ok {
		which := quote(a.resources[0])
		if len(a.resources) > 1 {
			which = "one of " + which + " and the other resources"
		}
		return nil, errorf("%w: %s is in use as %s, not as %s", ErrWrongKind, which, kindOf(kind), a.kind)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	fences, err := a.decode(r)
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
func (a *acquisition) call() wire.Call {
	if a.kind != kindExclusive {
		return a.sharedCall()
	}
	if a.cfg.term && len(a.resources) == 1 {
		return wire.Campaign(&a.names[0], a.owner, a.member, a.cfg.ttlArg, a.wait, a.cfg.fair, a.sent, a.cfg.leaseTail(), a.c.conn.Sharded())
	}
	if len(a.resources) == 1 {
		return wire.Acquire(&a.names[0], a.owner, a.member, a.cfg.ttlArg, a.wait, a.cfg.fair, a.sent, a.cfg.leaseTail(), a.stamp)
	}
	return wire.AcquireAll(a.names, a.owner, a.member, a.cfg.ttlArg, a.wait, a.sent, a.cfg.leaseTail())
}

// run sends the attempt's call c, with WAIT when WithReplicaAck asks.
func (a *acquisition) run(ctx context.Context, c wire.Call) (driver.Reply, int64) {
	if a.cfg.replicas > 0 {
		return a.c.conn.RunWait(ctx, c, a.cfg.replicas, a.cfg.replicaTimeout)
	}
	return a.c.conn.Run(ctx, c), 0
}

// send runs the attempt, returning within abandonSlack of ctx's deadline,
// after making sure that Redis can be reached (see wire.Conn.Connect): an
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
func (a *acquisition) send(ctx context.Context) (driver.Reply, int64) {
	c := a.call() // here: the goroutine below must not read a
	if d, ok := ctx.Deadline(); !ok || a.c.conn.KeepsDeadline(d) {
		return a.checkAndRun(ctx, c, nil)
	}
	f := &inflight{done: make(chan struct{})}
	started := a.c.spawn(func() {
		r, acked := a.checkAndRun(ctx, c, f.sending)
		if f.finish(r, acked) && (r.Err == nil || a.classify(r.Err) != driver.NotSent) {
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
	r         driver.Reply // set before done is closed
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
func (f *inflight) finish(r driver.Reply, acked int64) (late bool) {
	f.mu.Lock()
	f.r, f.acked = r, acked
	late = f.abandoned && f.isSending
	f.mu.Unlock()
	close(f.done)
	return late
}

// abandon stops waiting for the attempt, whose caller's ctx has ended.
func (f *inflight) abandon(ctx context.Context) (driver.Reply, int64) {
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
		return driver.Reply{Err: &unreachableError{errorf("%w: %w", errNoAnswer, context.Cause(ctx))}}, 0
	}
	return driver.Reply{Err: context.Cause(ctx)}, 0
}

// abandonSlack is how long past its context's deadline send waits for a
// reply on its way before it gives the request up.
const abandonSlack = 50 * time.Millisecond

// endedBy reports whether err is the end of ctx: ctx's error, or a
// deadline that the client library met at ctx's deadline, which can be a
// moment before ctx's own timer ends ctx: the libraries put the deadline on
// their connection, and report it as context.DeadlineExceeded (rueidis and
// valkey-go, on a connection that serves one request at a time) or as the
// connection's timeout (go-redis with ContextTimeoutEnabled).
func endedBy(ctx context.Context, err error) bool {
	if cerr := ctx.Err(); cerr != nil {
		return errors.Is(err, cerr)
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded))
}

// checkAndRun checks that Redis can be reached and then, if proceed (nil:
// always) agrees, runs the attempt.
func (a *acquisition) checkAndRun(ctx context.Context, c wire.Call, proceed func() bool) (driver.Reply, int64) {
	if err := a.c.conn.Connect(ctx, a.names[0].Lease); err != nil {
		if endedBy(ctx, err) {
			err = errorf("%w: %w", errNoAnswer, err)
		}
		return driver.Reply{Err: &unreachableError{err}}, 0
	}
	if proceed != nil && !proceed() {
		return driver.Reply{Err: &unreachableError{context.Cause(ctx)}}, 0
	}
	return a.run(ctx, c)
}

// decode reads an acquire script's reply (wire.ParseAcquire, ParseShared):
// the fences of the new leases (and a.permit), or a *BusyError.
//
// Model: model/redlease.pml, proctype Client, label acquiring (TAKE).
func (a *acquisition) decode(r driver.Reply) ([]int64, error) {
	var got wire.Acquired
	var err error
	switch a.kind {
	case kindPermit, kindRead:
		got, err = wire.ParseShared(r, a.kind == kindPermit)
	default:
		got, err = wire.ParseAcquire(r, len(a.resources))
	}
	switch {
	case err != nil:
		return nil, err
	case got.Busy != nil:
		return nil, a.busy(got.Busy)
	case got.Fences != nil:
		return got.Fences, nil
	case got.Fence == 0:
		return nil, errorf("%w: %w: %s is in use with %d permits, not %d", ErrNotAcquired, ErrInvalidArgument,
			quote(a.resources[0]), got.InUseWith, a.permits)
	}
	a.permit, a.fence[0] = got.Permit, got.Fence
	return a.fence[:], nil
}

// busy is the error of a busy reply b: another owner holds the lease of
// resource b.Index.
func (a *acquisition) busy(b *wire.Busy) *BusyError {
	busy := &BusyError{Resource: a.resources[b.Index], Remaining: time.Duration(b.PTTL) * time.Millisecond,
		Holder: b.Holder, first: b.First, index: b.Index, why: b.Why}
	if b.PTTL < 0 {
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
		if next := sent.Add(l.timing().interval()); a.cfg.autoRenew && l.renewsUntil(next) {
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
			var ours bool
			if ours, err = wire.Done(a.c.conn.Run(ctx, wire.Confirm(&l.keys, l.owner, fence, l.cfg.ttlArg))); err == nil && !ours {
				err = ErrLeaseLost
			}
		}
		if err != nil {
			return errorf("%w: %s: drawing its fence: %w", ErrNotAcquired, quote(l.resource), err)
		}
		l.mu.Lock() // the deadline timer's observers read the fence
		l.fence = fence
		if l.state == stateActive {
			l.extendLocked(sent, nil)
		}
		l.mu.Unlock()
	}
	return nil
}
