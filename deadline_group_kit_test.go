package redlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/redleasetest"
)

// Leases that the watchdog renewed together share one deadline (and one
// timer, deadline_group.go). Once renewals fail, each still ends at its own
// local deadline, not a moment before or after: those of the group at the
// group's, one that a Refresh moved on later at its own, and one released
// meanwhile is not touched.
func TestRenewedLeasesEndAtTheirOwnLocalDeadline(t *testing.T) {
	k := redleasetest.New(t) // TTL 30 s: renewals every 10 s
	c := k.Client()
	ctx := t.Context()
	var leases []*redlease.Lease
	for _, r := range []string{"a", "b", "released", "refreshed"} {
		l, err := c.TryAcquire(ctx, r)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	a, b, released, refreshed := leases[0], leases[1], leases[2], leases[3]

	k.FastForward(10 * time.Second) // the first renewals, in one batch
	deadline := a.Deadline()
	for _, l := range leases {
		require.Equal(t, deadline, l.Deadline(), "%s renewed with the others", l.Resource())
	}
	require.True(t, deadline.After(k.Now().Add(20*time.Second)), "deadline %v from now", deadline.Sub(k.Now()))

	require.NoError(t, released.Release(ctx))
	k.FastForward(time.Second)
	require.NoError(t, refreshed.Refresh(ctx))
	later := refreshed.Deadline()
	require.Equal(t, deadline.Add(time.Second), later)

	k.Outage()
	k.FastForward(deadline.Sub(k.Now()) - time.Millisecond)
	for _, l := range []*redlease.Lease{a, b, refreshed} {
		require.NoError(t, l.Context().Err(), "%s, a millisecond before the deadline", l.Resource())
	}
	k.FastForward(time.Millisecond)
	for _, l := range []*redlease.Lease{a, b} {
		require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "%s, at its deadline", l.Resource())
	}
	require.NoError(t, refreshed.Context().Err(), "refreshed: its deadline is a second later")
	require.ErrorIs(t, context.Cause(released.Context()), redlease.ErrReleased)
	k.FastForward(time.Second - time.Millisecond)
	require.NoError(t, refreshed.Context().Err(), "refreshed, a millisecond before its deadline")
	k.FastForward(time.Millisecond)
	require.ErrorIs(t, context.Cause(refreshed.Context()), redlease.ErrLeaseLost, "refreshed, at its deadline")
	k.Restore()
}
