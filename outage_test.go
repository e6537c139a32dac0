package redlease

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// outageEvents records when observers hear of outages.
type outageEvents struct {
	mu  sync.Mutex
	at  []time.Time
	err []error
}

func (o *outageEvents) Observe(_ context.Context, e Event) {
	if e.Kind == EventOutage {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.at, o.err = append(o.at, time.Now()), append(o.err, e.Err)
	}
}

// An acquire that Redis answers nothing for ends by default, after one TTL
// (WithMaxOutage), with ErrUnavailable, not ErrNotAcquired, naming the
// address and the last error, also on a context without a deadline: a wrong
// address or a Redis that is down is not taken for a busy lease, nor
// waited for forever. (Acquire(context.Background()) waited forever; its
// error, when its context ended, matched ErrNotAcquired.) Observers hear of
// the outage when it begins.
func TestAnOutageEndsAnAcquire(t *testing.T) {
	refused := servertest.RefusedAddr(t) // nothing listens
	// An address that does not resolve, as the resolver says so (the tests
	// send nothing beyond loopback, a DNS query included).
	unresolvable := func(_ context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network,
			Err: &net.DNSError{Err: "no such host", Name: "no-such-host.invalid", IsNotFound: true}}
	}
	for _, tc := range []struct {
		addr, says string
		dial       func(context.Context, string, string) (net.Conn, error)
	}{
		{refused, "connection refused", nil},
		{"no-such-host.invalid:6379", "no such host", unresolvable},
	} {
		t.Run(tc.says, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: tc.addr, MaxRetries: -1, Dialer: tc.dial})
			t.Cleanup(func() { _ = rdb.Close() })
			events := &outageEvents{}
			c := New(rdb, WithTTL(600*time.Millisecond), WithObserver(events))
			t.Cleanup(func() { _ = c.Close(context.Background()) })

			_, err := c.TryAcquire(context.Background(), "r")
			require.ErrorIs(t, err, ErrUnavailable, "TryAcquire is not sent into an outage")
			require.NotErrorIs(t, err, ErrNotAcquired)
			require.ErrorContains(t, err, tc.addr)
			require.ErrorContains(t, err, tc.says)

			start := time.Now()
			_, err = c.Acquire(context.Background(), "r")
			took := time.Since(start)
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrNotAcquired)
			require.ErrorContains(t, err, tc.addr)
			require.ErrorContains(t, err, tc.says)
			require.ErrorContains(t, err, "no answer from Redis for 600ms")
			require.GreaterOrEqual(t, took, 600*time.Millisecond, "it rode the outage out for one TTL")
			require.Less(t, took, 10*time.Second)
			if tc.says == "connection refused" {
				require.ErrorIs(t, err, syscall.ECONNREFUSED)
			}
			events.mu.Lock()
			defer events.mu.Unlock()
			require.Len(t, events.at, 1, "one outage event")
			require.Less(t, events.at[0].Sub(start), 500*time.Millisecond, "heard when the outage began")
		})
	}
}

// WithMaxOutage(0) rides an outage out until the context ends, then says
// that Redis was unavailable. (That a waiter whose Redis goes away while it
// waits ends after the bound is TestIntegrationMaxOutageEndsAWaitWhoseRedisWentAway,
// in tests/, on every client.)
func TestMaxOutage(t *testing.T) {
	refused := servertest.RefusedAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: refused, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithTTL(200*time.Millisecond))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(ctx, "r", WithMaxOutage(0))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "until the context ended, not the TTL")
}
