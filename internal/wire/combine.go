package wire

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redlease/redlease/driver"
)

// Concurrent calls of one Conn share round trips when it combines them
// (NewConn). While that many of its requests are in flight (those that
// could have queued: a call that may not queue goes out uncounted), the
// calls that other goroutines make queue up; when a request returns, the
// calls that queued meanwhile go out together, in one pipeline
// (driver.Driver.EvalMany) sent by one of them. An uncontended call goes
// out at once, as it would without this. Under load one write and one read,
// on both sides, carry many calls instead of one each: on a loaded machine
// those system calls are most of what a lease's round trips cost
// (docs/PERFORMANCE.md has the measurement), with every client library.
//
// A queued call waits for a request in flight before its own is sent, and
// leaves the queue unsent when its context ends. A batch runs with the
// context of the call that sends it, without its cancellation: what one
// caller gives up does not fail the others' calls. Where the driver keeps a
// call's deadline (driver.DeadlineKeeper), the call with the latest
// deadline, or one without, sends the batch, under that deadline, and every
// other call of the batch stops waiting at its own: each keeps its deadline,
// as it would on a request of its own. A call whose context has ended goes
// out at once, to fail as it would have.

// combiner is the queue of a Conn.
type combiner struct {
	after int // requests in flight before calls queue; 0: never
	mu    sync.Mutex
	busy  int // requests in flight that went through the queue's check
	queue []*pendingCall
}

// pendingCall is a call waiting for a request in flight.
type pendingCall struct {
	c        driver.Call
	r        driver.Reply
	deadline time.Time      // its context's, if the driver keeps it (zero: none)
	batch    []*pendingCall // if it sends the next batch: the batch, itself first
	ready    chan struct{}  // it has its reply, or a batch to send
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{ready: make(chan struct{}, 1)} }}

// eval runs dc: at once, or in the next batch.
func (c *Conn) eval(ctx context.Context, dc driver.Call) driver.Reply {
	m := &c.comb
	if m.after == 0 || ctx.Err() != nil {
		return c.d.Eval(ctx, dc)
	}
	m.mu.Lock()
	if m.busy < m.after {
		m.busy++
		m.mu.Unlock()
		defer m.pass()
		return c.d.Eval(ctx, dc)
	}
	p := pendingPool.Get().(*pendingCall)
	p.c = dc
	if d, ok := ctx.Deadline(); ok && c.KeepsDeadline(d) {
		p.deadline = d
	}
	m.queue = append(m.queue, p)
	m.mu.Unlock()
	select {
	case <-p.ready:
	case <-ctx.Done():
		if m.leave(p) { // not sent: as if no connection was free in time
			*p = pendingCall{ready: p.ready}
			pendingPool.Put(p)
			return driver.Reply{Err: unsent{ctx.Err()}}
		}
		// In a batch already; p.batch, set before pass let go of the queue's
		// lock, tells its sender.
		if p.batch != nil || p.deadline.IsZero() {
			<-p.ready
			break
		}
		select {
		case <-p.ready: // its reply came too
		default:
			// Its request may be on the network: an unknown outcome, as that
			// of a request of its own that met its deadline. The sender
			// still writes the reply, so p is not reused. It may also not be
			// written yet, and go out after requests made since (late).
			return driver.Reply{Err: late{ctx.Err()}}
		}
	}
	if p.batch != nil {
		bctx := context.WithoutCancel(ctx)
		if !p.deadline.IsZero() { // the latest of the batch (pass)
			var cancel context.CancelFunc
			bctx, cancel = context.WithDeadline(bctx, p.deadline)
			defer cancel()
		}
		c.sendBatch(bctx, p.batch)
	}
	r := p.r
	*p = pendingCall{ready: p.ready}
	pendingPool.Put(p)
	return r
}

// sendBatch runs the calls of batch in pipelines of driver.MaxBatch calls
// at most, hands each its reply, and passes the turn on. If a pipeline
// panics (a hook of the client library's), the panic is its sender's, and
// every other call of the batch gets ErrBatchPanicked rather than waiting
// forever.
func (c *Conn) sendBatch(ctx context.Context, batch []*pendingCall) {
	delivered := false
	defer func() {
		if !delivered {
			for _, p := range batch[1:] {
				p.r = driver.Reply{Err: ErrBatchPanicked}
				p.ready <- struct{}{}
			}
		}
		c.comb.pass()
	}()
	calls := make([]driver.Call, len(batch))
	for i, p := range batch {
		calls[i] = p.c
	}
	out := make([]driver.Reply, len(batch))
	for from := 0; from < len(calls); from += driver.MaxBatch {
		to := min(from+driver.MaxBatch, len(calls))
		c.d.EvalMany(ctx, calls[from:to], out[from:to])
	}
	delivered = true
	for i, p := range batch {
		p.r = out[i]
		if i > 0 { // the first is the sender, which reads its own
			p.ready <- struct{}{}
		}
	}
}

// ErrBatchPanicked is the reply of a call whose batch panicked: it may have
// been sent.
var ErrBatchPanicked = errors.New("redlease: the pipeline that carried this request panicked in another goroutine")

// pass ends a request: the calls queued meanwhile go out as the next batch,
// sent by the one that may wait longest (no deadline, else the latest), so
// that the batch's deadline is no call's but the sender's own.
func (m *combiner) pass() {
	m.mu.Lock()
	if len(m.queue) == 0 {
		m.busy--
		m.mu.Unlock()
		return
	}
	batch := m.queue
	m.queue = nil
	last := 0
	for i, p := range batch {
		if p.deadline.IsZero() {
			last = i
			break
		}
		if p.deadline.After(batch[last].deadline) {
			last = i
		}
	}
	batch[0], batch[last] = batch[last], batch[0]
	p := batch[0]
	p.batch = batch
	m.mu.Unlock()
	p.ready <- struct{}{}
}

// leave takes p out of the queue, unless it is in a batch already.
func (m *combiner) leave(p *pendingCall) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.Index(m.queue, p)
	if i >= 0 {
		m.queue = slices.Delete(m.queue, i, i+1)
	}
	return i >= 0
}

// Queued returns how many calls wait in the queue, for tests.
func (c *Conn) Queued() int {
	c.comb.mu.Lock()
	defer c.comb.mu.Unlock()
	return len(c.comb.queue)
}

// unsent is the error of a call that left the queue unsent: its context's.
// late is the error of a call that stopped waiting while its batch, sent
// by another call, was on its way: it may reach Redis after requests made
// since (see Conn.MayArriveLate).
type late struct{ err error }

func (e late) Error() string { return e.err.Error() }
func (e late) Unwrap() error { return e.err }

type unsent struct{ err error }

func (e unsent) Error() string { return e.err.Error() }
func (e unsent) Unwrap() error { return e.err }
