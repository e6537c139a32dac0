package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/rueidislease"
)

// scaleResult is one process holding n auto-renewed leases for a window.
type scaleResult struct {
	client       string // the redlease Client's: go-redis or rueidis
	leases       int
	acquire      time.Duration // taking all n, in parallel
	release      time.Duration // releasing all n, in parallel
	window       time.Duration
	renewPerSec  float64 // renewals while holding, per second: PEXPIRE calls on the server
	reqPerSec    float64 // renewal requests (script calls) sent while holding, per second
	expectPerSec float64 // n / renew interval
	cpu          float64 // process CPU while holding, in cores
	serverCPU    float64 // redis-server CPU while holding, in cores
	heapPerLease float64 // live heap after GC, per lease
	late         []time.Duration
	minPTTL      time.Duration // smallest remaining TTL seen on sampled keys
	lost         int64         // EventLost on observed leases
	ended        int           // lease contexts that had ended by the end of the window
	renewErrs    int64         // EventRenew with an outcome other than OK, on observed leases
}

// lateness observes the renewals of a sample of the leases: how long after
// its schedule each one was sent. A lease's first renewal falls due an
// interval after its acquire, each next one an interval after the previous
// one fell due, or was sent if that was later (the watchdog's rule at this
// TTL, where its cap does not bind). Renewals due within interval/10 of
// each other share a pipeline, so some go early (negative lateness).
type lateness struct {
	interval time.Duration

	mu   sync.Mutex
	due  map[string]time.Time // each lease's next renewal time
	late []time.Duration

	lost, renewErrs atomic.Int64
}

func (o *lateness) Observe(_ context.Context, e redlease.Event) {
	switch e.Kind {
	case redlease.EventAcquire:
		if e.Outcome == redlease.OutcomeOK {
			o.mu.Lock()
			o.due[e.Owner] = e.Start.Add(o.interval) // the call's start: before the request was sent, so lateness is overstated
			o.mu.Unlock()
		}
	case redlease.EventRenew:
		if e.Outcome != redlease.OutcomeOK {
			o.renewErrs.Add(1)
			return
		}
		o.mu.Lock()
		if due, ok := o.due[e.Owner]; ok {
			o.late = append(o.late, e.Start.Sub(due))
			o.due[e.Owner] = later(due, e.Start).Add(o.interval)
		}
		o.mu.Unlock()
	case redlease.EventLost:
		o.lost.Add(1)
	}
}

// scale takes n leases with auto-renew (TTL 10 s, so a renewal every 3.33 s)
// from g goroutines, holds them for window, and releases them. One lease in
// sampleEvery carries an observer that times its renewals.
func scale(ctx context.Context, srv *server, client string, n, g int, warm, window time.Duration, sampleEvery int) (scaleResult, error) {
	res := scaleResult{client: client, leases: n, window: window}
	interval := ttl / 3
	res.expectPerSec = float64(n) / interval.Seconds()
	hook := &countingHook{}
	sent := &hook.cmds // the requests the Client sends
	rdb := srv.client(hook, g+8)
	defer rdb.Close()
	opts := []redlease.Option{redlease.WithTTL(ttl), redlease.WithAutoRenew(true)}
	var c *redlease.Client
	switch client {
	case "go-redis":
		c = redlease.New(rdb, opts...)
	case "rueidis":
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
		if err != nil {
			return res, err
		}
		defer rc.Close()
		sent = new(atomic.Int64)
		c = rueidislease.New(countedRueidis{rc, new(atomic.Int64), sent}, opts...)
	default:
		return res, fmt.Errorf("no client %q", client)
	}
	defer c.Close(context.WithoutCancel(ctx))
	obs := &lateness{interval: interval, due: map[string]time.Time{}}

	// Warm up: open the connections the acquiring goroutines will use, so
	// their buffers are not counted as lease memory.
	if err := eachParallel(g, g*4, func(int) error { return rdb.Ping(ctx).Err() }); err != nil {
		return res, err
	}
	leases := make([]*redlease.Lease, n)
	key := func(i int) string { return fmt.Sprintf("scale-%d", i) }
	runtime.GC()
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)

	start := time.Now()
	err := eachParallel(g, n, func(i int) error {
		var opts []redlease.LeaseOption
		if i%sampleEvery == 0 {
			opts = append(opts, redlease.WithObserver(obs))
		}
		l, err := c.TryAcquire(ctx, key(i), opts...)
		leases[i] = l
		return err
	})
	res.acquire = time.Since(start)
	if err != nil {
		return res, err
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	res.heapPerLease = float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(n)

	sampler, err := startSampler(srv, func() string { return "redlease:{" + key(rand.IntN(n)) + "}:lease" })
	if err != nil {
		return res, err
	}
	defer sampler.end()
	// Settle half an interval later, off the renewals' schedule: leases
	// taken at nearly the same moment renew together. The window is a
	// whole number of intervals, so it counts each lease's renewals alike
	// wherever it starts.
	select {
	case <-time.After(interval / 2):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	settle() // before the count starts: the renewals it delays are sent in the window
	if err := warmUp(ctx, warm); err != nil {
		return res, err
	}
	sent.Store(0)
	cpu0, st0, t0 := cpuTime(), srv.stats(ctx), time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	cpu1, st1, elapsed := cpuTime(), srv.stats(ctx), time.Since(t0)
	res.reqPerSec = float64(sent.Load()) / elapsed.Seconds()
	res.renewPerSec = float64(st1.sub(st0).pexpire) / elapsed.Seconds()
	res.cpu = float64(cpu1-cpu0) / float64(elapsed)
	res.serverCPU = float64(st1.sub(st0).cpu) / float64(elapsed)
	if res.minPTTL, err = sampler.stop(); err != nil {
		return res, err
	}
	for _, l := range leases {
		if l.Context().Err() != nil {
			res.ended++
		}
	}
	obs.mu.Lock()
	res.late = slices.Clone(obs.late)
	obs.mu.Unlock()
	slices.Sort(res.late)
	res.lost, res.renewErrs = obs.lost.Load(), obs.renewErrs.Load()

	start = time.Now()
	err = eachParallel(g, n, func(i int) error { return leases[i].Release(ctx) })
	res.release = time.Since(start)
	if err != nil {
		return res, err
	}
	return res, srv.flush(ctx)
}

// settle returns to the OS the memory that the process no longer uses, so
// that the runtime's scavenger does not spend the window measured next
// returning what earlier parts of the run, or the acquires, left: it did,
// at about 3 % of a core (a process holding 1,000 leases measured 4.3 %
// after the other parts, 1.0 % alone).
func settle() { debug.FreeOSMemory() }

// warmUp waits after settle until the garbage collector has finished a
// cycle, or for at most limit. Until then the heap grows back to its size,
// and the pages it takes from the OS again cost what holding leases does
// not once it has: with 100,000 leases on rueidis, some 25,000 minor page
// faults in the first 15 s after settle, when the process took 9–10 % of a
// core against 6–7 % after (5 s steps, 2026-12-03).
func warmUp(ctx context.Context, limit time.Duration) error {
	c0, end := gcCycles(), time.Now().Add(limit)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for gcCycles() == c0 && time.Now().Before(end) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// gcCycles is how many garbage collections the runtime has finished.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// ttlSampler reads the remaining TTL of 200 random leases every 200 ms: a
// renewal that runs late shows as a dip. It runs in a process of its own
// (this binary, started with -sample-pttl), so that the CPU it spends is
// not counted as the measured process's.
type ttlSampler struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     bytes.Buffer
	stopped bool
}

// sampleKeys is how many keys the sampler reads at each tick.
const sampleKeys = 200

// startSampler starts sampling sampleKeys keys drawn by key.
func startSampler(srv *server, key func() string) (*ttlSampler, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &ttlSampler{cmd: exec.Command(self, "-sample-pttl", srv.addr)}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, os.Stderr
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	var keys strings.Builder
	for range sampleKeys {
		keys.WriteString(key() + "\n")
	}
	if _, err := io.WriteString(s.stdin, keys.String()); err != nil {
		s.stdin.Close()
		s.cmd.Wait()
		return nil, err
	}
	return s, nil
}

// stop ends the sampling and returns the smallest remaining TTL seen.
func (s *ttlSampler) stop() (time.Duration, error) {
	s.stopped = true
	s.stdin.Close() // the sampler's signal to stop
	if err := s.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("PTTL sampler: %w", err)
	}
	return time.ParseDuration(strings.TrimSpace(s.out.String()))
}

// end stops the sampler unless stop has: for a part that returns early.
func (s *ttlSampler) end() {
	if !s.stopped {
		s.stop()
	}
}

// samplePTTL is the sampler's process: it reads sampleKeys keys from stdin,
// reads their PTTL on addr every 200 ms until stdin ends, then prints the
// smallest seen.
func samplePTTL(addr string) error {
	in := bufio.NewScanner(os.Stdin)
	keys := make([]string, 0, sampleKeys)
	for len(keys) < sampleKeys && in.Scan() {
		keys = append(keys, in.Text())
	}
	if len(keys) < sampleKeys {
		return fmt.Errorf("%d keys on stdin, want %d", len(keys), sampleKeys)
	}
	quit := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(quit)
	}()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	defer rdb.Close()
	least := time.Duration(1<<63 - 1)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-quit:
			fmt.Println(least)
			return nil
		case <-t.C:
		}
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			least = min(least, cmd.(*redis.DurationCmd).Val())
		}
	}
}

// eachParallel calls f(0..n-1) from g goroutines and returns the first error.
func eachParallel(g, n int, f func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
