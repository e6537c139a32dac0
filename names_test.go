package redlease

import (
	"strings"
	"testing"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// One rule for resource names, before any round trip: up to
// MaxResourceName bytes of valid UTF-8 without a NUL. (A 1 MiB name, a NUL
// and invalid UTF-8 were taken, and left a key that no guard could fence.)
func TestResourceNamesFollowOneRule(t *testing.T) {
	_, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb, WithAutoRenew(false))
	ctx := t.Context()
	for _, bad := range []struct{ name, why string }{
		{strings.Repeat("r", MaxResourceName+1), "is over 1024 bytes"},
		{strings.Repeat("r", 1<<20), "is over 1024 bytes"},
		{"a\x00b", "holds a NUL byte"},
		{"\xff\xfe", "is not valid UTF-8"},
		{"", "empty resource name"},
	} {
		_, err := c.TryAcquire(ctx, bad.name)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorContains(t, err, bad.why)
		_, err = c.Inspect(ctx, bad.name)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
	require.Zero(t, hook.Cmds.Load(), "refused before any round trip")

	longest := strings.Repeat("é", MaxResourceName/2) // 1024 bytes of UTF-8
	l, err := c.TryAcquire(ctx, longest)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// Permit tells a semaphore's permit 0 from a lease that holds no permit.
// (Both were 0.)
func TestPermitOfALeaseThatHoldsNone(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb, WithAutoRenew(false))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "exclusive")
	require.NoError(t, err)
	require.Equal(t, -1, l.Permit())
	_, isPermit := l.Semaphore()
	require.False(t, isPermit)
	p, err := c.TryAcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	require.Equal(t, 0, p.Permit())
	n, isPermit := p.Semaphore()
	require.True(t, isPermit)
	require.Equal(t, 2, n)
	var nilLease *Lease
	require.Equal(t, -1, nilLease.Permit())
}
