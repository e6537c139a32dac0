package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/wire"
)

// renewFloor is the least a client pays to keep n leases alive: n keys set
// as redlease's leases are, each renewed every interval as the watchdog
// renews them, by refresh_many.lua calls of wire.RefreshManyMax keys
// (EVALSHA, compare-and-renew), driver.MaxBatch keys to a pipeline, sent
// by the client itself from a plain schedule with no lease object, lock,
// timer or context per key. The keys fall due in ten groups, one every
// interval/10, as the watchdog sends together what falls due within
// interval/10. Measured as scale measures redlease: the process's CPU over
// window, the PTTL sampler running beside it.
func renewFloor(ctx context.Context, srv *server, client string, n int, warm, window time.Duration) (scaleResult, error) {
	res := scaleResult{client: client, leases: n, window: window}
	interval := ttl / 3
	res.expectPerSec = float64(n) / interval.Seconds()
	keys, owners := make([]string, n), make([]string, n)
	for i := range keys {
		keys[i] = "redlease:{floor-" + strconv.Itoa(i) + "}:lease"
		owners[i] = fmt.Sprintf("%08x-floor-%d", rand.Uint32(), i)
	}
	ttlArg := strconv.FormatInt(ttlMS, 10)
	src := wire.Named("refresh_many.lua").Source()
	// call is the refresh_many.lua call on keys[lo:hi].
	call := func(lo, hi int) wire.Call {
		return wire.RefreshMany(hi-lo, func(i int) (string, string, string) { return keys[lo+i], owners[lo+i], ttlArg })
	}
	// count adds the replies of one call on k keys to sent and lost.
	count := func(vals []int64, k int, sent, lost *int) error {
		if len(vals) != k {
			return fmt.Errorf("refresh_many.lua replied %d values for %d keys", len(vals), k)
		}
		for _, v := range vals {
			if v != 1 {
				*lost++
			}
		}
		*sent += k
		return nil
	}

	// send renews keys[from:to], driver.MaxBatch keys to a pipeline, and
	// returns how many renewals were sent, how many found the key gone,
	// and the number of requests (script calls).
	var send func(from, to int) (sent, lost, reqs int, err error)
	rdb := srv.client(nil, 4)
	defer rdb.Close()
	switch client {
	case "go-redis":
		refresh := redis.NewScript(src)
		send = func(from, to int) (sent, lost, reqs int, err error) {
			for lo := from; lo < to; lo += driver.MaxBatch {
				hi := min(to, lo+driver.MaxBatch)
				cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for j := lo; j < hi; j += wire.RefreshManyMax {
						c := call(j, min(hi, j+wire.RefreshManyMax))
						args := make([]any, len(c.Args))
						for i, a := range c.Args {
							args[i] = a
						}
						refresh.EvalSha(ctx, p, c.Keys, args...)
					}
					return nil
				})
				if err != nil {
					return sent, lost, reqs, err
				}
				for j, c := range cmds {
					vals, err := c.(*redis.Cmd).Int64Slice()
					if err != nil {
						return sent, lost, reqs, err
					}
					k := min(hi, lo+(j+1)*wire.RefreshManyMax) - (lo + j*wire.RefreshManyMax)
					if err := count(vals, k, &sent, &lost); err != nil {
						return sent, lost, reqs, err
					}
				}
				reqs += len(cmds)
			}
			return sent, lost, reqs, nil
		}
		if err := refresh.Load(ctx, rdb).Err(); err != nil {
			return res, err
		}
	case "rueidis":
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
		if err != nil {
			return res, err
		}
		defer rc.Close()
		sha, err := rc.Do(ctx, rc.B().ScriptLoad().Script(src).Build()).ToString()
		if err != nil {
			return res, err
		}
		cmds := make(rueidis.Commands, 0, driver.MaxBatch/wire.RefreshManyMax+1)
		var sizes []int
		send = func(from, to int) (sent, lost, reqs int, err error) {
			for lo := from; lo < to; lo += driver.MaxBatch {
				hi := min(to, lo+driver.MaxBatch)
				cmds, sizes = cmds[:0], sizes[:0]
				for j := lo; j < hi; j += wire.RefreshManyMax {
					c := call(j, min(hi, j+wire.RefreshManyMax))
					cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build())
					sizes = append(sizes, len(c.Keys))
				}
				for j, r := range rc.DoMulti(ctx, cmds...) {
					vals, err := r.AsIntSlice()
					if err != nil {
						return sent, lost, reqs, err
					}
					if err := count(vals, sizes[j], &sent, &lost); err != nil {
						return sent, lost, reqs, err
					}
				}
				reqs += len(cmds)
			}
			return sent, lost, reqs, nil
		}
	default:
		return res, fmt.Errorf("no client %q", client)
	}

	// Set the keys as an acquire would (not measured).
	for lo := 0; lo < n; lo += driver.MaxBatch {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(n, lo+driver.MaxBatch); i++ {
				p.Set(ctx, keys[i], owners[i]+":1", ttl)
			}
			return nil
		}); err != nil {
			return res, err
		}
	}
	sampler, err := startSampler(srv, func() string { return keys[rand.IntN(n)] })
	if err != nil {
		return res, err
	}
	defer sampler.end()

	// Group g, keys[g*n/10 : (g+1)*n/10], falls due at start + g*interval/10
	// and every interval after that.
	const groups = 10
	start := time.Now()
	var sent, lost, reqs int
	var cpu0, cpu1 time.Duration
	var st0, st1 serverStats
	var t0 time.Time
	// As in scale: settle half an interval in, then warm up (warmUp's
	// criterion, checked between rounds, which go on meanwhile).
	settleAt := start.Add(interval / 2)
	var settled, windowTo time.Time
	var gc0 uint64
	for round := 0; ; round++ {
		due := start.Add(time.Duration(round) * interval / groups)
		if settled.IsZero() && !due.Before(settleAt) {
			settle()
			settled, gc0 = time.Now(), gcCycles()
		}
		if t0.IsZero() && !settled.IsZero() && (gcCycles() != gc0 || time.Since(settled) >= warm) {
			cpu0, st0, t0 = cpuTime(), srv.stats(ctx), time.Now()
			sent, reqs = 0, 0
			windowTo = t0.Add(window)
		}
		if !t0.IsZero() && !due.Before(windowTo) {
			break
		}
		select {
		case <-time.After(time.Until(due)):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		g := round % groups
		s, l, r, err := send(g*n/groups, (g+1)*n/groups)
		if err != nil {
			return res, err
		}
		sent, lost, reqs = sent+s, lost+l, reqs+r
	}
	// Wait out the window's end as scale does.
	select {
	case <-time.After(time.Until(windowTo)):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	cpu1, st1 = cpuTime(), srv.stats(ctx)
	elapsed := time.Since(t0)
	res.renewPerSec = float64(st1.sub(st0).pexpire) / elapsed.Seconds()
	res.reqPerSec = float64(reqs) / elapsed.Seconds()
	if sent > 0 && res.renewPerSec == 0 {
		return res, fmt.Errorf("%d renewals sent, no PEXPIRE counted by the server", sent)
	}
	res.cpu = float64(cpu1-cpu0) / float64(elapsed)
	res.serverCPU = float64(st1.sub(st0).cpu) / float64(elapsed)
	res.lost = int64(lost)
	if res.minPTTL, err = sampler.stop(); err != nil {
		return res, err
	}
	return res, srv.flush(ctx)
}
