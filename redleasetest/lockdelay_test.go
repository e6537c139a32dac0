package redleasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
	"github.com/redlease/redlease/redleasetest"
)

// WithLockDelay on the fake clock: a holder that stops renewing (frozen)
// blocks the resource for its TTL and the delay; a Release frees it at once.

func TestLockDelayIsWaitedOutAfterALapse(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			k := redleasetest.New(t)
			ctx := t.Context()
			// A frozen holder: it renews nothing after its acquire.
			l, err := kind.acquire(ctx, k.Client(), "r", redlease.WithTTL(3*time.Second),
				redlease.WithLockDelay(10*time.Second), redlease.WithAutoRenew(false))
			require.NoError(t, err)
			acquired := k.Now()
			other := k.NewClient()
			next := kind.acquire
			if kind.name == "read" { // readers share: a writer is what the read lease keeps out
				next = kinds[3].acquire
			}
			k.FastForward(3 * time.Second)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "its context ended within the TTL")
			_, err = next(ctx, other, "r")
			require.ErrorIs(t, err, redlease.ErrNotAcquired, "the TTL ran out, the delay did not")
			k.FastForward(acquired.Add(13*time.Second - time.Millisecond).Sub(k.Now()))
			_, err = next(ctx, other, "r")
			require.ErrorIs(t, err, redlease.ErrNotAcquired, "a millisecond before TTL + delay")
			k.FastForward(time.Millisecond)
			n, err := next(ctx, other, "r")
			require.NoError(t, err, "TTL + delay after the acquire")
			require.Greater(t, n.Fence(), l.Fence())
			require.NoError(t, n.Release(ctx))
		})
	}
}

func TestLockDelayIsNotWaitedAfterARelease(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithLockDelay(time.Hour))
	require.NoError(t, err)
	require.Greater(t, k.Status("r").Remaining, time.Hour, "Redis keeps it TTL + delay")
	k.FastForward(time.Minute) // renewed, each time for TTL + delay
	require.NoError(t, l.Context().Err())
	require.Greater(t, k.Status("r").Remaining, time.Hour)
	require.NoError(t, l.Release(ctx))
	next, err := k.NewClient().TryAcquire(ctx, "r")
	require.NoError(t, err, "released: free at once")
	require.NoError(t, next.Release(ctx))
}

func TestLockDelayMustBeWholeMilliseconds(t *testing.T) {
	k := redleasetest.New(t)
	for _, d := range []time.Duration{-time.Millisecond, 1500 * time.Microsecond} {
		_, err := k.Client().TryAcquire(t.Context(), "r", redlease.WithLockDelay(d))
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%v", d)
	}
}

// A Break honours the holder's lock delay: the broken lease keeps the
// resource for the delay from the break (the holder can neither renew nor
// release it meanwhile), a waiter gets it then; a second Break frees it.
func TestLockDelayIsWaitedOutAfterABreak(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	const delay = 10 * time.Second
	holder, waiter, operator := k.Client(), k.NewClient(), k.NewClient()
	l, err := holder.TryAcquire(ctx, "r", redlease.WithTTL(3*time.Second), redlease.WithLockDelay(delay),
		redlease.WithHolder("cron-1"))
	require.NoError(t, err)
	w := make(chan *redlease.Lease, 1)
	go func() {
		n, err := waiter.Acquire(ctx, "r")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		w <- n
	}()
	k.AwaitWaiters("r", 1)
	// The holder's Client subscribes to its break channel once it holds a
	// lease; a break before that reaches the holder at its next renewal.
	channel := wire.BreakChannel(redlease.DefaultPrefix, l.Owner()[:8])
	servertest.WaitFor(t, 5*time.Second, func() bool {
		return k.Redis().PubSubNumSub(ctx, channel).Val()[channel] > 0
	})

	broke := k.Now()
	_, removed, err := operator.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	select { // the break channel, in real time
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the broken holder's context did not end")
	}
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
	st := k.Status("r")
	require.True(t, st.Held, "kept for the delay")
	require.Equal(t, "broken", st.Owner)
	require.Equal(t, l.Fence(), st.Fence)
	require.Equal(t, "cron-1", st.Holder)
	require.Equal(t, delay, st.Remaining)
	require.ErrorIs(t, l.Refresh(ctx), redlease.ErrLeaseLost, "the holder cannot renew a broken lease")
	require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost, "nor release it")
	_, err = operator.TryAcquire(ctx, "r")
	var busy *redlease.BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, "cron-1", busy.Holder)

	k.FastForward(broke.Add(delay - time.Millisecond).Sub(k.Now()))
	require.Empty(t, w, "the waiter waits out the delay")
	_, err = operator.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, redlease.ErrNotAcquired, "a millisecond before the delay's end")
	k.FastForward(time.Millisecond)
	require.False(t, k.Status("r").Held, "free at the delay's end")
	k.FastForward(time.Millisecond) // a waiter tries a millisecond after the time left it was told
	var n *redlease.Lease
	select {
	case n = <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lease at the delay's end")
	}
	require.NotNil(t, n)
	require.Greater(t, n.Fence(), l.Fence())
	require.NoError(t, n.Release(ctx))
}

func TestLockDelayAfterABreakIsAtMostTheTimeLeft(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	// A frozen holder, 2 s past its TTL: Redis keeps its lease 8 s more,
	// less than the delay; a break keeps it no longer than that.
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithTTL(3*time.Second),
		redlease.WithLockDelay(10*time.Second), redlease.WithAutoRenew(false))
	require.NoError(t, err)
	k.FastForward(5 * time.Second)
	_, removed, err := k.NewClient().Break(ctx, "r", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, 8*time.Second, k.Status("r").Remaining)
	k.FastForward(8 * time.Second)
	n, err := k.NewClient().TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Greater(t, n.Fence(), l.Fence())
}

func TestLockDelayEndsWithASecondBreak(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithLockDelay(time.Hour))
	require.NoError(t, err)
	operator := k.NewClient()
	_, removed, err := operator.Break(ctx, "r", 0)
	require.NoError(t, err)
	require.True(t, removed)
	_, err = operator.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, redlease.ErrNotAcquired, "broken, kept for the delay")
	st, removed, err := operator.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed, "the second break deletes it")
	require.Equal(t, "broken", st.Owner)
	n, err := operator.TryAcquire(ctx, "r")
	require.NoError(t, err, "free at once")
	require.Greater(t, n.Fence(), l.Fence())

	// Steal is a takeover: it does not wait for a delay.
	m, err := k.Client().TryAcquire(ctx, "s", redlease.WithLockDelay(time.Hour))
	require.NoError(t, err)
	require.Greater(t, k.Steal("s"), m.Fence())
	require.Equal(t, redleasetest.OtherHolder, k.Status("s").Holder)
}

// Every kind: a broken lease with a lock delay keeps the resource for the
// delay (a read lease keeps out a writer), and no longer.
func TestLockDelayIsWaitedOutAfterABreakOfEveryKind(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			k := redleasetest.New(t)
			ctx := t.Context()
			const delay = 10 * time.Second
			l, err := kind.acquire(ctx, k.Client(), "r", redlease.WithTTL(3*time.Second),
				redlease.WithLockDelay(delay), redlease.WithHolder("cron-1"))
			require.NoError(t, err)
			other := k.NewClient()
			next := kind.acquire
			if kind.name == "read" {
				next = kinds[3].acquire
			}
			broke := k.Now()
			_, removed, err := other.Break(ctx, "r", l.Fence())
			require.NoError(t, err)
			require.True(t, removed)
			// (Its context ends when the break message comes, or at this
			// refusal if the Client was not yet subscribed to its channel.)
			require.ErrorIs(t, l.Refresh(ctx), redlease.ErrLeaseLost)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
			require.ErrorIs(t, other.CheckFence(ctx, "r", l.Fence()), redlease.ErrStaleFence, "a broken lease is not current")
			st := k.Status("r")
			require.True(t, st.Held)
			if kind.name == "exclusive" {
				require.Equal(t, "broken", st.Owner)
			} else {
				require.Len(t, st.Shared, 1)
				require.Equal(t, "broken", st.Shared[0].Owner)
				require.Equal(t, l.Fence(), st.Shared[0].Fence)
				require.Equal(t, "cron-1", st.Shared[0].Holder)
				require.Equal(t, delay, st.Shared[0].Remaining)
			}
			k.FastForward(broke.Add(delay - time.Millisecond).Sub(k.Now()))
			_, err = next(ctx, other, "r")
			require.ErrorIs(t, err, redlease.ErrNotAcquired, "a millisecond before the delay's end")
			k.FastForward(time.Millisecond)
			n, err := next(ctx, other, "r")
			require.NoError(t, err, "the delay's end")
			require.Greater(t, n.Fence(), l.Fence())
			require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
			require.NoError(t, n.Release(ctx))
		})
	}
}

// A second Break removes a broken lease of any kind at once.
func TestLockDelayEndsWithASecondBreakOfEveryKind(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			k := redleasetest.New(t)
			ctx := t.Context()
			l, err := kind.acquire(ctx, k.Client(), "r", redlease.WithLockDelay(time.Hour))
			require.NoError(t, err)
			other := k.NewClient()
			next := kind.acquire
			if kind.name == "read" {
				next = kinds[3].acquire
			}
			for i := range 2 {
				_, removed, err := other.Break(ctx, "r", l.Fence())
				require.NoError(t, err)
				require.True(t, removed, "break %d", i+1)
			}
			n, err := next(ctx, other, "r")
			require.NoError(t, err, "free at once")
			require.Greater(t, n.Fence(), l.Fence()) // a writer, for a read lease: no broken reader is left
		})
	}
}
