package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// The exclusive lease's life on a real server, on every library: taken by
// one of many, renewed, lost, replaced. (From the core's lease_test.go.)

func TestIntegrationContendersExactlyOneWins(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		const n = 16
		start := make(chan struct{})
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			won    []*redlease.Lease
			others int
		)
		for range n {
			c := e.client(redlease.WithTTL(10 * time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := c.TryAcquire(context.Background(), "contended")
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, l)
				} else if errors.Is(err, redlease.ErrNotAcquired) {
					others++
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Len(t, won, 1)
		require.Equal(t, n-1, others)
		require.Equal(t, int64(1), won[0].Fence())
		require.NoError(t, won[0].Release(t.Context()))
	})
}

func TestIntegrationDeadHolderIsReplacedAfterExpiry(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		// A's process dies: its connections close, and nothing renews or
		// releases (it reaches Redis through a proxy that is closed).
		proxy := servertest.StartProxy(t, e.srv.Addr)
		dead := e.clientAt(proxy.Addr(), false, redlease.WithTTL(300*time.Millisecond))
		a, err := dead.TryAcquire(ctx, "r")
		require.NoError(t, err)
		proxy.Close()

		c := e.client()
		start := time.Now()
		b, err := c.Acquire(ctx, "r")
		require.NoError(t, err)
		require.Greater(t, b.Fence(), a.Fence())
		require.Less(t, time.Since(start), 10*time.Second)
		servertest.WaitDone(t, a.Context(), 10*time.Second) // the dead holder's context ended too
		require.NoError(t, b.Release(ctx))
	})
}

func TestIntegrationStaleReleaseDoesNotDeleteNewLease(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithTTL(500*time.Millisecond), redlease.WithAutoRenew(false))
		a, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err)
		// A pauses past its TTL: Redis expires its lease.
		servertest.WaitFor(t, 5*time.Second, func() bool { return e.rdb.Exists(ctx, "redlease:{r}:lease").Val() == 0 })
		b, err := c.TryAcquire(ctx, "r", redlease.WithTTL(10*time.Second))
		require.NoError(t, err)

		require.ErrorIs(t, a.Release(ctx), redlease.ErrLeaseLost)
		v, err := e.rdb.Get(ctx, "redlease:{r}:lease").Result()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s:%d:%s", b.Owner(), b.Fence(), redlease.DefaultHolder()), v)
		require.NoError(t, b.Release(ctx))
	})
}

func TestIntegrationRenewAfterLoss(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		for _, autoRenew := range []bool{false, true} {
			t.Run(fmt.Sprintf("autoRenew=%v", autoRenew), func(t *testing.T) {
				e := e.in(t)
				res := fmt.Sprintf("renew-%v", autoRenew)
				c := e.client(redlease.WithTTL(600*time.Millisecond), redlease.WithAutoRenew(autoRenew))
				a, err := c.TryAcquire(ctx, res)
				require.NoError(t, err)
				// An operator breaks the lease and B takes it while A still runs.
				require.NoError(t, e.rdb.Del(ctx, "redlease:{"+res+"}:lease").Err())
				b, err := c.TryAcquire(ctx, res, redlease.WithTTL(10*time.Second))
				require.NoError(t, err)

				if autoRenew {
					servertest.WaitDone(t, a.Context(), 10*time.Second) // the watchdog's renewal found it
				} else {
					require.ErrorIs(t, a.Refresh(ctx), redlease.ErrLeaseLost)
				}
				require.ErrorIs(t, context.Cause(a.Context()), redlease.ErrLeaseLost)
				require.ErrorIs(t, a.Refresh(ctx), redlease.ErrLeaseLost)
				ttl, err := e.rdb.PTTL(ctx, "redlease:{"+res+"}:lease").Result()
				require.NoError(t, err)
				require.Greater(t, ttl, 5*time.Second, "A's renewals did not touch B's lease")
				require.NoError(t, b.Release(ctx))
			})
		}
	})
}

func TestIntegrationWatchdogKeepsLeaseFiveTTLs(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ttl := time.Second // renewed every 333 ms with 890 ms to spare: on time on a loaded machine
		holder := e.client(redlease.WithTTL(ttl))
		rival := e.client()
		ctx := t.Context()
		l, err := holder.TryAcquire(ctx, "r")
		require.NoError(t, err)

		deadline := time.Now().Add(5 * ttl)
		tries := 0
		for time.Now().Before(deadline) {
			_, err := rival.TryAcquire(ctx, "r")
			require.ErrorIs(t, err, redlease.ErrNotAcquired)
			tries++
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, l.Context().Err(), "the lease stayed held")
		require.Greater(t, tries, 10)
		require.NoError(t, l.Release(ctx))
	})
}

func TestIntegrationUnreachableRedisEndsContextBeforeServerExpiry(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		proxy := servertest.StartProxy(t, e.srv.Addr)
		const ttl = 2 * time.Second
		c := e.clientAt(proxy.Addr(), false, redlease.WithTTL(ttl), redlease.WithSafetyMargin(ttl/4))
		l, err := c.TryAcquire(t.Context(), "r")
		require.NoError(t, err)

		time.Sleep(ttl / 2) // a renewal or two go through
		cut := time.Now()
		proxy.Blackhole()
		// Every confirmed request was sent before the cut, so the server keeps
		// the lease until at least cut+TTL; the context must end before that.
		servertest.WaitDone(t, l.Context(), 3*ttl)
		ended := time.Now()
		require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
		require.True(t, ended.Before(cut.Add(ttl)), "context ended %v after the cut, TTL is %v", ended.Sub(cut), ttl)
		pttl, err := e.rdb.PTTL(t.Context(), "redlease:{r}:lease").Result()
		require.NoError(t, err)
		require.Greater(t, pttl, time.Duration(0), "the server still had the lease when the holder stopped")

		proxy.Heal()
		_ = l.Release(t.Context())
	})
}

// An acquire is one request, and so is a release: each is one EVALSHA,
// and the client sends nothing else. (In the core a go-redis hook counted
// the requests; the server counts them for every library.)
func TestIntegrationOneCommandPerAcquireAndRelease(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithAutoRenew(false))
		// The lease held throughout keeps the Client's break channel
		// subscribed, so that no pair below subscribes it; the warm pair
		// loads the scripts (EVALSHA, NOSCRIPT, EVAL).
		keep, err := c.TryAcquire(ctx, "keep")
		require.NoError(t, err)
		defer func() { require.NoError(t, keep.Release(ctx)) }()
		warm, err := c.TryAcquire(ctx, "warm")
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))

		m := integMonitorOf(t, e.srv.Addr, e.rdb)
		// A client library may reconnect at any time (rueidis and valkey-go
		// do when a health check's PING is slow on a loaded machine): its
		// handshake (HELLO, CLIENT) is not the lease's, nor is the break
		// channel's SUBSCRIBE, which the Client's hub sends on a goroutine
		// of its own and on a connection of its own if the subscription
		// made when "keep" was taken comes only now. A pair that saw one
		// is measured again, twice at most; a library or a Client that did
		// so for every request would fail the third.
		aside := func(cmds []string) bool {
			return slices.Contains(cmds, "hello") || slices.Contains(cmds, "subscribe")
		}
		for attempt := 1; ; attempt++ {
			l, err := c.TryAcquire(ctx, "r")
			require.NoError(t, err)
			acquired := m.sent()
			require.NoError(t, l.Release(ctx))
			released := m.sent()
			if attempt < 3 && (aside(acquired) || aside(released)) {
				t.Logf("attempt %d: a reconnect or a subscribe of the Client's (acquire %v, release %v): again", attempt, acquired, released)
				continue
			}
			require.Equal(t, []string{"evalsha"}, acquired, "acquire is one request")
			require.Equal(t, []string{"evalsha"}, released, "release is one request")
			break
		}
	})
}

func TestIntegrationScriptCacheFlushed(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithTTL(time.Second)) // renewals on time on a loaded machine
		var leases []*redlease.Lease
		for i := range 3 { // several leases, so renewals go in one pipeline
			l, err := c.TryAcquire(ctx, fmt.Sprint("flush-", i))
			require.NoError(t, err)
			leases = append(leases, l)
		}
		require.NoError(t, e.rdb.ScriptFlush(ctx).Err())
		time.Sleep(3 * time.Second) // renewals across a lost script cache
		for _, l := range leases {
			require.NoError(t, l.Context().Err(), "%v", context.Cause(l.Context()))
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestIntegrationExtend(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithTTL(2*time.Second), redlease.WithAutoRenew(false))
		for _, kind := range []struct {
			name    string
			acquire func(resource string) (*redlease.Lease, error)
		}{
			{"exclusive", func(r string) (*redlease.Lease, error) { return c.TryAcquire(ctx, r) }},
			{"semaphore", func(r string) (*redlease.Lease, error) { return c.TryAcquireSemaphore(ctx, r, 2) }},
			{"read", func(r string) (*redlease.Lease, error) { return c.TryAcquireRead(ctx, r) }},
			{"write", func(r string) (*redlease.Lease, error) { return c.TryAcquireWrite(ctx, r) }},
		} {
			t.Run(kind.name, func(t *testing.T) {
				res := "extend-" + kind.name
				l, err := kind.acquire(res)
				require.NoError(t, err)
				before := l.Deadline()
				require.NoError(t, l.Extend(ctx, time.Minute))
				require.True(t, l.Deadline().After(before.Add(50*time.Second)), "the local deadline follows")
				// The lease key carries the name's kind for shared leases, and
				// lives as long as the longest of them.
				ttl, err := e.rdb.PTTL(ctx, integLeaseKey(redlease.DefaultPrefix, res)).Result()
				require.NoError(t, err)
				require.Greater(t, ttl, 55*time.Second)
				require.NoError(t, l.Release(ctx))
			})
		}
		t.Run("shorter", func(t *testing.T) {
			l, err := c.TryAcquire(ctx, "extend-shorter", redlease.WithTTL(time.Minute))
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, l.Extend(ctx, time.Second))
			require.False(t, l.Deadline().After(time.Now().Add(time.Second)), "earlier than before")
			require.True(t, l.Deadline().After(start))
			ttl, err := e.rdb.PTTL(ctx, integLeaseKey(redlease.DefaultPrefix, "extend-shorter")).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, time.Second)
			require.NoError(t, l.Release(ctx))
		})
	})
}

// A holder that stops renewing (frozen: no watchdog) blocks its resource
// for its TTL and the lock delay; the waiter gets it no sooner. A Release
// frees it at once, however long the delay.
func TestIntegrationLockDelay(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		const ttl, delay = 300 * time.Millisecond, time.Second
		holder, waiter := e.client(), e.client()
		start := time.Now()
		l, err := holder.TryAcquire(ctx, "delayed", redlease.WithTTL(ttl), redlease.WithLockDelay(delay),
			redlease.WithAutoRenew(false))
		require.NoError(t, err)
		w := integWaiter(ctx, waiter, "delayed")
		servertest.WaitDone(t, l.Context(), 10*time.Second)
		ended := time.Since(start)
		got := servertest.Recv(t, w, 30*time.Second)
		took := time.Since(start)
		require.NoError(t, got.err)
		t.Logf("acquired at 0; the holder's context ended at %v; the waiter got the lease at %v (TTL %v + delay %v)",
			ended.Round(time.Millisecond), took.Round(time.Millisecond), ttl, delay)
		require.Less(t, ended, took, "the holder's context ended before the next holder began")
		require.GreaterOrEqual(t, took, ttl+delay-redisClockSlack, "nobody takes it before TTL + delay")
		require.Greater(t, got.l.Fence(), l.Fence())
		require.NoError(t, got.l.Release(ctx))

		l, err = holder.TryAcquire(ctx, "released", redlease.WithLockDelay(time.Hour))
		require.NoError(t, err)
		w = integWaiter(ctx, waiter, "released")
		servertest.WaitFor(t, 10*time.Second, func() bool { return e.waiting("released") })
		require.NoError(t, l.Release(ctx))
		got = servertest.Recv(t, w, 30*time.Second)
		require.NoError(t, got.err, "released: free at once, not after the hour")
		require.NoError(t, got.l.Release(ctx))
	})
}
