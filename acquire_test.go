package redlease

import (
	"context"
	"errors"
	"fmt"
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
	refused := servertest.RefusedAddr(t) // nothing listens
	silent := silentRedis(t)
	srv := servertest.Redis(t)
	proxy := servertest.StartProxy(t, srv.Addr)
	proxy.Delay(servertest.ToClient, 10*time.Second)
	// The limit leaves a refused dial time to be seen on a loaded machine.
	const limit, slack = 3 * time.Second, 800 * time.Millisecond

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
