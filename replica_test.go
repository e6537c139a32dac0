package redlease

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestIntegrationReplicaAck(t *testing.T) {
	master := servertest.Redis(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := servertest.Redis(t, "--replicaof", host, port)
	rdb := master.Client(t)
	ctx := t.Context()
	servertest.WaitReplicated(t, rdb)
	c := New(rdb, WithReplicaAck(1, 500*time.Millisecond))

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err, "the replica acknowledges")
	require.Equal(t, int64(1), l.Fence())
	require.NoError(t, l.Release(ctx))

	// The replica stops answering: the acquisition cannot be acknowledged.
	replica.Signal(t, syscall.SIGSTOP)
	defer replica.Signal(t, syscall.SIGCONT)
	time.Sleep(100 * time.Millisecond)
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrNotReplicated)
	servertest.WaitFor(t, 5*time.Second, func() bool { return rdb.Exists(ctx, "redlease:{r}:lease").Val() == 0 }) // released in the background
	_, err = c.Acquire(ctx, "r", WithMaxWait(time.Second))
	require.ErrorIs(t, err, ErrNotReplicated, "a waiting acquire fails as clearly")
	servertest.WaitFor(t, 5*time.Second, func() bool { return rdb.Exists(ctx, "redlease:{r}:lease").Val() == 0 })

	// Without the option the same master grants it.
	l, err = New(rdb).TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}
