package redlease

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/servertest"
)

// BenchmarkHandoff measures how fast a released lease reaches the next
// waiter: N contenders, each with its own Client (as separate processes
// would have), loop acquire, hold ~100µs, release on one resource of a real
// redis-server. The handoff is the time from the moment Release returns to
// the moment the next holder's Acquire returns (0 when the acquire returned
// first). Reported: handoff p50 and p99 in µs, and the commands the clients
// sent per handoff (acquire attempts, releases, renewals).
//
//	go test -run '^$' -bench Handoff -benchtime 2000x
func BenchmarkHandoff(b *testing.B) {
	for _, fair := range []bool{false, true} {
		for _, n := range []int{2, 8, 32} {
			b.Run(fmt.Sprintf("fair=%v/waiters=%d", fair, n), func(b *testing.B) { benchmarkHandoff(b, n, WithFair(fair)) })
		}
	}
}

func benchmarkHandoff(b *testing.B, n int, opts ...Option) {
	{
		{
			srv := servertest.Redis(b)
			hook := &servertest.CountingHook{}
			clients := make([]*Client, n)
			for i := range clients {
				rdb := srv.Client(b)
				rdb.AddHook(hook)
				clients[i] = New(rdb, append(opts, WithTTL(10*time.Second))...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			// Warm up: load the scripts, subscribe every client's wake channel.
			for _, c := range clients {
				l, err := c.Acquire(ctx, "hot")
				if err != nil {
					b.Fatal(err)
				}
				_ = l.Release(ctx)
			}

			start := time.Now()
			var (
				left        atomic.Int64 // handoffs still to do
				lastRelease atomic.Int64 // ns since start when the last Release returned; -1 none
				mu          sync.Mutex
				handoffs    = make([]time.Duration, 0, b.N)
				wg          sync.WaitGroup
			)
			left.Store(int64(b.N))
			lastRelease.Store(-1)
			hook.Cmds.Store(0)
			b.ResetTimer()
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						l, err := c.Acquire(ctx, "hot")
						if err != nil {
							b.Error(err)
							return
						}
						got := time.Since(start)
						if rel := lastRelease.Load(); rel >= 0 {
							mu.Lock()
							handoffs = append(handoffs, max(0, got-time.Duration(rel)))
							mu.Unlock()
						}
						spin(100 * time.Microsecond)
						lastRelease.Store(-1)
						if err := l.Release(ctx); err != nil {
							b.Error(err)
							return
						}
						lastRelease.Store(int64(time.Since(start)))
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(handoffs) == 0 {
				return
			}
			slices.Sort(handoffs)
			b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(hook.Cmds.Load())/float64(b.N), "cmds/handoff")
		}
	}
}

// spin holds the CPU for d: a sleep this short would measure the timer.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
