package redlease

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
