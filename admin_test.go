package redlease

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestInspect(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Minute), WithAutoRenew(false))
	ctx := t.Context()

	st, err := c.Inspect(ctx, "never")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "never"}, st)

	l, err := c.TryAcquire(ctx, "inv:1")
	require.NoError(t, err)
	waiting := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := c.Acquire(wctx, "inv:1")
		waiting <- err
	}()
	servertest.WaitFor(t, 5*time.Second, func() bool {
		st, err := c.Inspect(ctx, "inv:1")
		return err == nil && st.Waiters == 1
	})
	cancel()
	require.ErrorIs(t, <-waiting, ErrNotAcquired)

	st, err = c.Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, "inv:1", st.Resource)
	require.True(t, st.Held)
	require.Equal(t, l.Owner(), st.Owner)
	require.Equal(t, l.Fence(), st.Fence)
	require.Equal(t, l.Fence()+1, st.LastFence, "the waiter's first attempt drew a fence it did not use")
	require.Equal(t, time.Minute, st.Remaining)
	require.NoError(t, l.Release(ctx))

	st, err = c.Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "inv:1", LastFence: 2}, st, "released: free, the counter stays")

	// A key written by hand, without a TTL: shown as it is.
	require.NoError(t, mr.Set("redlease:{manual}:lease", "someone"))
	st, err = c.Inspect(ctx, "manual")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "manual", Held: true, Kind: "lease", Owner: "someone", Remaining: -1}, st)

	_, err = c.Inspect(ctx, "")
	require.ErrorIs(t, err, ErrInvalidArgument)
	st, err = New(rdb, WithPrefix("other:")).Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "inv:1"}, st, "another prefix is another namespace")
}

func TestBreakOnMiniredis(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithAutoRenew(false))
	ctx := t.Context()

	st, removed, err := c.Break(ctx, "free", 0)
	require.NoError(t, err)
	require.False(t, removed)
	require.Equal(t, Status{Resource: "free"}, st)

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	st, removed, err = c.Break(ctx, "r", l.Fence()+1)
	require.NoError(t, err)
	require.False(t, removed, "another fence than the holder's: nothing removed")
	require.Equal(t, l.Owner(), st.Owner)
	require.True(t, mr.Exists("redlease:{r}:lease"))

	st, removed, err = c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, l.Owner(), st.Owner)
	require.Equal(t, l.Fence(), st.Fence)
	require.False(t, mr.Exists("redlease:{r}:lease"))
	require.Equal(t, "1", mustGet(t, mr, counterKey("r")), "the counter stays")
	require.ErrorIs(t, l.Release(ctx), ErrLeaseLost, "the broken holder's release reports the loss")

	_, _, err = c.Break(ctx, "r", -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// Break reports every call that reaches Redis to the Client's observers,
// with the lease it found.
func TestBreakReportsToObservers(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	def := &recorder{}
	var buf servertest.Buffer // the loss of the lease that Break removes may be logged from the break channel's goroutine
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := New(rdb, WithObserver(def), WithLogger(logger), WithAutoRenew(false))
	ctx := t.Context()

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	def.take()
	before := time.Now()
	_, removed, err := c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	servertest.WaitFor(t, 5*time.Second, func() bool { def.mu.Lock(); defer def.mu.Unlock(); return len(def.events) == 2 })
	{
		def.mu.Lock()
		require.Len(t, def.events, 2, "the break, and the loss of the Client's own lease it removed")
		e, lost := def.events[0], def.events[1]
		def.mu.Unlock()
		if e.Kind == EventLost { // the break channel's message may come before Break's reply
			e, lost = lost, e
		}
		require.Equal(t, EventLost, lost.Kind)
		require.ErrorIs(t, lost.Err, ErrLeaseLost)
		require.Equal(t, EventBreak, e.Kind)
		require.Equal(t, OutcomeOK, e.Outcome)
		require.Equal(t, "r", e.Resource)
		require.Equal(t, l.Owner(), e.Owner)
		require.Equal(t, l.Fence(), e.Fence)
		require.False(t, e.Start.Before(before))
		require.False(t, e.End.Before(e.Start))
		require.NoError(t, e.Err)
	}
	require.Contains(t, buf.String(), "level=WARN msg=\"redlease break\" resource=r result=ok fence=1 owner="+l.Owner()[:8])
	def.take()

	// Nothing to remove: lost, with the lease found, if any.
	_, removed, err = c.Break(ctx, "r", 0)
	require.NoError(t, err)
	require.False(t, removed)
	m, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	_, removed, err = c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.False(t, removed, "another holder's fence")
	def.mu.Lock()
	last := def.events[len(def.events)-1]
	def.mu.Unlock()
	require.Equal(t, m.Owner(), last.Owner)
	require.Equal(t, m.Fence(), last.Fence)

	// A Redis error: its outcome; invalid input: no event.
	mr.SetError("LOADING Redis is loading the dataset in memory")
	_, _, err = c.Break(ctx, "r", 0)
	require.Error(t, err)
	mr.SetError("")
	def.mu.Lock()
	last = def.events[len(def.events)-1]
	def.mu.Unlock()
	require.ErrorIs(t, last.Err, err)
	require.Empty(t, last.Owner)
	_, _, err = c.Break(ctx, "r", -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, []string{"break:lost", "acquire:ok", "break:lost", "break:error"}, def.take())
	require.Equal(t, 4, strings.Count(buf.String(), "level=WARN msg=\"redlease break\""), buf.String())
	require.NoError(t, m.Release(ctx)) // a held lease keeps the Client's break channel subscribed
}
