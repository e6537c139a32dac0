package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/wire"
)

// What leases leave in Redis does not grow with the number of resources:
// after 50,000 distinct resources were leased (some waited for, some
// released, some left to lapse) and 500 elections held a term (half
// resigned, half lapsed), once the TTLs and the waiter timeout have passed,
// the only keys left are fence counters, at most one per hash slot.
// (Before the per-slot counter, every resource left its counter behind:
// 50,000 keys here, and every election name its leader record.) (From the
// core's footprint_test.go.)
func TestIntegrationFootprintIsBoundedBySlots(t *testing.T) {
	if testing.Short() {
		t.Skip("leases 50,000 resources")
	}
	// What the scripts leave does not depend on the client: one library per
	// server kind (go-redis on redis-server, valkey-go on Valkey), since the
	// test takes 20 s on each.
	integRun(t, integOnePerKind(), false, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		before := integUsedMemory(t, rdb)

		const resources, elections, workers = 50_000, 500, 16
		const ttl = time.Second
		c := e.client(redlease.WithTTL(ttl), redlease.WithAutoRenew(false))
		waiter := e.client()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < resources; i += workers {
					if err := integLeaseOnce(ctx, c, waiter, i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for i := range elections {
			term, err := redlease.NewElection(c, fmt.Sprintf("election:%d", i)).Campaign(ctx, "host")
			require.NoError(t, err)
			if i%2 == 0 {
				require.NoError(t, term.Release(ctx)) // resigned; the others lapse
			}
		}
		wg.Wait()
		close(errs)
		require.NoError(t, <-errs)
		_ = c.Close(ctx) // it reports the leases left to lapse as lost
		require.NoError(t, waiter.Close(ctx))

		time.Sleep(ttl + wire.WaiterTimeoutMs*time.Millisecond + time.Second) // every lease, marker and queue has lapsed
		kinds := map[string]int{}
		total := 0
		for cursor := uint64(0); ; {
			keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
			require.NoError(t, err)
			for _, k := range keys {
				ttl, err := rdb.PTTL(ctx, k).Result()
				if errors.Is(err, redis.Nil) || ttl == -2*time.Nanosecond {
					continue // expired meanwhile
				}
				require.NoError(t, err)
				_, kind, _ := wire.ResourceOf(redlease.DefaultPrefix, k)
				require.Equal(t, wire.KindFences, kind, "%s (PTTL %v) outlived its lease", k, ttl)
				kinds[kind]++
				total++
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		require.LessOrEqual(t, total, wire.NumSlots, "one counter per hash slot at most")
		grew := integUsedMemory(t, rdb) - before
		t.Logf("after %d resources and %d elections: %d keys left (%.3f per resource), used_memory %+d B (%.1f B per resource)",
			resources, elections, total, float64(total)/resources, grew, float64(grew)/resources)
	})
}

// integLeaseOnce leases resource i as the footprint test does: most are
// taken and released; every 10th is left to lapse; every 1000th is waited
// for by another Client that gives up, so that its queue is left behind.
func integLeaseOnce(ctx context.Context, c, waiter *redlease.Client, i int) error {
	r := fmt.Sprintf("order:%d:capture", i)
	l, err := c.TryAcquire(ctx, r)
	if err != nil {
		return err
	}
	if i%1000 == 0 {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := waiter.Acquire(wctx, r)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the waiter got %v", err)
		}
	}
	if i%10 == 0 {
		return nil // left to lapse
	}
	return l.Release(ctx)
}
