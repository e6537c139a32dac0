package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
)

// ttl is the lease TTL of every implementation in every scenario.
const ttl = 10 * time.Second

// locker is one caller's handle on a lock implementation. It holds at most
// one lock at a time, and is used by one goroutine.
type locker interface {
	// Lock takes the lock of key, waiting while it is held, until ctx ends.
	Lock(ctx context.Context, key string) error
	// Unlock releases the lock taken by the last Lock.
	Unlock(ctx context.Context) error
}

// impl is a lock implementation in one configuration.
type impl struct {
	name string
	// shared makes what the lockers of one process share (a library client);
	// lockers share it in the parallel scenario, and each contender of the hot
	// key gets its own (as separate processes would).
	shared func(rdb *redis.Client) any
	// locker makes one caller's handle from the shared value.
	locker func(rdb *redis.Client, shared any) locker
	// waits tells whether Lock can wait for a held lock (the raw baselines
	// cannot).
	waits bool
	// timeouts asks for a go-redis client with ContextTimeoutEnabled.
	timeouts bool
}

var errBusy = errors.New("bench: lock is held")

// ---- redlease ----

type redleaseLocker struct {
	c     *redlease.Client
	try   bool
	lease *redlease.Lease
}

func (l *redleaseLocker) Lock(ctx context.Context, key string) (err error) {
	if l.try {
		l.lease, err = l.c.TryAcquire(ctx, key)
	} else {
		l.lease, err = l.c.Acquire(ctx, key)
	}
	return err
}

func (l *redleaseLocker) Unlock(ctx context.Context) error { return l.lease.Release(ctx) }

func redleaseImpl(name string, try bool, opts ...redlease.Option) impl {
	return impl{
		name: name,
		shared: func(rdb *redis.Client) any {
			return redlease.New(rdb, append([]redlease.Option{redlease.WithTTL(ttl)}, opts...)...)
		},
		locker: func(_ *redis.Client, s any) locker { return &redleaseLocker{c: s.(*redlease.Client), try: try} },
		waits:  !try,
	}
}

// ---- bsm/redislock ----

type bsmLocker struct {
	c    *redislock.Client
	opt  *redislock.Options
	lock *redislock.Lock
}

func (l *bsmLocker) Lock(ctx context.Context, key string) error {
	for {
		lock, err := l.c.Obtain(ctx, key, ttl, l.opt)
		if err == nil {
			l.lock = lock
			return nil
		}
		// Obtain gives up with ErrNotObtained when its retry strategy runs
		// out; a caller that must have the lock asks again.
		if ctx.Err() != nil || !errors.Is(err, redislock.ErrNotObtained) {
			return err
		}
	}
}

func (l *bsmLocker) Unlock(ctx context.Context) error { return l.lock.Release(ctx) }

func bsmImpl(name string, retry time.Duration) impl {
	return impl{
		name:   name,
		shared: func(rdb *redis.Client) any { return redislock.New(rdb) },
		locker: func(_ *redis.Client, s any) locker {
			return &bsmLocker{c: s.(*redislock.Client), opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(retry)}}
		},
		waits: true,
	}
}

// ---- go-redsync/redsync ----

type redsyncLocker struct {
	rs    *redsync.Redsync
	opts  []redsync.Option
	key   string
	mutex *redsync.Mutex // reused while the key stays the same, as redsync's examples do
}

func (l *redsyncLocker) Lock(ctx context.Context, key string) error {
	if l.mutex == nil || key != l.key {
		l.key, l.mutex = key, l.rs.NewMutex(key, l.opts...)
	}
	for {
		err := l.mutex.LockContext(ctx)
		if err == nil {
			return nil
		}
		// LockContext gives up after its tries (ErrFailed, or ErrTaken on the
		// last one); a caller that must have the lock asks again.
		if ctx.Err() != nil {
			return err
		}
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			return err
		}
	}
}

func (l *redsyncLocker) Unlock(ctx context.Context) error {
	ok, err := l.mutex.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock did not delete the lock")
	}
	return err
}

func redsyncImpl(name string, opts ...redsync.Option) impl {
	opts = append([]redsync.Option{redsync.WithExpiry(ttl)}, opts...)
	return impl{
		name:   name,
		shared: func(rdb *redis.Client) any { return redsync.New(goredis.NewPool(rdb)) },
		locker: func(_ *redis.Client, s any) locker { return &redsyncLocker{rs: s.(*redsync.Redsync), opts: opts} },
		waits:  true,
	}
}

// ---- raw go-redis baselines ----

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

// deadlineLocker gives each Lock and Unlock a context with a 3 s
// deadline, as a service's request handler has. Without go-redis's
// ContextTimeoutEnabled, redlease keeps such a deadline by sending the
// request on a goroutine; go-redis itself, and so bsm/redislock, ignores
// it.
type deadlineLocker struct{ in locker }

func (l deadlineLocker) Lock(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return l.in.Lock(ctx, key)
}

func (l deadlineLocker) Unlock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return l.in.Unlock(ctx)
}

// trips is the inner locker's counter, if it has one.
func (l deadlineLocker) trips() *atomic.Int64 {
	if tc, ok := l.in.(tripCounter); ok {
		return tc.trips()
	}
	return nil
}

func (l deadlineLocker) close(ctx context.Context) {
	if c, ok := l.in.(interface{ close(context.Context) }); ok {
		c.close(ctx)
	}
}

// withDeadline is in, named name, with a 3 s deadline on each call;
// timeouts asks for go-redis's ContextTimeoutEnabled.
func withDeadline(name string, in impl, timeouts bool) impl {
	inner := in.locker
	in.name, in.timeouts = name, timeouts
	in.locker = func(rdb *redis.Client, s any) locker { return deadlineLocker{inner(rdb, s)} }
	return in
}

var lockerSeq atomic.Uint64

func uniqueBase() string {
	return fmt.Sprintf("bench-%d-%d:", os.Getpid(), lockerSeq.Add(1))
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

// close ends the Client's background work; used where each contender has
// its own Client.
func (l *redleaseLocker) close(ctx context.Context) { _ = l.c.Close(ctx) }
