package tests

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// WithReplicaAck on a master whose one replica acknowledges, then stops
// answering, on every library. (From the core's replica_test.go;
// rueidislease's TestReplicaAck runs it on Cluster too.)
func TestIntegrationReplicaAck(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		host, port, _ := net.SplitHostPort(e.srv.Addr)
		replica := servertest.Start(t, e.kind, "--replicaof", host, port)
		rdb := e.rdb
		ctx := t.Context()
		servertest.WaitReplicated(t, rdb)
		c := e.client(redlease.WithReplicaAck(1, 500*time.Millisecond))

		l, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err, "the replica acknowledges")
		require.Equal(t, int64(1), l.Fence())
		require.NoError(t, l.Release(ctx))

		// The replica stops answering: the acquisition cannot be acknowledged.
		replica.Signal(t, syscall.SIGSTOP)
		defer replica.Signal(t, syscall.SIGCONT)
		time.Sleep(100 * time.Millisecond)
		_, err = c.TryAcquire(ctx, "r")
		require.ErrorIs(t, err, redlease.ErrNotAcquired)
		require.ErrorIs(t, err, redlease.ErrNotReplicated)
		// Released in the background: after the acquire's WAIT (500 ms),
		// which a client library may queue the release behind, on a loaded
		// machine too. 20 s, against the TTL's 30: a lease left behind
		// still fails.
		released := func() bool { return rdb.Exists(ctx, "redlease:{r}:lease").Val() == 0 }
		servertest.WaitFor(t, 20*time.Second, released)
		_, err = c.Acquire(ctx, "r", redlease.WithMaxWait(time.Second))
		require.ErrorIs(t, err, redlease.ErrNotReplicated, "a waiting acquire fails as clearly")
		servertest.WaitFor(t, 20*time.Second, released)

		// Without the option the same master grants it.
		l, err = e.client().TryAcquire(ctx, "r")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})
}
