package redlease

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// holdHook holds every script request sent alone while it is closed, and
// records the script requests of each pipeline.
type holdHook struct {
	mu        sync.Mutex
	closed    bool
	held      int
	gate      chan struct{}
	opened    sync.Once
	pipelines []int // script commands per pipeline
	// With holdPipelines, pipelines of scripts wait for openPipelines or
	// the end of their context.
	pipesClosed bool
	pipesHeld   int
	pipesGaveUp int // held pipelines that returned at their deadline
	pipeGate    chan struct{}
	pipesOpened sync.Once
}

func newHoldHook() *holdHook {
	return &holdHook{gate: make(chan struct{}), pipeGate: make(chan struct{})}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		hold := h.closed && (cmd.Name() == "evalsha" || cmd.Name() == "eval")
		if hold {
			h.held++
		}
		h.mu.Unlock()
		if hold {
			<-h.gate
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.pipelines = append(h.pipelines, n)
			hold := h.pipesClosed
			if hold {
				h.pipesHeld++
			}
			h.mu.Unlock()
			if hold {
				select {
				case <-h.pipeGate:
				case <-ctx.Done(): // as a network that does not answer
					for _, c := range cmds {
						c.SetErr(ctx.Err())
					}
					h.mu.Lock()
					h.pipesGaveUp++
					h.mu.Unlock()
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmds)
	}
}

func (h *holdHook) close() { h.mu.Lock(); h.closed = true; h.mu.Unlock() }

func (h *holdHook) open() {
	h.mu.Lock()
	h.closed = false
	h.mu.Unlock()
	h.opened.Do(func() { close(h.gate) })
}

func (h *holdHook) heldCount() int { h.mu.Lock(); defer h.mu.Unlock(); return h.held }

func (h *holdHook) holdPipelines() { h.mu.Lock(); h.pipesClosed = true; h.mu.Unlock() }

func (h *holdHook) openPipelines() {
	h.mu.Lock()
	h.pipesClosed = false
	h.mu.Unlock()
	h.pipesOpened.Do(func() { close(h.pipeGate) })
}

func (h *holdHook) pipelinesHeld() int { h.mu.Lock(); defer h.mu.Unlock(); return h.pipesHeld }

func (h *holdHook) pipelinesGaveUp() int { h.mu.Lock(); defer h.mu.Unlock(); return h.pipesGaveUp }

func (h *holdHook) pipelineSizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.pipelines...)
}

func queuedCalls(c *Client) int { return c.conn.Queued() }

// combineAfter is how many requests of a go-redis Client are in flight
// before its calls queue.
const combineAfter = combineGoRedis

// eventually polls cond for up to 10 s.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("still not %s after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type result struct {
	l   *Lease
	err error
}

// combiningClient returns a Client on a real redis-server whose script
// requests are held by a gate hook, after one warm-up lease (so that no
// reachability check or script load interferes).
func combiningClient(t *testing.T, ctxTime bool, opts ...Option) (*Client, *holdHook, *redis.Client) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxTime})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHoldHook()
	rdb.AddHook(h)
	c := New(rdb, append([]Option{WithAutoRenew(false)}, opts...)...)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	t.Cleanup(h.open) // before Close: a failed test leaves nothing held
	t.Cleanup(h.openPipelines)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "warm")
	require.NoError(t, err)
	// Its break channel subscribed too, on a goroutine of its own that
	// should not dial and subscribe while a test counts pipelines; it stays
	// subscribed while the test takes leases.
	watchingBreaks(t, c, DefaultPrefix, c.hub.id)
	require.NoError(t, l.Release(ctx))
	return c, h, srv.Client(t)
}

// holdInFlight closes h and makes combineAfter requests of c (the counter
// script), which h holds: what follows queues. Their errors come on the
// channel once h opens.
func holdInFlight(t *testing.T, c *Client, h *holdHook) chan error {
	h.close()
	first := make(chan error, combineAfter)
	for i := range combineAfter {
		go func() {
			_, err := c.LastFence(context.Background(), fmt.Sprint("a", i))
			first <- err
		}()
	}
	eventuallyTrue(t, "four requests in flight", func() bool { return h.heldCount() == combineAfter })
	return first
}

// acquireAsync starts TryAcquire calls of resources, with ctx.
func acquireAsync(ctx context.Context, c *Client, resources ...string) chan result {
	out := make(chan result, len(resources))
	for _, r := range resources {
		go func() {
			l, err := c.TryAcquire(ctx, r)
			out <- result{l, err}
		}()
	}
	return out
}

// While four requests are in flight, further calls queue and then go out as
// one pipeline, each with its own reply (here a lease, or a busy error), also
// when the server has lost its scripts meanwhile: the batch meets NOSCRIPT
// (the requests in flight run another script, which they load again
// themselves) and is sent again with the sources.
func TestCallsQueuedBehindRequestsInFlightGoOutInOnePipeline(t *testing.T) {
	c, h, admin := combiningClient(t, false)
	ctx := context.Background()
	other := New(admin, WithAutoRenew(false))
	defer func() { _ = other.Close(ctx) }()
	held, err := other.TryAcquire(ctx, "b-busy")
	require.NoError(t, err)

	first := holdInFlight(t, c, h)
	queued := acquireAsync(ctx, c, "b0", "b1", "b2", "b3", "b-busy")
	eventuallyTrue(t, "five calls queued", func() bool { return queuedCalls(c) == 5 })
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	h.open()

	for range combineAfter {
		require.NoError(t, <-first)
	}
	var leases, busy int
	for range 5 {
		r := <-queued
		if r.err != nil {
			var be *BusyError
			require.ErrorAs(t, r.err, &be, "only b-busy is held")
			busy++
			continue
		}
		leases++
		require.NoError(t, r.l.Release(ctx))
	}
	require.Equal(t, []int{4, 1}, []int{leases, busy})
	sizes := h.pipelineSizes()
	// Each call that met NOSCRIPT is sent again with its source on its own
	// (internal/wire's one cache-miss path), and may queue again; the
	// requests that were in flight are among them, before or after the
	// batch, as the machine schedules them.
	batch := slices.IndexFunc(sizes, func(n int) bool { return n > 1 })
	require.True(t, batch >= 0 && sizes[batch] == 5, "the five queued calls go out in one pipeline: %v", sizes)
	require.NoError(t, held.Release(ctx))
}

// Every call of a Client made WithCombinedRequests(false) goes out at once,
// whatever is in flight.
func TestCallsOfAClientWithoutCombiningGoOutAtOnce(t *testing.T) {
	c, h, _ := combiningClient(t, false, WithCombinedRequests(false))
	h.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := make([]string, combineAfter+2)
	for i := range names {
		names[i] = fmt.Sprint("r", i)
	}
	rs := acquireAsync(ctx, c, names...)
	eventuallyTrue(t, "every request in flight", func() bool { return h.heldCount() == len(names) })
	require.Zero(t, queuedCalls(c))
	h.open()
	for range names {
		r := <-rs
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(context.Background()))
	}
	require.Empty(t, h.pipelineSizes())
}

// heldBatchOfTwo queues an acquire of "early" (a deadline 300 ms away) and
// then one of "late" (lateIn away) behind requests in flight, lets those
// return, and holds the pipeline that carries the two: its results come on
// leaves (early's) and sends (late's).
func heldBatchOfTwo(t *testing.T, c *Client, h *holdHook, admin *redis.Client, lateIn time.Duration) (leaves, sends chan result) {
	t.Helper()
	ctx := context.Background()
	// No NOSCRIPT round of the requests in flight, whose resends would queue.
	require.NoError(t, admin.ScriptLoad(ctx, wire.Named("counter.lua").Source()).Err())
	first := holdInFlight(t, c, h)
	h.holdPipelines()
	early, cancelEarly := context.WithTimeout(ctx, 300*time.Millisecond)
	t.Cleanup(cancelEarly)
	late, cancelLate := context.WithTimeout(ctx, lateIn)
	t.Cleanup(cancelLate)
	leaves = acquireAsync(early, c, "early")
	eventuallyTrue(t, "one call queued", func() bool { return queuedCalls(c) == 1 })
	sends = acquireAsync(late, c, "late")
	eventuallyTrue(t, "two calls queued", func() bool { return queuedCalls(c) == 2 })
	h.open()
	for range combineAfter {
		require.NoError(t, <-first)
	}
	eventuallyTrue(t, "the batch held", func() bool { return h.pipelinesHeld() == 1 })
	return leaves, sends
}

// On a client that ends a request at its context's deadline
// (ContextTimeoutEnabled), calls with deadlines queue too, and each keeps
// its own: the call with the latest deadline sends the batch under it, and
// a call with an earlier one (here queued first) stops waiting at its own
// while the batch is still on its way, an unknown outcome, as for a request
// of its own.
func TestBatchKeepsTheDeadlineOfEachOfItsCalls(t *testing.T) {
	c, h, admin := combiningClient(t, true)
	leaves, sends := heldBatchOfTwo(t, c, h, admin, 3*time.Second)
	for _, call := range []struct {
		name   string
		rs     chan result
		gaveUp int // held pipelines that had returned by then
	}{{"early", leaves, 0}, {"late", sends, 1}} {
		select {
		case r := <-call.rs:
			require.ErrorIs(t, r.err, context.DeadlineExceeded, call.name)
			require.Equal(t, call.gaveUp, h.pipelinesGaveUp(), call.name)
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s call waits for its batch past its deadline", call.name)
		}
	}
	require.Equal(t, []int{2}, h.pipelineSizes(), "both calls went out in one pipeline")
}

// The call that stopped waiting for its batch (as above) may have its
// attempt reach Redis after the release by which its acquire undid it: the
// batch's sender had not written it yet. The lease it takes then, for
// nobody, is released by the releases sent again after the give-up (on the
// fake clock), not left for its TTL.
func TestBatchCallThatStoppedWaitingIsUndoneWhenItsBatchLands(t *testing.T) {
	clk := clock.NewFake(time.Now())
	c, h, admin := combiningClient(t, true, WithTTL(time.Minute), clock.Option(clk).(Option))
	ctx := context.Background()
	leaves, sends := heldBatchOfTwo(t, c, h, admin, time.Minute)
	r := servertest.Recv(t, leaves, 10*time.Second)
	require.ErrorIs(t, r.err, ErrOutcomeUnknown)
	lease := wire.KeysOf(DefaultPrefix, "early").Lease
	require.Zero(t, admin.Exists(ctx, lease).Val(), "undone before the batch went out")

	h.openPipelines() // the batch lands: early's attempt takes its lease, for nobody
	r = servertest.Recv(t, sends, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, r.l.Release(ctx))
	require.EqualValues(t, 1, admin.Exists(ctx, lease).Val(), "taken after the undo")
	servertest.WaitFor(t, 10*time.Second, func() bool {
		clk.Advance(10 * time.Millisecond)
		return admin.Exists(ctx, lease).Val() == 0
	})
}

// A queued call whose context ends before its batch is sent leaves the queue
// unsent, as a call that waited in vain for a free connection would; the
// batch goes out without it.
func TestQueuedCallLeavesAtItsDeadlineUnsent(t *testing.T) {
	c, h, admin := combiningClient(t, false)
	ctx := context.Background()
	// No NOSCRIPT round of the requests in flight, whose resends would queue.
	require.NoError(t, admin.ScriptLoad(ctx, wire.Named("counter.lua").Source()).Err())
	first := holdInFlight(t, c, h)
	stay := acquireAsync(ctx, c, "stays", "stays too")
	eventuallyTrue(t, "two calls queued", func() bool { return queuedCalls(c) == 2 })
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := c.LastFence(short, "leaves")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, driver.NotSent, c.conn.Classify(err), "the call that left was not sent")
	require.Equal(t, 2, queuedCalls(c), "the call that left is no longer queued")
	h.open()
	for range combineAfter {
		require.NoError(t, <-first)
	}
	for range 2 {
		r := <-stay
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(ctx))
	}
	require.Equal(t, []int{2}, h.pipelineSizes(), "the batch holds the calls that stayed only")
}

// panicHook panics in the first pipeline of scripts it sees.
type panicHook struct{ done sync.Once }

func (h *panicHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "evalsha" {
			h.done.Do(func() { panic("hook") })
		}
		return next(ctx, cmds)
	}
}

// A batch whose pipeline panics (a hook of the caller's) panics in its
// sender; the other calls of the batch get an error instead of waiting
// forever, and the Client goes on.
func TestBatchThatPanicsFailsItsOtherCalls(t *testing.T) {
	c, h, _ := combiningClient(t, false)
	c.conn.Driver().(*goredis.Driver).Client().AddHook(&panicHook{})
	ctx := context.Background()
	first := holdInFlight(t, c, h)
	panicked := make(chan any, 3)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			defer func() {
				if v := recover(); v != nil {
					panicked <- v
				}
			}()
			_, err := c.LastFence(ctx, fmt.Sprint("b", i))
			errs <- err
		}()
	}
	eventuallyTrue(t, "three calls queued", func() bool { return queuedCalls(c) == 3 })
	h.open()
	for range combineAfter {
		require.NoError(t, <-first)
	}
	require.Equal(t, "hook", <-panicked)
	for range 2 {
		require.ErrorIs(t, <-errs, wire.ErrBatchPanicked)
	}
	_, err := c.LastFence(ctx, "after")
	require.NoError(t, err)
}

// On Redis Cluster a batch holds calls of many slots: go-redis splits it by
// node, and each call still gets its own reply.
func TestCombinedCallsOnClusterSpanTheNodes(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	h := newHoldHook()
	cc.AddHook(h)
	c := New(cc, WithAutoRenew(false))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	t.Cleanup(h.open)
	ctx := context.Background()
	names := make([]string, 12)
	nodes := map[string]bool{}
	for i := range names {
		names[i] = fmt.Sprint("spread-", i)
		addr, err := cc.MasterForKey(ctx, wire.KeysOf(DefaultPrefix, names[i]).Lease)
		require.NoError(t, err)
		nodes[addr.Options().Addr] = true
	}
	require.Len(t, nodes, 3, "the names fall on every master")
	// No NOSCRIPT round of the requests in flight: their resends would queue,
	// and a batch of one could go out before the batch of twelve.
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.ScriptLoad(ctx, wire.Named("counter.lua").Source()).Err()
	}))
	first := holdInFlight(t, c, h)
	rs := acquireAsync(ctx, c, names...)
	eventuallyTrue(t, "every call queued", func() bool { return queuedCalls(c) == len(names) })
	h.open()
	for range combineAfter {
		require.NoError(t, <-first)
	}
	for range names {
		r := <-rs
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(ctx))
	}
	require.Equal(t, len(names), h.pipelineSizes()[0], "one batch: %v", h.pipelineSizes())
}

// gatedDriver is the go-redis driver as another client's: it holds every
// Eval while closed, and records the size of each EvalMany.
type gatedDriver struct {
	*goredis.Driver
	mu      sync.Mutex
	closed  bool
	held    int
	gate    chan struct{}
	batches []int
}

func (d *gatedDriver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	d.mu.Lock()
	hold := d.closed
	if hold {
		d.held++
	}
	d.mu.Unlock()
	if hold {
		<-d.gate
	}
	return d.Driver.Eval(ctx, c)
}

func (d *gatedDriver) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	d.mu.Lock()
	d.batches = append(d.batches, len(calls))
	d.mu.Unlock()
	d.Driver.EvalMany(ctx, calls, replies)
}

func (d *gatedDriver) heldCount() int { d.mu.Lock(); defer d.mu.Unlock(); return d.held }

// A Client of NewWithDriver combines too, once combineDriver of its requests
// are in flight (rueidis and valkey-go pipeline fewer by themselves), through
// the driver's EvalMany; WithCombinedRequests(false) turns it off.
func TestCallsOfAnyDriverCombineUnderHeavierLoad(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("combining=", on), func(t *testing.T) {
			srv := servertest.Redis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			gd, err := goredis.New(admin)
			require.NoError(t, err)
			d := &gatedDriver{Driver: gd, gate: make(chan struct{})}
			c := NewWithDriver(d, WithAutoRenew(false), WithCombinedRequests(on))
			defer func() { _ = c.Close(ctx) }()
			l, err := c.TryAcquire(ctx, "warm")
			require.NoError(t, err)
			watchingBreaks(t, c, DefaultPrefix, c.hub.id)
			require.NoError(t, l.Release(ctx))
			// No NOSCRIPT round of the calls, whose resends would queue.
			require.NoError(t, admin.ScriptLoad(ctx, wire.Named("counter.lua").Source()).Err())

			d.mu.Lock()
			d.closed = true
			d.mu.Unlock()
			const more = 3
			errs := make(chan error, combineDriver+more)
			lastFence := func(i int) {
				_, err := c.LastFence(ctx, fmt.Sprint("r", i))
				errs <- err
			}
			for i := range combineDriver {
				go lastFence(i)
			}
			eventuallyTrue(t, "requests in flight", func() bool { return d.heldCount() == combineDriver })
			for i := range more {
				go lastFence(combineDriver + i)
			}
			if on {
				eventuallyTrue(t, "calls queued", func() bool { return queuedCalls(c) == more })
			} else {
				eventuallyTrue(t, "every call in flight", func() bool { return d.heldCount() == combineDriver+more })
			}
			close(d.gate)
			for range combineDriver + more {
				require.NoError(t, <-errs)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			if on {
				require.Equal(t, []int{more}, d.batches, "the queued calls went out in one pipeline")
			} else {
				require.Equal(t, 0, len(d.batches), "no pipeline")
			}
		})
	}
}
