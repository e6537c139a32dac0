package goredis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redlease/redlease/driver"
)

// Concurrent calls of one Driver share round trips. While combineAfter
// requests of the Driver are in flight (those that could have queued: a call
// that may not queue goes out uncounted), the calls that other goroutines
// make queue up; when a request returns, the calls that queued meanwhile go out
// together, in one pipeline sent by the first of them. An uncontended call
// goes out at once, as it would without this. Under load one write and one
// read, on both sides, carry many calls instead of one each: on a loaded
// machine those system calls are most of what a lease's round trips cost
// (docs/PERFORMANCE.md has the measurement).
//
// A queued call waits for a request in flight before its own is sent, and
// leaves the queue unsent when its context ends. A batch runs with the
// context of the call that sends it, without its cancellation: what one
// caller gives up does not fail the others' calls. On a client that ends a
// request at its context's deadline (ContextTimeoutEnabled), the call with
// the latest deadline sends the batch, under that deadline, and every other
// call of the batch stops waiting at its own: each keeps its deadline, as
// it would on a request of its own. A call whose context has ended goes out
// at once, to fail as it would have.

// combineAfter is how many requests a Driver has in flight before its calls
// queue. With 8 goroutines on this repository's 2-core machine, 4 did
// better than 1 or 2 (docs/PERFORMANCE.md).
const combineAfter = 4

// combiner is the queue of a Driver.
type combiner struct {
	off   bool // WithCombinedRequests(false)
	mu    sync.Mutex
	busy  int // requests in flight that went through the queue's check
	queue []*pendingCall
}

// pendingCall is a call waiting for a request in flight.
type pendingCall struct {
	c        driver.Call
	r        driver.Reply
	deadline time.Time      // its context's, if it keeps one (zero: none)
	batch    []*pendingCall // if it sends the next batch: the batch, itself first
	ready    chan struct{}  // it has its reply, or a batch to send
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{ready: make(chan struct{}, 1)} }}

// Eval implements driver.Driver: at once, or in the next batch.
func (d *Driver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	m := &d.comb
	if m.off || ctx.Err() != nil {
		return d.evalOne(ctx, c)
	}
	m.mu.Lock()
	if m.busy < combineAfter {
		m.busy++
		m.mu.Unlock()
		defer m.pass()
		return d.evalOne(ctx, c)
	}
	p := pendingPool.Get().(*pendingCall)
	p.c = c
	if d.ctxTime {
		p.deadline, _ = ctx.Deadline()
	}
	m.queue = append(m.queue, p)
	m.mu.Unlock()
	select {
	case <-p.ready:
	case <-ctx.Done():
		if m.leave(p) { // not sent: as if no connection was free in time
			*p = pendingCall{ready: p.ready}
			pendingPool.Put(p)
			return driver.Reply{Err: ctx.Err()}
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
			// still writes the reply, so p is not reused.
			return driver.Reply{Err: ctx.Err()}
		}
	}
	if p.batch != nil {
		bctx := context.WithoutCancel(ctx)
		if !p.deadline.IsZero() { // the latest of the batch (pass)
			var cancel context.CancelFunc
			bctx, cancel = context.WithDeadline(bctx, p.deadline)
			defer cancel()
		}
		d.sendBatch(bctx, p.batch)
	}
	r := p.r
	*p = pendingCall{ready: p.ready}
	pendingPool.Put(p)
	return r
}

// sendBatch runs the calls of batch in one pipeline (driver.MaxBatch at most),
// hands each its reply, and passes the turn on. If the pipeline panics (a
// go-redis hook of the caller's), the panic is its sender's, and every other
// call of the batch gets ErrBatchPanicked rather than waiting forever.
func (d *Driver) sendBatch(ctx context.Context, batch []*pendingCall) {
	delivered := false
	defer func() {
		if !delivered {
			for _, p := range batch[1:] {
				p.r = driver.Reply{Err: ErrBatchPanicked}
				p.ready <- struct{}{}
			}
		}
		d.comb.pass()
	}()
	calls := make([]driver.Call, len(batch))
	for i, p := range batch {
		calls[i] = p.c
	}
	out := make([]driver.Reply, len(batch))
	for from := 0; from < len(calls); from += driver.MaxBatch {
		to := min(from+driver.MaxBatch, len(calls))
		d.pipeline(ctx, calls[from:to], out[from:to])
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
func (d *Driver) Queued() int {
	d.comb.mu.Lock()
	defer d.comb.mu.Unlock()
	return len(d.comb.queue)
}
