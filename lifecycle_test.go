package redlease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// The lease lifecycle at its edges: Close racing an acquire, Close of leases
// that ended locally, Close and Release against an unresponsive Redis, and
// what observers are told. (Found in a review; each test failed before its
// fix.)

func (c *Client) tracked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.leases)
}

// Close releases every lease in pipelines, so that it is bounded by its ctx
// and not by the number of leases times the release timeout.
func TestCloseIsBoundedByItsContext(t *testing.T) {
	mr, _ := servertest.Mini(t)
	p := servertest.StartProxy(t, mr.Addr())
	// ContextTimeoutEnabled: go-redis bounds a request already on the
	// network by ctx only then (see Close).
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithTTL(10*time.Second), WithReleaseTimeout(2*time.Second))
	ctx := context.Background()
	var leases []*Lease
	for i := range 8 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("r%d", i))
		require.NoError(t, err)
		leases = append(leases, l)
	}
	p.Blackhole()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Close(cctx)
	took := time.Since(start)
	p.Heal()
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Less(t, took, 2*time.Second, "8 leases × a 2 s release timeout, one by one, would take 16 s")
	for _, l := range leases {
		require.ErrorIs(t, context.Cause(l.Context()), ErrReleased, "Close ends every lease, released in Redis or not")
	}
	// The releases that did not get through can be retried.
	for _, l := range leases {
		require.NoError(t, l.Release(ctx))
	}
	for i := range 8 {
		require.False(t, mr.Exists(fmt.Sprintf("redlease:{r%d}:lease", i)))
	}
}

// With ContextTimeoutEnabled, the release timeout bounds a Release to an
// unresponsive Redis.
func TestReleaseTimeoutBoundsTheRequest(t *testing.T) {
	mr, _ := servertest.Mini(t)
	p := servertest.StartProxy(t, mr.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithTTL(10*time.Second), WithReleaseTimeout(200*time.Millisecond))
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	p.Blackhole()
	start := time.Now()
	err = l.Release(ctx)
	took := time.Since(start)
	p.Heal()
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Less(t, took, 2*time.Second, "go-redis's own timeouts (3 s read, retried) were not what bounded it")
	require.NoError(t, l.Release(ctx), "a Release that got no answer can be retried")
	require.NoError(t, c.Close(ctx))
}

// A lease whose context ended at its local deadline may still be held in
// Redis for up to a TTL: Close releases it, and a Client that outlives it
// forgets it once Redis surely has.
func TestCloseReleasesALapsedLease(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second))
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "r", WithMaxHold(100*time.Millisecond))
	require.NoError(t, err)
	servertest.WaitDone(t, l.Context(), 5*time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), ErrMaxHold)
	require.True(t, mr.Exists("redlease:{r}:lease"), "Redis still holds it")
	require.Equal(t, 1, c.tracked())
	require.NoError(t, c.Close(ctx))
	require.False(t, mr.Exists("redlease:{r}:lease"), "Close released it")
	require.Zero(t, c.tracked())
	require.NoError(t, l.Release(ctx), "Release after Close returns Close's verdict")

	// Not released: forgotten a TTL after the lapse.
	c2 := New(rdb, WithTTL(300*time.Millisecond), WithAutoRenew(false))
	defer c2.Close(ctx)
	l2, err := c2.TryAcquire(ctx, "r2")
	require.NoError(t, err)
	servertest.WaitDone(t, l2.Context(), 5*time.Second)
	require.Equal(t, 1, c2.tracked())
	servertest.WaitFor(t, 5*time.Second, func() bool { return c2.tracked() == 0 })

	// Released by its holder: forgotten at once.
	l3, err := c2.TryAcquire(ctx, "r3")
	require.NoError(t, err)
	servertest.WaitDone(t, l3.Context(), 5*time.Second)
	require.NoError(t, l3.Release(ctx))
	require.Zero(t, c2.tracked())
}

// Close may begin while an acquire's reply is being turned into a lease:
// Close never sees a lease that is not complete, and the acquire never
// hands out a lease that Close has ended.
func TestCloseRacingAnAcquireNeverSeesAnIncompleteLease(t *testing.T) {
	for range 20 {
		_, rdb := servertest.Mini(t)
		c := New(rdb, WithTTL(10*time.Second))
		// The context is slow to answer Done once the reply is in: that is
		// where the lease used to be visible to Close without its context.
		ctx := &slowDoneCtx{Context: context.Background(), done: make(chan struct{})}
		rdb.AddHook(&afterScriptHook{after: func() { ctx.slow.Store(true) }})
		acquired := make(chan error, 1)
		go func() {
			l, err := c.TryAcquire(ctx, "r")
			if err == nil && l.Context().Err() != nil {
				err = fmt.Errorf("handed out a lease that had ended: %w", context.Cause(l.Context()))
			}
			acquired <- err
		}()
		servertest.WaitFor(t, 5*time.Second, ctx.inDone.Load)
		require.NoError(t, c.Close(context.Background())) // used to panic on a nil cancel func
		err := <-acquired
		if err != nil {
			require.ErrorIs(t, err, ErrClientClosed)
		}
		require.Zero(t, c.tracked())
		other := New(rdb)
		l, err := other.TryAcquire(context.Background(), "r")
		require.NoError(t, err, "a lease that Close or the acquire gave back is free")
		require.NoError(t, l.Release(context.Background()))
	}
}

type slowDoneCtx struct {
	context.Context
	done   chan struct{}
	slow   atomic.Bool
	inDone atomic.Bool
}

func (c *slowDoneCtx) Done() <-chan struct{} {
	if c.slow.CompareAndSwap(true, false) {
		c.inDone.Store(true)
		time.Sleep(100 * time.Millisecond)
	}
	return c.done
}

// afterScriptHook calls after once a script's reply is in.
type afterScriptHook struct{ after func() }

func (h *afterScriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			h.after()
		}
		return err
	}
}
func (h *afterScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The observers hear of a loss only for a lease that was handed out, and a
// retried Release is not an overrun.
func TestObserversHearOnlyOfRealLossesAndOverruns(t *testing.T) {
	_, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	var lost, overran, released atomic.Int32
	obs := ObserverFunc(func(_ context.Context, e Event) {
		switch {
		case e.Kind == EventLost:
			lost.Add(1)
		case e.Kind == EventRelease && e.Overran:
			overran.Add(1)
		case e.Kind == EventRelease:
			released.Add(1)
		}
	})
	c := New(rdb, WithObserver(obs))
	ctx := context.Background()
	defer c.Close(ctx)

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id) // its SUBSCRIBE is not the request whose reply is lost
	hook.LoseReplies.Store(1)
	require.ErrorIs(t, l.Release(ctx), ErrOutcomeUnknown)
	require.NoError(t, l.Release(ctx))
	require.Zero(t, overran.Load(), "the lease was active when Release was first called")
	require.EqualValues(t, 2, released.Load())

	// A lease the acquire call gave back (its fence source failed) was never
	// the caller's to lose.
	_, err = c.TryAcquire(ctx, "s", WithFenceSource(&counterFences{before: func() error { return fmt.Errorf("down") }}))
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Zero(t, lost.Load())
}

// A fence source slower than the lease's lifetime: the lease is not handed
// out, is given back, and is no loss to the observers (it lapsed before
// anyone had it).
func TestSlowFenceSourceHandsOutNoEndedLease(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	var lost atomic.Int32
	obs := ObserverFunc(func(_ context.Context, e Event) {
		if e.Kind == EventLost {
			lost.Add(1)
		}
	})
	c := New(rdb, WithTTL(200*time.Millisecond), WithAutoRenew(false), WithObserver(obs))
	ctx := context.Background()
	defer c.Close(ctx)
	slow := &counterFences{before: func() error {
		time.Sleep(400 * time.Millisecond) // past the local deadline
		return nil
	}}
	_, err := c.TryAcquire(ctx, "r", WithFenceSource(slow))
	require.ErrorIs(t, err, ErrNotAcquired)
	servertest.WaitFor(t, 5*time.Second, func() bool { return !mr.Exists("redlease:{r}:lease") }) // given back in the background
	require.Zero(t, c.tracked())
	require.Zero(t, lost.Load(), "a lease never handed out was reported lost")

	// A source that answers in time extends the lease as a renewal would.
	fast := &counterFences{before: func() error { time.Sleep(50 * time.Millisecond); return nil }}
	sent := time.Now()
	l, err := c.TryAcquire(ctx, "r", WithFenceSource(fast))
	require.NoError(t, err)
	require.True(t, l.Deadline().After(sent.Add(l.cfg.lifetime()+40*time.Millisecond)), "the confirm's send time sets the deadline")
	require.NoError(t, l.Release(ctx))
}

func TestKeyNamesKeepTheirHashTag(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := context.Background()
	_, err := New(rdb, WithPrefix("app{x}:")).TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = New(rdb).TryAcquire(ctx, "}r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	l, err := New(rdb).TryAcquire(ctx, "a}b") // its hash tag is "a": still one slot
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// Two Close calls at once (a signal handler's and a deferred one): each used
// to lock the leases' relMu in its own map order, and they deadlocked.
func TestConcurrentClosesRunOneAfterTheOther(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second), WithAutoRenew(false))
	ctx := context.Background()
	for i := range 300 {
		_, err := c.TryAcquire(ctx, fmt.Sprintf("r%d", i))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_ = c.Close(ctx)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(start)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("two concurrent Close calls deadlocked")
	}
}

// The usual shutdown: the root context is canceled by a signal, and the
// deferred Close gets it. Close ignores the cancellation, as Release does, so
// that the resources are not blocked for a TTL.
func TestCloseWithACanceledContextStillReleases(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 3 {
		_, err := c.TryAcquire(ctx, fmt.Sprintf("r%d", i))
		require.NoError(t, err)
	}
	cancel() // SIGTERM
	err := c.Close(ctx)
	for i := range 3 {
		require.False(t, mr.Exists(fmt.Sprintf("redlease:{r%d}:lease", i)), "Close(ctx) left the lease in Redis: %v", err)
	}
}

// A lease that the watchdog stopped renewing (its renewals failed until its
// deadline was near) is renewed again after a Refresh of the caller's
// confirms it.
func TestRefreshPutsALeaseBackInTheWatchdogsQueue(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second))
	ctx := context.Background()
	defer c.Close(ctx)
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	c.wd.mu.Lock()
	require.GreaterOrEqual(t, l.index, 0, "queued for renewal")
	c.wd.queue.remove(l.index) // as the watchdog does with a lease it gives up on
	c.wd.mu.Unlock()
	require.NoError(t, l.Refresh(ctx))
	c.wd.mu.Lock()
	defer c.wd.mu.Unlock()
	require.GreaterOrEqual(t, l.index, 0, "queued for renewal again")
	require.WithinDuration(t, time.Now().Add(l.cfg.interval()), c.wd.queue.timeOf(l), time.Second)
}

// A renewal sent early, with a group of others that fall due within a tenth
// of an interval, keeps its lease's cadence: the watchdog queues the next
// one an interval after this one fell due, not after it went, but puts it
// off by at most a quarter of what the lifetime leaves after the interval.
// A renewal sent late is followed by the next an interval after it went.
func TestEarlyRenewalsKeepTheLeasesCadence(t *testing.T) {
	_, rdb := servertest.Mini(t)
	clk := clock.NewFake(time.Now())
	const ttl = 30 * time.Second
	c := New(rdb, WithTTL(ttl), clock.Option(clk).(Option)) // renewed every 10 s
	ctx := t.Context()
	defer c.Close(ctx)
	lifetime := c.cfg.lifetime()
	now, interval := clk.Now(), ttl/3
	for _, tc := range []struct {
		name      string
		opts      []LeaseOption
		due, next time.Time
	}{
		{"on time", nil, now, now.Add(interval)},
		{"early", nil, now.Add(500 * time.Millisecond), now.Add(500 * time.Millisecond).Add(interval)},
		{"late", nil, now.Add(-2 * time.Second), now.Add(interval)},
		{
			"early, with an interval near the lifetime",
			[]LeaseOption{WithRenewInterval(lifetime - 400*time.Millisecond)},
			now.Add(time.Second), now.Add(lifetime - 400*time.Millisecond + 100*time.Millisecond),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.TryAcquire(ctx, tc.name, tc.opts...)
			require.NoError(t, err)
			c.wd.mu.Lock()
			c.wd.queue.remove(l.index) // as the loop takes a batch off the queue
			c.wd.inflight++
			c.wd.mu.Unlock()
			c.wd.renewBatch([]dueLease{{l, tc.due}})
			c.wd.mu.Lock()
			defer c.wd.mu.Unlock()
			require.GreaterOrEqual(t, l.index, 0, "queued again")
			require.True(t, tc.next.Equal(c.wd.queue.timeOf(l)), "next renewal at %v, want %v",
				c.wd.queue.timeOf(l).Sub(now), tc.next.Sub(now))
		})
	}
}
