package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// Elections on a real server, on every library. (From the core's
// election_test.go.)

func TestIntegrationElectionHandOverWhenLeaderStalls(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		proxy := servertest.StartProxy(t, e.srv.Addr)
		ctx := t.Context()
		const ttl = 600 * time.Millisecond
		// The first leader reaches Redis through a proxy that will stall.
		a := redlease.NewElection(e.clientAt(proxy.Addr(), false), "cron", redlease.WithTTL(ttl))
		b := redlease.NewElection(e.client(), "cron", redlease.WithTTL(ttl))

		_, err := b.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
		termA, err := a.Campaign(ctx, "host-a")
		require.NoError(t, err)
		leader, err := b.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, redlease.Leader{Value: "host-a", Owner: termA.Owner(), Fence: termA.Fence(), Remaining: leader.Remaining}, leader)

		elected := make(chan *redlease.Lease, 1)
		go func() {
			l, err := b.Campaign(ctx, "host-b")
			if err != nil {
				l = nil
			}
			elected <- l
		}()
		time.Sleep(3 * ttl) // A keeps the lease: B waits
		require.NoError(t, termA.Context().Err())
		require.Empty(t, elected)

		proxy.Blackhole() // A stalls: its renewals go nowhere
		servertest.WaitDone(t, termA.Context(), 10*time.Second)
		require.ErrorIs(t, context.Cause(termA.Context()), redlease.ErrLeaseLost)
		termB := servertest.Recv(t, elected, 30*time.Second)
		require.NotNil(t, termB)
		require.Greater(t, termB.Fence(), termA.Fence(), "the new term has a higher fence")
		leader, err = b.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "host-b", leader.Value)

		proxy.Heal()
		require.ErrorIs(t, termA.Release(ctx), redlease.ErrLeaseLost, "A's resignation cannot touch B's term")
		require.NoError(t, termB.Release(ctx)) // resign
		_, err = b.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
	})
}

// The leader's value is its term's holder description, written with the
// lease in one step: a stalled campaigner cannot overwrite the value of the
// term that came after its own, a reader never sees a value without its
// term, and a resigned election leaves nothing in Redis but its slot's fence
// counter. (Campaign recorded the value after Acquire, once in a plain SET
// that a stalled campaigner could overwrite the next leader's value with,
// and in a record without a TTL that outlived every term.)
func TestIntegrationLeaderValueLivesInTheTermsLease(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		a := e.client(redlease.WithTTL(300*time.Millisecond), redlease.WithAutoRenew(false))
		b := e.client(redlease.WithTTL(5 * time.Second))
		ea, eb := redlease.NewElection(a, "cron"), redlease.NewElection(b, "cron")

		termA, err := ea.Campaign(ctx, "host-a")
		require.NoError(t, err)
		require.Equal(t, "host-a", termA.Holder())
		termB, err := eb.Campaign(ctx, "host-b") // once A's term lapses: A stalled
		require.NoError(t, err)
		require.Greater(t, termB.Fence(), termA.Fence())
		require.ErrorIs(t, termA.Refresh(ctx), redlease.ErrLeaseLost, "A wakes up: its term is over")
		ld, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, redlease.Leader{Value: "host-b", Owner: termB.Owner(), Fence: termB.Fence(), Remaining: ld.Remaining}, ld)

		require.NoError(t, termB.Release(ctx)) // resign
		_, err = eb.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
		keys, err := rdb.Keys(ctx, "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			if k != integCounterKey(redlease.DefaultPrefix, "cron") {
				require.Positive(t, ttl, "%s has no TTL", k)
			}
		}
		_, err = ea.Campaign(ctx, strings.Repeat("v", redlease.MaxHolder+1))
		require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	})
}
