//go:build unix

package redlease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Benchmarks of the hot paths, on a real redis-server (skipped without one,
// as the integration tests are). They run only with -bench:
//
//	go test -run '^$' -bench 'AcquireRelease|RenewBatch' -benchmem
//
// The comparison with other libraries lives in the separate module in
// bench/, so that this module never depends on them.

// BenchmarkAcquireRelease measures one uncontended acquire+release pair on
// a free key: time, allocations, the commands sent (cmds/op; the floor is
// 2) and the goroutines started (goroutines/op). "scripts" runs the same two
// scripts by hand with EVALSHA, keys and owner token made once: the floor
// that the rest of the client adds to. Semaphore/permits=N takes the last
// free permit of N (the others held), Read and Write a read/write lease.
// Acquire/deadline=3s gives each pair a request handler's context, with a
// deadline that go-redis without ContextTimeoutEnabled does not keep: the
// acquire goes out on a goroutine of its own (goroutines/op 1).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := servertest.Redis(b)
	pair := func(opts ...WaitOption) func(*Client) func(context.Context) error {
		return func(c *Client) func(context.Context) error {
			return func(ctx context.Context) error {
				l, err := c.Acquire(ctx, "bench", opts...)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}
	}
	cases := []struct {
		name  string
		setup func(c *Client) func(ctx context.Context) error
	}{
		{"Acquire", pair()},
		{"TryAcquire", func(c *Client) func(context.Context) error {
			return func(ctx context.Context) error {
				l, err := c.TryAcquire(ctx, "bench")
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"Acquire/autorenew=off", pair(WithAutoRenew(false))},
		{"Acquire/deadline=3s", func(c *Client) func(context.Context) error {
			p := pair()(c)
			return func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				return p(ctx)
			}
		}},
		{"Semaphore/permits=1", semaphorePair(1)},
		{"Semaphore/permits=10", semaphorePair(10)},
		{"Semaphore/permits=1000", semaphorePair(1000)},
		{"Read", func(c *Client) func(context.Context) error {
			return func(ctx context.Context) error {
				l, err := c.AcquireRead(ctx, "bench-rw")
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"Write", func(c *Client) func(context.Context) error {
			return func(ctx context.Context) error {
				l, err := c.AcquireWrite(ctx, "bench-rw")
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"scripts", func(c *Client) func(context.Context) error {
			k := wire.KeysOf(DefaultPrefix, "bench")
			owner, member, ttl := "owner", "owner/c", c.defaults.ttlArg
			return func(ctx context.Context) error {
				if err := c.conn.Run(ctx, wire.Acquire(&k, owner, member, ttl, false, false, false, "", "")).Err; err != nil {
					return err
				}
				return c.conn.Run(ctx, wire.Release(&k, owner, "", false)).Err
			}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			hook := &servertest.CountingHook{}
			rdb := srv.Client(b)
			rdb.AddHook(hook)
			c := New(rdb, WithTTL(10*time.Second))
			ctx := context.Background()
			run := tc.setup(c)
			for range 100 { // load the scripts, warm the connection
				if err := run(ctx); err != nil {
					b.Fatal(err)
				}
			}
			hook.Cmds.Store(0)
			g0 := goroutinesCreated()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := run(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(hook.Cmds.Load())/float64(b.N), "cmds/op")
			b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
		})
	}
}

// semaphorePair is a pair on a semaphore of n permits, n-1 of which other
// holders keep: the pair takes the last one, so its cost shows how finding
// a permit scales with n.
func semaphorePair(n int) func(*Client) func(context.Context) error {
	return func(c *Client) func(context.Context) error {
		ctx := context.Background()
		resource := fmt.Sprintf("bench-sem-%d", n)
		for range n - 1 {
			if _, err := c.TryAcquireSemaphore(ctx, resource, n, WithAutoRenew(false), WithTTL(time.Hour)); err != nil {
				panic(err)
			}
		}
		return func(ctx context.Context) error {
			l, err := c.AcquireSemaphore(ctx, resource, n)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}
}

// BenchmarkAcquireReleaseParallel measures pairs on distinct keys from 8
// goroutines (at least: GOMAXPROCS times the parallelism that reaches 8)
// sharing one Client, as bench/'s parallel part does, and "scripts" the same
// two scripts sent through the same Client by hand (keys, owner token and
// holder made once, no lease built). The difference is what the library
// does per pair besides its scripts, at a load where requests combine: the
// owner token and keys, the lease with its context, local deadline timer
// and watchdog entry, and the release's timeout.
//
//	go test -run '^$' -bench AcquireReleaseParallel -benchmem
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	srv := servertest.Redis(b)
	const goroutines = 8
	for _, name := range []string{"Acquire", "scripts"} {
		b.Run(name, func(b *testing.B) {
			c := New(srv.Client(b), WithTTL(10*time.Second))
			b.Cleanup(func() { _ = c.Close(context.Background()) })
			var seq atomic.Int64
			b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				resource := fmt.Sprintf("bench-par-%d", seq.Add(1))
				k := wire.KeysOf(DefaultPrefix, resource)
				owner, member := newOwner(c.hub.id)
				holder, ttl := DefaultHolder(), c.defaults.ttlArg
				for pb.Next() {
					if name == "scripts" {
						// A fence (> 0) for the lease taken, 1 for the lease deleted.
						acq := c.conn.Run(ctx, wire.Acquire(&k, owner, member, ttl, true, false, false, holder, ""))
						rel := c.conn.Run(ctx, wire.Release(&k, owner, "", false))
						fence, _ := acq.Value.(int64)
						if err := errors.Join(acq.Err, rel.Err); err != nil || fence <= 0 || rel.Value != int64(1) {
							b.Errorf("acquire %+v, release %+v: %v", acq, rel, err)
							return
						}
						continue
					}
					l, err := c.Acquire(ctx, resource)
					if err == nil {
						err = l.Release(ctx)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRenewBatch measures the watchdog: n leases, auto-renewed every
// 100 ms (TTL 300 ms), renewed in pipelines by the Client's one watchdog
// goroutine. One op is one renewal; the run takes b.N renewals. ns/op is
// set by the schedule (100 ms / n), so the numbers that matter are the
// process CPU per renewal (cpu-ns/renew) and the allocations per renewal,
// both of which include everything that runs meanwhile: timers, the
// renewal queue, go-redis's pipelines.
//
//	go test -run '^$' -bench RenewBatch -benchtime 50000x
func BenchmarkRenewBatch(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) { benchmarkRenewBatch(b, n) })
	}
}

func benchmarkRenewBatch(b *testing.B, n int) {
	const (
		ttl      = 300 * time.Millisecond
		interval = 100 * time.Millisecond
	)
	srv := servertest.Redis(b)
	hook := &renewalCounter{}
	rdb := srv.Client(b)
	rdb.AddHook(hook)
	c := New(rdb, WithTTL(ttl), WithRenewInterval(interval))
	ctx := context.Background()
	b.Cleanup(func() { _ = c.Close(ctx) })
	leases := make([]*Lease, n)
	for i := range leases {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("renew-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l
	}
	time.Sleep(2 * interval) // into the steady state
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	hook.renewals.Store(0)
	b.ResetTimer()
	t := time.NewTicker(interval / 10)
	defer t.Stop()
	for hook.renewals.Load() < int64(b.N) {
		<-t.C
	}
	b.StopTimer()
	renewals := float64(hook.renewals.Load())
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	for _, l := range leases {
		if err := l.Context().Err(); err != nil {
			b.Fatalf("lease lost while renewing: %v", context.Cause(l.Context()))
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/renewals, "cpu-ns/renew")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/renewals, "allocs/renew")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/renewals, "B/renew")
}

// renewalCounter counts the leases that the script calls go-redis sends
// name, pipelined ones included: in BenchmarkRenewBatch's steady state
// every call is a renewal, of one lease (refresh.lua) or of several
// (refresh_many.lua).
type renewalCounter struct{ renewals atomic.Int64 }

func (h *renewalCounter) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if a := cmd.Args(); len(a) > 2 && a[0] == "evalsha" {
			if n, ok := a[2].(int); ok {
				h.renewals.Add(int64(n))
			}
		}
	}
}

func (h *renewalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *renewalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *renewalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
