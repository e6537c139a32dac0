package redlease

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"strings"
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

func TestIntegrationFencesStrictlyIncreaseAcrossClients(t *testing.T) {
	srv := servertest.Redis(t)
	const clients, rounds = 4, 250
	var (
		mu     sync.Mutex
		fences []int64
		wg     sync.WaitGroup
		errs   = make(chan error, clients)
	)
	for range clients {
		c := New(srv.Client(t), WithTTL(5*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for range rounds {
				l, err := c.Acquire(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock() // inside the critical section: the append order is the holder order
				fences = append(fences, l.Fence())
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, fences, clients*rounds)
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1], "fence %d", i)
	}
}

func TestFenceCounterNeverExpiresNorFallsBack(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	c := New(rdb, WithTTL(50*time.Millisecond), WithAutoRenew(false))
	var last int64
	for range 3 {
		l, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last)
		last = l.Fence()
		time.Sleep(100 * time.Millisecond) // let it expire instead of releasing
	}
	ttl, err := rdb.PTTL(ctx, counterKey("r")).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "the counter has no TTL")
	got, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, last, got)
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

// Fences of a resource keep rising when its slot, counter included, moves to
// another master (a reshard).
func TestIntegrationFencesRiseAcrossSlotMigration(t *testing.T) {
	nodes, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	c := New(cc, WithAutoRenew(false))
	take := func() int64 {
		t.Helper()
		l, err := c.TryAcquire(ctx, "moving")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return l.Fence()
	}
	for range 3 {
		take()
	}
	last := take()
	slot := wire.SlotOf("moving")
	src, err := cc.MasterForKey(ctx, "{moving}")
	require.NoError(t, err)
	var dst *redis.Client
	for _, n := range nodes {
		if n.Addr != src.Options().Addr {
			dst = servertest.NewClient(t, n.Addr)
			break
		}
	}
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	require.NoError(t, dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	require.NoError(t, src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	ks, err := src.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	require.NoError(t, err)
	require.Contains(t, ks, counterKey("moving"), "the counter lives in the resource's slot")
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for _, k := range ks {
		require.NoError(t, src.Migrate(ctx, host, port, k, 0, 5*time.Second).Err())
	}
	for _, n := range []*redis.Client{dst, src} {
		require.NoError(t, n.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	}
	require.Greater(t, take(), last, "the counter moved with its slot")
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
// 367 script runs).
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
	// atLeast (TestIntegrationCorruptFenceCounter).
	require.NoError(t, rdb.Set(ctx, counterKey("bad"), "abc", 0).Err())
	n, err = c.AdvanceFence(ctx, "bad", 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
}

// A fence counter that holds something INCR does not count from, or a
// count Lua numbers round: the reads report it (tonumber read "0x10" as 16,
// "1.5" as 1), AdvanceFence repairs it so that acquisitions work again (it
// reported success and left it), and a count above 2^53 is read exactly.
func TestIntegrationCorruptFenceCounter(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	counter := counterKey("r")
	for _, bad := range []string{"0x10", "1.5", "1e3", "-3", "+7", "007", " 7", "abc", "", "99999999999999999999"} {
		require.NoError(t, rdb.Set(ctx, counter, bad, 0).Err())
		_, err := c.LastFence(ctx, "r")
		require.ErrorIs(t, err, wire.ErrCorruptCounter, "%q", bad)
		require.ErrorContains(t, err, counter, "%q: the error names the counter", bad)
		_, err = c.Inspect(ctx, "r")
		require.ErrorIs(t, err, wire.ErrCorruptCounter, "%q", bad)
		err = c.ScanFences(ctx, func(FenceCounter) error { return nil })
		require.ErrorIs(t, err, wire.ErrCorruptCounter, "%q", bad)
		if bad != "-3" { // INCR counts from -3 (to fences a lease cannot carry)
			_, err = c.TryAcquire(ctx, "r")
			require.Error(t, err, "%q: INCR fails on it", bad)
		}

		n, err := c.AdvanceFence(ctx, "r", 5)
		require.NoError(t, err, "%q", bad)
		require.Equal(t, int64(5), n, "%q", bad)
		l, err := c.TryAcquire(ctx, "r")
		require.NoError(t, err, "%q: repaired", bad)
		require.Equal(t, int64(6), l.Fence())
		require.NoError(t, l.Release(ctx))
	}

	// Break's removal is done before the counter is read: no error.
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, rdb.Set(ctx, counter, "0x10", 0).Err())
	st, removed, err := c.Break(ctx, "r", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, l.Fence(), st.Fence)
	require.Zero(t, st.LastFence)

	// Above 2^53, exact (tonumber rounded 2^53+1 to 2^53).
	const big = MaxFence + 1
	require.NoError(t, rdb.Set(ctx, counter, big, 0).Err())
	last, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, big, last)
	st, err = c.Inspect(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, big, st.LastFence)
	n, err := c.AdvanceFence(ctx, "r", MaxFence)
	require.NoError(t, err)
	require.Equal(t, big, n, "not moved back, and exact")
	n, err = c.AdvanceFence(ctx, "r", 9)
	require.NoError(t, err)
	require.Equal(t, big, n, "fewer digits is smaller")
	require.NoError(t, c.ScanFences(ctx, func(fc FenceCounter) error {
		require.Equal(t, big, fc.Value)
		return nil
	}))
	require.NoError(t, rdb.Set(ctx, counter, "9223372036854775807", 0).Err())
	n, err = c.AdvanceFence(ctx, "r", MaxFence)
	require.NoError(t, err)
	require.Equal(t, int64(1<<63-1), n, "the largest count is one")

	// An old per-resource counter that is corrupt is refused, and nothing
	// changes (migrate.lua folded "0x10" in as 16 and copied it).
	require.NoError(t, rdb.Set(ctx, counter, "20", 0).Err())
	old := wire.Key(DefaultPrefix, "r", wire.KindFence)
	require.NoError(t, rdb.Set(ctx, old, "0x10", 0).Err())
	_, err = c.MigrateFences(ctx)
	require.ErrorContains(t, err, old)
	require.Equal(t, "20", rdb.Get(ctx, counter).Val(), "the slot's counter is unchanged")
	require.Equal(t, "0x10", rdb.Get(ctx, old).Val(), "the old counter is kept")
	require.NoError(t, rdb.Set(ctx, old, "9007199254740993", 0).Err())
	_, err = c.MigrateFences(ctx)
	require.NoError(t, err)
	require.Equal(t, "9007199254740993", rdb.Get(ctx, counter).Val(), "folded in exactly")
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
		switch a[0] {
		case "evalsha":
			require.Equal(t, wire.Named("counter.lua").Hash(), a[1])
		case "eval": // after NOSCRIPT (a new miniredis has no scripts)
			require.Equal(t, wire.Named("counter.lua").Source(), a[1])
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
