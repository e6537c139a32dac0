package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// token is a fence and owner as a guard saw them.
type token struct {
	fence int64
	owner string
}

// raceFences runs workers goroutines that each call write perWorker times at
// once, with fences drawn from 1..maxFence and owners "o0" or "o1" (so equal
// fences from different owners occur), and returns the refusals. Any other
// error fails the test.
func raceFences(t *testing.T, workers, perWorker int, maxFence int64, write func(fence int64, owner string) error) []*StaleFenceError {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused []*StaleFenceError
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
				var stale *StaleFenceError
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
func requireNeverBack(t *testing.T, accepted []token, refused []*StaleFenceError, attempts int) {
	t.Helper()
	var prev token
	for i, a := range accepted {
		require.True(t, admits(a.fence, a.owner, prev.fence, prev.owner),
			"accepted write %d %+v after %+v", i, a, prev)
		prev = a
	}
	require.Equal(t, attempts, len(accepted)+len(refused))
	require.Greater(t, len(accepted), 1)
	require.NotEmpty(t, refused)
	for _, s := range refused {
		require.False(t, admits(s.Fence, s.Owner, s.Newest, s.NewestOwner), "refused %+v", *s)
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

// recorder is an observer that keeps the events it sees.
type recorder struct {
	mu     sync.Mutex
	events []redlease.Event
}

func (r *recorder) Observe(_ context.Context, e redlease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events recorded so far, as "kind:outcome", and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Kind.String()+":"+e.Outcome.String())
	}
	r.events = nil
	return out
}

func TestGuardsReportStaleFences(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	rec := &recorder{}

	rg := NewRedisGuard(rdb, WithObserver(rec))
	require.NoError(t, rg.Set(ctx, "k", "v", 0, 2, "b"))
	require.ErrorIs(t, rg.Set(ctx, "k", "v", 0, 1, "a"), ErrStaleFence)
	_, err := rg.Del(ctx, "k", 1, "a")
	require.ErrorIs(t, err, ErrStaleFence)

	// SQLGuard's report is TestSQLGuardReportsStaleFences in the tests module,
	// which has an SQL driver.

	h := HTTPGuard{Store: &MemoryStore{}, Observer: rec}.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, fence := range []string{"2", "1"} {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set(HeaderFencingToken, fence)
		req.Header.Set(HeaderFencingResource, "r")
		req.Header.Set(HeaderFencingOwner, "o")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	require.Equal(t, []string{"stale_fence:stale", "stale_fence:stale", "stale_fence:stale"}, rec.take())
}
