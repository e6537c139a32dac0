package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// Acquiring on a real server, on every library: deadlines, outages, sets of
// resources. (From the core's acquire_test.go, lifecycle_test.go,
// combine_test.go and hub_test.go.)

// The acquire calls return by their context's deadline, plus a small
// slack, when the Redis that a Client reaches goes silent or slow. (The
// core's TestAcquireKeepsItsDeadline makes go-redis Clients for a Redis
// that already refuses, is silent or is slow, with and without
// ContextTimeoutEnabled; rueidis and valkey-go make no client for a Redis
// that does not answer, and rueidislease's TestClassifyRefusedDial has
// their refused dials.) The server does not matter here: redis-server only.
func TestIntegrationAcquireKeepsItsDeadline(t *testing.T) {
	calls := []struct {
		name string
		call func(context.Context, *redlease.Client) error
	}{
		{"TryAcquire", func(ctx context.Context, c *redlease.Client) error { _, err := c.TryAcquire(ctx, "r"); return err }},
		{"Acquire", func(ctx context.Context, c *redlease.Client) error { _, err := c.Acquire(ctx, "r"); return err }},
		{"AcquireAll", func(ctx context.Context, c *redlease.Client) error {
			_, err := c.AcquireAll(ctx, []string{"a", "b"})
			return err
		}},
		{"Campaign", func(ctx context.Context, c *redlease.Client) error {
			_, err := redlease.NewElection(c, "e").Campaign(ctx, "v")
			return err
		}},
	}
	const limit, slack = 2 * time.Second, 800 * time.Millisecond
	integRun(t, integServerless(), true, func(t *testing.T, e *integ) {
		type result struct {
			name string
			took time.Duration
			err  error
		}
		var (
			wg      sync.WaitGroup
			results = make(chan result, 2*len(calls))
		)
		for _, state := range []struct {
			name  string
			fault func(*servertest.Proxy)
		}{
			{"silent", (*servertest.Proxy).Blackhole},
			// Replies later than the deadline and its slack, and than
			// go-redis's read timeout (3 s).
			{"slow", func(p *servertest.Proxy) { p.Delay(servertest.ToClient, 4*time.Second) }},
		} {
			proxy := servertest.StartProxy(t, e.srv.Addr)
			clients := make([]*redlease.Client, len(calls))
			for i := range calls {
				clients[i] = e.clientAt(proxy.Addr(), false) // made while Redis answers
			}
			state.fault(proxy)
			t.Cleanup(proxy.Heal) // before the Clients close: they release what they may have taken
			for i, call := range calls {
				wg.Go(func() { // all at once: each waits for its deadline
					ctx, cancel := context.WithTimeout(context.Background(), limit)
					defer cancel()
					start := time.Now()
					err := call.call(ctx, clients[i])
					results <- result{state.name + "/" + call.name, time.Since(start), err}
				})
			}
		}
		wg.Wait()
		close(results)
		for r := range results {
			t.Run(r.name, func(t *testing.T) {
				t.Logf("returned after %v: %v", r.took.Round(time.Millisecond), r.err)
				require.ErrorIs(t, r.err, redlease.ErrUnavailable)
				require.NotErrorIs(t, r.err, redlease.ErrNotAcquired, "nobody is known to hold it")
				require.Less(t, r.took, limit+slack, "the deadline was not kept")
				require.Equal(t, 1, strings.Count(r.err.Error(), "redlease:"), "one prefix: %v", r.err)
			})
		}
	})
}

// An attempt whose caller stopped waiting at its deadline, after the
// request was sent, gives back what the request took once its reply
// arrives: the caller's own give-up release may have run before the request
// reached Redis, and nobody else would ever release that lease.
func TestIntegrationAcquireAbandonedAfterSendingGivesTheLeaseBack(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		if dk, ok := e.lib.driver(t, e.srv.Addr).(driver.DeadlineKeeper); !ok || dk.KeepsDeadline(time.Now().Add(300*time.Millisecond)) {
			// The Client then sends the request with the caller's context,
			// and the client library drops the reply that comes after it:
			// nothing tells the Client that the request took the lease, which
			// lapses at its TTL. (So does go-redis with ContextTimeoutEnabled.)
			t.Skipf("%s ends a request at its context's deadline and drops its late reply", e.lib.name)
		}
		proxy := servertest.StartProxy(t, e.srv.Addr)
		c := e.clientAt(proxy.Addr(), false)
		integWarm(t, c) // so that the next acquire is sent without a check first

		// The acquire request reaches Redis 1.5 s late; the give-up release,
		// sent once the delay is lifted, before it.
		proxy.Delay(servertest.ToServer, 1500*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Acquire(ctx, "late")
		proxy.Delay(servertest.ToServer, 0)
		require.ErrorIs(t, err, redlease.ErrUnavailable)
		require.ErrorIs(t, err, redlease.ErrOutcomeUnknown, "the request was sent")
		require.Less(t, time.Since(start), time.Second, "the deadline was kept")

		lease, released := "redlease:{late}:lease", "redlease:{late}:released"
		servertest.WaitFor(t, 20*time.Second, func() bool { // the TTL is 30 s
			return e.rdb.Exists(context.Background(), released).Val() == 1
		})
		require.Zero(t, e.rdb.Exists(context.Background(), lease).Val(), "the late grant was given back")
	})
}

// A wait that meets an outage says so once, at Warn, and once at Info when
// Redis answers again, and goes on to take the lease; observers see both.
// (A wait with a context that never ends used to wait silently forever.)
func TestIntegrationWaitThatMeetsAnOutageSaysSoOnce(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		var buf servertest.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		rec := &integRecorder{}
		c := e.client(redlease.WithLogger(logger), redlease.WithObserver(rec))
		integWarm(t, c)

		e.srv.Stop()
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
		e.srv.Restart(t)
		require.NoError(t, servertest.Recv(t, got, 20*time.Second))

		out := buf.String()
		require.Equal(t, 1, strings.Count(out, `level=WARN msg="redlease outage"`), "%s", out)
		require.Equal(t, 1, strings.Count(out, `level=INFO msg="redlease recovered"`), "%s", out)
		var kinds []string
		var outage error
		for _, ev := range rec.all() {
			k := ev.Kind.String() + ":" + ev.Outcome.String()
			if !strings.HasPrefix(k, "acquire") && !strings.HasPrefix(k, "release") {
				kinds = append(kinds, k)
			}
			if ev.Kind == redlease.EventOutage {
				outage = ev.Err
			}
		}
		require.Equal(t, []string{"outage:error", "recovered:ok"}, kinds)
		// The log names the error: the refused dial, where the library dials
		// again at once (go-redis checks a pooled connection before it uses
		// it), or the connection that the server's end broke (rueidis and
		// valkey-go find that out by using it: EOF, or on a loaded machine,
		// where the write may come after the server's end closed, a reset or
		// a broken pipe).
		require.Contains(t, out, outage.Error())
		require.True(t, errors.Is(outage, syscall.ECONNREFUSED) || errors.Is(outage, io.EOF) ||
			errors.Is(outage, syscall.ECONNRESET) || errors.Is(outage, syscall.EPIPE), "%v", outage)
	})
}

// A waiter whose Redis goes away while it waits ends after WithMaxOutage,
// as one that began in the outage does, with ErrUnavailable naming the
// address. (From the core's TestMaxOutage.)
func TestIntegrationMaxOutageEndsAWaitWhoseRedisWentAway(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		holder := e.client(redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
		_, err := holder.TryAcquire(t.Context(), "held")
		require.NoError(t, err)
		waiter := e.clientAt(e.srv.Addr, true, redlease.WithAutoRenew(false))
		got := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(context.Background(), "held", redlease.WithMaxOutage(500*time.Millisecond))
			got <- err
		}()
		servertest.WaitFor(t, 10*time.Second, func() bool {
			st, err := holder.Inspect(t.Context(), "held")
			return err == nil && st.Waiters == 1
		})
		e.srv.Stop()
		err = servertest.Recv(t, got, 20*time.Second)
		require.ErrorIs(t, err, redlease.ErrUnavailable, "a waiter whose Redis went away")
		require.ErrorContains(t, err, e.srv.Addr)
		require.ErrorContains(t, err, "no answer from Redis for 500ms")
	})
}

// AcquireAll takes every resource or none, in one request on one server.
// (The core counted the requests with a go-redis hook; the server counts
// them here, for every library.)
func TestIntegrationAcquireAllIsAllOrNothing(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		c := e.client()
		other := e.client()

		warm, err := c.TryAcquire(ctx, "warm") // loads the release script
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))

		held, err := other.TryAcquire(ctx, "b")
		require.NoError(t, err)
		_, err = c.TryAcquireAll(ctx, []string{"a", "b", "c"})
		var busy *redlease.BusyError
		require.ErrorAs(t, err, &busy)
		require.Equal(t, "b", busy.Resource)
		require.Zero(t, rdb.Exists(ctx, "redlease:{a}:lease", "redlease:{c}:lease", integCounterKey(redlease.DefaultPrefix, "a")).Val(),
			"nothing was taken, no fence drawn")

		done := make(chan []*redlease.Lease, 1)
		go func() {
			ls, err := c.AcquireAll(ctx, []string{"a", "b", "c"}, redlease.WithMaxWait(10*time.Second))
			if err != nil {
				ls = nil
			}
			done <- ls
		}()
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("b")) == 1 })
		require.NoError(t, held.Release(ctx)) // wakes the set's acquisition
		ls := servertest.Recv(t, done, 30*time.Second)
		require.Len(t, ls, 3)
		for i, r := range []string{"a", "b", "c"} {
			require.Equal(t, r, ls[i].Resource())
		}
		require.Equal(t, int64(1), ls[0].Fence())
		require.Equal(t, int64(2), ls[1].Fence(), "each resource keeps its own counter")
		require.Empty(t, e.queued("b"))
		m := integMonitorOf(t, e.srv.Addr, rdb)
		for _, l := range ls {
			require.NoError(t, l.Release(ctx))
		}
		require.Equal(t, []string{"evalsha", "evalsha", "evalsha"}, m.sent())

		ls, err = c.TryAcquireAll(ctx, []string{"x", "y", "z"})
		require.NoError(t, err)
		require.Equal(t, []string{"evalsha"}, m.sent(), "one script, one round trip")
		require.NoError(t, errors.Join(ls[0].Release(ctx), ls[1].Release(ctx), ls[2].Release(ctx)))

		for _, bad := range [][]string{nil, {"a", "a"}, {"a", ""}} {
			_, err := c.TryAcquireAll(ctx, bad)
			require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%q", bad)
		}
		_, err = c.AcquireAll(ctx, []string{"a", "b"}, redlease.WithFair(true))
		require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	})
}

// A lease whose fence comes from a fence source keeps the mark that others
// wait for it, also without a holder description, so its release wakes the
// next waiter. (confirm.lua wrote a marked "owner:fence\x00" back without
// the mark, and the release woke nobody: the last waiter polled.)
func TestIntegrationFenceSourceKeepsTheWaitedForMark(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client(redlease.WithFenceSource(&integFences{}), redlease.WithHolder(""))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err)
		got := make(chan *redlease.Lease, 2)
		for range 2 {
			go func() {
				l, err := c.Acquire(ctx, "r")
				if err != nil {
					t.Error(err) // not require: FailNow must not run outside the test's goroutine
				}
				got <- l
			}()
		}
		servertest.WaitFor(t, 10*time.Second, func() bool { return e.rdb.ZCard(ctx, "redlease:{r}:queue").Val() == 2 })
		require.NoError(t, a.Release(ctx))
		next := servertest.Recv(t, got, 10*time.Second)
		require.NotNil(t, next)
		v := e.rdb.Get(ctx, "redlease:{r}:lease").Val()
		require.True(t, strings.HasSuffix(v, "\x00"), "another waits, so the lease is marked: %q", v)
		require.NoError(t, next.Release(ctx))
		last := servertest.Recv(t, got, 10*time.Second)
		require.NotNil(t, last)
		require.NoError(t, last.Release(ctx))
	})
}

// AcquireAll reports a busy holder's description without the waited-for
// mark, as TryAcquire does. (It reported "h1\x00".)
func TestIntegrationAcquireAllBusyHolderHasNoMark(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := c.TryAcquire(ctx, "x", redlease.WithHolder("h1"))
		require.NoError(t, err)
		defer a.Release(ctx)
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		go func() { _, _ = c.Acquire(wctx, "x") }() // marks the lease as waited for
		servertest.WaitFor(t, 10*time.Second, func() bool {
			return strings.HasSuffix(e.rdb.Get(ctx, "redlease:{x}:lease").Val(), "\x00")
		})
		for _, try := range []func() error{
			func() error { _, err := c.TryAcquire(ctx, "x"); return err },
			func() error { _, err := c.TryAcquireAll(ctx, []string{"x", "y"}); return err },
		} {
			var busy *redlease.BusyError
			require.ErrorAs(t, try(), &busy)
			require.Equal(t, "h1", busy.Holder)
		}
	})
}

// A waiter that gave up leaves the queue even when an earlier attempt of its
// own had already given a lease back; and a fair acquire of the free
// resource does not wait for it. (From the core's lifecycle_test.go.)
func TestIntegrationGivingUpLeavesTheQueueAfterAnEarlierGiveBack(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := context.Background()
		a := e.client(redlease.WithTTL(10 * time.Second))
		b := e.client(redlease.WithTTL(10 * time.Second))
		done := make(chan error, 1)
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		go func() {
			// No replica: every attempt takes the lease and gives it back.
			_, err := a.Acquire(actx, "r", redlease.WithReplicaAck(1, 20*time.Millisecond))
			done <- err
		}()
		servertest.WaitFor(t, 5*time.Second, func() bool { n, _ := b.LastFence(ctx, "r"); return n >= 2 })
		var held *redlease.Lease
		servertest.WaitFor(t, 5*time.Second, func() bool {
			l, err := b.TryAcquire(ctx, "r")
			held = l
			return err == nil
		})
		// Busy to the end; or, on a loaded machine, the last attempts met no
		// answer in time, and the wait ended during that outage.
		if err := <-done; !errors.Is(err, redlease.ErrNotAcquired) && !errors.Is(err, redlease.ErrUnavailable) {
			t.Fatalf("the wait ended with %v, want ErrNotAcquired or ErrUnavailable", err)
		}
		// The waiter leaves the queue in the background: its ctx's deadline was
		// too near to wait for that.
		servertest.WaitFor(t, 5*time.Second, func() bool {
			st, err := b.Inspect(ctx, "r")
			require.NoError(t, err)
			return st.Waiters == 0
		})
		require.NoError(t, held.Release(ctx))

		// A fair acquire of the free resource does not wait for a dead waiter.
		c := e.client()
		l, err := c.TryAcquire(ctx, "r", redlease.WithFair(true))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})
}

// Many goroutines taking and releasing leases of a few resources through one
// Client, their calls combined under load (go-redis's driver combines them,
// rueidis and valkey-go pipeline them), each get a lease of their own: a
// fence of the resource that nobody else got. (From the core's
// combine_test.go.)
func TestIntegrationCombinedCallsUnderLoadKeepLeasesApart(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client(redlease.WithAutoRenew(false))
		ctx := context.Background()
		var (
			mu     sync.Mutex
			fences = map[string]bool{}
			wg     sync.WaitGroup
			errs   = make(chan error, 32*50)
		)
		for g := range 32 {
			wg.Go(func() {
				for i := range 50 {
					name := fmt.Sprint("load-", g%8)
					l, err := c.Acquire(ctx, name)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					f := fmt.Sprint(name, "/", l.Fence())
					dup := fences[f]
					fences[f] = true
					mu.Unlock()
					if dup {
						errs <- fmt.Errorf("fence %s given twice", f)
					}
					if err := l.Release(ctx); err != nil {
						errs <- fmt.Errorf("release %d: %w", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		require.NoError(t, errors.Join(func() (e []error) {
			for err := range errs {
				e = append(e, err)
			}
			return
		}()...))
		require.Len(t, fences, 32*50)
	})
}

// integStuckDriver is a library's driver whose Subscribe blocks (ignoring its
// context) or panics.
type integStuckDriver struct {
	driver.Driver
	panics  bool
	release chan struct{} // closed at the end of the test: a blocked Subscribe returns
}

func (d *integStuckDriver) Subscribe(ctx context.Context, channel string, handle func(string)) (driver.Subscription, error) {
	if d.panics {
		panic("subscribe failed")
	}
	<-d.release
	return nil, errors.New("released")
}

// A contended Acquire returns by its deadline whatever the driver does in
// Subscribe, and the Client goes on: no lock of the library is held across
// a call into the client. (With a *redis.Ring, whose Subscribe panics
// without channels, an Acquire used to hang forever: the panic left the
// hub's lock held, and the deferred leave waited for it.) (From the core's
// hub_test.go; the server does not matter: redis-server only.)
func TestIntegrationAcquireKeepsItsDeadlineWhenSubscribeBlocksOrPanics(t *testing.T) {
	integRun(t, integServerless(), true, func(t *testing.T, e *integ) {
		for _, panics := range []bool{false, true} {
			t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
				stuck := &integStuckDriver{Driver: e.lib.driver(t, e.srv.Addr), panics: panics, release: make(chan struct{})}
				c := closing(t, redlease.NewWithDriver(stuck, redlease.WithAutoRenew(false)))
				defer close(stuck.release) // before Close: a blocked Subscribe returns
				held, err := c.TryAcquire(t.Context(), "stuck")
				require.NoError(t, err)
				for range 2 {
					ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
					start := time.Now()
					_, err = c.Acquire(ctx, "stuck")
					took := time.Since(start)
					cancel()
					require.ErrorIs(t, err, context.DeadlineExceeded)
					require.Less(t, took, 300*time.Millisecond+time.Second, "the acquire returns near its deadline")
				}
				// The waiters leave the queue in the background (their
				// deadline has passed): until then, the release would hand
				// the lease to one of them, whose leaving hands it on.
				servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("stuck")) == 0 })
				require.NoError(t, held.Release(t.Context()))
				l, err := c.TryAcquire(t.Context(), "stuck")
				require.NoError(t, err, "the Client goes on")
				require.NoError(t, l.Release(t.Context()))
			})
		}
	})
}
