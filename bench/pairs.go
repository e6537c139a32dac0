package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pairResult is the uncontended cost of one acquire+release pair.
type pairResult struct {
	name      string
	ns        float64 // median over rounds
	nsRounds  []float64
	trips     float64 // commands sent per pair (go-redis hook)
	allocs    float64
	bytes     float64
	serverCmd float64       // commands the server executed per pair, script calls included
	serverCPU time.Duration // server CPU per pair
	clientCPU time.Duration // this process's CPU per pair
	started   float64       // goroutines started per pair
	vsFirst   float64       // median over rounds of ns / ns of the first implementation in the same round
}

// uncontended measures acquire+release pairs on one free key, one after
// the other, in rounds that alternate between the implementations so that
// a noisy moment of the machine hits all of them alike. It reports the
// median of the rounds, and the median of each round's ratio to the first
// implementation (the baseline), which was measured just before it.
func uncontended(ctx context.Context, srv *server, impls []impl, pairs, rounds int) ([]pairResult, error) {
	type entry struct {
		lk   locker
		hook *countingHook
		key  string
		res  pairResult
	}
	entries := make([]*entry, len(impls))
	for i, im := range impls {
		hook := &countingHook{}
		rdb := srv.clientOf(im, hook, 0)
		defer rdb.Close()
		e := &entry{lk: im.locker(rdb, im.shared(rdb)), hook: hook, key: fmt.Sprintf("uncontended-%d", i)}
		defer closeLocker(ctx, e.lk)
		e.res.name = im.name
		for range 200 { // warm up: connections, script cache, code paths
			if err := pair(ctx, e.lk, e.key); err != nil {
				return nil, fmt.Errorf("%s: %w", im.name, err)
			}
		}
		entries[i] = e
	}
	type sample struct{ ns, trips, allocs, bytes, cmds, cpu, client, started, vsFirst float64 }
	samples := make([][]sample, len(impls))
	var ms0, ms1 runtime.MemStats
	for range rounds {
		for i, e := range entries {
			runtime.GC()
			st0 := srv.stats(ctx)
			e.hook.cmds.Store(0)
			if tc, ok := e.lk.(tripCounter); ok && tc.trips() != nil {
				tc.trips().Store(0)
			}
			runtime.ReadMemStats(&ms0)
			cpu0, g0 := cpuTime(), goroutinesCreated()
			start := time.Now()
			for range pairs {
				if err := pair(ctx, e.lk, e.key); err != nil {
					return nil, fmt.Errorf("%s: %w", e.res.name, err)
				}
			}
			elapsed := time.Since(start)
			client, started := cpuTime()-cpu0, goroutinesCreated()-g0
			runtime.ReadMemStats(&ms1)
			trips := e.hook.cmds.Load()
			if tc, ok := e.lk.(tripCounter); ok && tc.trips() != nil {
				trips = tc.trips().Load()
			}
			st := srv.stats(ctx).sub(st0)
			n := float64(pairs)
			samples[i] = append(samples[i], sample{
				ns:      float64(elapsed.Nanoseconds()) / n,
				trips:   float64(trips) / n,
				allocs:  float64(ms1.Mallocs-ms0.Mallocs) / n,
				bytes:   float64(ms1.TotalAlloc-ms0.TotalAlloc) / n,
				cmds:    float64(st.calls) / n,
				cpu:     float64(st.cpu) / n,
				client:  float64(client) / n,
				started: float64(started) / n,
			})
			last := &samples[i][len(samples[i])-1]
			last.vsFirst = last.ns / samples[0][len(samples[i])-1].ns
		}
	}
	out := make([]pairResult, len(impls))
	for i, e := range entries {
		r := e.res
		col := func(f func(sample) float64) float64 {
			var v []float64
			for _, s := range samples[i] {
				v = append(v, f(s))
			}
			return median(v)
		}
		for _, s := range samples[i] {
			r.nsRounds = append(r.nsRounds, s.ns)
		}
		r.ns = col(func(s sample) float64 { return s.ns })
		r.trips = col(func(s sample) float64 { return s.trips })
		r.allocs = col(func(s sample) float64 { return s.allocs })
		r.bytes = col(func(s sample) float64 { return s.bytes })
		r.serverCmd = col(func(s sample) float64 { return s.cmds })
		r.serverCPU = time.Duration(col(func(s sample) float64 { return s.cpu }))
		r.clientCPU = time.Duration(col(func(s sample) float64 { return s.client }))
		r.vsFirst = col(func(s sample) float64 { return s.vsFirst })
		r.started = col(func(s sample) float64 { return s.started })
		out[i] = r
	}
	return out, nil
}

func pair(ctx context.Context, lk locker, key string) error {
	if err := lk.Lock(ctx, key); err != nil {
		return err
	}
	return lk.Unlock(ctx)
}

// parallelResult is the throughput of G goroutines, each on its own key.
type parallelResult struct {
	name   string
	perSec map[int]float64 // by goroutines: median pairs per second
	rounds map[int][]float64
	// By goroutines: the median over rounds of the CPU time per pair of the
	// server (INFO cpu) and of this process (getrusage), where the two share
	// the machine's cores.
	serverCPU, clientCPU       map[int]time.Duration
	serverRounds, clientRounds map[int][]float64
	// Rounds given up on: a pair had not returned a while after the round's
	// end (runParallel). The round counts the pairs that completed in it
	// toward the pairs per second, and nothing toward the CPU per pair.
	hung []hungRound
}

// hungRound is a parallel round in which a pair did not return.
type hungRound struct {
	goroutines, round int      // round -1 is the warm-up
	in                []string // where the stuck pairs waited
}

// parallel runs g goroutines, each taking and releasing its own key in a
// loop for d, sharing one go-redis client and one library client (as one
// service would), and counts the pairs. Rounds alternate between the
// implementations; the median is reported.
func parallel(ctx context.Context, srv *server, impls []impl, gs []int, d time.Duration, rounds int) ([]parallelResult, error) {
	out := make([]parallelResult, len(impls))
	for i, im := range impls {
		out[i] = parallelResult{name: im.name, perSec: map[int]float64{}, rounds: map[int][]float64{},
			serverCPU: map[int]time.Duration{}, clientCPU: map[int]time.Duration{},
			serverRounds: map[int][]float64{}, clientRounds: map[int][]float64{}}
	}
	for _, g := range gs {
		type setup struct {
			lockers []locker
			close   func()
		}
		setups := make([]setup, len(impls))
		for i, im := range impls {
			rdb := srv.clientOf(im, nil, g+8)
			shared := im.shared(rdb)
			ls := make([]locker, g)
			for j := range ls {
				ls[j] = im.locker(rdb, shared)
			}
			setups[i] = setup{lockers: ls, close: func() {
				closeLocker(ctx, ls[0])
				_ = rdb.Close()
			}}
		}
		for r := -1; r < rounds; r++ { // round -1 warms up
			for i, im := range impls {
				rd := d
				if r < 0 {
					rd = d / 4
				}
				st0, cpu0 := srv.stats(ctx), cpuTime()
				n, hung, err := runParallel(ctx, setups[i].lockers, fmt.Sprintf("par-%d-%d", i, g), rd)
				if err != nil {
					return nil, fmt.Errorf("%s, %d goroutines: %w", im.name, g, err)
				}
				if hung != nil {
					out[i].hung = append(out[i].hung, hungRound{goroutines: g, round: r, in: hung})
				}
				st, cpu := srv.stats(ctx).sub(st0), cpuTime()-cpu0
				if r >= 0 && n > 0 {
					o := &out[i]
					o.rounds[g] = append(o.rounds[g], float64(n)/rd.Seconds())
					if hung == nil { // a hung round's CPU times span its wait for the give-up too
						o.serverRounds[g] = append(o.serverRounds[g], float64(st.cpu)/float64(n))
						o.clientRounds[g] = append(o.clientRounds[g], float64(cpu)/float64(n))
					}
				}
			}
		}
		for i := range impls {
			o := &out[i]
			o.perSec[g] = median(o.rounds[g])
			o.serverCPU[g] = time.Duration(median(o.serverRounds[g]))
			o.clientCPU[g] = time.Duration(median(o.clientRounds[g]))
			setups[i].close()
		}
		if err := srv.flush(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stuckAfter is how long after a parallel round's end a pair may still be
// running before the round gives up on it: long enough for any client's
// timeouts and retries, short of the whole run's.
var stuckAfter = time.Minute

// runParallel runs one goroutine per locker, each taking and releasing its
// own key in a loop for d, and returns the pairs that completed. A pair that
// has not returned stuckAfter past the round's end has its context
// cancelled, and the round returns where the pairs then waited (hung: see
// waitingIn), after writing every goroutine to stderr: a lock that loses a
// wake-up marks its own rows instead of failing the whole run.
// err is a pair's error, unless it came once the round had given up. The
// pairs' context gets no deadline of its own: a deadline nearer than
// go-redis's own timeouts reach would put redlease's acquires on a
// goroutine (see acquisition.send) and change what is measured.
func runParallel(ctx context.Context, lockers []locker, prefix string, d time.Duration) (n int64, hung []string, err error) {
	var (
		total atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		stuck atomic.Bool // the round has given up
	)
	stop, after := time.Now().Add(d), stuckAfter
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := make(chan struct{})
	giveUp := time.AfterFunc(d+after, func() {
		defer close(gaveUp)
		all := make([]byte, 1<<20)
		all = all[:runtime.Stack(all, true)]
		mu.Lock()
		if hung = waitingIn(string(all)); len(hung) == 0 {
			hung = []string{"(none: every pair returned as the round gave up)"}
		}
		mu.Unlock()
		fmt.Fprintf(os.Stderr, "a pair of %s has not returned %v after the round's end; goroutines:\n%s\n", prefix, after, all)
		stuck.Store(true)
		cancel()
	})
	for j, lk := range lockers {
		key := fmt.Sprintf("%s-%d", prefix, j)
		wg.Go(func() {
			var done int64
			for time.Now().Before(stop) {
				if err := pair(rctx, lk, key); err != nil {
					if !stuck.Load() { // after the give-up, its cancellation's doing
						mu.Lock()
						first = err
						mu.Unlock()
					}
					break
				}
				done++
			}
			total.Add(done)
		})
	}
	wg.Wait()
	if !giveUp.Stop() {
		<-gaveUp
	}
	return total.Load(), hung, first
}

// waitingIn returns, for each goroutine of stacks (runtime.Stack's text)
// that is running a pair, the innermost function of its stack outside the
// standard library: the call that the pair waits in. Each function once.
func waitingIn(stacks string) []string {
	var out []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if !strings.Contains(g, "\n"+pairFunc+"(") {
			continue
		}
		lines := strings.Split(g, "\n")
		for k := 1; k < len(lines); k += 2 { // a function's line, then its file's
			fn := lines[k]
			if a := strings.LastIndex(fn, "("); a > 0 { // the arguments
				fn = fn[:a]
			}
			if standard(fn) {
				continue
			}
			if !slices.Contains(out, fn) {
				out = append(out, fn)
			}
			break
		}
	}
	return out
}

// pairFunc is pair's name in a stack: main.pair, or in a test the
// package's path and .pair.
var pairFunc = runtime.FuncForPC(reflect.ValueOf(pair).Pointer()).Name()

// standard reports whether fn, a function as a stack names it, is in the
// standard library: the first element of its package's path has no dot.
func standard(fn string) bool {
	dir, name := "", fn
	if k := strings.LastIndex(fn, "/"); k >= 0 {
		dir, name = fn[:k], fn[k+1:]
	}
	pkg, _, _ := strings.Cut(name, ".")
	if dir != "" {
		pkg = dir
	}
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".") && first != "main"
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
