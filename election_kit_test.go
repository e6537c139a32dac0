package redlease_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/redleasetest"
)

// Elections on the test kit's clock: time passes only when the test says.

// probe returns what h answers a GET with: the status code and the body.
func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// A leader whose renewals fail becomes unhealthy once its renewal is
// overdue by more than maxLate, while it still holds its term; it is
// healthy again once a renewal gets through, and once its term has ended.
// A follower is healthy all along.
func TestElectionUnhealthyWhileRenewalsFail(t *testing.T) {
	k := redleasetest.New(t) // TTL 30 s: renewals every 10 s, local lifetime 26.7 s
	const interval, maxLate = 10 * time.Second, 5 * time.Second
	leader := redlease.NewElection(k.Client(), "cron")
	follower := redlease.NewElection(k.NewClient(), "cron")
	lh, fh := leader.HealthHandler(maxLate), follower.HealthHandler(maxLate)
	term, err := leader.Campaign(t.Context(), "host-a")
	require.NoError(t, err)

	k.FastForward(time.Minute) // renewals on time
	require.NoError(t, leader.Healthy(0))
	code, body := probe(t, lh)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body)

	k.Outage()
	k.FastForward(interval + maxLate) // confirmed a minute in; the renewal due 10 s later fails
	require.NoError(t, leader.Healthy(maxLate), "exactly maxLate overdue is still on time")
	k.FastForward(time.Millisecond)
	err = leader.Healthy(maxLate)
	require.ErrorIs(t, err, redlease.ErrUnhealthy)
	require.Contains(t, err.Error(), `"cron"`)
	require.Contains(t, err.Error(), "5.001s overdue")
	require.NoError(t, term.Context().Err(), "unhealthy, and still leading: the local deadline is later")
	code, body = probe(t, lh)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, err.Error()+"\n", body)
	require.NoError(t, follower.Healthy(0), "a follower is healthy")
	code, _ = probe(t, fh)
	require.Equal(t, http.StatusOK, code)

	k.Restore()
	k.FastForward(interval / 4) // the watchdog retries a failed renewal every interval/4
	require.NoError(t, term.Context().Err())
	require.NoError(t, leader.Healthy(0), "renewed")

	k.Outage()
	k.FastForward(time.Minute) // past the local deadline: the term ends
	require.ErrorIs(t, context.Cause(term.Context()), redlease.ErrLeaseLost)
	require.NoError(t, leader.Healthy(0), "no longer leading: healthy, and campaigning or about to")
	code, _ = probe(t, lh)
	require.Equal(t, http.StatusOK, code)
	k.Restore()
}

// While a campaign fails at once (the name is in use as a semaphore), Run
// retries with a backoff on the Client's clock: a handful of campaigns per
// second of that clock. Once the name is free it is elected.
func TestElectionRunBacksOffWhileItCannotCampaign(t *testing.T) {
	k := redleasetest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sem, err := k.NewClient().AcquireSemaphore(ctx, "cron", 2)
	require.NoError(t, err)
	var campaigns atomic.Int64
	count := redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		if e.Kind == redlease.EventAcquire {
			campaigns.Add(1)
		}
	})
	e := redlease.NewElection(k.Client(), "cron", redlease.WithObserver(count))
	led := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(lctx context.Context) error {
			led <- e.Term().Fence()
			<-lctx.Done()
			return nil
		})
	}()

	servertest.WaitFor(t, 5*time.Second, func() bool { return campaigns.Load() > 0 })
	for range 100 { // a second of the Client's clock
		k.FastForward(10 * time.Millisecond)
	}
	n := campaigns.Load()
	t.Logf("%d campaigns in a second", n)
	// Backoff ceilings 2, 4, …, 256, then 500 ms, each delay uniform below
	// its ceiling: about a dozen campaigns in the second, fewer if Run was
	// slow to arm its timer (a step of the clock may pass before it does).
	// Without a backoff on this clock they would be as many as round trips
	// fit in the real time that the steps took.
	require.Less(t, n, int64(100), "Run spins")
	// And it does campaign again, each time the clock passes its backoff.
	deadline := time.Now().Add(10 * time.Second)
	for campaigns.Load() < n+2 {
		require.False(t, time.Now().After(deadline), "Run stopped campaigning at %d campaigns", campaigns.Load())
		k.FastForward(10 * time.Millisecond)
	}
	require.Empty(t, led)

	require.NoError(t, sem.Release(ctx))
	// Each step of the clock may fire Run's backoff; its campaign and the
	// announcement of its term then take round trips in real time.
	deadline = time.Now().Add(10 * time.Second)
	for len(led) == 0 {
		require.False(t, time.Now().After(deadline), "not elected within 10 s")
		k.FastForward(100 * time.Millisecond)
		select {
		case f := <-led:
			led <- f
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.Positive(t, <-led)
	cancel()
	require.ErrorIs(t, servertest.Recv(t, done, 10*time.Second), context.Canceled)
}
