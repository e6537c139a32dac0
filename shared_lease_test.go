package redlease

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// On miniredis; on real servers: tests/integ_shared_test.go.
func TestSemaphoreHoldsAtMostNPermits(t *testing.T) {
	_, rdb := servertest.Mini(t)
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

// On miniredis; on real servers: tests/integ_shared_test.go.
func TestReadersShareAndWritersExclude(t *testing.T) {
	_, rdb := servertest.Mini(t)
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
