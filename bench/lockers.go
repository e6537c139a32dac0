package main

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// closeLocker closes the library client that l was made from (its
// connections and goroutines), where l's row has one to close. Lockers made
// from one shared value share that client: close one of them.
func closeLocker(ctx context.Context, l locker) {
	if c, ok := l.(interface{ close(context.Context) }); ok {
		c.close(ctx)
	}
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

func (l deadlineLocker) close(ctx context.Context) { closeLocker(ctx, l.in) }

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

// close ends the Client's background work; used where each contender has
// its own Client.
func (l *redleaseLocker) close(ctx context.Context) { _ = l.c.Close(ctx) }
