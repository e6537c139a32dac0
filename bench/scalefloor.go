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
// as redlease's leases are, each renewed every interval with redlease's
// refresh script (EVALSHA, compare-and-renew), sent by the client itself
// in pipelines of driver.MaxBatch, from a plain schedule with no lease
// object, lock, timer or context per key. The keys fall due in ten groups,
// one every interval/10, as the watchdog sends together what falls due
// within interval/10. Measured as scale measures redlease: the process's
// CPU over window, the PTTL sampler running beside it.
func renewFloor(ctx context.Context, srv *server, client string, n int, window time.Duration) (scaleResult, error) {
	res := scaleResult{client: client, leases: n, window: window}
	interval := ttl / 3
	res.expectPerSec = float64(n) / interval.Seconds()
	keys, owners := make([]string, n), make([]string, n)
	for i := range keys {
		keys[i] = "redlease:{floor-" + strconv.Itoa(i) + "}:lease"
		owners[i] = fmt.Sprintf("%08x-floor-%d", rand.Uint32(), i)
	}
	ttlArg := strconv.FormatInt(ttlMS, 10)
	src := wire.Named("refresh.lua").Source()

	// send renews keys[from:to], in pipelines of driver.MaxBatch, and
	// returns how many renewals were sent and how many found the key gone.
	var send func(from, to int) (sent, lost int, err error)
	rdb := srv.client(nil, 4)
	defer rdb.Close()
	switch client {
	case "go-redis":
		refresh := redis.NewScript(src)
		send = func(from, to int) (int, int, error) {
			sent, lost := 0, 0
			for lo := from; lo < to; lo += driver.MaxBatch {
				hi := min(to, lo+driver.MaxBatch)
				cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for i := lo; i < hi; i++ {
						refresh.EvalSha(ctx, p, []string{keys[i]}, owners[i], ttlArg)
					}
					return nil
				})
				if err != nil {
					return sent, lost, err
				}
				for _, c := range cmds {
					if c.(*redis.Cmd).Val() != int64(1) {
						lost++
					}
				}
				sent += len(cmds)
			}
			return sent, lost, nil
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
		cmds := make(rueidis.Commands, 0, driver.MaxBatch)
		send = func(from, to int) (int, int, error) {
			sent, lost := 0, 0
			for lo := from; lo < to; lo += driver.MaxBatch {
				cmds = cmds[:0]
				for i := lo; i < min(to, lo+driver.MaxBatch); i++ {
					cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(keys[i]).Arg(owners[i], ttlArg).Build())
				}
				for _, r := range rc.DoMulti(ctx, cmds...) {
					v, err := r.AsInt64()
					if err != nil {
						return sent, lost, err
					}
					if v != 1 {
						lost++
					}
					sent++
				}
			}
			return sent, lost, nil
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
	sampler := startSampler(ctx, srv, func() string { return keys[rand.IntN(n)] })

	// Group g, keys[g*n/10 : (g+1)*n/10], falls due at start + g*interval/10
	// and every interval after that.
	const groups = 10
	start := time.Now()
	var sent, lost int
	var cpu0, cpu1 time.Duration
	var st0, st1 serverStats
	var t0 time.Time
	windowFrom, windowTo := start.Add(interval/2), start.Add(interval/2+window)
	for round := 0; ; round++ {
		due := start.Add(time.Duration(round) * interval / groups)
		if t0.IsZero() && !due.Before(windowFrom) {
			settle()
			cpu0, st0, t0 = cpuTime(), srv.stats(ctx), time.Now()
			sent = 0
		}
		if !due.Before(windowTo) {
			break
		}
		select {
		case <-time.After(time.Until(due)):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		g := round % groups
		s, l, err := send(g*n/groups, (g+1)*n/groups)
		if err != nil {
			return res, err
		}
		sent, lost = sent+s, lost+l
	}
	// Wait out the window's end as scale does.
	select {
	case <-time.After(time.Until(windowTo)):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	cpu1, st1 = cpuTime(), srv.stats(ctx)
	elapsed := time.Since(t0)
	res.renewPerSec = float64(sent) / elapsed.Seconds()
	res.cpu = float64(cpu1-cpu0) / float64(elapsed)
	res.serverCPU = float64(st1.sub(st0).cpu) / float64(elapsed)
	res.lost = int64(lost)
	var err error
	if res.minPTTL, err = sampler.stop(); err != nil {
		return res, err
	}
	return res, srv.flush(ctx)
}
