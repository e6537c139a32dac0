package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/wire"
)

// The server's share: what a lock's two scripts cost redis-server per
// pair, without the clients' round trips in the way. Pairs go in
// pipelines (all acquires of a batch, then all its releases), on keys of
// their own, so the server's CPU time (INFO cpu) is spent on parsing and
// running the requests and little else; what it costs per pair is the
// price a shared Redis pays for every lease.

// scriptPair is a lock's acquire and release as pipelined commands.
type scriptPair struct {
	name    string
	acquire func(p redis.Pipeliner, key, owner string)
	release func(p redis.Pipeliner, key, owner string)
	load    []*redis.Script // scripts of its own, put in the server's cache before the rounds
}

// shareResult is a script pair's server CPU time per pair: medians over
// rounds, of the acquires, the releases, and both.
type shareResult struct {
	name                    string
	acquire, release, total time.Duration
	vsFirst                 float64 // median over rounds of total ÷ the first pair's total
}

// bsmObtainSrc and luaRelease are bsm/redislock's obtain and release as it
// runs them for a free key: SET NX PX in a script, and a
// compare-and-delete script.
const bsmObtainSrc = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.status_reply('OK') end
return false`

var (
	bsmObtainScript = redis.NewScript(bsmObtainSrc)
	bsmReleaseLua   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`)
)

// releaseByDel is redlease's release script with DEL in place of the RENAME
// that keeps the released lease for a retried release's verdict: what that
// verdict costs the server. redlease has no such variant.
func releaseByDel() (*redis.Script, error) {
	const rename = "redis.call('RENAME', lease, KEYS[4])"
	src := wire.Named("release.lua").Source()
	if strings.Count(src, rename) != 1 {
		return nil, fmt.Errorf("the server's share: release.lua has not exactly one %q", rename)
	}
	return redis.NewScript(strings.Replace(src, rename, "redis.call('DEL', lease)", 1)), nil
}

func scriptPairs(s *scripts) ([]scriptPair, error) {
	byDel, err := releaseByDel()
	if err != nil {
		return nil, err
	}
	ttlArg := strconv.FormatInt(ttlMS, 10)
	// redlease's keys for a resource; the fence counter is its slot's,
	// one key for every resource here, as on a single server.
	acqKeys := func(key string) []string {
		p := "redlease:{" + key + "}:"
		return []string{p + "lease", "redlease:{abc}:fences", p + "queue", p + "alive"}
	}
	relKeys := func(key string) []string {
		p := "redlease:{" + key + "}:"
		return []string{p + "lease", p + "queue", p + "alive", p + "released"}
	}
	return []scriptPair{
		{"bsm/redislock's scripts (obtain: SET NX PX in Lua; release: compare-and-delete)",
			func(p redis.Pipeliner, key, owner string) {
				bsmObtainScript.EvalSha(context.Background(), p, []string{key}, owner, ttlArg)
			},
			func(p redis.Pipeliner, key, owner string) {
				bsmReleaseLua.EvalSha(context.Background(), p, []string{key}, owner)
			},
			[]*redis.Script{bsmObtainScript, bsmReleaseLua}},
		{"fenced floor (INCR + SET NX PX; compare-and-delete)",
			func(p redis.Pipeliner, key, owner string) {
				fencedScript.EvalSha(context.Background(), p, []string{key, "{abc}:fence"}, owner, ttlArg)
			},
			func(p redis.Pipeliner, key, owner string) {
				fencedDelScript.EvalSha(context.Background(), p, []string{key}, owner)
			}, nil},
		{"the fenced floor with redlease's keys",
			func(p redis.Pipeliner, key, owner string) {
				fencedScript.EvalSha(context.Background(), p, acqKeys(key), owner, ttlArg)
			},
			func(p redis.Pipeliner, key, owner string) {
				fencedDelScript.EvalSha(context.Background(), p, relKeys(key), owner)
			}, nil},
		{"the fenced floor with redlease's keys and arguments",
			func(p redis.Pipeliner, key, owner string) {
				fencedScript.EvalSha(context.Background(), p, acqKeys(key), owner, ttlArg, "0", owner+"/raw", holder)
			},
			func(p redis.Pipeliner, key, owner string) {
				fencedDelScript.EvalSha(context.Background(), p, relKeys(key), owner)
			}, nil},
		{"redlease's scripts (acquire.lua, release.lua)",
			func(p redis.Pipeliner, key, owner string) {
				s.acquire.EvalSha(context.Background(), p, acqKeys(key), owner, ttlArg, "0", owner+"/raw", holder)
			},
			func(p redis.Pipeliner, key, owner string) {
				s.release.EvalSha(context.Background(), p, relKeys(key), owner)
			}, nil},
		{"redlease's scripts without a holder description (WithHolder(\"\"))",
			func(p redis.Pipeliner, key, owner string) {
				s.acquire.EvalSha(context.Background(), p, acqKeys(key), owner, ttlArg, "0", owner+"/raw")
			},
			func(p redis.Pipeliner, key, owner string) {
				s.release.EvalSha(context.Background(), p, relKeys(key), owner)
			}, nil},
		{"redlease's scripts, the release deleting the lease instead of keeping it for a retried release's verdict (no such option)",
			func(p redis.Pipeliner, key, owner string) {
				s.acquire.EvalSha(context.Background(), p, acqKeys(key), owner, ttlArg, "0", owner+"/raw", holder)
			},
			func(p redis.Pipeliner, key, owner string) {
				byDel.EvalSha(context.Background(), p, relKeys(key), owner)
			},
			[]*redis.Script{byDel}},
	}, nil
}

// serverShare runs each pair batches × batch times per round, rounds
// alternating between the pairs, and checks every reply.
func serverShare(ctx context.Context, srv *server, pairs []scriptPair, batch, batches, rounds int) ([]shareResult, error) {
	rdb := srv.client(nil, 2)
	defer rdb.Close()
	for _, sp := range pairs {
		for _, sc := range sp.load {
			if err := sc.Load(ctx, rdb).Err(); err != nil {
				return nil, err
			}
		}
	}
	type sample struct{ acq, rel, vs float64 }
	samples := make([][]sample, len(pairs))
	run := func(sp scriptPair, prefix string, step func(sp scriptPair, p redis.Pipeliner, key, owner string)) (time.Duration, error) {
		st0 := srv.stats(ctx)
		for b := range batches {
			p := rdb.Pipeline()
			for i := range batch {
				k := prefix + strconv.Itoa(b*batch+i)
				step(sp, p, k, "owner-"+k)
			}
			cmds, err := p.Exec(ctx)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", sp.name, err)
			}
			for _, c := range cmds {
				if n, err := c.(*redis.Cmd).Result(); err != nil || n == nil || n == int64(0) {
					return 0, fmt.Errorf("%s: a reply says it did not take or release its key: %v, %v", sp.name, n, err)
				}
			}
		}
		return srv.stats(ctx).sub(st0).cpu, nil
	}
	for r := -1; r < rounds; r++ { // round -1 warms up
		for i, sp := range pairs {
			prefix := fmt.Sprintf("share-%d-%d-", r+1, i)
			acq, err := run(sp, prefix, func(sp scriptPair, p redis.Pipeliner, k, o string) { sp.acquire(p, k, o) })
			if err != nil {
				return nil, err
			}
			rel, err := run(sp, prefix, func(sp scriptPair, p redis.Pipeliner, k, o string) { sp.release(p, k, o) })
			if err != nil {
				return nil, err
			}
			// The next row starts from an empty server: rows that keep
			// keys (redlease's release keeps the released lease) would
			// otherwise make the dictionaries of the rows after them grow.
			if err := srv.flush(ctx); err != nil {
				return nil, err
			}
			if r < 0 {
				continue
			}
			n := float64(batch * batches)
			s := sample{acq: float64(acq) / n, rel: float64(rel) / n}
			base := s // the first pair's, of this round
			if i > 0 {
				base = samples[0][len(samples[0])-1]
			}
			s.vs = (s.acq + s.rel) / (base.acq + base.rel)
			samples[i] = append(samples[i], s)
		}
	}
	out := make([]shareResult, len(pairs))
	for i, sp := range pairs {
		col := func(f func(sample) float64) float64 {
			var v []float64
			for _, s := range samples[i] {
				v = append(v, f(s))
			}
			return median(v)
		}
		out[i] = shareResult{name: sp.name,
			acquire: time.Duration(col(func(s sample) float64 { return s.acq })),
			release: time.Duration(col(func(s sample) float64 { return s.rel })),
			total:   time.Duration(col(func(s sample) float64 { return s.acq + s.rel })),
			vsFirst: col(func(s sample) float64 { return s.vs })}
	}
	return out, nil
}
