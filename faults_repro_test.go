package redlease_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/stretchr/testify/require"
)

// Reproductions of core bugs that the fault suite found, failing until the
// core is fixed; skipped unless REDLEASE_REPRO=1, so that the suite stays
// green meanwhile. Once one passes, drop its skip.

// A release whose reply was lost, repeated after the next holder took the
// lease, should be recognised as done (nil), as Release documents: "Redis
// keeps the deleted lease under <prefix>{R}:released for the time it had
// left, until the next holder's release replaces it", and a shared lease's
// release works "as for an exclusive lease" (shared_lease.go). It is, for an
// exclusive lease and a write lease. For a semaphore's permit the record
// that recognises the retry lasts only until the permit is taken again, and
// for a read lease only until a later reader's acquire trims it (up to two
// released records per taking): the retry then reports ErrLeaseLost
// ("had expired or was taken by another owner before release") for a
// release that happened. Under contention that is the common case, since
// the release wakes a waiter that takes the permit at once:
// TestFaultSharedLostReplies/semaphore saw 9 of 10 retries reported lost.
// Safety holds (the model of the lock accepts a failed release); the
// verdict is wrong.
func TestFaultSharedRetriedReleaseAfterTheNextHolder(t *testing.T) {
	if os.Getenv("REDLEASE_REPRO") == "" {
		t.Skip("reproduces a core bug (retried release of a permit or read lease reported lost); set REDLEASE_REPRO=1")
	}
	for _, kind := range []leaseKind{leaseExclusive, leasePermit, leaseRead, leaseWrite} {
		t.Run(kind.String(), func(t *testing.T) {
			ctx := t.Context()
			lock := servertest.Redis(t)
			proxy := servertest.StartProxy(t, lock.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			lossy := redlease.New(rdb, redlease.WithAutoRenew(false))
			other := redlease.New(lock.Client(t), redlease.WithAutoRenew(false))
			defer lossy.Close(ctx)
			defer other.Close(ctx)
			take := func(c *redlease.Client) *redlease.Lease {
				l, err := tryAcquireKind(ctx, c, kind, "r")
				require.NoError(t, err)
				return l
			}
			require.NoError(t, take(other).Release(ctx)) // the scripts are in the server's cache: the lost reply is the release's own

			a := take(lossy)
			require.NoError(t, rdb.Ping(ctx).Err())
			proxy.DropReplies(1)
			require.ErrorIs(t, a.Release(ctx), redlease.ErrOutcomeUnknown, "the release ran, its reply was lost")
			b := take(other) // the next holder: of the permit, or a later reader
			require.NoError(t, a.Release(ctx), "asked again, the release that happened is recognised")
			require.NoError(t, b.Release(ctx))
		})
	}
}

// tryAcquireKind takes a lease of kind on resource without waiting; a
// permit is one of 1.
func tryAcquireKind(ctx context.Context, c *redlease.Client, kind leaseKind, resource string) (*redlease.Lease, error) {
	switch kind {
	case leasePermit:
		return c.TryAcquireSemaphore(ctx, resource, 1)
	case leaseRead:
		return c.TryAcquireRead(ctx, resource)
	case leaseWrite:
		return c.TryAcquireWrite(ctx, resource)
	}
	return c.TryAcquire(ctx, resource)
}
