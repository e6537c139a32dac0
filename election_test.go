package redlease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	ctx := t.Context()
	c := New(rdb)
	other := New(srv.Client(t))

	warm, err := c.TryAcquire(ctx, "warm") // loads the release script
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	held, err := other.TryAcquire(ctx, "b")
	require.NoError(t, err)
	_, err = c.TryAcquireAll(ctx, []string{"a", "b", "c"})
	var busy *BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, "b", busy.Resource)
	require.Zero(t, rdb.Exists(ctx, "redlease:{a}:lease", "redlease:{c}:lease", "redlease:{a}:fence").Val(),
		"nothing was taken, no fence drawn")

	done := make(chan []*Lease, 1)
	go func() {
		ls, err := c.AcquireAll(ctx, []string{"a", "b", "c"}, WithMaxWait(10*time.Second))
		if err != nil {
			ls = nil
		}
		done <- ls
	}()
	waitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "b")) == 1 })
	require.NoError(t, held.Release(ctx)) // wakes the set's acquisition
	ls := recv(t, done, 30*time.Second)
	require.Len(t, ls, 3)
	for i, r := range []string{"a", "b", "c"} {
		require.Equal(t, r, ls[i].Resource())
	}
	require.Equal(t, int64(1), ls[0].Fence())
	require.Equal(t, int64(2), ls[1].Fence(), "each resource keeps its own counter")
	require.Empty(t, queued(t, rdb, "b"))
	before := hook.cmds.Load()
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	require.Equal(t, int64(3), hook.cmds.Load()-before)

	before = hook.cmds.Load()
	ls, err = c.TryAcquireAll(ctx, []string{"x", "y", "z"})
	require.NoError(t, err)
	require.Equal(t, int64(1), hook.cmds.Load()-before, "one script, one round trip")
	require.NoError(t, errors.Join(ls[0].Release(ctx), ls[1].Release(ctx), ls[2].Release(ctx)))

	for _, bad := range [][]string{nil, {"a", "a"}, {"a", ""}} {
		_, err := c.TryAcquireAll(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
	}
	_, err = c.AcquireAll(ctx, []string{"a", "b"}, WithFair(true))
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestAcquireAllAcrossClusterSlots(t *testing.T) {
	_, cc := startCluster(t, 3)
	ctx := t.Context()
	c := New(cc)
	resources := []string{"orders", "payments", "users", "{tenant}:a", "{tenant}:b"}
	ls, err := c.AcquireAll(ctx, resources)
	require.NoError(t, err, "spread over slots: taken one by one in order")
	for i, l := range ls {
		require.Equal(t, resources[i], l.Resource())
		require.Equal(t, int64(1), l.Fence())
	}
	// One busy resource: the others are given back.
	_, err = New(cc).TryAcquireAll(ctx, []string{"zebra", "users"})
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Zero(t, cc.Exists(ctx, "redlease:{zebra}:lease").Val(), "the lease taken first was released")
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	// Same hash slot: one script.
	same, err := c.TryAcquireAll(ctx, []string{"{tenant}:a", "{tenant}:b"})
	require.NoError(t, err)
	require.Equal(t, int64(2), same[0].Fence())
	require.Equal(t, same[0].Owner(), same[1].Owner(), "taken by one script, under one owner token")
	require.NoError(t, errors.Join(same[0].Release(ctx), same[1].Release(ctx)))
}

func TestDoReleasesOnEveryPath(t *testing.T) {
	mr, rdb := newMini(t)
	c := New(rdb)
	ctx := t.Context()

	errWork := errors.New("work failed")
	err := c.Do(ctx, "r", func(ctx context.Context, l *Lease) error {
		require.NoError(t, ctx.Err())
		require.Equal(t, int64(1), l.Fence())
		return errWork
	})
	require.ErrorIs(t, err, errWork)
	require.False(t, mr.Exists("redlease:{r}:lease"))

	require.Panics(t, func() {
		_ = c.Do(ctx, "r", func(context.Context, *Lease) error { panic("boom") })
	})
	require.False(t, mr.Exists("redlease:{r}:lease"), "released although fn panicked")

	err = c.Do(ctx, "r", func(ctx context.Context, l *Lease) error {
		mr.Del("redlease:{r}:lease") // the lease is lost while fn runs
		return nil
	})
	require.ErrorIs(t, err, ErrLeaseLost, "a lease lost during fn is reported")

	require.ErrorIs(t, c.Do(ctx, "r", nil), ErrInvalidArgument)
}

func TestElectionHandOverWhenLeaderStalls(t *testing.T) {
	srv := startRedis(t)
	proxy := startProxy(t, srv.Addr)
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	// The first leader reaches Redis through a proxy that will stall.
	a := NewElection(New(newClient(t, proxy.Addr())), "cron", WithTTL(ttl))
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
	waitDone(t, termA.Context(), 10*time.Second)
	require.ErrorIs(t, context.Cause(termA.Context()), ErrLeaseLost)
	termB := recv(t, elected, 30*time.Second)
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
