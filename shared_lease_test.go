package redlease

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestSemaphoreHoldsAtMostNPermits(t *testing.T) {
	for _, name := range []string{"miniredis", "redis-server"} {
		t.Run(name, func(t *testing.T) {
			rdb := servertest.Redis(t).Client(t)
			if name == "miniredis" {
				_, rdb = servertest.Mini(t)
			}
			c := New(rdb, WithAutoRenew(false))
			ctx := t.Context()
			var held []*Lease
			seen := map[int]bool{}
			var last int64
			for range 3 {
				l, err := c.TryAcquireSemaphore(ctx, "payments", 3)
				require.NoError(t, err)
				require.False(t, seen[l.Permit()], "permit %d twice", l.Permit())
				seen[l.Permit()] = true
				require.Greater(t, l.Fence(), last)
				last = l.Fence()
				held = append(held, l)
			}
			_, err := c.TryAcquireSemaphore(ctx, "payments", 3)
			var busy *BusyError
			require.ErrorAs(t, err, &busy, "a fourth holder")
			require.Positive(t, busy.Remaining)

			_, err = c.TryAcquireSemaphore(ctx, "payments", 5)
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorIs(t, err, ErrInvalidArgument, "another number of permits while held")
			require.ErrorContains(t, err, "in use with 3 permits, not 5")

			require.NoError(t, held[1].Release(ctx))
			require.NoError(t, held[1].Release(ctx), "the verdict again")
			next, err := c.TryAcquireSemaphore(ctx, "payments", 3)
			require.NoError(t, err)
			require.Equal(t, held[1].Permit(), next.Permit(), "the released permit is the next one taken")
			require.Greater(t, next.Fence(), last, "its fence rises with its new holder")
			require.ErrorIs(t, held[1].Refresh(ctx), ErrReleased)
			require.NoError(t, next.Refresh(ctx))
			for _, l := range []*Lease{held[0], held[2], next} {
				require.NoError(t, l.Release(ctx))
			}
			l, err := c.TryAcquireSemaphore(ctx, "payments", 5)
			require.NoError(t, err, "none held: the number may change")
			require.NoError(t, l.Release(ctx))

			for _, n := range []int{0, -1, MaxPermits + 1} {
				_, err := c.TryAcquireSemaphore(ctx, "p", n)
				require.ErrorIs(t, err, ErrInvalidArgument, "%d permits", n)
			}
		})
	}
}

// A permit holder that paused past its TTL: its permit lapses, the next
// holder takes that very permit with a higher fence, and the old holder's
// renewal and release find it gone.
func TestIntegrationSemaphorePermitGoesToTheNextHolderWithAHigherFence(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	c := New(rdb)
	a, err := c.TryAcquireSemaphore(ctx, "s", 1, WithTTL(300*time.Millisecond), WithAutoRenew(false))
	require.NoError(t, err)
	servertest.WaitDone(t, a.Context(), 5*time.Second)
	time.Sleep(100 * time.Millisecond) // past the TTL in Redis too
	b, err := c.TryAcquireSemaphore(ctx, "s", 1)
	require.NoError(t, err)
	require.Equal(t, a.Permit(), b.Permit())
	require.Greater(t, b.Fence(), a.Fence())
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost)
	require.NoError(t, b.Refresh(ctx), "the old holder's release left the new one alone")
	require.NoError(t, b.Release(ctx))
}

// Waiters for a full semaphore take turns as permits are released (that
// each is woken by a wake-up, not a timer, is
// TestIntegrationSemaphoreQuickReleasesWakeOneWaiterEach's); the watchdog
// renews permits.
func TestIntegrationSemaphoreWaitersAreWokenByReleases(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	c := New(rdb, WithTTL(time.Second))
	const permits, workers = 2, 6
	var (
		inside, most atomic.Int32
		wg           sync.WaitGroup
	)
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				l, err := c.AcquireSemaphore(ctx, "pool", permits)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	require.LessOrEqual(t, most.Load(), int32(permits))

	// A lease held past several renew intervals stays held.
	l, err := c.TryAcquireSemaphore(ctx, "pool", permits)
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, l.Context().Err())
	require.NoError(t, l.Release(ctx))
}

// A lost reply: the retry with the same owner token gets the same permit
// and fence.
func TestSemaphoreLostReplyKeepsOnePermit(t *testing.T) {
	_, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb)
	warm(t, c)
	ctx := t.Context()
	hook.LoseReplies.Store(1)
	l, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	other, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	require.NotEqual(t, l.Permit(), other.Permit(), "the retry took one permit, not two")
	_, err = c.TryAcquireSemaphore(ctx, "s", 2)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, errors.Join(l.Release(ctx), other.Release(ctx)))

	// The acquire's reply lost, and then that of the check whether Redis
	// answers: given up, and the permit is released by owner.
	hook.LoseReplies.Store(2)
	_, err = c.TryAcquireSemaphore(ctx, "s", 1)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	l, err = c.TryAcquireSemaphore(ctx, "s", 1)
	require.NoError(t, err, "the permit of unknown outcome was given back")
	require.NoError(t, l.Release(ctx))
}

func TestReadersShareAndWritersExclude(t *testing.T) {
	for _, name := range []string{"miniredis", "redis-server"} {
		t.Run(name, func(t *testing.T) {
			rdb := servertest.Redis(t).Client(t)
			if name == "miniredis" {
				_, rdb = servertest.Mini(t)
			}
			c := New(rdb, WithAutoRenew(false))
			ctx := t.Context()
			r1, err := c.TryAcquireRead(ctx, "config")
			require.NoError(t, err)
			r2, err := c.TryAcquireRead(ctx, "config")
			require.NoError(t, err, "readers share")
			require.Greater(t, r2.Fence(), r1.Fence())
			_, err = c.TryAcquireWrite(ctx, "config")
			var busy *BusyError
			require.ErrorAs(t, err, &busy, "a writer waits for the readers")
			require.NoError(t, errors.Join(r1.Release(ctx), r2.Release(ctx)))
			require.NoError(t, r1.Release(ctx), "the verdict again")

			w, err := c.TryAcquireWrite(ctx, "config", WithHolder("the writer"))
			require.NoError(t, err)
			require.Greater(t, w.Fence(), r2.Fence())
			_, err = c.TryAcquireRead(ctx, "config")
			require.ErrorAs(t, err, &busy, "no reader beside the writer")
			require.Equal(t, "the writer", busy.Holder)
			_, err = c.TryAcquireWrite(ctx, "config")
			require.ErrorAs(t, err, &busy, "no second writer")
			require.NoError(t, w.Refresh(ctx))
			require.NoError(t, w.Release(ctx))
			r3, err := c.TryAcquireRead(ctx, "config")
			require.NoError(t, err)
			require.Greater(t, r3.Fence(), w.Fence(), "a read fence follows the writes before it")
			require.NoError(t, r3.Refresh(ctx))
			require.NoError(t, r3.Release(ctx))

			l, err := c.TryAcquire(ctx, "config")
			require.NoError(t, err, "nothing held or waited for: the exclusive lease is free too (holders are kept in keys of their own)")
			require.NoError(t, l.Release(ctx))
		})
	}
}

// A waiting writer is not starved by a stream of readers: once it waits, new
// readers wait behind it; its release wakes every waiting reader at once.
func TestIntegrationWriterFirstThenEveryReader(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	c := New(rdb)
	r1, err := c.TryAcquireRead(ctx, "doc")
	require.NoError(t, err)

	writer := make(chan acquired, 1)
	go func() {
		l, err := c.AcquireWrite(ctx, "doc")
		writer <- acquired{l, err}
	}()
	servertest.WaitFor(t, 5*time.Second, func() bool { return len(queued(t, rdb, "doc")) == 1 })
	_, err = c.TryAcquireRead(ctx, "doc")
	var busy *BusyError
	require.ErrorAs(t, err, &busy, "a new reader waits behind the waiting writer")

	const readers = 4
	got := make(chan acquired, readers)
	for range readers {
		go func() {
			l, err := c.AcquireRead(ctx, "doc")
			got <- acquired{l, err}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, got)
	require.NoError(t, r1.Release(ctx)) // the last reader out: the writer goes
	w := servertest.Recv(t, writer, 5*time.Second)
	require.NoError(t, w.err)
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, got, "no reader beside the writer")

	start := time.Now()
	require.NoError(t, w.l.Release(ctx))
	for range readers {
		r := servertest.Recv(t, got, 5*time.Second)
		require.NoError(t, r.err)
		require.Greater(t, r.l.Fence(), w.l.Fence())
		defer r.l.Release(ctx)
	}
	t.Logf("the writer's release let %d readers in within %v", readers, time.Since(start))
	require.Less(t, time.Since(start), 500*time.Millisecond, "woken together, not one poll after another")
}

// Shared leases end with ErrLeaseLost when Redis says they are not ours,
// and a TryAcquire of every kind refuses before any round trip what cannot
// work.
func TestSharedLeasesLostAndBadInput(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	p, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	r, err := c.TryAcquireRead(ctx, "rw")
	require.NoError(t, err)
	mr.Del(wire.Key(DefaultPrefix, "s", wire.KindPermits))
	mr.Del(wire.Key(DefaultPrefix, "rw", wire.KindReaders))
	require.ErrorIs(t, p.Refresh(ctx), ErrLeaseLost)
	require.ErrorIs(t, r.Refresh(ctx), ErrLeaseLost)
	require.ErrorIs(t, context.Cause(p.Context()), ErrLeaseLost)

	src := &counterFences{}
	_, err = c.TryAcquireRead(ctx, "rw", WithFenceSource(src))
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = c.TryAcquireSemaphore(ctx, "", 2)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, -1, (*Lease)(nil).Permit())
	require.Equal(t, -1, r.Permit(), "no permit")
}

// Inspect and Scan show shared leases and their holders; Break removes one
// by its fence, and its holder's release reports the loss.
func TestIntegrationAdminOfSharedLeases(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	p0, err := c.TryAcquireSemaphore(ctx, "pool", 3, WithHolder("worker 0"))
	require.NoError(t, err)
	p1, err := c.TryAcquireSemaphore(ctx, "pool", 3)
	require.NoError(t, err)
	r, err := c.TryAcquireRead(ctx, "doc", WithHolder("reader"))
	require.NoError(t, err)

	st, err := c.Inspect(ctx, "pool")
	require.NoError(t, err)
	require.True(t, st.Held, "a permit holds it")
	require.Equal(t, "semaphore", st.Kind)
	require.Empty(t, st.Owner, "no exclusive lease")
	require.Equal(t, 3, st.Permits)
	require.Len(t, st.Shared, 2)
	byPermit := map[int]Holder{}
	for _, h := range st.Shared {
		require.Equal(t, "permit", h.Kind)
		byPermit[h.Permit] = h
	}
	require.Equal(t, Holder{Kind: "permit", Permit: p0.Permit(), Owner: p0.Owner(), Fence: p0.Fence(), Holder: "worker 0",
		TTL: byPermit[p0.Permit()].TTL}, byPermit[p0.Permit()])
	require.Positive(t, byPermit[p0.Permit()].TTL)

	st, err = c.Inspect(ctx, "doc")
	require.NoError(t, err)
	require.True(t, st.Held, "a read lease holds it")
	require.Equal(t, "read/write", st.Kind)
	require.Equal(t, []Holder{{Kind: "read", Owner: r.Owner(), Fence: r.Fence(), Holder: "reader", TTL: st.Shared[0].TTL}}, st.Shared)

	found := map[string]int{}
	require.NoError(t, c.Scan(ctx, "*", func(st Status) error { found[st.Resource] += len(st.Shared); return nil }))
	require.Equal(t, map[string]int{"pool": 2, "doc": 1}, found)

	st, removed, err := c.Break(ctx, "pool", p1.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	require.Len(t, st.Shared, 2, "the status before the break")
	require.ErrorIs(t, p1.Release(ctx), ErrLeaseLost, "the broken holder learns of it")
	next, err := c.TryAcquireSemaphore(ctx, "pool", 3)
	require.NoError(t, err)
	require.Greater(t, next.Fence(), p1.Fence())
	_, removed, err = c.Break(ctx, "doc", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.ErrorIs(t, r.Refresh(ctx), ErrLeaseLost)
	w, err := c.TryAcquireWrite(ctx, "doc")
	require.NoError(t, err, "the reader is gone: the writer goes in")
	require.NoError(t, errors.Join(w.Release(ctx), p0.Release(ctx), next.Release(ctx)))
}

// Shared leases on Redis Cluster: each script's keys share the resource's
// slot (the fence counter included), so they run on any master.
func TestIntegrationSharedLeasesOnCluster(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	c := New(cc, WithTTL(time.Second))
	defer c.Close(ctx)
	for i := range 6 { // over the slots of all masters
		r := fmt.Sprintf("cluster:%d", i)
		p, err := c.AcquireSemaphore(ctx, r, 2)
		require.NoError(t, err)
		rd, err := c.AcquireRead(ctx, r+":rw")
		require.NoError(t, err)
		done := make(chan acquired, 1)
		go func() {
			l, err := c.AcquireWrite(ctx, r+":rw")
			done <- acquired{l, err}
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, rd.Release(ctx))
		w := servertest.Recv(t, done, 5*time.Second) // woken through the slot's shard channel
		require.NoError(t, w.err)
		require.Greater(t, w.l.Fence(), rd.Fence())
		st, err := c.Inspect(ctx, r)
		require.NoError(t, err)
		require.Len(t, st.Shared, 1)
		require.NoError(t, errors.Join(p.Release(ctx), w.l.Release(ctx)))
	}
}

// Busy errors of shared leases say what they wait for; a semaphore in use
// with another number of permits fails at once, waiting or not.
func TestSharedBusyErrorsSayWhy(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	p, err := c.TryAcquireSemaphore(ctx, "s", 1)
	require.NoError(t, err)
	_, err = c.TryAcquireSemaphore(ctx, "s", 1)
	require.ErrorContains(t, err, `every permit of "s" is held`)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.AcquireSemaphore(wctx, "s", 2)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Less(t, time.Since(start), 5*time.Second, "final, not waited out")

	r, err := c.TryAcquireRead(ctx, "rw")
	require.NoError(t, err)
	_, err = c.TryAcquireWrite(ctx, "rw")
	require.ErrorContains(t, err, `"rw" has readers`)
	require.NoError(t, errors.Join(p.Release(ctx), r.Release(ctx)))

	l, err := c.TryAcquire(ctx, "x", WithHolder("web-1\nrm -rf /"))
	require.NoError(t, err)
	_, err = c.TryAcquire(ctx, "x")
	require.NotContains(t, err.Error(), "\n", "a holder's description cannot break the message")
	require.NoError(t, l.Release(ctx))
}

// A release whose reply was lost, repeated after the next holder took the
// lease, is recognised as done, for every kind of lease. (For a permit the
// record lasted only until the permit was taken again, for a read lease
// until a later reader's acquire trimmed it: the retry reported
// ErrLeaseLost. Found by the shared fault scenarios.)
func TestIntegrationRetriedReleaseAfterTheNextHolderIsRecognised(t *testing.T) {
	kinds := map[string]func(context.Context, *Client) (*Lease, error){
		"lease":  func(ctx context.Context, c *Client) (*Lease, error) { return c.TryAcquire(ctx, "r") },
		"permit": func(ctx context.Context, c *Client) (*Lease, error) { return c.TryAcquireSemaphore(ctx, "r", 1) },
		"read":   func(ctx context.Context, c *Client) (*Lease, error) { return c.TryAcquireRead(ctx, "r") },
		"write":  func(ctx context.Context, c *Client) (*Lease, error) { return c.TryAcquireWrite(ctx, "r") },
	}
	for name, take := range kinds {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			srv := servertest.Redis(t)
			proxy := servertest.StartProxy(t, srv.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			lossy, other := New(rdb, WithAutoRenew(false)), New(srv.Client(t), WithAutoRenew(false))
			defer lossy.Close(ctx)
			defer other.Close(ctx)
			warmUp, err := take(ctx, other) // the scripts in the server's cache
			require.NoError(t, err)
			require.NoError(t, warmUp.Release(ctx))

			a, err := take(ctx, lossy)
			require.NoError(t, err)
			require.NoError(t, rdb.Ping(ctx).Err())
			proxy.DropReplies(1)
			require.ErrorIs(t, a.Release(ctx), ErrOutcomeUnknown, "the release ran, its reply was lost")
			b, err := take(ctx, other)
			require.NoError(t, err)
			require.NoError(t, a.Release(ctx), "asked again, the release that happened is recognised")
			require.NoError(t, b.Release(ctx))
		})
	}
}

// A released reader's entry in readinfo goes with its release. (It stayed:
// the trimming in rw_read.lua reaches only readers still in readers, and
// each new reader lengthened readinfo's TTL, so while readers overlapped the
// hash grew by one entry per read lease: 51 here, beside one reader.)
func TestIntegrationReleasedReadersLeaveReadInfo(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	long, err := c.TryAcquireRead(ctx, "doc")
	require.NoError(t, err)
	for range 50 {
		r, err := c.TryAcquireRead(ctx, "doc")
		require.NoError(t, err)
		require.NoError(t, r.Release(ctx))
	}
	readers := wire.Key(DefaultPrefix, "doc", wire.KindReaders)
	readinfo := wire.Key(DefaultPrefix, "doc", wire.KindReadInfo)
	require.Equal(t, int64(1), rdb.ZCard(ctx, readers).Val())
	require.Equal(t, []string{long.Owner()}, rdb.HKeys(ctx, readinfo).Val(), "only the reader still inside")
	require.NoError(t, long.Release(ctx))
	require.Zero(t, rdb.HLen(ctx, readinfo).Val())
}

// Two permits released in quick succession, both before the first waiter's
// attempt runs, get both waiters in, by wake-ups alone: the waiters' Clients
// run on a clock that never moves, so no backoff timer of theirs ever fires,
// and a waiter that no wake-up reaches waits for good. (Both releases woke
// the first waiter, which stays first in the queue until its attempt runs;
// the second slept until its timer, 25 ms to 1 s later, and with WithFair
// the free permit sat idle meanwhile.)
func TestIntegrationSemaphoreQuickReleasesWakeOneWaiterEach(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			srv := servertest.Redis(t)
			ctx := t.Context()
			holders := New(srv.Client(t), WithAutoRenew(false))
			a, err := holders.TryAcquireSemaphore(ctx, "pool", 2, WithTTL(time.Minute))
			require.NoError(t, err)
			b, err := holders.TryAcquireSemaphore(ctx, "pool", 2, WithTTL(time.Minute))
			require.NoError(t, err)

			gate := &gateHook{}
			rdb := srv.Client(t)
			rdb.AddHook(gate)
			frozen := clock.NewFake(time.Now())
			got := make(chan acquired, 2)
			for i := range 2 {
				c := New(rdb, WithAutoRenew(false), WithTTL(time.Minute), WithFair(fair),
					clock.Option(frozen).(Option))
				defer c.Close(ctx)
				go func() {
					l, err := c.AcquireSemaphore(ctx, "pool", 2)
					got <- acquired{l, err}
				}()
				// In the queue in this order, and asleep on the frozen clock.
				servertest.WaitFor(t, 5*time.Second, func() bool {
					return len(queued(t, srv.Client(t), "pool")) == i+1 && c.hub.asleep.Load() == 1
				})
			}

			gate.shut() // the woken waiter's attempt waits until both releases ran
			require.NoError(t, errors.Join(a.Release(ctx), b.Release(ctx)))
			gate.open()
			var fences []int64
			for range 2 {
				// The bound is no timing: without a wake-up the waiter never
				// gets in, with one it does within milliseconds.
				r := servertest.Recv(t, got, 2*time.Second)
				require.NoError(t, r.err)
				fences = append(fences, r.l.Fence())
				defer r.l.Release(ctx)
			}
			require.Empty(t, queued(t, srv.Client(t), "pool"))
			require.Greater(t, min(fences[0], fences[1]), b.Fence())
		})
	}
}

// gateHook holds a client's scripts, while it is shut, until it is opened.
type gateHook struct {
	mu     sync.Mutex
	opened chan struct{} // nil while open
}

func (g *gateHook) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = make(chan struct{})
}

func (g *gateHook) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.opened)
	g.opened = nil
}

// wait returns once the gate is open, if any of cmds is a script.
func (g *gateHook) wait(cmds ...redis.Cmder) {
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	if opened == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			<-opened
			return
		}
	}
}

func (g *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.wait(cmd)
		return next(ctx, cmd)
	}
}

func (g *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.wait(cmds...)
		return next(ctx, cmds)
	}
}

// A permit's release whose reply was lost, retried after the semaphore's
// number of permits changed, is recognised. (The change deleted the holders
// hash, and with it the record of the release: the retry reported
// ErrLeaseLost.)
func TestIntegrationRetriedPermitReleaseAfterTheNumberChangedIsRecognised(t *testing.T) {
	ctx := t.Context()
	srv := servertest.Redis(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lossy, other := New(rdb, WithAutoRenew(false)), New(srv.Client(t), WithAutoRenew(false))
	defer lossy.Close(ctx)
	defer other.Close(ctx)
	warmUp, err := other.TryAcquireSemaphore(ctx, "s", 1) // the scripts in the server's cache
	require.NoError(t, err)
	require.NoError(t, warmUp.Release(ctx))

	a, err := lossy.TryAcquireSemaphore(ctx, "s", 1)
	require.NoError(t, err)
	require.NoError(t, rdb.Ping(ctx).Err())
	proxy.DropReplies(1)
	require.ErrorIs(t, a.Release(ctx), ErrOutcomeUnknown, "the release ran, its reply was lost")
	b, err := other.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err, "none held: the number may change")
	require.Equal(t, a.Permit(), b.Permit())
	require.NoError(t, a.Release(ctx), "asked again, the release that happened is recognised")
	require.NoError(t, b.Release(ctx))
}
