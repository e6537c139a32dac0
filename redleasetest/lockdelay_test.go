package redleasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
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
