package redlease

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestFencesRiseWithEveryHolder(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	ctx := t.Context()
	for want := int64(1); want <= 5; want++ {
		l, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err)
		require.Equal(t, want, l.Fence())
		require.NoError(t, l.Release(ctx))
	}
	// Another resource has its own counter; another prefix its own keys.
	l, err := c.TryAcquire(ctx, "other")
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Fence())
	l2, err := c.TryAcquire(ctx, "r", WithPrefix("app2:"))
	require.NoError(t, err)
	require.Equal(t, int64(1), l2.Fence())
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l2.Release(ctx))
}

// counterFences is a FenceSource for tests: a counter, with a hook run
// before each draw.
type counterFences struct {
	mu     sync.Mutex
	next   int64
	before func() error
}

func (s *counterFences) NextFence(context.Context, string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.before != nil {
		if err := s.before(); err != nil {
			return 0, err
		}
	}
	s.next++
	return s.next, nil
}

func TestFenceSource(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	src := &counterFences{next: 1000}
	c := New(rdb, WithFenceSource(src))

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(1001), l.Fence())
	require.Equal(t, l.Owner()+":1001:"+DefaultHolder(), mustGet(t, mr, "redlease:{r}:lease"), "the lease records the drawn fence")
	require.Equal(t, "1", mustGet(t, mr, counterKey("r")), "the Redis counter still counts")
	require.NoError(t, l.Release(ctx))

	// A source that fails: the lease is given back.
	src.before = func() error { return errors.New("sequence unavailable") }
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorContains(t, err, "sequence unavailable")
	servertest.WaitFor(t, 5*time.Second, func() bool { return !mr.Exists("redlease:{r}:lease") }) // given back in the background

	// The lease is lost while the fence is drawn: the fence is not handed out.
	src.before = func() error { mr.Del("redlease:{r}:lease"); return nil }
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrLeaseLost)

	src.before = nil
	l, err = c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(1003), l.Fence(), "fences keep rising; drawn values may be skipped")
	require.NoError(t, l.Release(ctx))
}

// An upgrade from per-resource counters: MigrateFences folds each one into
// its slot's counter, so the next holder's fence is above every old one.
func TestMigrateFencesFromPerResourceCounters(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	for r, n := range map[string]string{"a": "41", "b": "7", "a}x": "50"} {
		require.NoError(t, mr.Set(wire.Key(DefaultPrefix, r, wire.KindFence), n)) // as a version before this one left them
	}
	var legacy []string
	require.NoError(t, c.ScanFences(ctx, func(fc FenceCounter) error {
		if fc.Resource != "" {
			legacy = append(legacy, fc.Resource)
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"a", "b", "a}x"}, legacy)
	n, err := c.MigrateFences(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for r, old := range map[string]int64{"a": 50, "b": 7, "a}x": 50} { // "a}x" hashes by its tag "a": a's slot
		l, err := c.TryAcquire(ctx, r)
		require.NoError(t, err)
		require.Greater(t, l.Fence(), old, "%q", r)
		require.NoError(t, l.Release(ctx))
		require.False(t, mr.Exists(wire.Key(DefaultPrefix, r, wire.KindFence)), "the old counter is gone")
	}
	n, err = c.MigrateFences(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "idempotent")
	var slots int
	require.NoError(t, c.ScanFences(ctx, func(fc FenceCounter) error { slots++; return nil }))
	require.Equal(t, 2, slots, "the counters of two slots remain")
}

// MigrateFences looks only for the old counters, and sends their scripts in
// pipelines: it scanned every slot's counter too, read each one, and ran
// one round trip per old counter (300 slot counters and 20 old ones cost
// 367 script runs). The round trips are counted with a go-redis hook; the
// script runs, which the server counts, on every library in
// tests/integ_fence_test.go.
func TestIntegrationMigrateFencesTouchesOnlyOldCounters(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	pipe := rdb.Pipeline()
	const slots, olds = 300, 20
	for s := range slots {
		pipe.Set(ctx, wire.SlotCounter(DefaultPrefix, s), 1000+s, 0)
	}
	oldSlots := map[int]int64{}
	for i := range olds {
		r := fmt.Sprintf("old:%d", i)
		pipe.Set(ctx, wire.Key(DefaultPrefix, r, wire.KindFence), 5000+i, 0)
		oldSlots[wire.SlotOf(r)] = max(oldSlots[wire.SlotOf(r)], int64(5000+i))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	c := New(rdb)
	require.NoError(t, rdb.ScriptLoad(ctx, wire.Named("migrate.lua").Source()).Err()) // no NOSCRIPT round to count
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	trips := &roundTripHook{}
	rdb.AddHook(trips)

	n, err := c.MigrateFences(ctx)
	require.NoError(t, err)
	require.Equal(t, olds, n)
	scans, others := trips.scans.Load(), trips.others.Load()
	stats := servertest.CommandStats(t, rdb)
	require.Equal(t, olds, stats["evalsha"], "one script run per old counter, none per slot counter: %v", stats)
	require.Equal(t, scans, int64(stats["scan"]))
	require.LessOrEqual(t, others, scans, "at most one round trip of scripts per SCAN batch (not one per old counter)")
	for s := range slots {
		v, err := rdb.Get(ctx, wire.SlotCounter(DefaultPrefix, s)).Int64()
		require.NoError(t, err)
		want := int64(1000 + s)
		if old, ok := oldSlots[s]; ok {
			want = max(want, old)
		}
		require.Equal(t, want, v, "slot %d", s)
	}
	for i := range olds {
		require.Zero(t, rdb.Exists(ctx, wire.Key(DefaultPrefix, fmt.Sprintf("old:%d", i), wire.KindFence)).Val())
	}
}

// roundTripHook counts round trips: SCAN calls, and the others (a
// pipeline is one).
type roundTripHook struct{ scans, others atomic.Int64 }

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			h.scans.Add(1)
		} else {
			h.others.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.others.Add(1)
		return next(ctx, cmds)
	}
}

func TestAdvanceFenceNeverMovesBack(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	ctx := t.Context()

	n, err := c.AdvanceFence(ctx, "r", 10)
	require.NoError(t, err)
	require.Equal(t, int64(10), n, "an absent counter is created")
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(11), l.Fence())
	require.NoError(t, l.Release(ctx))

	for _, atLeast := range []int64{1, 5, 11} {
		n, err = c.AdvanceFence(ctx, "r", atLeast)
		require.NoError(t, err)
		require.Equal(t, int64(11), n, "AdvanceFence(%d)", atLeast)
	}
	n, err = c.AdvanceFence(ctx, "r", 12)
	require.NoError(t, err)
	require.Equal(t, int64(12), n)
	last, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(12), last)
	ttl, err := rdb.PTTL(ctx, counterKey("r")).Result()
	require.NoError(t, err)
	require.Negative(t, ttl, "the counter still has no TTL")

	// The prefix names the counter; MaxFence itself is exact.
	n, err = New(rdb, WithPrefix("other:")).AdvanceFence(ctx, "r", MaxFence)
	require.NoError(t, err)
	require.Equal(t, MaxFence, n)
	v, err := rdb.Get(ctx, wire.SlotCounter("other:", wire.SlotOf("r"))).Int64()
	require.NoError(t, err)
	require.Equal(t, MaxFence, v)
	last, err = c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(12), last, "the default prefix's counter is untouched")

	// A counter INCR cannot count from is the repair's case: it is set to
	// atLeast (TestIntegrationCorruptFenceCounter, in tests/).
	require.NoError(t, rdb.Set(ctx, counterKey("bad"), "abc", 0).Err())
	n, err = c.AdvanceFence(ctx, "bad", 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
}

// LastFence reads the counter alone: counter.lua, not inspect.lua's ten
// keys.
func TestLastFenceRunsTheCounterScript(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &argsHook{}
	rdb.AddHook(h)
	c := New(rdb)
	_, err := c.LastFence(t.Context(), "r")
	require.NoError(t, err)
	var scripts int
	for _, a := range h.args {
		// The hash or the source goes by pointer, as every word of a call.
		switch a[0] {
		case "evalsha":
			require.Equal(t, wire.Named("counter.lua").Hash(), *a[1].(*string))
		case "eval": // after NOSCRIPT (a new miniredis has no scripts)
			require.Equal(t, wire.Named("counter.lua").Source(), *a[1].(*string))
		default:
			continue // the connection's handshake
		}
		require.Equal(t, 1, a[2], "one key")
		scripts++
	}
	require.NotZero(t, scripts)
}

// argsHook records the words of each command sent, one at a time.
type argsHook struct{ args [][]any }

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.args = append(h.args, cmd.Args())
		return next(ctx, cmd)
	}
}
func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestAdvanceFenceRejectsBadInputBeforeAnyRoundTrip(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &servertest.CountingHook{}
	rdb.AddHook(h)
	c := New(rdb)
	for _, atLeast := range []int64{0, -1, MaxFence + 1, 1<<63 - 1} {
		_, err := c.AdvanceFence(t.Context(), "r", atLeast)
		require.ErrorIs(t, err, ErrInvalidArgument, "AdvanceFence(%d)", atLeast)
	}
	_, err := c.AdvanceFence(t.Context(), "", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = (*Client)(nil).AdvanceFence(t.Context(), "r", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = New(nil).AdvanceFence(t.Context(), "r", 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Zero(t, h.Cmds.Load(), "no command was sent")
}

func TestCheckFence(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	t.Cleanup(func() { _ = c.Close(context.Background()) }) // the broken lease is still renewed
	ctx := t.Context()
	stale := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrStaleFence)
	}

	stale(c.CheckFence(ctx, "r", 1)) // never held
	a, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, c.CheckFence(ctx, "r", a.Fence()))
	stale(c.CheckFence(ctx, "r", a.Fence()+1))
	stale(c.CheckFence(ctx, "other", a.Fence()))
	require.NoError(t, a.Release(ctx))
	stale(c.CheckFence(ctx, "r", a.Fence()))

	// Broken and taken by another: the old fence is not current, the new one is.
	a, err = c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	_, removed, err := c.Break(ctx, "r", a.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	b, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	stale(c.CheckFence(ctx, "r", a.Fence()))
	require.NoError(t, c.CheckFence(ctx, "r", b.Fence()))
	require.NoError(t, b.Release(ctx))

	// Shared leases: each permit's and each reader's fence is current.
	p1, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	p2, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	require.NoError(t, c.CheckFence(ctx, "s", p1.Fence()))
	require.NoError(t, c.CheckFence(ctx, "s", p2.Fence()))
	require.NoError(t, p1.Release(ctx))
	stale(c.CheckFence(ctx, "s", p1.Fence()))
	require.NoError(t, c.CheckFence(ctx, "s", p2.Fence()))
	r1, err := c.TryAcquireRead(ctx, "rw")
	require.NoError(t, err)
	r2, err := c.TryAcquireRead(ctx, "rw")
	require.NoError(t, err)
	require.NoError(t, c.CheckFence(ctx, "rw", r1.Fence()))
	require.NoError(t, c.CheckFence(ctx, "rw", r2.Fence()))
	require.NoError(t, r1.Release(ctx))
	require.NoError(t, r2.Release(ctx))
	require.NoError(t, p2.Release(ctx))

	for _, bad := range []struct {
		resource string
		fence    int64
	}{{"r", 0}, {"r", -1}, {"", 1}, {"a\x00b", 1}} {
		require.ErrorIs(t, c.CheckFence(ctx, bad.resource, bad.fence), ErrInvalidArgument, "%q %d", bad.resource, bad.fence)
	}
}
