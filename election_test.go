package redlease

import (
	"testing"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// After Close, the calls that only read or repair (and an election's) return
// ErrClientClosed before any round trip, as the acquire calls do.
func TestAdminCallsAfterCloseReturnErrClientClosed(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	_, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	mr.Close() // a call that tried a round trip would fail otherwise

	_, err = c.Inspect(ctx, "r")
	require.ErrorIs(t, err, ErrClientClosed)
	require.ErrorIs(t, c.Scan(ctx, "*", func(Status) error { return nil }), ErrClientClosed)
	_, err = c.LastFence(ctx, "r")
	require.ErrorIs(t, err, ErrClientClosed)
	_, err = c.AdvanceFence(ctx, "r", 10)
	require.ErrorIs(t, err, ErrClientClosed)
	_, _, err = c.Break(ctx, "r", 0)
	require.ErrorIs(t, err, ErrClientClosed)
	e := NewElection(c, "cron")
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrClientClosed)
	_, err = e.Campaign(ctx, "host-a")
	require.ErrorIs(t, err, ErrClientClosed)
}
