package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Fences on a real server, on every library. (From the core's
// fence_test.go.)

func TestIntegrationFencesStrictlyIncreaseAcrossClients(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		const clients, rounds = 4, 250
		var (
			mu     sync.Mutex
			fences []int64
			wg     sync.WaitGroup
			errs   = make(chan error, clients)
		)
		for range clients {
			c := e.client(redlease.WithTTL(5 * time.Second))
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
	})
}

func TestIntegrationFenceCounterNeverExpiresNorFallsBack(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithTTL(500*time.Millisecond), redlease.WithAutoRenew(false))
		var last int64
		for range 3 {
			l, err := c.TryAcquire(ctx, "r")
			require.NoError(t, err)
			require.Greater(t, l.Fence(), last)
			last = l.Fence()
			// Let it expire instead of releasing.
			servertest.WaitFor(t, 5*time.Second, func() bool { return e.rdb.Exists(ctx, "redlease:{r}:lease").Val() == 0 })
		}
		ttl, err := e.rdb.PTTL(ctx, integCounterKey(redlease.DefaultPrefix, "r")).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "the counter has no TTL")
		got, err := c.LastFence(ctx, "r")
		require.NoError(t, err)
		require.Equal(t, last, got)
	})
}

// MigrateFences looks only for the old counters: one script run per old
// counter, none per slot counter. (It scanned every slot's counter too,
// read each one, and ran one round trip per old counter: 300 slot counters
// and 20 old ones cost 367 script runs.) That the scripts go in one round
// trip per SCAN batch the core's TestIntegrationMigrateFencesTouchesOnlyOldCounters
// counts on go-redis, with a hook; the server cannot tell.
func TestIntegrationMigrateFencesTouchesOnlyOldCounters(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		pipe := rdb.Pipeline()
		const slots, olds = 300, 20
		for s := range slots {
			pipe.Set(ctx, wire.SlotCounter(redlease.DefaultPrefix, s), 1000+s, 0)
		}
		oldSlots := map[int]int64{}
		for i := range olds {
			r := fmt.Sprintf("old:%d", i)
			pipe.Set(ctx, wire.Key(redlease.DefaultPrefix, r, wire.KindFence), 5000+i, 0)
			oldSlots[wire.SlotOf(r)] = max(oldSlots[wire.SlotOf(r)], int64(5000+i))
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		c := e.client()
		require.NoError(t, rdb.ScriptLoad(ctx, wire.Named("migrate.lua").Source()).Err()) // no NOSCRIPT round to count
		integResetStats(t, rdb)

		n, err := c.MigrateFences(ctx)
		require.NoError(t, err)
		require.Equal(t, olds, n)
		stats := integServed(t, rdb)
		require.Equal(t, olds, stats["evalsha"], "one script run per old counter, none per slot counter: %v", stats)
		require.Zero(t, stats["eval"])
		for s := range slots {
			v, err := rdb.Get(ctx, wire.SlotCounter(redlease.DefaultPrefix, s)).Int64()
			require.NoError(t, err)
			want := int64(1000 + s)
			if old, ok := oldSlots[s]; ok {
				want = max(want, old)
			}
			require.Equal(t, want, v, "slot %d", s)
		}
		for i := range olds {
			require.Zero(t, rdb.Exists(ctx, wire.Key(redlease.DefaultPrefix, fmt.Sprintf("old:%d", i), wire.KindFence)).Val())
		}
	})
}

// A fence counter that holds something INCR does not count from, or a
// count Lua numbers round: the reads report it (tonumber read "0x10" as 16,
// "1.5" as 1), AdvanceFence repairs it so that acquisitions work again (it
// reported success and left it), and a count above 2^53 is read exactly,
// through every library's replies.
func TestIntegrationCorruptFenceCounter(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		c := e.client(redlease.WithAutoRenew(false))
		counter := integCounterKey(redlease.DefaultPrefix, "r")
		for _, bad := range []string{"0x10", "1.5", "1e3", "-3", "+7", "007", " 7", "abc", "", "99999999999999999999"} {
			require.NoError(t, rdb.Set(ctx, counter, bad, 0).Err())
			_, err := c.LastFence(ctx, "r")
			require.ErrorIs(t, err, wire.ErrCorruptCounter, "%q", bad)
			require.ErrorContains(t, err, counter, "%q: the error names the counter", bad)
			_, err = c.Inspect(ctx, "r")
			require.ErrorIs(t, err, wire.ErrCorruptCounter, "%q", bad)
			err = c.ScanFences(ctx, func(redlease.FenceCounter) error { return nil })
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
		const big = redlease.MaxFence + 1
		require.NoError(t, rdb.Set(ctx, counter, big, 0).Err())
		last, err := c.LastFence(ctx, "r")
		require.NoError(t, err)
		require.Equal(t, big, last)
		st, err = c.Inspect(ctx, "r")
		require.NoError(t, err)
		require.Equal(t, big, st.LastFence)
		n, err := c.AdvanceFence(ctx, "r", redlease.MaxFence)
		require.NoError(t, err)
		require.Equal(t, big, n, "not moved back, and exact")
		n, err = c.AdvanceFence(ctx, "r", 9)
		require.NoError(t, err)
		require.Equal(t, big, n, "fewer digits is smaller")
		require.NoError(t, c.ScanFences(ctx, func(fc redlease.FenceCounter) error {
			require.Equal(t, big, fc.Value)
			return nil
		}))
		require.NoError(t, rdb.Set(ctx, counter, "9223372036854775807", 0).Err())
		n, err = c.AdvanceFence(ctx, "r", redlease.MaxFence)
		require.NoError(t, err)
		require.Equal(t, int64(1<<63-1), n, "the largest count is one")

		// An old per-resource counter that is corrupt is refused, and nothing
		// changes (migrate.lua folded "0x10" in as 16 and copied it).
		require.NoError(t, rdb.Set(ctx, counter, "20", 0).Err())
		old := wire.Key(redlease.DefaultPrefix, "r", wire.KindFence)
		require.NoError(t, rdb.Set(ctx, old, "0x10", 0).Err())
		_, err = c.MigrateFences(ctx)
		require.ErrorContains(t, err, old)
		require.Equal(t, "20", rdb.Get(ctx, counter).Val(), "the slot's counter is unchanged")
		require.Equal(t, "0x10", rdb.Get(ctx, old).Val(), "the old counter is kept")
		require.NoError(t, rdb.Set(ctx, old, "9007199254740993", 0).Err())
		_, err = c.MigrateFences(ctx)
		require.NoError(t, err)
		require.Equal(t, "9007199254740993", rdb.Get(ctx, counter).Val(), "folded in exactly")
	})
}

func TestIntegrationCheckFence(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client()
		a, err := c.TryAcquire(ctx, "check")
		require.NoError(t, err)
		require.NoError(t, c.CheckFence(ctx, "check", a.Fence()))
		require.ErrorIs(t, c.CheckFence(ctx, "check", a.Fence()+1), fencing.ErrStaleFence)
		// An operator's break, and a new holder: the old fence is stale.
		require.NoError(t, e.rdb.Del(ctx, integLeaseKey(redlease.DefaultPrefix, "check")).Err())
		b, err := c.TryAcquire(ctx, "check")
		require.NoError(t, err)
		require.ErrorIs(t, c.CheckFence(ctx, "check", a.Fence()), redlease.ErrStaleFence)
		require.NoError(t, c.CheckFence(ctx, "check", b.Fence()))
		require.NoError(t, b.Release(ctx))
		require.ErrorIs(t, c.CheckFence(ctx, "check", b.Fence()), redlease.ErrStaleFence)
		w, err := c.TryAcquireWrite(ctx, "check-rw")
		require.NoError(t, err)
		require.NoError(t, c.CheckFence(ctx, "check-rw", w.Fence()))
		require.NoError(t, w.Release(ctx))
		require.ErrorIs(t, c.CheckFence(ctx, "check-rw", w.Fence()), redlease.ErrStaleFence)
	})
}
