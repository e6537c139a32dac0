package redlease

import (
	"bytes"
	"context"
	"github.com/redlease/redlease/internal/clock"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(_ context.Context, e Event) {
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

func TestObserverSeesEveryOutcome(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	rec := &recorder{}
	c := New(rdb, WithObserver(rec), WithAutoRenew(false), WithTTL(time.Minute))
	ctx := t.Context()

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, []string{"acquire:ok"}, rec.take())

	_, err = c.TryAcquire(ctx, "r")
	require.Error(t, err)
	// A waiter whose context ends while it sleeps, not while an attempt is
	// on its way (then the outcome would be unknown): on a frozen clock it
	// sleeps until it is woken, and nothing wakes it.
	waiter := New(rdb, WithObserver(rec), clock.Option(clock.NewFake(time.Now())).(Option))
	defer func() { _ = waiter.Close(ctx) }()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for i := 0; i < 10_000 && waiter.hub.asleep.Load() != 1; i++ { // bounded: 10 s
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err = waiter.Acquire(wctx, "r")
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"acquire:busy", "acquire:timeout"}, rec.take())

	require.NoError(t, l.Refresh(ctx))
	mr.Del("redlease:{r}:lease")
	require.ErrorIs(t, l.Refresh(ctx), ErrLeaseLost)
	require.Equal(t, []string{"renew:ok", "renew:lost", "lost:lost"}, rec.take())

	require.ErrorIs(t, l.Release(ctx), ErrLeaseLost)
	rec.mu.Lock()
	rel := rec.events[0]
	rec.mu.Unlock()
	require.Equal(t, []string{"release:lost"}, rec.take())
	require.True(t, rel.Overran, "the lease ended before the holder released it")
	require.Equal(t, l.Owner(), rel.Owner)
	require.Equal(t, l.Fence(), rel.Fence)
	require.Positive(t, rel.Held)

	l, err = c.TryAcquire(ctx, "r", WithTTL(500*time.Millisecond))
	require.NoError(t, err)
	servertest.WaitDone(t, l.Context(), 10*time.Second)
	// The timer emits the loss once it has let go of the lease's lock, so
	// just after the context ended.
	servertest.WaitFor(t, 5*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.events) == 2
	})
	require.NoError(t, l.Release(ctx), "miniredis keeps the key without FastForward")
	require.Equal(t, []string{"acquire:ok", "lost:expired", "release:ok"}, rec.take())
}

func TestLoggerIsQuietOnSuccessAndWarnsOnLoss(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := New(rdb, WithLogger(logger), WithAutoRenew(false))
	ctx := t.Context()

	l, err := c.TryAcquire(ctx, "billing:7")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.Empty(t, buf.String(), "success is logged at Debug only")

	l, err = c.TryAcquire(ctx, "billing:7")
	require.NoError(t, err)
	mr.Del("redlease:{billing:7}:lease")
	require.Error(t, l.Refresh(ctx))
	_ = l.Release(ctx)
	out := buf.String()
	require.Contains(t, out, "level=WARN msg=\"redlease lost\" resource=billing:7 result=lost fence=2 owner="+l.Owner()[:8])
	require.Contains(t, out, "level=WARN msg=\"redlease release\"")
	require.Contains(t, out, "overran=true")
	require.NotContains(t, out, l.Owner(), "only an owner prefix is logged")
	require.Equal(t, 3, strings.Count(out, "\n"), "renew failure (Info), loss and release (Warn):\n%s", out)
}

// Observers may call anything: an observer that, on each renew, loss and
// release event of a lease, calls every method of that lease and takes and
// gives back another lease, from the watchdog, a deadline timer and the
// caller alike, finishes. (Observers used to be called with the lease's lock
// held, and one that read Deadline deadlocked.)
func TestObserversMayCallTheLeaseAndTheClient(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	var (
		mu     sync.Mutex
		seen   = map[string]int{} // by "resource/kind"
		inner  = map[EventKind]bool{}
		leases = map[string]*Lease{}
		c      *Client
	)
	obs := ObserverFunc(func(ctx context.Context, e Event) {
		if e.Kind != EventRenew && e.Kind != EventLost && e.Kind != EventRelease {
			return
		}
		mu.Lock()
		seen[e.Resource+"/"+e.Kind.String()]++
		l := leases[e.Resource]
		again := inner[e.Kind] // once per kind, or a Refresh on renew would recurse
		inner[e.Kind] = true
		mu.Unlock()
		if again || l == nil {
			return
		}
		_, _, _, _ = l.Resource(), l.Owner(), l.Fence(), l.Deadline()
		_ = l.Context().Err()
		_ = l.Refresh(ctx)
		_ = l.Release(ctx)
		other, err := c.TryAcquire(ctx, "other-"+e.Kind.String())
		if err == nil {
			_ = other.Release(ctx)
		}
		_, _ = c.Inspect(ctx, e.Resource)
	})
	c = New(rdb, WithObserver(obs))
	defer c.Close(ctx)

	// TTL 2 s: the acquires' replies must come within the local lifetime,
	// also on a loaded machine under -race.
	renewed, err := c.TryAcquire(ctx, "renewed", WithTTL(2*time.Second))
	require.NoError(t, err)
	lapsed, err := c.TryAcquire(ctx, "lapsed", WithTTL(2*time.Second), WithAutoRenew(false))
	require.NoError(t, err)
	mu.Lock()
	leases["renewed"], leases["lapsed"] = renewed, lapsed
	mu.Unlock()

	// The watchdog's first renewal of "renewed" runs the observer, which
	// releases it; "lapsed" ends on its timer.
	servertest.WaitDone(t, renewed.Context(), 5*time.Second)
	servertest.WaitDone(t, lapsed.Context(), 5*time.Second)
	require.ErrorIs(t, context.Cause(renewed.Context()), ErrReleased)
	require.ErrorIs(t, context.Cause(lapsed.Context()), ErrLeaseLost)
	servertest.WaitFor(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["renewed/renew"] > 0 && seen["renewed/release"] > 0 && seen["lapsed/lost"] > 0
	})
	require.NoError(t, lapsed.Release(ctx)) // its own release event, from the caller
}

// An observer may even close the Client from an event of its watchdog.
func TestObserverMayCloseTheClient(t *testing.T) {
	_, rdb := servertest.Mini(t)
	closed := make(chan error, 1)
	var once sync.Once
	var c *Client
	c = New(rdb, WithObserver(ObserverFunc(func(ctx context.Context, e Event) {
		if e.Kind == EventRenew {
			once.Do(func() { closed <- c.Close(ctx) })
		}
	})))
	l, err := c.TryAcquire(t.Context(), "r", WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, servertest.Recv(t, closed, 5*time.Second))
	require.ErrorIs(t, context.Cause(l.Context()), ErrReleased, "Close released the lease")
}

// An observer of the release events that Close emits may call the Client,
// Close included. (Close emitted them holding its lock, and an observer that
// called Close deadlocked.)
func TestObserverOfCloseMayCallClose(t *testing.T) {
	_, rdb := servertest.Mini(t)
	var c *Client
	inner := make(chan error, 1)
	c = New(rdb, WithObserver(ObserverFunc(func(ctx context.Context, e Event) {
		if e.Kind == EventRelease {
			_, _ = c.Inspect(ctx, e.Resource)
			inner <- c.Close(ctx)
		}
	})))
	_, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Close(t.Context()) }()
	require.NoError(t, servertest.Recv(t, done, 5*time.Second))
	require.NoError(t, servertest.Recv(t, inner, 5*time.Second))
}
