package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// A PostgreSQL sequence (fencing.Sequence) as the fence source: fences keep
// rising across a Redis restart that loses the counter.
func TestIntegrationSequenceFencesSurviveRedisRestart(t *testing.T) {
	db := servertest.Postgres(t)
	lock := servertest.Redis(t)
	ctx := t.Context()
	src, err := fencing.NewSequence(db, "redlease_fences")
	require.NoError(t, err)
	require.NoError(t, src.Create(ctx))
	for _, bad := range []string{"fences; DROP TABLE x", strings.Repeat("s", 64), "public." + strings.Repeat("s", 64), ""} {
		_, err = fencing.NewSequence(db, bad)
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%q", bad)
	}
	_, err = fencing.NewSequence(nil, "s")
	require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	// A reserved word is a valid name: it is quoted, in lower case as
	// PostgreSQL would fold it unquoted.
	reserved, err := fencing.NewSequence(db, "User")
	require.NoError(t, err)
	require.NoError(t, reserved.Create(ctx))
	n, err := reserved.NextFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	var next int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT nextval('"user"')`).Scan(&next))
	require.Equal(t, int64(2), next, "it is the sequence user")

	c := redlease.New(lock.Client(t), redlease.WithFenceSource(src))
	var last int64
	for i := range 6 {
		if i == 3 {
			lock.Restart(t) // the Redis counter is gone
		}
		l, err := c.Acquire(ctx, "r", redlease.WithMaxWait(10*time.Second))
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, "acquisition %d", i)
		last = l.Fence()
		require.NoError(t, l.Release(ctx))
	}
	n, err = c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "the Redis counter started again, the source's fences did not")
}
