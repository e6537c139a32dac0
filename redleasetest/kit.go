package redleasetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/embedded"
)

// Kit is an embedded Redis, the redlease Clients of a test on it, and the
// clock they share. Make one per test with New. Its methods fail the test
// (tb.Fatal) when the embedded Redis does not do what they ask.
type Kit struct {
	tb   testing.TB
	mr   *miniredis.Miniredis
	clk  *clock.Fake
	opts []redlease.Option // New's

	rdb   *redis.Client // the test's own (Redis)
	own   *redis.Client // other's
	gate  gate          // on the connections of the Kit's Clients
	c     *redlease.Client
	other *redlease.Client // the other owner of Steal, and the Kit's reads and Expire

	mu   sync.Mutex // the helpers take turns
	down bool       // between Outage and Restore

	cmu     sync.Mutex
	clients []*redlease.Client // every Client on clk
	rdbs    []*redis.Client    // every Redis client, rdb and own first
}

// OtherHolder is the holder description (redlease.Status.Holder) of the
// leases that Steal takes for another owner.
const OtherHolder = "redleasetest: another owner"

// patience bounds, in real time, each wait of the Kit's: for the Clients
// to settle after a step of the clock, for a request, for Redis to answer
// again after Restore.
const patience = 5 * time.Second

// New starts an embedded Redis for tb and returns a Kit whose Client is
// made with opts (the defaults of redlease.New without them), on the Kit's
// clock. The clock reads the real time when New is called and then moves
// only with FastForward. When tb ends, the Kit closes its Clients (which
// releases their leases), its Redis clients and the embedded Redis.
func New(tb testing.TB, opts ...redlease.Option) *Kit {
	tb.Helper()
	mr := miniredis.NewMiniRedis()
	if err := embedded.Start(mr); err != nil {
		tb.Fatalf("redleasetest: starting the embedded Redis: %v", err)
	}
	start := time.Now().Round(0) // no monotonic reading: the clock is the Kit's
	mr.SetTime(start)
	mr.ClockTTL(true) // Redis's TTLs run on SetTime's clock, which follows the Kit's
	addr := mr.Addr()
	k := &Kit{
		tb:   tb,
		mr:   mr,
		clk:  clock.NewFake(start),
		opts: slices.Clone(opts),
		rdb:  redis.NewClient(redisOptions(addr)),
		own:  redis.NewClient(redisOptions(addr)),
	}
	k.rdbs = []*redis.Client{k.rdb, k.own}
	tb.Cleanup(k.close)
	other := append(slices.Clone(k.opts), clock.Unobserved().(redlease.Option),
		clock.QuietBreaks().(redlease.Option), redlease.WithHolder(OtherHolder))
	k.other = k.newClient(k.own, other)
	k.c = k.newClient(nil, k.opts)
	return k
}

// redisOptions are those of the Kit's Redis clients: go-redis's defaults,
// but that a refused connection fails at once. go-redis waits between its
// redials and retries in real time, which would only slow a test down: it
// does not age a lease on the Kit's clock. (go-redis still retries each
// request three times; and after as many failed dials as PoolSize it
// refuses requests until a redial, once a second, succeeds: see Restore.)
func redisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:            addr,
		DialerRetries:   1,
		MinRetryBackoff: -1,
		MaxRetryBackoff: -1,
		PoolSize:        1000, // more failed dials before go-redis stops dialling
	}
}

// Client returns the Kit's Client, made with New's options, on the Kit's
// clock and the embedded Redis.
func (k *Kit) Client() *redlease.Client { return k.c }

// NewClient returns another Client on the embedded Redis and the Kit's
// clock, with a Redis client of its own, made with New's options followed
// by opts: a second worker, process or host. The Kit closes it when the
// test ends.
func (k *Kit) NewClient(opts ...redlease.Option) *redlease.Client {
	return k.newClient(nil, append(slices.Clone(k.opts), opts...))
}

// newClient makes a Client on the Kit's clock, through rdb, or (nil) a
// Redis client of its own whose requests go through the gate.
func (k *Kit) newClient(rdb *redis.Client, opts []redlease.Option) *redlease.Client {
	k.cmu.Lock()
	defer k.cmu.Unlock()
	if rdb == nil {
		rdb = redis.NewClient(redisOptions(k.addr()))
		rdb.AddHook(&k.gate)
		k.rdbs = append(k.rdbs, rdb)
	}
	c := redlease.New(rdb, append(opts, clock.Option(k.clk).(redlease.Option))...)
	k.clients = append(k.clients, c)
	return c
}

// addr is the embedded Redis's address, the same after a Restore.
func (k *Kit) addr() string { return k.rdb.Options().Addr }

// redisClients returns every Redis client of the Kit's.
func (k *Kit) redisClients() []*redis.Client {
	k.cmu.Lock()
	defer k.cmu.Unlock()
	return slices.Clone(k.rdbs)
}

// Redis returns a client of the embedded Redis for the test's own use: to
// read and write its data, or to make a fencing guard on it. The Kit's
// Clients have Redis clients of their own.
func (k *Kit) Redis() redis.UniversalClient { return k.rdb }

// Now returns the time on the Kit's clock: the time of the leases'
// deadlines (redlease.Lease.Deadline) and of the embedded Redis.
func (k *Kit) Now() time.Time { return k.clk.Now() }

// Status returns what Redis holds for resource (redlease.Client.Inspect),
// read with New's options, so under their key prefix.
func (k *Kit) Status(resource string) redlease.Status {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.status("Status", resource)
}

func (k *Kit) status(op, resource string) redlease.Status {
	k.tb.Helper()
	k.up(op)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	st, err := k.other.Inspect(ctx, resource)
	if err != nil {
		k.tb.Fatalf("redleasetest: %s(%q): %v", op, resource, err)
	}
	return st
}

// AwaitWaiters returns once at least n acquire calls wait for resource in
// Redis's queue and the Kit's Clients have settled, so that every waiting
// call of theirs is asleep on the Kit's clock: then FastForward moves them
// on. Start the acquire calls on goroutines of their own, then call it.
// The count may include a waiter that gave up less than 3 s ago (see
// redlease.Status.Waiters).
//
// Redis's clock stands still between steps of the Kit's, and it orders a
// queue by arrival time: calls that queue at one instant are in no
// particular order among themselves. To test that fair waiters are served
// in arrival order, FastForward a millisecond after each arrival.
func (k *Kit) AwaitWaiters(resource string, n int) {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	deadline := time.Now().Add(patience)
	for k.status("AwaitWaiters", resource).Waiters < int64(n) {
		if time.Now().After(deadline) {
			k.tb.Fatalf("redleasetest: AwaitWaiters(%q, %d): fewer waiters after %v", resource, n, patience)
		}
		time.Sleep(time.Millisecond)
	}
	k.settle("AwaitWaiters")
}

// up fails the test if Redis is down (Outage): op needs it.
func (k *Kit) up(op string) {
	k.tb.Helper()
	if k.down {
		k.tb.Fatalf("redleasetest: %s: the embedded Redis is down (Outage); Restore it first", op)
	}
}

// close is the Kit's cleanup.
func (k *Kit) close() {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	k.cmu.Lock()
	clients := slices.Clone(k.clients)
	k.cmu.Unlock()
	for _, c := range clients {
		_ = c.Close(ctx) // a release that fails is the TTL's to clean up
	}
	for _, rdb := range k.redisClients() {
		_ = rdb.Close()
	}
	k.mr.Close()
}
