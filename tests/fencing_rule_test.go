package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// The helpers of the fencing tests that moved here from package fencing
// (its rule_test.go keeps its own copies for the guards that need no SQL
// driver). They use fencing's exported API only.

// fenceToken is a fence and owner as a guard saw them.
type fenceToken struct {
	fence int64
	owner string
}

// fenceAdmits is the fencing rule as package fencing documents it: a write
// with fence f and owner o is admitted iff f > newest, or f == newest and o
// is the owner recorded with newest. It is written out here, apart from
// fencing's own, to check the guards against the documentation.
func fenceAdmits(f int64, o string, newest int64, newestOwner string) bool {
	return f > newest || (f == newest && o == newestOwner)
}

// raceFences runs workers goroutines that each call write perWorker times at
// once, with fences drawn from 1..maxFence and owners "o0" or "o1" (so equal
// fences from different owners occur), and returns the refusals. Any other
// error fails the test.
func raceFences(t *testing.T, workers, perWorker int, maxFence int64,
	write func(fence int64, owner string) error) []*fencing.StaleFenceError {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused []*fencing.StaleFenceError
		errs    []error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(maxFence)))
			for range perWorker {
				fence, owner := rng.Int64N(maxFence)+1, fmt.Sprintf("o%d", rng.IntN(2))
				err := write(fence, owner)
				var stale *fencing.StaleFenceError
				mu.Lock()
				if errors.As(err, &stale) {
					refused = append(refused, stale)
				} else if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	return refused
}

// requireNeverBack checks a log of accepted writes, in the order the resource
// applied them, against the fencing rule: each write is admitted after the one
// before it. Every attempt was either accepted or refused, and each refusal
// was by the rule. It also requires both outcomes, so that the race raced.
func requireNeverBack(t *testing.T, accepted []fenceToken, refused []*fencing.StaleFenceError, attempts int) {
	t.Helper()
	var prev fenceToken
	for i, a := range accepted {
		require.True(t, fenceAdmits(a.fence, a.owner, prev.fence, prev.owner),
			"accepted write %d %+v after %+v", i, a, prev)
		prev = a
	}
	require.Equal(t, attempts, len(accepted)+len(refused))
	require.Greater(t, len(accepted), 1)
	require.NotEmpty(t, refused)
	for _, s := range refused {
		require.False(t, fenceAdmits(s.Fence, s.Owner, s.Newest, s.NewestOwner), "refused %+v", *s)
	}
}

// staleAndCurrent sets up the seeds' story on real leases of "invoice:42": A
// takes the lease with fence 33 and freezes past its TTL (Redis's clock jumps
// 31 s, A's own does not, so A still believes it holds the lease); then B
// takes it over with fence 34. B's lease is released when the test ends.
func staleAndCurrent(t *testing.T) (a, b *redlease.Lease) {
	t.Helper()
	ctx := t.Context()
	mr, rdb := servertest.Mini(t)
	locks := redlease.New(rdb, redlease.WithTTL(30*time.Second), redlease.WithAutoRenew(false))
	_, err := locks.AdvanceFence(ctx, "invoice:42", 32)
	require.NoError(t, err)
	a, err = locks.TryAcquire(ctx, "invoice:42")
	require.NoError(t, err)
	require.Equal(t, int64(33), a.Fence())
	mr.FastForward(31 * time.Second)
	require.NoError(t, a.Context().Err(), "A still believes it holds the lease")
	b, err = locks.TryAcquire(ctx, "invoice:42")
	require.NoError(t, err)
	require.Equal(t, int64(34), b.Fence())
	t.Cleanup(func() { _ = b.Release(context.Background()) })
	return a, b
}

// fenceEvents is an observer that keeps the events it sees.
type fenceEvents struct {
	mu     sync.Mutex
	events []redlease.Event
}

func (r *fenceEvents) Observe(_ context.Context, e redlease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events recorded so far, as "kind:outcome", and forgets them.
func (r *fenceEvents) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Kind.String()+":"+e.Outcome.String())
	}
	r.events = nil
	return out
}
