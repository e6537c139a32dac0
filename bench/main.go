// Command bench compares redlease with github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4, and with raw go-redis, on one
// redis-server that it starts on loopback, and writes the results to
// docs/BENCHMARKS.md. Run it with bench/run.sh from the repository root.
//
// It measures, in one run: the cost of an uncontended acquire+release pair
// (time, round trips, allocations, server work), the throughput of 8 and 64
// goroutines on distinct keys, the handoff of one hot key among 2, 8 and 32
// contenders, and one process holding 1,000, 10,000 and 100,000
// auto-renewed leases.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func main() {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	var (
		out     = flag.String("out", filepath.Join(root, "docs", "BENCHMARKS.md"), "where to write the report (- for stdout)")
		bin     = flag.String("redis-server", "redis-server", "redis-server binary")
		quick   = flag.Bool("quick", false, "a short run to check that everything works; its numbers mean little")
		maxHeld = flag.Int("max-leases", 100_000, "largest number of leases held at once")
		parts   = flag.String("parts", "pairs,parallel,share,hot,scale", "which parts to run (comma-separated; also share: the server's CPU per pair, pipelined)")
		rows    = flag.String("rows", "", "pairs, parallel and hot parts: run only the rows whose names contain one of these comma-separated strings, each the exact name of a row or a part of the names of several, e.g. \"SET NX,by hand,redlease,bsm/redislock, defaults\" (a comma followed by a space is a name's; default all)")
		cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for a run of a few rows)")
		sampler = flag.String("sample-pttl", "", "internal: be the scale part's PTTL sampler for the redis-server at this address")
		pinRun  = flag.Bool("pin", false, "Linux: run this process on one CPU (GOMAXPROCS 1) and redis-server on another, so that a pair's time does not depend on where the scheduler puts the two: the quieter measure of the uncontended pair; the parallel parts measure a 1-core client then")
	)
	flag.Parse()
	if *pinRun {
		err := readPinned()
		if err == nil && !pinned.on {
			err = pin() // returns only if it failed
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *sampler != "" {
		if err := samplePTTL(*sampler); err != nil {
			fmt.Fprintln(os.Stderr, "bench: PTTL sampler:", err)
			os.Exit(1)
		}
		return
	}
	redis.SetLogger(quietLogger{})
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*out, *bin, *quick, *maxHeld, strings.Split(*parts, ","), *rows); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plan is how long each part runs.
type plan struct {
	pairs, pairRounds int           // uncontended
	parDur            time.Duration // parallel, per round
	parRounds         int
	hotWant           int           // handoffs per configuration
	hotLimit          time.Duration // time per configuration
	scales            []int
	scaleWarm         time.Duration // the most the scale part waits for the heap to settle (warmUp)
	scaleWindow       time.Duration
}

func run(out, bin string, quick bool, maxHeld int, parts []string, rows string) error {
	p := plan{pairs: 2000, pairRounds: 15, parDur: time.Second, parRounds: 7,
		hotWant: 4000, hotLimit: 4 * time.Second, scales: []int{1_000, 10_000, 100_000}, scaleWarm: 15 * time.Second, scaleWindow: 3 * ttl}
	if quick {
		p = plan{pairs: 300, pairRounds: 3, parDur: 200 * time.Millisecond, parRounds: 1,
			hotWant: 200, hotLimit: 500 * time.Millisecond, scales: []int{1_000}, scaleWarm: time.Second, scaleWindow: ttl / 3}
	}
	var scales []int
	for _, n := range p.scales {
		if n <= maxHeld {
			scales = append(scales, n)
		}
	}
	p.scales = scales

	s := loadScripts()
	path, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Errorf("%s not found: install redis-server (Debian: apt-get install -y redis-server)", bin)
	}
	srv, err := startServer(path)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := loadAll(ctx, srv.info, s); err != nil {
		return err
	}
	rep := &report{started: time.Now(), quick: quick, args: os.Args[1:], plan: p, redisVersion: srv.version(ctx)}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.1fs] "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
	}

	raw, setnx := rawImpl(s), setnxImpl()
	rl := redleaseImpl(nameRL, false)
	bsmDefault, bsmFast := bsmImpl(nameBSM, 0), bsmImpl(nameBSMFast, time.Millisecond)
	rsDefault, rsFast := redsyncImpl(nameRS), redsyncImpl(nameRSFast, redsync.WithRetryDelay(time.Millisecond))

	// bsm/redislock does not retry by default (NoRetry); a caller that waits
	// must give a retry strategy. Its documentation's examples retry every
	// 100 ms and 500 ms; "defaults" here is the 100 ms one.
	hotImpls := []impl{
		rl,
		redleaseImpl(nameRLFair, false, redlease.WithFair(true)),
		bsmImpl(nameBSMHot, 100*time.Millisecond), bsmFast,
		rsDefault, rsFast,
	}
	rlRueidis, rlValkey := redleaseRueidisImpl(nameRLRueidis), redleaseValkeyImpl(nameRLValkey)
	hotImpls = append(hotImpls, rlRueidis, rueidislockImpl(nameRueidis), rlValkey, valkeylockImpl(nameValkeylock))
	hotImpls = append(hotImpls, handoffImpl(nameHandoff))
	rlNoRenew := redleaseImpl(nameRLNoRenew, false, redlease.WithAutoRenew(false))
	rlAlone := redleaseImpl(nameRLAlone, false, redlease.WithCombinedRequests(false))
	if slices.Contains(parts, "pairs") {
		logf("uncontended pairs: %d × %d rounds", p.pairs, p.pairRounds)
		impls, err := chooseRows([]impl{
			raw, setnx, fencedImpl(), fencedArgsImpl(), rl,
			redleaseImpl(nameRLTry, true),
			rlNoRenew, rlAlone, bsmDefault, rsDefault, rlRueidis, rlValkey,
			withDeadline(nameRLCtx, rl, false), withDeadline(nameBSMCtx, bsmDefault, false),
			withDeadline(nameRLCtxCTE, rl, true), withDeadline(nameBSMCtxCTE, bsmDefault, true),
			withDeadline(nameRLRueidisCtx, rlRueidis, false), withDeadline(nameRLValkeyCtx, rlValkey, false),
			fencedRueidisImpl(nameFencedRueidis, false), fencedRueidisImpl(nameFencedRueidisSub, true),
			spawnedImpl(),
		}, rows)
		if err != nil {
			return err
		}
		rep.pairs, err = uncontended(ctx, srv, impls, p.pairs, p.pairRounds)
		if err != nil {
			return err
		}
	}
	if slices.Contains(parts, "parallel") {
		logf("parallel distinct keys")
		impls, err := chooseRows([]impl{raw, setnx, fencedImpl(), fencedArgsImpl(), rl, rlAlone, rlNoRenew, bsmDefault, rsDefault,
			fencedRueidisImpl(nameFencedRueidis, false), rlRueidis, rlValkey, rueidislockImpl(nameRueidis), valkeylockImpl(nameValkeylock),
			withDeadline(nameRLCtxCTE, rl, true), withDeadline(nameBSMCtxCTE, bsmDefault, true)}, rows)
		if err != nil {
			return err
		}
		rep.parallel, err = parallel(ctx, srv, impls, []int{8, 64}, p.parDur, p.parRounds)
		if err != nil {
			return err
		}
	}
	if slices.Contains(parts, "share") {
		logf("the server's share: pipelined pairs")
		batches, rounds := 25, 11
		if quick {
			batches, rounds = 5, 2
		}
		pairs, err := scriptPairs(s)
		if err != nil {
			return err
		}
		rep.share, err = serverShare(ctx, srv, pairs, 200, batches, rounds)
		if err != nil {
			return err
		}
	}
	if !slices.Contains(parts, "hot") {
		hotImpls = nil
	} else if hotImpls, err = chooseRows(hotImpls, rows); err != nil {
		return err
	}
	if !slices.Contains(parts, "scale") {
		p.scales = nil
	}

	for _, n := range []int{2, 8, 32} {
		for _, im := range hotImpls {
			logf("hot key: %s, %d contenders", im.name, n)
			r, err := hotKey(ctx, srv, im, n, p.hotWant, p.hotLimit)
			if err != nil {
				return fmt.Errorf("hot key, %s, %d contenders: %w", im.name, n, err)
			}
			rep.hot = append(rep.hot, r)
		}
	}

	for _, client := range []string{"go-redis", "rueidis"} {
		for _, n := range p.scales {
			logf("holding %d leases on %s", n, client)
			r, err := scale(ctx, srv, client, n, 64, p.scaleWarm, p.scaleWindow, max(1, n/1000))
			if err != nil {
				return fmt.Errorf("holding %d leases on %s: %w", n, client, err)
			}
			rep.scale = append(rep.scale, r)
		}
		if n := slices.Max(append([]int{0}, p.scales...)); n > 0 {
			logf("renewal floor: %d keys on %s", n, client)
			r, err := renewFloor(ctx, srv, client, n, p.scaleWarm, p.scaleWindow)
			if err != nil {
				return fmt.Errorf("renewal floor, %d keys on %s: %w", n, client, err)
			}
			rep.scaleFloor = append(rep.scaleFloor, r)
		}
	}
	rep.duration = time.Since(began)
	logf("done")

	md := rep.markdown()
	if out == "-" {
		_, err = os.Stdout.WriteString(md)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "wrote", out)
	return nil
}

// chooseRows keeps, in their order, the implementations that rows names: a
// comma-separated list of strings, each of which picks the row of that exact
// name if there is one, else every row whose name contains it (all rows if
// rows is empty). A same-run look at a few rows, in less time than the whole
// part.
func chooseRows(impls []impl, rows string) ([]impl, error) {
	if rows == "" {
		return impls, nil
	}
	keep := make([]bool, len(impls))
	for _, s := range splitRows(rows) {
		exact := slices.IndexFunc(impls, func(im impl) bool { return im.name == s })
		for i, im := range impls {
			keep[i] = keep[i] || i == exact || exact < 0 && s != "" && strings.Contains(im.name, s)
		}
	}
	var kept []impl
	for i, im := range impls {
		if keep[i] {
			kept = append(kept, im)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("-rows %q matches no row of the part", rows)
	}
	return kept, nil
}

// splitRows splits the -rows list at its commas, except at a comma
// followed by a space, which belongs to a row's name ("bsm/redislock,
// defaults").
func splitRows(rows string) []string {
	var out []string
	for {
		i := 0
		for {
			j := strings.IndexByte(rows[i:], ',')
			if j < 0 {
				return append(out, rows)
			}
			i += j
			if !strings.HasPrefix(rows[i:], ", ") {
				break
			}
			i++
		}
		out, rows = append(out, rows[:i]), rows[i+1:]
	}
}
