package redlease

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/stretchr/testify/require"
)

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	hook := &servertest.CountingHook{}
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
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "b")) == 1 })
	require.NoError(t, held.Release(ctx)) // wakes the set's acquisition
	ls := servertest.Recv(t, done, 30*time.Second)
	require.Len(t, ls, 3)
	for i, r := range []string{"a", "b", "c"} {
		require.Equal(t, r, ls[i].Resource())
	}
	require.Equal(t, int64(1), ls[0].Fence())
	require.Equal(t, int64(2), ls[1].Fence(), "each resource keeps its own counter")
	require.Empty(t, queued(t, rdb, "b"))
	before := hook.Cmds.Load()
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	require.Equal(t, int64(3), hook.Cmds.Load()-before)

	before = hook.Cmds.Load()
	ls, err = c.TryAcquireAll(ctx, []string{"x", "y", "z"})
	require.NoError(t, err)
	require.Equal(t, int64(1), hook.Cmds.Load()-before, "one script, one round trip")
	require.NoError(t, errors.Join(ls[0].Release(ctx), ls[1].Release(ctx), ls[2].Release(ctx)))

	for _, bad := range [][]string{nil, {"a", "a"}, {"a", ""}} {
		_, err := c.TryAcquireAll(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
	}
	_, err = c.AcquireAll(ctx, []string{"a", "b"}, WithFair(true))
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestAcquireAllAcrossClusterSlots(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
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
	mr, rdb := servertest.Mini(t)
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

// A campaigner that stalls between Acquire and recording its value (a GC
// pause, a slow network) past its TTL must not overwrite the value of the
// term that came next, nor be told it was elected. Found in review
// (TestReviewCampaignStaleValueOverwrite): Campaign recorded the value with a
// plain SET, and Leader then showed the real leader with Value "" for its
// whole term.
func TestCampaignDoesNotOverwriteTheNextLeadersValue(t *testing.T) {
	s := servertest.Redis(t)
	ctx := context.Background()
	rdbA := s.Client(t)
	gate := &gateHook{key: "redlease:{cron}:leader", gate: make(chan struct{})}
	rdbA.AddHook(gate)
	a := New(rdbA, WithTTL(300*time.Millisecond))
	defer a.Close(ctx)
	b := New(s.Client(t), WithTTL(5*time.Second))
	defer b.Close(ctx)
	ea, eb := NewElection(a, "cron"), NewElection(b, "cron")

	type result struct {
		l   *Lease
		err error
	}
	resA := make(chan result, 1)
	go func() { l, err := ea.Campaign(ctx, "host-a"); resA <- result{l, err} }()
	servertest.WaitFor(t, 2*time.Second, gate.stalled.Load) // A elected, its record (and renewals) held
	lb, err := eb.Campaign(ctx, "host-b")                   // B elected once A's lease expires
	require.NoError(t, err)
	close(gate.gate) // A resumes: its record reaches Redis
	gotA := servertest.Recv(t, resA, 10*time.Second)
	ld, err := eb.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, lb.Owner(), ld.Owner)
	require.Equal(t, "host-b", ld.Value, "A's late record must not replace B's")
	require.ErrorIs(t, gotA.err, ErrLeaseLost, "A's term ended before its value was recorded")
	require.Nil(t, gotA.l)
	require.NoError(t, lb.Release(ctx))
}

// gateHook holds every command of a client, from the first one that names key
// until gate is closed.
type gateHook struct {
	key     string
	gate    chan struct{}
	stalled atomic.Bool
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if names(cmd, h.key) {
			h.stalled.Store(true)
		}
		if h.stalled.Load() {
			<-h.gate
		}
		return next(ctx, cmd)
	}
}
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.stalled.Load() {
			<-h.gate
		}
		return next(ctx, cmds)
	}
}

// A term whose local deadline passed while its value was being recorded is
// not handed out, even though Redis still held its lease and took the record:
// the caller would lead under a context that has already ended.
func TestCampaignFailsIfTheTermEndedWhileRecording(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	defer c.Close(ctx)
	rdb.AddHook(&beforeHook{key: "redlease:{cron}:leader", fn: func() {
		c.mu.Lock()
		var ls []*Lease
		for l := range c.leases {
			ls = append(ls, l)
		}
		c.mu.Unlock()
		for _, l := range ls {
			l.mu.Lock() // as if the local deadline passed during the round trip
			l.endLocked(stateLapsed, l.lapseCause())
			l.mu.Unlock()
		}
	}})
	e := NewElection(c, "cron")

	l, err := e.Campaign(ctx, "host-a")
	require.ErrorIs(t, err, ErrLeaseLost)
	require.Nil(t, l)
	require.True(t, mr.Exists("redlease:{cron}:leader"), "Redis took the record: the lease was still ours there")
	require.False(t, mr.Exists("redlease:{cron}:lease"), "the term was released")
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "the record of a term that ended is not shown")
}

// beforeHook runs fn before the first command that names key.
type beforeHook struct {
	key  string
	fn   func()
	done atomic.Bool
}

func (h *beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if names(cmd, h.key) && h.done.CompareAndSwap(false, true) {
			h.fn()
		}
		return next(ctx, cmd)
	}
}
func (h *beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
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

// names reports whether cmd names key (the scripts pass keys as *string).
func names(cmd redis.Cmder, key string) bool {
	return slices.ContainsFunc(cmd.Args(), func(a any) bool {
		s, ok := a.(*string)
		return a == any(key) || ok && *s == key
	})
}
