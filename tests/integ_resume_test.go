package tests

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Passing a lease between processes (Lease.Token, Handoff, Client.Resume)
// on a real server, on every library. (The core's resume_test.go has the
// miniredis cases.) Two Clients stand for the two processes.

// integTakeAll takes one lease of each kind on resources named after it,
// with opts.
func integTakeAll(t *testing.T, c *redlease.Client, opts ...redlease.LeaseOption) map[redlease.LeaseKind]*redlease.Lease {
	t.Helper()
	ctx := t.Context()
	out := map[redlease.LeaseKind]*redlease.Lease{}
	var err error
	out[redlease.ExclusiveLease], err = c.TryAcquire(ctx, "exclusive", opts...)
	require.NoError(t, err)
	_, err = c.TryAcquireSemaphore(ctx, "semaphore", 4, opts...) // so that the resumed permit is 1, not 0
	require.NoError(t, err)
	out[redlease.SemaphorePermit], err = c.TryAcquireSemaphore(ctx, "semaphore", 4, opts...)
	require.NoError(t, err)
	out[redlease.ReadLease], err = c.TryAcquireRead(ctx, "read", opts...)
	require.NoError(t, err)
	out[redlease.WriteLease], err = c.TryAcquireWrite(ctx, "write", opts...)
	require.NoError(t, err)
	return out
}

// Every kind of lease passes from one process to another by its token's
// text: the same owner, fence and permit, renewed by its new holder and
// released by it, and left alone by the old one's Release and Close.
func TestIntegrationResumeEveryKind(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		parent := e.client(redlease.WithHolder("parent"))
		child := e.client(redlease.WithAutoRenew(false))
		for kind, l := range integTakeAll(t, parent, redlease.WithTTL(5*time.Second)) {
			t.Run(kind.String(), func(t *testing.T) {
				tok, err := redlease.ParseToken(l.Token().String())
				require.NoError(t, err)
				require.Equal(t, kind, tok.Kind)
				r, err := child.Resume(ctx, tok)
				require.NoError(t, err)
				require.Equal(t, l.Owner(), r.Owner())
				require.Equal(t, l.Fence(), r.Fence())
				require.Equal(t, l.Permit(), r.Permit())
				require.Equal(t, "parent", r.Holder())
				if kind == redlease.SemaphorePermit {
					require.Equal(t, 1, r.Permit())
					n, ok := r.Semaphore()
					require.True(t, ok)
					require.Equal(t, 4, n)
				}

				require.NoError(t, l.Handoff())
				require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrHandedOff)
				require.ErrorIs(t, l.Release(ctx), redlease.ErrHandedOff, "the parent's deferred Release")
				require.NoError(t, r.Refresh(ctx))
				st, err := child.Inspect(ctx, tok.Resource)
				require.NoError(t, err)
				require.True(t, st.Held, "%+v", st)

				require.NoError(t, r.Release(ctx))
				_, err = child.Resume(ctx, tok)
				require.ErrorIs(t, err, redlease.ErrLeaseLost, "released")
			})
		}
	})
}

// A lease that expired, was released, broken or taken by another holder,
// or whose token names another fence, is not resumed: ErrLeaseLost, and
// nothing written.
func TestIntegrationResumeOfALeaseNoLongerHeld(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithAutoRenew(false))
		resumer := e.client()

		// Expired: every kind, in Redis (not just locally).
		leases := integTakeAll(t, c, redlease.WithTTL(time.Second))
		sk := func(r string) *wire.SharedKeys { return wire.SharedKeysOf(redlease.DefaultPrefix, r) }
		gone := map[redlease.LeaseKind]string{
			redlease.ExclusiveLease:  integLeaseKey(redlease.DefaultPrefix, "exclusive"),
			redlease.SemaphorePermit: sk("semaphore").Permits,
			redlease.ReadLease:       sk("read").Readers,
			redlease.WriteLease:      sk("write").Writer,
		}
		for kind, l := range leases {
			servertest.WaitFor(t, 5*time.Second, func() bool { return e.rdb.Exists(ctx, gone[kind]).Val() == 0 })
			_, err := resumer.Resume(ctx, l.Token())
			require.ErrorIs(t, err, redlease.ErrLeaseLost, "%v expired", kind)
		}

		// Taken by another holder since.
		taken, err := c.TryAcquire(ctx, "exclusive")
		require.NoError(t, err)
		require.Greater(t, taken.Fence(), leases[redlease.ExclusiveLease].Fence())
		_, err = resumer.Resume(ctx, leases[redlease.ExclusiveLease].Token())
		require.ErrorIs(t, err, redlease.ErrLeaseLost, "another holder's")

		// Another fence of the same owner: the holder's lease, untouched.
		key := integLeaseKey(redlease.DefaultPrefix, "exclusive")
		require.NoError(t, e.rdb.PExpire(ctx, key, time.Hour).Err())
		wrong := taken.Token()
		wrong.Fence++
		_, err = resumer.Resume(ctx, wrong)
		require.ErrorIs(t, err, redlease.ErrLeaseLost, "another fence")
		require.Greater(t, e.rdb.PTTL(ctx, key).Val(), 59*time.Minute, "not renewed")

		// Broken by an operator.
		_, removed, err := c.Break(ctx, "exclusive", taken.Fence())
		require.NoError(t, err)
		require.True(t, removed)
		_, err = resumer.Resume(ctx, taken.Token())
		require.ErrorIs(t, err, redlease.ErrLeaseLost, "broken")
	})
}

// Two processes that resume one token share the lease: the first Release
// ends it in Redis; the other's next renewal finds it lost, and ends its
// lease context.
func TestIntegrationResumeTwiceSharesTheLease(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		holder := e.client()
		a, b := e.client(redlease.WithAutoRenew(false)), e.client(redlease.WithAutoRenew(false))
		for kind, l := range integTakeAll(t, holder) {
			t.Run(kind.String(), func(t *testing.T) {
				require.NoError(t, l.Handoff())
				ra, err := a.Resume(ctx, l.Token())
				require.NoError(t, err)
				rb, err := b.Resume(ctx, l.Token())
				require.NoError(t, err)
				require.Equal(t, ra.Fence(), rb.Fence())
				require.NoError(t, ra.Refresh(ctx))
				require.NoError(t, rb.Refresh(ctx))

				require.NoError(t, ra.Release(ctx))
				require.ErrorIs(t, rb.Refresh(ctx), redlease.ErrLeaseLost)
				require.ErrorIs(t, context.Cause(rb.Context()), redlease.ErrLeaseLost)
				require.ErrorIs(t, rb.Release(ctx), redlease.ErrLeaseLost)
				_, err = b.Resume(ctx, l.Token())
				require.ErrorIs(t, err, redlease.ErrLeaseLost)
			})
		}
	})
}
