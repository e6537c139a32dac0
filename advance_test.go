package redlease

import (
	"testing"

	"github.com/redlease/redlease/internal/servertest"
	"github.com/stretchr/testify/require"
)

func TestAdvanceFenceNeverMovesBack(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	ctx := t.Context()

	n, err := c.AdvanceFence(ctx, "r", 10)
	require.NoError(t, err)
	require.Equal(t, int64(10), n, "an absent counter is created")
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(11), l.Fence())
	require.NoError(t, l.Release(ctx))

	for _, atLeast := range []int64{1, 5, 11} {
		n, err = c.AdvanceFence(ctx, "r", atLeast)
		require.NoError(t, err)
		require.Equal(t, int64(11), n, "AdvanceFence(%d)", atLeast)
	}
	n, err = c.AdvanceFence(ctx, "r", 12)
	require.NoError(t, err)
	require.Equal(t, int64(12), n)
	last, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(12), last)
	ttl, err := rdb.PTTL(ctx, counterKey("r")).Result()
	require.NoError(t, err)
	require.Negative(t, ttl, "the counter still has no TTL")

	// The prefix names the counter; MaxFence itself is exact.
	n, err = New(rdb, WithPrefix("other:")).AdvanceFence(ctx, "r", MaxFence)
	require.NoError(t, err)
	require.Equal(t, MaxFence, n)
	v, err := rdb.Get(ctx, slotCounter("other:", slotOf("r"))).Int64()
	require.NoError(t, err)
	require.Equal(t, MaxFence, v)
	last, err = c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(12), last, "the default prefix's counter is untouched")

	require.NoError(t, rdb.Set(ctx, counterKey("bad"), "abc", 0).Err())
	_, err = c.AdvanceFence(ctx, "bad", 3)
	require.ErrorContains(t, err, "non-integer")
}

func TestAdvanceFenceRejectsBadInputBeforeAnyRoundTrip(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &servertest.CountingHook{}
	rdb.AddHook(h)
	c := New(rdb)
	for _, atLeast := range []int64{0, -1, MaxFence + 1, 1<<63 - 1} {
		_, err := c.AdvanceFence(t.Context(), "r", atLeast)
		require.ErrorIs(t, err, ErrInvalidArgument, "AdvanceFence(%d)", atLeast)
	}
	_, err := c.AdvanceFence(t.Context(), "", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = (*Client)(nil).AdvanceFence(t.Context(), "r", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = New(nil).AdvanceFence(t.Context(), "r", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Zero(t, h.Cmds.Load(), "no command was sent")
}
