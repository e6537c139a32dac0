package tests

import (
	"context"
	"errors"
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

// A Break honours the holder's lock delay: the holder's context ends at
// once, but nobody takes the resource until the delay has passed since
// the break (a waiter gets it then); Redis keeps the broken lease, owned
// by nobody, for the delay.
func TestIntegrationBreakHonoursTheLockDelay(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		const delay = time.Second
		holder, waiter, admin := e.client(redlease.WithTTL(30*time.Second)), e.client(), e.client()
		l, err := holder.TryAcquire(ctx, "delayed", redlease.WithLockDelay(delay))
		require.NoError(t, err)
		integWatchingBreaks(t, prefixOwner(redlease.DefaultPrefix, l), e.rdb)
		w := integWaiter(ctx, waiter, "delayed")
		servertest.WaitFor(t, 10*time.Second, func() bool { return e.waiting("delayed") })

		at := time.Now()
		_, removed, err := admin.Break(ctx, "delayed", l.Fence())
		require.NoError(t, err)
		require.True(t, removed)
		st, err := admin.Inspect(ctx, "delayed")
		require.NoError(t, err)
		require.Equal(t, "broken", st.Owner)
		require.LessOrEqual(t, st.Remaining, delay)
		servertest.WaitDone(t, l.Context(), 5*time.Second)
		ended := time.Since(at)
		got := servertest.Recv(t, w, 30*time.Second)
		took := time.Since(at)
		require.NoError(t, got.err)
		t.Logf("%s/%s: TTL 30s, lock delay %v, Break at t: the holder's context ended at t + %v; the waiter got the lease at t + %v",
			e.lib.name, e.kind, delay, ended.Round(100*time.Microsecond), took.Round(time.Millisecond))
		require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
		require.GreaterOrEqual(t, took, delay-redisClockSlack, "nobody takes it before the delay has passed since the break")
		require.Greater(t, got.l.Fence(), l.Fence())
		require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
		require.NoError(t, got.l.Release(ctx))

		// The shared kinds: a broken permit, write lease or read lease
		// keeps the resource (a read lease: from a writer) for the delay.
		for _, kind := range []struct {
			name       string
			take, next func(r string, opts ...redlease.LeaseOption) (*redlease.Lease, error)
		}{
			{"permit", func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return holder.TryAcquireSemaphore(ctx, r, 1, o...)
			}, func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return admin.TryAcquireSemaphore(ctx, r, 1, o...)
			}},
			{"write", func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return holder.TryAcquireWrite(ctx, r, o...)
			}, func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return admin.TryAcquireWrite(ctx, r, o...)
			}},
			{"read", func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return holder.TryAcquireRead(ctx, r, o...)
			}, func(r string, o ...redlease.LeaseOption) (*redlease.Lease, error) {
				return admin.TryAcquireWrite(ctx, r, o...)
			}},
		} {
			r := "delayed-" + kind.name
			l, err := kind.take(r, redlease.WithLockDelay(delay))
			require.NoError(t, err)
			at := time.Now()
			_, removed, err := admin.Break(ctx, r, l.Fence())
			require.NoError(t, err)
			require.True(t, removed)
			var n *redlease.Lease
			servertest.WaitFor(t, 10*time.Second, func() bool {
				n, err = kind.next(r)
				require.NoError(t, ignoreBusy(err), kind.name)
				return err == nil
			})
			took := time.Since(at)
			require.GreaterOrEqual(t, took, delay-redisClockSlack, "%s: nobody takes it before the delay has passed since the break", kind.name)
			require.Greater(t, n.Fence(), l.Fence())
			require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
			require.NoError(t, n.Release(ctx))
		}
	})
}

// redisClockSlack is how much sooner than a span measured here Redis may
// let a key expire: it keeps an expiry in whole milliseconds of its own
// clock, the wall clock, where a test measures on Go's monotonic clock. (A
// run of .ci/run saw a broken lease's 1 s lock delay end 999.998 ms after
// the test's clock began, before the Break was sent.)
const redisClockSlack = 2 * time.Millisecond

// ignoreBusy is err, or nil if it says that the lease is busy.
func ignoreBusy(err error) error {
	if errors.Is(err, redlease.ErrNotAcquired) {
		return nil
	}
	return err
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
