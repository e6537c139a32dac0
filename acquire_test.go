package redlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// silentRedis accepts connections and never answers, as a Redis that is
// paused or behind a dead network does; it is closed when the test ends.
func silentRedis(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// The acquire calls return by their context's deadline, plus a small slack,
// whether Redis refuses connections, is silent or is slow, with or without
// ContextTimeoutEnabled; a refused connection stays in the error, and is
// not an unknown outcome, since nothing was sent. (With Redis refusing, a
// 3 s Acquire returned after 4.7 s with "outcome unknown: context deadline
// exceeded", the give-up release holding it up.)
func TestAcquireKeepsItsDeadline(t *testing.T) {
	refused := fmt.Sprintf("127.0.0.1:%d", servertest.FreePort(t)) // nothing listens
	silent := silentRedis(t)
	srv := servertest.Redis(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	proxy.Delay(servertest.ToClient, 10*time.Second)
	const limit, slack = 2 * time.Second, 800 * time.Millisecond

	calls := map[string]func(context.Context, *Client) error{
		"TryAcquire": func(ctx context.Context, c *Client) error { _, err := c.TryAcquire(ctx, "r"); return err },
		"Acquire":    func(ctx context.Context, c *Client) error { _, err := c.Acquire(ctx, "r"); return err },
		"AcquireAll": func(ctx context.Context, c *Client) error {
			_, err := c.AcquireAll(ctx, []string{"a", "b"})
			return err
		},
		"Campaign": func(ctx context.Context, c *Client) error {
			_, err := NewElection(c, "e").Campaign(ctx, "v")
			return err
		},
	}
	for _, redisState := range []struct{ name, addr string }{{"refusing", refused}, {"silent", silent}, {"slow", proxy.Addr()}} {
		for _, ctxTimeout := range []bool{false, true} {
			for name, call := range calls {
				t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v/%s", redisState.name, ctxTimeout, name), func(t *testing.T) {
					t.Parallel()
					rdb := redis.NewClient(&redis.Options{Addr: redisState.addr, ContextTimeoutEnabled: ctxTimeout})
					t.Cleanup(func() { _ = rdb.Close() })
					c := New(rdb)
					t.Cleanup(func() { _ = c.Close(context.Background()) })
					ctx, cancel := context.WithTimeout(context.Background(), limit)
					defer cancel()
					start := time.Now()
					err := call(ctx, c)
					took := time.Since(start)
					t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
					require.ErrorIs(t, err, ErrUnavailable)
					require.NotErrorIs(t, err, ErrNotAcquired, "nobody is known to hold it")
					require.Less(t, took, limit+slack, "the deadline was not kept")
					require.Equal(t, 1, strings.Count(err.Error(), "redlease:"), "one prefix: %v", err)
					if redisState.addr == refused {
						require.ErrorIs(t, err, syscall.ECONNREFUSED, "the cause is kept")
						require.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was sent")
					}
				})
			}
		}
	}
}

// An attempt whose caller stopped waiting at its deadline, after the
// request was sent, gives back what the request took once its reply
// arrives: the caller's own give-up release may have run before the request
// reached Redis, and nobody else would ever release that lease.
func TestAcquireAbandonedAfterSendingGivesTheLeaseBack(t *testing.T) {
	srv := servertest.Redis(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb)
	defer c.Close(context.Background())
	warm(t, c) // so that the next acquire is sent without a check first

	// The acquire request reaches Redis 1.5 s late; the give-up release,
	// sent once the delay is lifted, before it.
	proxy.Delay(servertest.ToServer, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(ctx, "late")
	proxy.Delay(servertest.ToServer, 0)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, ErrOutcomeUnknown, "the request was sent")
	require.Less(t, time.Since(start), time.Second, "the deadline was kept")

	direct := srv.Client(t)
	lease, released := "redlease:{late}:lease", "redlease:{late}:released"
	servertest.WaitFor(t, 20*time.Second, func() bool { // the TTL is 30 s
		return direct.Exists(context.Background(), released).Val() == 1
	})
	require.Zero(t, direct.Exists(context.Background(), lease).Val(), "the late grant was given back")
}

// A wait that meets an outage says so once, at Warn, and once at Info when
// Redis answers again, and goes on to take the lease; observers see both.
// (A wait with a context that never ends used to wait silently forever.)
func TestWaitThatMeetsAnOutageSaysSoOnce(t *testing.T) {
	srv := servertest.Redis(t)
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rec := &recorder{}
	c := New(srv.Client(t), WithLogger(logger), WithObserver(rec))
	defer c.Close(context.Background())
	warm(t, c)

	srv.Stop()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "r")
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	servertest.WaitFor(t, 20*time.Second, func() bool { return strings.Contains(buf.String(), "redlease outage") })
	time.Sleep(2 * time.Second) // more retries while Redis is down: none is logged
	srv.Restart(t)
	require.NoError(t, servertest.Recv(t, got, 20*time.Second))

	out := buf.String()
	require.Equal(t, 1, strings.Count(out, `level=WARN msg="redlease outage"`), "%s", out)
	require.Equal(t, 1, strings.Count(out, `level=INFO msg="redlease recovered"`), "%s", out)
	require.Contains(t, out, "connection refused")
	var kinds []string
	for _, k := range rec.take() {
		if !strings.HasPrefix(k, "acquire") && !strings.HasPrefix(k, "release") {
			kinds = append(kinds, k)
		}
	}
	require.Equal(t, []string{"outage:error", "recovered:ok"}, kinds)
}

// syncBuffer is a bytes.Buffer that goroutines may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

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
	require.Zero(t, rdb.Exists(ctx, "redlease:{a}:lease", "redlease:{c}:lease", counterKey("a")).Val(),
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
		require.Positive(t, l.Fence())
	}
	require.Greater(t, ls[4].Fence(), ls[3].Fence(), "one slot, one counter, taken in sorted order")
	// One busy resource: the others are given back.
	_, err = New(cc).TryAcquireAll(ctx, []string{"zebra", "users"})
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Zero(t, cc.Exists(ctx, "redlease:{zebra}:lease").Val(), "the lease taken first was released")
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	// Once the scripts are loaded, one request per resource: no script for
	// all of them first, which Cluster refuses (CROSSSLOT), and no give-back
	// of what it did not take.
	hook := &servertest.CountingHook{}
	cc.AddHook(hook)
	ls, err = c.AcquireAll(ctx, resources)
	require.NoError(t, err)
	require.Equal(t, int64(len(resources)), hook.Cmds.Load(), "requests for %d resources", len(resources))
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	// Same hash slot: one script.
	same, err := c.TryAcquireAll(ctx, []string{"{tenant}:a", "{tenant}:b"})
	require.NoError(t, err)
	require.Greater(t, same[1].Fence(), same[0].Fence(), "one slot, one counter")
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

// A lease whose fence comes from a fence source keeps the mark that others
// wait for it, also without a holder description, so its release wakes the
// next waiter. (confirm.lua wrote a marked "owner:fence\x00" back without
// the mark, and the release woke nobody: the last waiter polled.)
func TestFenceSourceKeepsTheWaitedForMark(t *testing.T) {
	srv := servertest.Redis(t)
	direct := srv.Client(t)
	c := New(srv.Client(t), WithFenceSource(&counterFences{}), WithHolder(""))
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	got := make(chan *Lease, 2)
	for range 2 {
		go func() {
			l, err := c.Acquire(ctx, "r")
			if err != nil {
				t.Error(err) // not require: FailNow must not run outside the test's goroutine
			}
			got <- l
		}()
	}
	servertest.WaitFor(t, 10*time.Second, func() bool { return direct.ZCard(ctx, "redlease:{r}:queue").Val() == 2 })
	require.NoError(t, a.Release(ctx))
	next := servertest.Recv(t, got, 10*time.Second)
	require.NotNil(t, next)
	v := direct.Get(ctx, "redlease:{r}:lease").Val()
	require.True(t, strings.HasSuffix(v, "\x00"), "another waits, so the lease is marked: %q", v)
	require.NoError(t, next.Release(ctx))
	last := servertest.Recv(t, got, 10*time.Second)
	require.NotNil(t, last)
	require.NoError(t, last.Release(ctx))
}

// AcquireAll reports a busy holder's description without the waited-for
// mark, as TryAcquire does. (It reported "h1\x00".)
func TestAcquireAllBusyHolderHasNoMark(t *testing.T) {
	srv := servertest.Redis(t)
	direct := srv.Client(t)
	c := New(srv.Client(t))
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := c.TryAcquire(ctx, "x", WithHolder("h1"))
	require.NoError(t, err)
	defer a.Release(ctx)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _, _ = c.Acquire(wctx, "x") }() // marks the lease as waited for
	servertest.WaitFor(t, 10*time.Second, func() bool {
		return strings.HasSuffix(direct.Get(ctx, "redlease:{x}:lease").Val(), "\x00")
	})
	for _, try := range []func() error{
		func() error { _, err := c.TryAcquire(ctx, "x"); return err },
		func() error { _, err := c.TryAcquireAll(ctx, []string{"x", "y"}); return err },
	} {
		var busy *BusyError
		require.ErrorAs(t, try(), &busy)
		require.Equal(t, "h1", busy.Holder)
	}
}
