package tests

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// A Break reaches the holder at once: with TTL 30 s, so that its next
// renewal would be 10 s away, the holder's context ends within a round
// trip of the Break. (From the core's broken_test.go.)
func TestIntegrationBreakReachesTheHolderAtOnce(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		holder := e.client(redlease.WithTTL(30 * time.Second))
		admin := e.client()
		l, err := holder.TryAcquire(ctx, "job")
		require.NoError(t, err)
		integWatchingBreaks(t, prefixOwner(redlease.DefaultPrefix, l), e.rdb)

		at := time.Now()
		_, removed, err := admin.Break(ctx, "job", 0)
		require.NoError(t, err)
		require.True(t, removed)
		servertest.WaitDone(t, l.Context(), 5*time.Second)
		t.Logf("%s/%s: TTL 30s, Break at t, the holder's context ends at t + %v", e.lib.name, e.kind, time.Since(at))
		require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
		require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)

		// A shared lease too.
		r, err := holder.TryAcquireRead(ctx, "doc")
		require.NoError(t, err)
		_, removed, err = admin.Break(ctx, "doc", r.Fence())
		require.NoError(t, err)
		require.True(t, removed)
		servertest.WaitDone(t, r.Context(), 5*time.Second)
		require.ErrorIs(t, r.Release(ctx), redlease.ErrLeaseLost)
	})
}

// prefixOwner is the break channel that tells the holder of l, under prefix.
func prefixOwner(prefix string, l *redlease.Lease) string {
	return wire.BreakChannel(prefix, l.Owner()[:8])
}

// integWatchingBreaks waits until some node of nodes counts a subscriber
// of the break channel.
func integWatchingBreaks(t *testing.T, channel string, nodes ...*redis.Client) {
	t.Helper()
	servertest.WaitFor(t, 10*time.Second, func() bool {
		for _, n := range nodes {
			if n.PubSubNumSub(context.Background(), channel).Val()[channel] > 0 {
				return true
			}
		}
		return false
	})
}

// On Redis Cluster the break channel is a classic channel, which a PUBLISH
// on any master reaches: a Break of resources in the slots of every master
// reaches their holder's one subscription.
func testBreakOnCluster(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	holder := cl.client(t, lib, redlease.WithPrefix(prefix), redlease.WithTTL(30*time.Second))
	admin := cl.client(t, lib, redlease.WithPrefix(prefix))
	var leases []*redlease.Lease
	for _, r := range []string{"a", "b", "c", "d", "e", "f"} { // spread over the masters
		l, err := holder.TryAcquire(ctx, "broken:"+r)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	integWatchingBreaks(t, prefixOwner(prefix, leases[0]), cl.masters(t)...)
	for _, l := range leases {
		at := time.Now()
		_, removed, err := admin.Break(ctx, l.Resource(), 0)
		require.NoError(t, err)
		require.True(t, removed)
		servertest.WaitDone(t, l.Context(), 5*time.Second)
		t.Logf("%s/%s slot %d: TTL 30s, Break at t, the holder's context ends at t + %v",
			cl.kind, lib.name, wire.SlotOf(l.Resource()), time.Since(at))
		require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
	}
}
