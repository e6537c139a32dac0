package fencing

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/shared"
	"github.com/redlease/redlease/internal/wire"
)

// Store is where an HTTPGuard keeps the newest fence accepted per
// resource.
type Store interface {
	// Admit applies the fencing rule to fence and owner for resource: it
	// accepts them iff fence > newest, or fence == newest and owner is the
	// owner recorded with newest (or nothing is recorded yet), and then
	// records them as the resource's newest. Refusing, it returns a
	// *StaleFenceError and records nothing. Accepting, it returns done, which
	// the caller calls exactly once when the write it admitted is over; a
	// store may hold the resource for that write until then.
	Admit(ctx context.Context, resource string, fence int64, owner string) (done func(), err error)
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// MemoryStore is a Store in the memory of one process: for a single
// gateway in front of a service that cannot check fences itself (a legacy
// system, an object store). It admits one request per resource at a time: a
// request's Admit waits while another admitted request of the same resource is
// still being handled, until its done is called. The check, the record and
// the handler's write to the service are therefore atomic within the process,
// and the service sees a resource's writes in an order in which the fences
// never go back.
//
// Its guarantees hold only while every write to the service passes through
// this one process, and only for as long as the process lives: a restart
// forgets every fence (a new gateway accepts a stale holder that comes back
// before the current one writes again), and a second gateway process has
// fences of its own. A handler that returns before its write is done (a
// write handed to a background goroutine) escapes the serialisation. It
// keeps one small entry per resource ever seen, for the life of the process;
// with ResourceOf unset, clients choose the resource names.
//
// The zero value is an empty store, ready for use. It must not be copied
// after first use.
type MemoryStore struct {
	mu sync.Mutex
	m  map[string]*memFence
}

// memFence is one resource's entry. turn holds a value while a request of the
// resource is admitted; newest and owner are read and written only by the
// goroutine that holds it.
type memFence struct {
	turn   chan struct{}
	newest int64
	owner  string
}

// Admit implements Store. It waits for the resource's turn until ctx
// ends, and then returns an error that matches ctx.Err(). It returns
// an error matching redlease.ErrInvalidArgument for an empty resource or
// owner or a fence below 1.
func (s *MemoryStore) Admit(ctx context.Context, resource string, fence int64, owner string) (func(), error) {
	if s == nil {
		return nil, invalidf("nil MemoryStore")
	}
	if err := checkResource(resource); err != nil {
		return nil, err
	}
	if err := checkToken(fence, owner); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*memFence)
	}
	e := s.m[resource]
	if e == nil {
		e = &memFence{turn: make(chan struct{}, 1)}
		s.m[resource] = e
	}
	s.mu.Unlock()

	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, shared.Errorf("waiting for %s: %w", quote(resource), context.Cause(ctx))
	}
	if !admits(fence, owner, e.newest, e.owner) {
		err := &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: e.newest, NewestOwner: e.owner}
		<-e.turn
		return nil, err
	}
	e.newest, e.owner = fence, owner
	return sync.OnceFunc(func() { <-e.turn }), nil
}

// admitScript records an admitted fence and does nothing else.
var admitScript = NewScript("return 1")

// RedisStore is a Store in Redis, for several gateway processes in
// front of one service: each Admit is one Lua script that checks the fence
// against the record of the resource and records it, atomically, so no two
// gateways admit the same fence from two owners, and none admits a fence
// after a newer one was recorded. The record of resource R is a hash {fence,
// owner} at "<prefix>{R}:accepted", without a TTL (prefix:
// redlease.DefaultPrefix, or WithPrefix); Forget removes it.
//
// What it does not make atomic is the check with the write to the service:
// done is a no-op and requests are not serialised. A request admitted with
// fence 33 may still be on its way to the service when a request with 34 is
// admitted and written, and then 33's write lands after 34's. It stops every
// stale request that arrives after a newer one was admitted, not one that was
// admitted first and is slow. Use it where the service's writes are quick
// next to the lease TTL and a late one does no harm, or make the service check
// fences itself; for strict ordering, send all writes of a resource through
// one gateway with a MemoryStore. The records are as durable as that
// Redis: a failover or a restart without persistence can lose them, and
// records lost let a stale holder through.
type RedisStore struct {
	conn   *wire.Conn
	prefix string
	err    error // a nil client or an invalid prefix, returned by Admit
}

// NewRedisStore returns a store that keeps its records through rdb: a
// plain, Sentinel (failover) or cluster go-redis client, the leases' Redis or
// another. A nil rdb makes Admit return an error matching
// redlease.ErrInvalidArgument. Of the options, WithPrefix applies. Gateways in
// front of one service must agree on it: each prefix is a record of its own.
// A prefix with a '{' makes Admit fail the same way: the record of resource R
// is <prefix>{R}:accepted, and the braces must delimit R, or two prefixes
// could share records. HTTPGuard.Wrap panics on a store made either way.
func NewRedisStore(rdb redis.UniversalClient, opts ...Option) *RedisStore {
	c, err := conn(rdb)
	return newRedisStore(c, err, opts)
}

// NewRedisStoreWithDriver is NewRedisStore on any client's driver (the
// modules rueidislease and valkeylease have one for rueidis and valkey-go).
func NewRedisStoreWithDriver(d driver.Driver, opts ...Option) *RedisStore {
	c, err := connOn(d)
	return newRedisStore(c, err, opts)
}

func newRedisStore(c *wire.Conn, err error, opts []Option) *RedisStore {
	s := &RedisStore{conn: c, prefix: newConfig(opts).prefix, err: err}
	if err == nil && strings.Contains(s.prefix, "{") {
		s.err = invalidf("key prefix %q holds a '{'", s.prefix)
	}
	return s
}

// Admit implements Store in one round trip once its script is cached on the
// server (the first call sends EVALSHA, then EVAL). Besides a *StaleFenceError
// it returns an error matching redlease.ErrInvalidArgument for an empty
// resource or owner, or a fence outside 1..MaxFence, and errors of the
// request (matching redlease.ErrOutcomeUnknown when the fence may have been
// recorded).
func (s *RedisStore) Admit(ctx context.Context, resource string, fence int64, owner string) (func(), error) {
	switch {
	case s == nil:
		return nil, invalidf("nil RedisStore")
	case s.err != nil:
		return nil, s.err
	}
	if err := checkResource(resource); err != nil {
		return nil, err
	}
	if _, err := runFenced(ctx, s.conn, admitScript.s, resource, s.record(resource), nil, fence, owner, nil); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// configError is the error every Admit of s returns whatever its arguments,
// or nil: HTTPGuard.Wrap refuses such a store.
func (s *RedisStore) configError() error { return s.err }

// record is the key of resource's record.
func (s *RedisStore) record(resource string) string { return s.prefix + "{" + resource + "}:accepted" }

// Forget removes the record of resource, for a resource that is gone for
// good: once it is removed, the next Admit admits any fence.
func (s *RedisStore) Forget(ctx context.Context, resource string) error {
	switch {
	case s == nil:
		return invalidf("nil RedisStore")
	case s.err != nil:
		return s.err
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	return forget(ctx, s.conn, resource, s.record(resource))
}
