package redlease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestElectionHandOverWhenLeaderStalls(t *testing.T) {
	srv := servertest.Redis(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	// The first leader reaches Redis through a proxy that will stall.
	a := NewElection(New(servertest.NewClient(t, proxy.Addr())), "cron", WithTTL(ttl))
	b := NewElection(New(srv.Client(t)), "cron", WithTTL(ttl))

	_, err := b.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	termA, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	leader, err := b.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Value: "host-a", Owner: termA.Owner(), Fence: termA.Fence(), Remaining: leader.Remaining}, leader)

	elected := make(chan *Lease, 1)
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
	require.ErrorIs(t, context.Cause(termA.Context()), ErrLeaseLost)
	termB := servertest.Recv(t, elected, 30*time.Second)
	require.NotNil(t, termB)
	require.Greater(t, termB.Fence(), termA.Fence(), "the new term has a higher fence")
	leader, err = b.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "host-b", leader.Value)

	proxy.Heal()
	require.ErrorIs(t, termA.Release(ctx), ErrLeaseLost, "A's resignation cannot touch B's term")
	require.NoError(t, termB.Release(ctx)) // resign
	_, err = b.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
}

// The leader's value is its term's holder description, written with the
// lease in one step: a stalled campaigner cannot overwrite the value of the
// term that came after its own, a reader never sees a value without its
// term, and a resigned election leaves nothing in Redis but its slot's fence
// counter. (Campaign recorded the value after Acquire, once in a plain SET
// that a stalled campaigner could overwrite the next leader's value with,
// and in a record without a TTL that outlived every term.)
func TestLeaderValueLivesInTheTermsLease(t *testing.T) {
	s := servertest.Redis(t)
	rdb := s.Client(t)
	ctx := t.Context()
	a := New(rdb, WithTTL(300*time.Millisecond), WithAutoRenew(false))
	defer a.Close(ctx)
	b := New(rdb, WithTTL(5*time.Second))
	defer b.Close(ctx)
	ea, eb := NewElection(a, "cron"), NewElection(b, "cron")

	termA, err := ea.Campaign(ctx, "host-a")
	require.NoError(t, err)
	require.Equal(t, "host-a", termA.Holder())
	termB, err := eb.Campaign(ctx, "host-b") // once A's term lapses: A stalled
	require.NoError(t, err)
	require.Greater(t, termB.Fence(), termA.Fence())
	require.ErrorIs(t, termA.Refresh(ctx), ErrLeaseLost, "A wakes up: its term is over")
	ld, err := ea.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Value: "host-b", Owner: termB.Owner(), Fence: termB.Fence(), Remaining: ld.Remaining}, ld)

	require.NoError(t, termB.Release(ctx)) // resign
	_, err = eb.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		if k != counterKey("cron") {
			require.Positive(t, ttl, "%s has no TTL", k)
		}
	}
	_, err = ea.Campaign(ctx, strings.Repeat("v", MaxHolder+1))
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// The record's script names both of its keys, which share the election's
// hash slot, so a campaign works on Redis Cluster.
func TestCampaignOnCluster(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	c := New(cc)
	defer c.Close(ctx)
	e := NewElection(c, "cron")
	term, err := e.Campaign(ctx, "host-a")
	require.NoError(t, err)
	ld, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Value: "host-a", Owner: term.Owner(), Fence: term.Fence(), Remaining: ld.Remaining}, ld)
	require.NoError(t, term.Release(ctx))
}

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
