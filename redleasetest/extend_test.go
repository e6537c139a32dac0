package redleasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/redleasetest"
)

// Lease.Extend on the fake clock: Redis's TTL, the local deadline and the
// watchdog's interval all follow the new TTL.

// lifetime is the local lifetime of a lease with the default margin.
func lifetime(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*redlease.DriftFactor) - ttl/10
}

// kinds takes a lease of each kind on resource with opts.
var kinds = []struct {
	name    string
	acquire func(ctx context.Context, c *redlease.Client, resource string, opts ...redlease.LeaseOption) (*redlease.Lease, error)
}{
	{"exclusive", func(ctx context.Context, c *redlease.Client, r string, opts ...redlease.LeaseOption) (*redlease.Lease, error) {
		return c.TryAcquire(ctx, r, opts...)
	}},
	{"semaphore", func(ctx context.Context, c *redlease.Client, r string, opts ...redlease.LeaseOption) (*redlease.Lease, error) {
		return c.TryAcquireSemaphore(ctx, r, 1, opts...)
	}},
	{"read", func(ctx context.Context, c *redlease.Client, r string, opts ...redlease.LeaseOption) (*redlease.Lease, error) {
		return c.TryAcquireRead(ctx, r, opts...)
	}},
	{"write", func(ctx context.Context, c *redlease.Client, r string, opts ...redlease.LeaseOption) (*redlease.Lease, error) {
		return c.TryAcquireWrite(ctx, r, opts...)
	}},
}

func TestExtendLengthensEveryKindInRedisAndLocally(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			k := redleasetest.New(t)
			ctx := t.Context()
			// No watchdog: only Extend can keep the lease past its 3 s.
			l, err := kind.acquire(ctx, k.Client(), "r", redlease.WithTTL(3*time.Second), redlease.WithAutoRenew(false))
			require.NoError(t, err)
			sent := k.Now()
			require.NoError(t, l.Extend(ctx, time.Minute))
			require.Equal(t, sent.Add(lifetime(time.Minute)), l.Deadline())
			k.FastForward(50 * time.Second)
			require.NoError(t, l.Context().Err(), "held on the new TTL")
			require.True(t, k.Status("r").Held, "Redis still holds it")
			k.FastForward(10 * time.Second)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "not renewed: the minute ran out")
			require.False(t, k.Status("r").Held)
		})
	}
}

func TestExtendShortensTheLeaseAndTheWatchdogFollows(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r") // 30 s, renewed every 10 s
	require.NoError(t, err)
	k.FastForward(5 * time.Second)
	sent := k.Now()
	require.NoError(t, l.Extend(ctx, 3*time.Second))
	require.Equal(t, sent.Add(lifetime(3*time.Second)), l.Deadline(), "earlier than before")
	st := k.Status("r")
	require.LessOrEqual(t, st.Remaining, 3*time.Second)
	require.Greater(t, st.Remaining, 2*time.Second)

	// The watchdog renews every second now, each time for 3 s.
	k.FastForward(time.Minute)
	require.NoError(t, l.Context().Err())
	require.LessOrEqual(t, k.Status("r").Remaining, 3*time.Second)
	require.True(t, l.Deadline().After(k.Now().Add(lifetime(3*time.Second)-time.Second-time.Millisecond)),
		"renewed within the last second")

	// An outage ends the context within the new lifetime, before Redis
	// lets the 3 s lease go.
	last := l.Deadline().Add(-lifetime(3 * time.Second)) // the last confirmed renewal's send time
	k.Outage()
	k.FastForward(3 * time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
	k.Restore()
	require.False(t, k.Status("r").Held, "Redis let it go 3 s after the last renewal")
	require.True(t, l.Deadline().Before(last.Add(3*time.Second)))
}

func TestExtendThatFailsKeepsTheEarlierDeadline(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithAutoRenew(false))
	require.NoError(t, err)
	before := l.Deadline()
	k.Outage()
	sent := k.Now()
	require.Error(t, l.Extend(ctx, 3*time.Second))
	shrunk := sent.Add(lifetime(3 * time.Second))
	require.True(t, shrunk.Before(before))
	require.Equal(t, shrunk, l.Deadline(), "Redis may have applied the 3 s: the deadline is the earlier")
	require.Error(t, l.Extend(ctx, time.Hour))
	require.Equal(t, shrunk, l.Deadline(), "nor does a failed longer Extend move it later")
	k.Restore()
	sent = k.Now()
	require.NoError(t, l.Extend(ctx, time.Hour))
	require.Equal(t, sent.Add(lifetime(time.Hour)), l.Deadline())
}

func TestExtendRefusesAnInvalidTTLAndChangesNothing(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithRenewInterval(10*time.Second))
	require.NoError(t, err)
	deadline := l.Deadline()
	for _, ttl := range []time.Duration{0, -time.Second, redlease.MinTTL - time.Millisecond, 1500 * time.Microsecond,
		5 * time.Second} { // the last: the 10 s renew interval would not fit
		require.ErrorIs(t, l.Extend(ctx, ttl), redlease.ErrInvalidArgument, "%v", ttl)
	}
	require.Equal(t, deadline, l.Deadline())
	require.Greater(t, k.Status("r").Remaining, 29*time.Second)
	var nilLease *redlease.Lease
	require.ErrorIs(t, nilLease.Extend(ctx, time.Second), redlease.ErrInvalidArgument)
}

func TestExtendOfALostLeaseIsLost(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r")
	require.NoError(t, err)
	k.Steal("r")
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redlease.ErrLeaseLost)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redlease.ErrLeaseLost, "ended: no round trip")
}

func TestExtendStaysWithinMaxHold(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "r", redlease.WithMaxHold(10*time.Second))
	require.NoError(t, err)
	acquired := k.Now()
	require.NoError(t, l.Extend(ctx, time.Hour))
	require.Equal(t, acquired.Add(10*time.Second), l.Deadline())
	k.FastForward(10 * time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrMaxHold)
}
