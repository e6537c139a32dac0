package tests

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// Through Sentinel, on every library and both server kinds (one deployment
// per kind, which the libraries share; the kinds in parallel): a lease
// renewed past its TTL, a waiter woken by a release through the
// subscription the client makes through Sentinel, and the replica's
// acknowledgement. (From the core's TestIntegrationSentinelFailoverClient
// and rueidislease's TestSentinel.)
func TestIntegrationSentinel(t *testing.T) {
	for _, k := range servertest.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			master, _, sentinel, _ := servertest.SentinelOf(t, k)
			servertest.WaitReplicated(t, master.Client(t))
			addrs := []string{sentinel.Addr}
			for _, lib := range libraries {
				t.Run(lib.name, func(t *testing.T) {
					ctx := t.Context()
					prefix := redlease.WithPrefix(resource(t, ""))
					c := lib.sentinel(t, addrs, prefix, redlease.WithTTL(500*time.Millisecond))
					l, err := c.TryAcquire(ctx, "r")
					require.NoError(t, err)
					time.Sleep(time.Second) // renewals through the failover client
					require.NoError(t, l.Context().Err())
					require.NoError(t, l.Release(ctx))
					l, err = c.Acquire(ctx, "r")
					require.NoError(t, err)
					require.Equal(t, int64(2), l.Fence())
					require.NoError(t, l.Release(ctx))

					// A waiter whose Client runs on a clock that never moves
					// has no timer that can fire: only the release's wake-up
					// can get it the lease.
					holder := lib.sentinel(t, addrs, prefix)
					h, err := holder.TryAcquire(ctx, "r", redlease.WithTTL(time.Minute))
					require.NoError(t, err)
					waiter := lib.sentinel(t, addrs, prefix, clock.Option(clock.NewFake(time.Now())).(redlease.Option))
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					got := integWaiter(wctx, waiter, "r")
					servertest.WaitFor(t, 10*time.Second, func() bool {
						st, err := holder.Inspect(ctx, "r")
						return err == nil && st.Waiters == 1
					})
					require.NoError(t, h.Release(ctx))
					w := servertest.Recv(t, got, 20*time.Second)
					require.NoError(t, w.err)
					require.Greater(t, w.l.Fence(), h.Fence())
					require.NoError(t, w.l.Release(ctx))

					// The replica acknowledges, through the failover client.
					acked := lib.sentinel(t, addrs, prefix, redlease.WithReplicaAck(1, 2*time.Second))
					l, err = acked.TryAcquire(ctx, "r")
					require.NoError(t, err)
					require.NoError(t, l.Release(ctx))
				})
			}
		})
	}
}
