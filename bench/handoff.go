package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// handoffLocker is the floor of a direct handoff, for the hot key: a release
// that finds a waiter gives the key to it in the same script (a new fence, a
// new TTL) and publishes to the waiter's own channel, so that the waiter
// holds the lock as soon as the message arrives, without the round trip in
// which redlease's woken waiter, and the peers', take the key. It keeps
// nothing else: no liveness of waiters (a waiter that is gone would hold the
// key until its TTL), no timeouts, no retried-release verdict; what it
// measures is the handoff that protocol could reach.
type handoffLocker struct {
	rdb  *redis.Client
	me   string
	ps   *redis.PubSub
	msgs <-chan *redis.Message
	key  string
}

// handoffAcquire takes a free key with a fence, or queues the caller.
// KEYS: lock, queue, fences; ARGV: owner, TTL in ms.
var handoffAcquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('INCR', KEYS[3])
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 0`)

// handoffRelease deletes the caller's key or gives it to the first waiter,
// with a new fence, and tells that waiter on its channel ("handoff:<owner>").
// KEYS: lock, queue, fences; ARGV: owner, TTL in ms.
var handoffRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local next = redis.call('LPOP', KEYS[2])
if not next then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], next, 'PX', ARGV[2])
redis.call('PUBLISH', 'handoff:' .. next, '1')
return 2`)

var handoffIDs atomic.Int64

func handoffImpl(name string) impl {
	return impl{
		name:   name,
		shared: func(*redis.Client) any { return nil },
		locker: func(rdb *redis.Client, _ any) locker {
			me := fmt.Sprintf("h%d", handoffIDs.Add(1))
			return &handoffLocker{rdb: rdb, me: me}
		},
		waits: true,
	}
}

func (l *handoffLocker) keys(key string) []string {
	return []string{"handoff:{" + key + "}:lock", "handoff:{" + key + "}:queue", "handoff:{" + key + "}:fences"}
}

func (l *handoffLocker) Lock(ctx context.Context, key string) error {
	if l.ps == nil { // subscribed before the first request that may queue it
		l.ps = l.rdb.Subscribe(ctx, "handoff:"+l.me)
		if _, err := l.ps.Receive(ctx); err != nil {
			return err
		}
		l.msgs = l.ps.Channel()
	}
	l.key = key
	got, err := handoffAcquire.Run(ctx, l.rdb, l.keys(key), l.me, ttlMS).Int()
	if err != nil || got == 1 {
		return err
	}
	select { // queued: the release that gives the key says so
	case <-l.msgs:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *handoffLocker) Unlock(ctx context.Context) error {
	n, err := handoffRelease.Run(ctx, l.rdb, l.keys(l.key), l.me, ttlMS).Int()
	if err == nil && n == 0 {
		err = errBusy
	}
	return err
}

func (l *handoffLocker) close(context.Context) {
	if l.ps != nil {
		_ = l.ps.Close()
	}
}
