package redlease

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// queued returns the owner tokens waiting on resource, in queue order.
func queued(t *testing.T, rdb redis.UniversalClient, resource string) []string {
	t.Helper()
	owners, err := rdb.ZRange(context.Background(), "redlease:{"+resource+"}:queue", 0, -1).Result()
	require.NoError(t, err)
	return owners
}

// startWaiter runs Acquire in a goroutine; the lease (or error) arrives on the channel.
func startWaiter(ctx context.Context, c *Client, resource string, opts ...WaitOption) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, resource, opts...)
		out <- acquired{l, err}
	}()
	return out
}

type acquired struct {
	l   *Lease
	err error
}

func TestReleaseWakesOnlyTheFirstWaiter(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	// Fair: without it, a waiter whose backoff timer fires just after the
	// release may take the lease before the woken one.
	holder := New(rdb, WithFair(true))
	l, err := holder.TryAcquire(ctx, "r")
	require.NoError(t, err)

	// Listen on every Client's wake channel as a third party.
	ps := rdb.PSubscribe(ctx, "redlease:{r}:wake:*")
	defer ps.Close()
	_, err = ps.Receive(ctx) // the subscription confirmation
	require.NoError(t, err)

	var (
		waits   []<-chan acquired
		clients []*Client
	)
	for i := range 3 {
		c := New(srv.Client(t), WithFair(true))
		clients = append(clients, c)
		waits = append(waits, startWaiter(ctx, c, "r"))
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "r")) == i+1 })
	}
	order := queued(t, rdb, "r") // members: <owner>/<client id>

	require.NoError(t, l.Release(ctx))
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(mctx)
	require.NoError(t, err)
	require.Equal(t, order[0], msg.Payload+"/"+clients[0].hub.id, "release names the first waiter")
	require.Equal(t, "redlease:{r}:wake:"+clients[0].hub.id, msg.Channel, "on its Client's channel only")
	first := servertest.Recv(t, waits[0], 30*time.Second)
	require.NoError(t, first.err)
	require.Equal(t, msg.Payload, first.l.Owner())
	require.Equal(t, order[1:], queued(t, rdb, "r"), "the others keep their places")

	// A waiter that gives up leaves the queue.
	require.NoError(t, first.l.Release(ctx))
	for _, w := range waits[1:] {
		got := servertest.Recv(t, w, 30*time.Second)
		require.NoError(t, got.err)
		require.NoError(t, got.l.Release(ctx))
	}
	require.Empty(t, queued(t, rdb, "r"))
}

// release.lua finds the wake channel from the lease key (it is not sent):
// the key's last word is swapped, whatever the prefix holds, even the word
// itself.
func TestReleaseWakesOnTheChannelOfItsPrefix(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	const prefix = "lease:lease:"
	holder, waiter := New(rdb, WithPrefix(prefix)), New(srv.Client(t), WithPrefix(prefix))
	l, err := holder.TryAcquire(ctx, "r")
	require.NoError(t, err)
	ps := rdb.PSubscribe(ctx, "*")
	defer ps.Close()
	_, err = ps.Receive(ctx)
	require.NoError(t, err)

	wait := startWaiter(ctx, waiter, "r")
	servertest.WaitFor(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, prefix+"{r}:queue").Val() == 1 })
	require.NoError(t, l.Release(ctx))
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(mctx)
	require.NoError(t, err)
	require.Equal(t, prefix+"{r}:wake:"+waiter.hub.id, msg.Channel)
	got := servertest.Recv(t, wait, 30*time.Second)
	require.NoError(t, got.err)
	require.Equal(t, msg.Payload, got.l.Owner())
	require.NoError(t, got.l.Release(ctx))
}

func TestWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	c := New(rdb)
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	w := startWaiter(ctx, c, "r")
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "r")) == 1 })
	cancel()
	got := servertest.Recv(t, w, 30*time.Second)
	require.ErrorIs(t, got.err, ErrNotAcquired)
	require.ErrorIs(t, got.err, context.Canceled)
	servertest.WaitFor(t, 5*time.Second, func() bool { return len(queued(t, rdb, "r")) == 0 }) // a release in the background
	require.NoError(t, l.Release(t.Context()))
}

func TestMaxWait(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Acquire(t.Context(), "r", WithMaxWait(100*time.Millisecond))
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	require.NoError(t, l.Release(t.Context()))
}

func TestFairWaitersGoInArrivalOrder(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	holder := New(rdb)
	l, err := holder.TryAcquire(ctx, "r", WithFair(true))
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		order []int
		waits []<-chan acquired
	)
	for i := range 4 {
		c := New(srv.Client(t), WithFair(true))
		out := make(chan acquired, 1)
		go func() {
			l, err := c.Acquire(ctx, "r")
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				err = l.Release(ctx)
			}
			out <- acquired{l, err}
		}()
		waits = append(waits, out)
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "r")) == i+1 })
	}
	// A newcomer cannot barge in while others queue.
	_, err = New(rdb, WithFair(true)).TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)

	require.NoError(t, l.Release(ctx))
	for _, w := range waits {
		require.NoError(t, servertest.Recv(t, w, 30*time.Second).err)
	}
	require.Equal(t, []int{0, 1, 2, 3}, order)
}

// Waiters that arrive within one millisecond still queue in arrival order,
// not in the order of their random owner tokens. (Arrival was once recorded
// in ms, and a later waiter with a smaller token went first: with two fair
// contenders, about one handoff in a hundred took a millisecond more.)
func TestWaitersArrivingInOneMillisecondKeepTheirOrder(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	c := New(rdb)
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	k := wire.KeysOf(DefaultPrefix, "r")
	require.NoError(t, rdb.ScriptLoad(ctx, wire.Named("acquire.lua").Source()).Err())
	for round := range 20 {
		// Members in reverse lexical order, sent back to back in one pipeline:
		// the scripts run within microseconds of each other.
		members := []string{fmt.Sprintf("z%d/c", round), fmt.Sprintf("y%d/c", round), fmt.Sprintf("x%d/c", round)}
		pipe := rdb.Pipeline()
		for _, m := range members {
			owner := m[:len(m)-2]
			pipe.EvalSha(ctx, wire.Named("acquire.lua").Hash(), []string{k.Lease, k.Fence, k.Queue, k.Alive}, owner, 10000, "60000", m)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, members, queued(t, rdb, "r")[3*round:], "round %d", round)
	}
	require.NoError(t, l.Release(ctx))
}

func TestVanishedWaiterIsDroppedFromQueue(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	c := New(rdb, WithFair(true))
	l, err := c.TryAcquire(ctx, "r", WithFair(true))
	require.NoError(t, err)
	// A waiter whose process died: queued first, alive for 300ms more, never refreshed.
	tm, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.ZAdd(ctx, "redlease:{r}:queue", redis.Z{Score: 1, Member: "dead"}).Err())
	require.NoError(t, rdb.HSet(ctx, "redlease:{r}:alive", "dead", tm.UnixMilli()+300).Err())

	w := startWaiter(ctx, c, "r")
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "r")) == 2 })
	require.NoError(t, l.Release(ctx))           // wakes "dead", which never comes
	got := servertest.Recv(t, w, 30*time.Second) // the live waiter gets it once "dead" has timed out
	require.NoError(t, got.err)
	require.NotContains(t, queued(t, rdb, "r"), "dead")
	require.NoError(t, got.l.Release(ctx))
}

func TestWaiterWakesWhenHolderExpires(t *testing.T) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	dead := New(srv.Client(t), WithTTL(300*time.Millisecond), WithAutoRenew(false))
	a, err := dead.TryAcquire(ctx, "r") // never released: it expires
	require.NoError(t, err)
	b, err := New(srv.Client(t)).Acquire(ctx, "r", WithMaxWait(10*time.Second))
	require.NoError(t, err)
	require.Greater(t, b.Fence(), a.Fence())
	require.NoError(t, b.Release(ctx))
}

// The contention test of the waiting design: many goroutines, one resource,
// a plain GET/SET counter with no atomic increment. A lost update or two
// overlapping holders would show.
func TestIntegrationContentionNoLostUpdateNoOverlap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		opts   []Option
	}{
		{"shared client", true, nil},
		{"client per goroutine", false, nil},
		{"fair", false, []Option{WithFair(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := servertest.Redis(t)
			data := srv.Client(t)
			const workers, rounds = 32, 50
			shared := New(srv.Client(t), tc.opts...)
			type interval struct {
				fence      int64
				start, end time.Time
			}
			var (
				mu        sync.Mutex
				intervals []interval
				wg        sync.WaitGroup
				errs      = make(chan error, workers)
			)
			for range workers {
				c := shared
				if !tc.shared {
					c = New(srv.Client(t), tc.opts...)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					for range rounds {
						l, err := c.Acquire(ctx, "counter")
						if err != nil {
							errs <- err
							return
						}
						start := time.Now()
						n, err := data.Get(ctx, "count").Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							errs <- err
							return
						}
						if err := data.Set(ctx, "count", n+1, 0).Err(); err != nil {
							errs <- err
							return
						}
						end := time.Now()
						if err := l.Release(ctx); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						intervals = append(intervals, interval{l.Fence(), start, end})
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			n, err := data.Get(t.Context(), "count").Int()
			require.NoError(t, err)
			require.Equal(t, workers*rounds, n, "no lost update")
			slices.SortFunc(intervals, func(a, b interval) int { return a.start.Compare(b.start) })
			for i := 1; i < len(intervals); i++ {
				prev, cur := intervals[i-1], intervals[i]
				require.False(t, cur.start.Before(prev.end), "holders %d and %d overlap", prev.fence, cur.fence)
				require.Greater(t, cur.fence, prev.fence, "fences follow the holder order")
			}
		})
	}
}

// A reply lost after the request was delivered: the proxy closes the
// connection instead of forwarding it. With go-redis's own retries (which
// resend after a reset) the final answer must still be right; without them,
// the outcome must be reported unknown, never as success or as lost.
func TestIntegrationLostReplies(t *testing.T) {
	srv := servertest.Redis(t)
	direct := srv.Client(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	ctx := t.Context()
	for _, retries := range []int{0, -1} { // go-redis default (3), none
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: retries})
			t.Cleanup(func() { _ = rdb.Close() })
			c := New(rdb, WithAutoRenew(false), WithTTL(time.Minute))
			warm(t, c) // the acquire below is sent without asking first whether Redis answers
			for _, name := range []string{"acquire.lua", "refresh.lua", "release.lua"} {
				// The reply lost is the script's, not a NOSCRIPT error's.
				require.NoError(t, direct.ScriptLoad(ctx, wire.Named(name).Source()).Err())
			}
			res := fmt.Sprint("lost", retries)
			key := "redlease:{" + res + "}:lease"
			loseNextReply := func() {
				require.NoError(t, rdb.Ping(ctx).Err()) // a warm connection: the next reply is ours
				proxy.DropReplies(1)
			}

			loseNextReply()
			l, err := c.TryAcquire(ctx, res)
			require.NoError(t, err, "the retry with the same owner token resolves it")
			require.Equal(t, int64(1), l.Fence())
			// go-redis's retry (MaxRetries 0: its default) draws a fence it
			// skips, finding the lease its own: no second lease, no second
			// fence handed out.
			require.True(t, strings.HasPrefix(direct.Get(ctx, key).Val(), l.Owner()+":1:"), "the lease is the first attempt's")

			require.NoError(t, direct.PExpire(ctx, key, 30*time.Second).Err())
			loseNextReply()
			err = l.Refresh(ctx)
			if retries < 0 {
				require.ErrorIs(t, err, ErrOutcomeUnknown)
				require.NotErrorIs(t, err, ErrLeaseLost)
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, l.Context().Err())
			require.Greater(t, direct.PTTL(ctx, key).Val(), 50*time.Second, "the renewal did happen")

			loseNextReply()
			err = l.Release(ctx)
			if retries < 0 {
				require.ErrorIs(t, err, ErrOutcomeUnknown)
				require.NotErrorIs(t, err, ErrLeaseLost)
				require.NoError(t, l.Release(ctx), "asked again, Redis remembers that this owner released")
			} else {
				require.NoError(t, err, "go-redis's retry is recognised as the same release")
			}
			require.Zero(t, direct.Exists(ctx, key).Val(), "the delete did happen")
		})
	}
}

func TestIntegrationMaxHold(t *testing.T) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	c := New(srv.Client(t), WithTTL(300*time.Millisecond))
	start := time.Now()
	l, err := c.TryAcquire(ctx, "r", WithMaxHold(time.Second))
	require.NoError(t, err)
	servertest.WaitDone(t, l.Context(), 10*time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), ErrMaxHold)
	require.NotErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "renewed until the hold limit")
	// The stuck holder never releases; the lease lapses within a TTL and another takes it.
	b, err := New(srv.Client(t)).Acquire(ctx, "r", WithMaxWait(5*time.Second))
	require.NoError(t, err)
	require.Greater(t, b.Fence(), l.Fence())
	require.NoError(t, b.Release(ctx))
}

func TestAcquireOnClusterWakesWaiters(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	holder := New(cc)
	var leases []*Lease
	var waits []<-chan acquired
	for i := range 6 {
		res := fmt.Sprint("cl-", i)
		l, err := holder.TryAcquire(ctx, res)
		require.NoError(t, err)
		leases = append(leases, l)
		waits = append(waits, startWaiter(ctx, New(cc), res, WithMaxWait(30*time.Second)))
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, cc, res)) == 1 })
	}
	for i, l := range leases {
		require.NoError(t, l.Release(ctx))
		got := servertest.Recv(t, waits[i], 60*time.Second)
		require.NoError(t, got.err)
		require.Greater(t, got.l.Fence(), l.Fence())
		require.NoError(t, got.l.Release(ctx))
	}
}

func TestCloseReleasesLeasesAndStopsWaiters(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	require.NoError(t, rdb.Ping(ctx).Err())
	before := servertest.Goroutines()

	other := New(srv.Client(t))
	blocker, err := other.TryAcquire(ctx, "blocked")
	require.NoError(t, err)

	c := New(rdb, WithTTL(time.Minute))
	a, err := c.TryAcquire(ctx, "a")
	require.NoError(t, err)
	b, err := c.TryAcquire(ctx, "b", WithAutoRenew(false))
	require.NoError(t, err)
	w := startWaiter(ctx, c, "blocked")
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(queued(t, rdb, "blocked")) == 1 })

	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, servertest.Recv(t, w, 30*time.Second).err, ErrClientClosed)
	require.ErrorIs(t, context.Cause(a.Context()), ErrReleased)
	require.ErrorIs(t, context.Cause(b.Context()), ErrReleased)
	require.Zero(t, rdb.Exists(ctx, "redlease:{a}:lease", "redlease:{b}:lease").Val())
	_, err = c.TryAcquire(ctx, "c")
	require.ErrorIs(t, err, ErrClientClosed)

	require.NoError(t, other.Close(ctx))
	require.ErrorIs(t, context.Cause(blocker.Context()), ErrReleased)
	servertest.CheckLeaks(t, before, time.Second)
}

// An acquire whose reply arrives after Close began is given back, not handed
// out: Close could not have released it.
func TestAcquireRacingCloseIsGivenBack(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	// Close begins while the acquire script is on its way.
	rdb.AddHook(closeAfterSend{c: c})
	_, err := c.TryAcquire(t.Context(), "r")
	require.ErrorIs(t, err, ErrClientClosed)
	require.ErrorIs(t, err, ErrNotAcquired)
	servertest.WaitFor(t, 5*time.Second, func() bool { return rdb.Exists(t.Context(), "redlease:{r}:lease").Val() == 0 }) // released by owner
}

// closeAfterSend closes c right after the first EVALSHA has been answered,
// before the Client sees the reply.
type closeAfterSend struct{ c *Client }

func (h closeAfterSend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h closeAfterSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h closeAfterSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.c.mu.Lock()
			h.c.closed.Store(true) // what Close does first
			h.c.mu.Unlock()
		}
		return err
	}
}

// A wait rides out a Redis that answers that it runs nothing now (LOADING
// after a restart, and the like), as it rides out one it cannot reach; a
// TryAcquire says the request was not run. (The wait gave up at the first
// such answer.)
func TestWaitRidesOutARedisThatIsLoading(t *testing.T) {
	for _, reply := range []string{
		"LOADING Redis is loading the dataset in memory",
		"READONLY You can't write against a read only replica.",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
	} {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			mr, rdb := servertest.Mini(t)
			c := New(rdb)
			defer c.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mr.SetError(reply)
			_, err := c.TryAcquire(ctx, "r")
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrOutcomeUnknown, "the request was not run")
			got := make(chan error, 1)
			go func() {
				l, err := c.Acquire(ctx, "r")
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(1500 * time.Millisecond) // longer than go-redis's own retries
			mr.SetError("")
			require.NoError(t, servertest.Recv(t, got, 15*time.Second))
		})
	}
}
