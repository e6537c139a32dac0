package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/wire"
)

// The raw go-redis baselines: what any client must pay, beside which the
// libraries' rows are read (see the report's floors).

// scripts are redlease's acquire, release and refresh scripts, as the
// core's protocol layer has them, so the baseline runs exactly what
// redlease runs.
type scripts struct {
	acquire, release, refresh *redis.Script
}

func loadScripts() *scripts {
	src := func(name string) string { return wire.Named(name).Source() }
	return &scripts{acquire: redis.NewScript(src("acquire.lua")), release: redis.NewScript(src("release.lua")),
		refresh: redis.NewScript(src("refresh.lua"))}
}

// rawLocker runs redlease's two scripts by hand with EVALSHA: the floor that
// redlease's client side adds to. It keeps the keys of the last resource and
// draws an owner token from a counter; it cannot wait.
type rawLocker struct {
	rdb     *redis.Client
	s       *scripts
	base    string
	n       uint64
	key     string
	acqKeys []string // lease, fence, queue, alive
	relKeys []string // lease, queue, alive, released
	owner   string
}

var ttlMS = ttl.Milliseconds()

// holder is the holder description redlease sends by default.
var holder = redlease.DefaultHolder()

// next sets the keys for key, if they are not set already, and draws the
// next owner token.
func (l *rawLocker) next(key string) {
	if key != l.key {
		p := "redlease:{" + key + "}:"
		l.key = key
		// One server: any key may stand for the fence counter of the
		// resource's hash slot.
		l.acqKeys = []string{p + "lease", p + "fences", p + "queue", p + "alive"}
		l.relKeys = []string{p + "lease", p + "queue", p + "alive", p + "released"}
	}
	l.n++
	l.owner = l.base + strconv.FormatUint(l.n, 36)
}

func (l *rawLocker) Lock(ctx context.Context, key string) error {
	l.next(key)
	// ARGV: owner, TTL, mode (the waiter timeout, 0: do not queue; no
	// flags: not fair, first attempt), queue member, holder description.
	// Reply: the fence (> 0), or an array when busy.
	fence, err := l.s.acquire.EvalSha(ctx, l.rdb, l.acqKeys, l.owner, ttlMS, "0", l.owner+"/raw", holder).Int64()
	if err == nil && fence <= 0 {
		err = errBusy
	}
	return err
}

func (l *rawLocker) Unlock(ctx context.Context) error {
	// ARGV: owner; no queue member (not queued), not Cluster.
	n, err := l.s.release.EvalSha(ctx, l.rdb, l.relKeys, l.owner).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: release did not delete the lease")
	}
	return err
}

// setnxLocker is the peers' floor: SET NX PX, and a compare-and-delete
// script by EVALSHA.
type setnxLocker struct {
	rdb   *redis.Client
	base  string
	n     uint64
	key   string
	owner string
}

var delScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (l *setnxLocker) Lock(ctx context.Context, key string) error {
	l.n++
	l.key, l.owner = key, l.base+strconv.FormatUint(l.n, 36)
	ok, err := l.rdb.SetNX(ctx, key, l.owner, ttl).Result()
	if err == nil && !ok {
		err = errBusy
	}
	return err
}

func (l *setnxLocker) Unlock(ctx context.Context) error {
	n, err := delScript.EvalSha(ctx, l.rdb, []string{l.key}, l.owner).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: delete did not delete the lock")
	}
	return err
}

// fencedLocker is the floor of any lock with fencing tokens: one script
// that increments a counter and takes the lock with SET NX PX (the fence in
// its value), and the compare-and-delete script.
type fencedLocker struct {
	setnxLocker
}

const (
	fencedSrc = `local f = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1] .. ':' .. f, 'NX', 'PX', ARGV[2]) then return f end
return 0`
	fencedDelSrc = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then return redis.call('DEL', KEYS[1]) end
return 0`
)

var (
	fencedScript    = redis.NewScript(fencedSrc)
	fencedDelScript = redis.NewScript(fencedDelSrc)
)

func (l *fencedLocker) Lock(ctx context.Context, key string) error {
	l.n++
	l.key, l.owner = key, l.base+strconv.FormatUint(l.n, 36)
	f, err := fencedScript.EvalSha(ctx, l.rdb, []string{key, key + ":fence"}, l.owner, ttlMS).Int64()
	if err == nil && f <= 0 {
		err = errBusy
	}
	return err
}

func (l *fencedLocker) Unlock(ctx context.Context) error {
	n, err := fencedDelScript.EvalSha(ctx, l.rdb, []string{l.key}, l.owner).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: delete did not delete the lock")
	}
	return err
}

// fencedArgsLocker runs the fenced floor's two scripts with the keys and
// arguments that redlease's scripts take (the waiting queue's keys and the
// released key, the mode, queue member, holder description), which these
// scripts ignore: what carrying them costs, apart from what redlease's
// scripts do with them.
type fencedArgsLocker struct {
	rawLocker
}

func (l *fencedArgsLocker) Lock(ctx context.Context, key string) error {
	l.next(key)
	f, err := fencedScript.EvalSha(ctx, l.rdb, l.acqKeys, l.owner, ttlMS, "0", l.owner+"/raw", holder).Int64()
	if err == nil && f <= 0 {
		err = errBusy
	}
	return err
}

func (l *fencedArgsLocker) Unlock(ctx context.Context) error {
	n, err := fencedDelScript.EvalSha(ctx, l.rdb, l.relKeys, l.owner).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: delete did not delete the lock")
	}
	return err
}

func fencedArgsImpl() impl {
	return impl{
		name:   nameFencedArgs,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker {
			return &fencedArgsLocker{rawLocker{rdb: rdb, base: uniqueBase()}}
		},
	}
}

// spawnedLocker is a fencedLocker whose Lock sends the script on a goroutine
// of its own and waits for it or for the end of ctx, as redlease sends an
// acquire whose deadline its client would not keep (go-redis without
// ContextTimeoutEnabled): what that costs any lock, apart from the rest of
// redlease.
type spawnedLocker struct {
	fencedLocker
}

func (l *spawnedLocker) Lock(ctx context.Context, key string) error {
	done := make(chan error, 1)
	go func() { done <- l.fencedLocker.Lock(ctx, key) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func spawnedImpl() impl {
	return impl{
		name:   nameSpawned,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker {
			return &spawnedLocker{fencedLocker{setnxLocker{rdb: rdb, base: uniqueBase()}}}
		},
	}
}

func fencedImpl() impl {
	return impl{
		name:   nameFenced,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker { return &fencedLocker{setnxLocker{rdb: rdb, base: uniqueBase()}} },
	}
}

func rawImpl(s *scripts) impl {
	return impl{
		name:   nameRaw,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker { return &rawLocker{rdb: rdb, s: s, base: uniqueBase()} },
	}
}

func setnxImpl() impl {
	return impl{
		name:   nameSetNX,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker { return &setnxLocker{rdb: rdb, base: uniqueBase()} },
	}
}

// loadAll puts every script in the server's cache, so no measured call pays
// for a NOSCRIPT round trip (the watchdog's first pipeline would otherwise
// be sent twice, the second time with the script's source).
func loadAll(ctx context.Context, rdb *redis.Client, s *scripts) error {
	for _, sc := range []*redis.Script{s.acquire, s.release, s.refresh, delScript, fencedScript, fencedDelScript} {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
