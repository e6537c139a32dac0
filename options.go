package redlease

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/wire"
)

// Defaults of the options below.
const (
	// DefaultTTL is the lease TTL when WithTTL is not given.
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL a lease takes. A shorter one leaves a
	// local lifetime (TTL less the drift allowance and the safety margin)
	// that an acquire's round trip may outlast, and a lease whose reply
	// arrives after its local deadline is never handed out.
	MinTTL = 10 * time.Millisecond
	// DefaultPrefix starts every key redlease writes.
	DefaultPrefix = "redlease:"
	// DefaultReleaseTimeout bounds Release when WithReleaseTimeout is not given.
	DefaultReleaseTimeout = 5 * time.Second
	// DriftFactor is the rate ρ by which the local monotonic clock and the
	// Redis server's clock are assumed to differ at most. The local deadline of
	// a lease is shortened by TTL·ρ (Redlock uses the same 1 %).
	DriftFactor = 0.01
)

// Option configures a Client: New and NewWithDriver take them. Every
// LeaseOption and WaitOption is an Option too, which sets the default of
// every lease of the Client; an acquire call's options override the
// defaults for its lease. An option that a call does not honour does not
// compile there: WithCombinedRequests is an Option only, WithMaxWait a
// WaitOption (the Try… calls never wait).
type Option interface {
	apply(*config)
}

// WaitOption configures an acquire call that waits for a busy lease
// (Acquire, AcquireAll, Do, AcquireSemaphore, AcquireRead, AcquireWrite, an
// Election's Campaign), or as an Option the default of New. Every
// LeaseOption is one.
type WaitOption interface {
	Option
	waits()
}

// LeaseOption configures any acquire call, waiting or not, or as an Option
// the default of New.
type LeaseOption interface {
	WaitOption
	leases()
}

// clientOption is an Option only; waitOption a WaitOption, leaseOption a
// LeaseOption.
type (
	clientOption func(*config)
	waitOption   struct{ clientOption }
	leaseOption  struct{ waitOption }
)

func (o clientOption) apply(c *config) { o(c) }
func (waitOption) waits()              {}
func (leaseOption) leases()            {}

func forLease(f func(*config)) LeaseOption { return leaseOption{waitOption{f}} }

// applyAll applies opts to c in order, skipping nil ones.
func applyAll[O Option](c *config, opts []O) {
	for _, o := range opts {
		if any(o) != nil {
			o.apply(c)
		}
	}
}

type config struct {
	ttl            time.Duration
	autoRenew      bool
	prefix         string
	renewInterval  time.Duration // 0: ttl/3
	safetyMargin   time.Duration
	marginSet      bool // false: ttl/10
	releaseTimeout time.Duration
	maxWait        time.Duration // 0: until ctx ends
	maxOutage      time.Duration // 0: until ctx ends
	outageSet      bool          // false: maxOutage is the TTL
	maxHold        time.Duration // 0: no limit
	lockDelay      time.Duration // Redis keeps a lease this much longer than its TTL, until released
	fair           bool
	observers      []Observer
	replicas       int
	replicaTimeout time.Duration
	fences         FenceSource // nil: the Redis counter
	holder         string
	uncombined     bool        // WithCombinedRequests(false); only a Client's options set it
	clk            clock.Clock // the Client's; only New's options set it
	quietBreak     bool        // Break tells no holder (redleasetest's Expire and Steal); only New's options set it
	term           bool        // an election's term: its acquire and renewals carry the handover key (asTerm)
	ttlArg         string      // ttl plus lockDelay in ms, as the scripts take it; set by validate
}

func defaultConfig() config {
	return config{
		ttl:            DefaultTTL,
		autoRenew:      true,
		prefix:         DefaultPrefix,
		releaseTimeout: DefaultReleaseTimeout,
		holder:         DefaultHolder(),
		clk:            clock.Real,
	}
}

func init() {
	// redleasetest runs a Client on a fake clock through this hook.
	clock.Option = func(c clock.Clock) any { return Option(clientOption(func(cfg *config) { cfg.clk = c })) }
	clock.Quiet = func(c any) bool { return c.(*Client).quiet() }
	clock.Unobserved = func() any { return Option(clientOption(func(cfg *config) { cfg.observers = nil })) }
	clock.QuietBreaks = func() any { return Option(clientOption(func(cfg *config) { cfg.quietBreak = true })) }
}

// MaxHolder is the longest holder description, in bytes (WithHolder).
const MaxHolder = 1024

// DefaultHolder is the holder description of a lease taken without
// WithHolder: "<host name> pid <process id>".
func DefaultHolder() string { return defaultHolder() }

var defaultHolder = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + " pid " + strconv.Itoa(os.Getpid())
})

// WithHolder sets the description of the lease's holder, which Redis keeps
// in the lease itself (no extra key, no extra round trip) for operators and
// other owners to read: Status.Holder, BusyError.Holder, Election.Leader,
// and the redlease command's status and list. "" sets none. It may hold any
// text up to MaxHolder bytes but a NUL; it is not secret, so put no
// credentials in it. Default DefaultHolder() (host and pid); the redlease command adds the
// command it runs.
func WithHolder(desc string) LeaseOption { return forLease(func(c *config) { c.holder = desc }) }

// WithCombinedRequests turns the combining of concurrent requests on or
// off. On (the default), while a Client has 8 requests in flight that
// could have queued (16 for a Client of NewWithDriver: rueidis and valkey-go
// pipeline concurrent requests by themselves, and gain from it only under
// heavier load), the calls that other goroutines make queue, and go out
// together in one pipeline (the driver's EvalMany) when one of those
// returns: fewer system calls on both sides, so more leases per second under
// load, for up to one request's time more per call. A queued call leaves the
// queue unsent when its context ends. Where the client ends a request at its
// context's deadline (rueidis, valkey-go, go-redis with
// ContextTimeoutEnabled) each call keeps its deadline: the call with the
// latest deadline sends the batch under it, and the others stop waiting at
// their own. Off, every call is a request of its own.
func WithCombinedRequests(on bool) Option {
	return clientOption(func(c *config) { c.uncombined = !on })
}

// WithTTL sets the lease TTL: how long Redis keeps a lease that is not
// renewed, and so how long a crashed holder blocks the resource. It must be a
// whole number of milliseconds (Redis stores expiries in ms), at least
// MinTTL (10 ms). Default DefaultTTL (30 s). The README's "Choosing a TTL"
// weighs it.
func WithTTL(d time.Duration) LeaseOption { return forLease(func(c *config) { c.ttl = d }) }

// WithAutoRenew turns the watchdog on or off. On (the default), the Client
// renews the lease every renew interval until it is released or lost. Off,
// the lease context ends at the lease's local deadline unless Refresh extends it.
func WithAutoRenew(on bool) LeaseOption { return forLease(func(c *config) { c.autoRenew = on }) }

// WithPrefix sets the prefix of every key (see keys.go for the layout): a
// resource R uses keys <prefix>{R}:<kind>, and the fence counter of R's hash
// slot, all in one Redis Cluster hash slot; so the prefix may not contain a
// brace, nor R begin with '}'. Default DefaultPrefix ("redlease:"). Leases
// taken with different prefixes do not exclude each other. The guards of
// package fencing have an option of their own (fencing.WithPrefix) for the
// keys of their fence records.
func WithPrefix(p string) LeaseOption { return forLease(func(c *config) { c.prefix = p }) }

// WithRenewInterval sets how often the watchdog renews a lease. It must be
// at least 1 ms and shorter than the lease's local lifetime (see
// WithSafetyMargin). Default TTL/3 (so an auto-renewed lease needs a TTL of
// at least 3 ms).
func WithRenewInterval(d time.Duration) LeaseOption {
	return forLease(func(c *config) { c.renewInterval = d })
}

// WithSafetyMargin sets how much earlier than the TTL, on top of the clock
// drift allowance TTL·DriftFactor, the lease context ends when no renewal was
// confirmed: the holder's time to notice and stop before Redis can hand the
// resource to someone else. The local lifetime of a lease is
// TTL − TTL·DriftFactor − margin, counted from the moment the last confirmed
// acquire or renew request was sent. It must be at least 0 and leave a
// positive lifetime. Default TTL/10.
func WithSafetyMargin(d time.Duration) LeaseOption {
	return forLease(func(c *config) { c.safetyMargin, c.marginSet = d, true })
}

// WithReleaseTimeout bounds each Release call. Release ignores the
// cancellation of the context it is given (it is often the lease's own,
// already ended context) and uses this timeout instead. Default
// DefaultReleaseTimeout (5 s); at least 1 ms. Like every deadline, it bounds a request
// already on the network only if the go-redis client has
// ContextTimeoutEnabled.
func WithReleaseTimeout(d time.Duration) LeaseOption {
	return forLease(func(c *config) { c.releaseTimeout = d })
}

// WithMaxWait bounds how long Acquire waits for a busy lease; then it
// returns an error matching ErrNotAcquired and context.DeadlineExceeded.
// It must be 0 or at least 1 ms. Default 0: until the context ends. The
// Try… calls never wait, and do not take it.
func WithMaxWait(d time.Duration) WaitOption { return waitOption{func(c *config) { c.maxWait = d }} }

// WithMaxOutage bounds how long an acquire that waits (Acquire, Campaign,
// …) rides out a Redis outage: once none of its requests has had an
// answer for d, it returns an error matching ErrUnavailable that names the
// address and the last error. d = 0 rides an outage out until the
// context ends; otherwise it must be at least 1 ms. Default: the lease's
// TTL, so that a Redis that is down, or an address that is wrong, ends the
// call instead of leaving it waiting forever on a context without a
// deadline. The Try… calls never ride an outage out: their request is not
// sent into one (ErrUnavailable at once).
func WithMaxOutage(d time.Duration) WaitOption {
	return waitOption{func(c *config) { c.maxOutage, c.outageSet = d, true }}
}

// WithMaxHold bounds how long a lease is held in total: the watchdog stops
// renewing, and the lease context ends with cause ErrMaxHold, d after the
// acquire request was sent. A holder that is alive but stuck cannot keep the
// resource forever; unless it releases, the lease expires in Redis at most one
// TTL after d. It must be 0 or at least 1 ms. Default 0: no limit.
func WithMaxHold(d time.Duration) LeaseOption { return forLease(func(c *config) { c.maxHold = d }) }

// WithLockDelay makes a lease block its resource for d after it ends
// without a Release (Consul's and Chubby's lock-delay): when its holder
// stops renewing it (a crash, a pause, a partition, WithMaxHold), nobody
// can take the resource until d after the lease's TTL ran out in Redis. A
// Release frees the resource at once, as always.
//
// It is for resources that cannot check a fence: a third-party API, a
// child process of redlease run, a file on a shared disk. A holder that
// paused past its TTL does not yet know that it lost the lease; the delay
// gives it d to find out (its context has ended by then) before a new
// holder starts. It does not make such a resource safe (a holder may stall
// longer than d), only less often unsafe; a fenced resource does not need
// it. The price: a crashed holder blocks the resource for TTL + d instead
// of the TTL.
//
// It works by asking Redis to keep the lease TTL + d after every acquire
// and renewal, while the holder's local deadline still counts from the TTL.
// So Status.Remaining and a BusyError's time left include d, and waiters
// wait it out. Client.Break honours it too (Redis keeps d in the lease's
// value): a broken lease keeps the resource for d from the break, and a
// second Break frees it. d must be 0 (the default: none) or a whole number
// of milliseconds.
func WithLockDelay(d time.Duration) LeaseOption {
	return forLease(func(c *config) { c.lockDelay = d })
}

// WithFair makes Acquire hand the lease to waiters in arrival order: a free
// lease goes to the first live waiter in the resource's queue, and TryAcquire
// fails while anyone is queued. Fairness holds only among acquirers that all
// use WithFair; others still take a free lease at once. A waiter that
// vanishes without leaving (a crashed process) holds up the queue for at most
// 3 s. Default off: a free lease goes to whoever asks first, and release
// still wakes only the first waiter.
func WithFair(on bool) LeaseOption { return forLease(func(c *config) { c.fair = on }) }

// WithReplicaAck makes an acquisition wait, in the same round trip, until n
// replicas have acknowledged the new lease and its fence (Redis WAIT), for at
// most timeout. If fewer do, the lease is released by owner and the acquire
// fails with an error matching ErrNotAcquired and ErrNotReplicated.
//
// What it narrows: a master that fails right after granting a lease can no
// longer hand the same fence, or the same resource, out again through a
// promoted replica that never saw the grant — as long as the promoted replica
// is one that acknowledged. What it cannot promise: WAIT is not consensus.
// The replica that acknowledged may not be the one promoted; an acknowledged
// write can still be lost if replicas lose it (no AOF fsync); renewals are not
// waited for, so after a failover a lease may expire up to one renew interval
// before its holder's local deadline. Fence checks at the resource remain the
// safety net. timeout must be below the lease's local lifetime (a longer WAIT
// would outlive the lease) and the Redis client's read timeout. Default
// n = 0: no waiting.
func WithReplicaAck(n int, timeout time.Duration) LeaseOption {
	return forLease(func(c *config) { c.replicas, c.replicaTimeout = n, timeout })
}

// WithFenceSource draws each lease's fence from src instead of the Redis
// counter, for fences that must keep rising across a Redis failover or a
// restart without persistence (a PostgreSQL sequence: fencing.Sequence). The
// fence is drawn right after the lease is taken and recorded in it while it
// is still ours, one more round trip to Redis and one to the source; if
// either fails, the lease is released and the acquire fails. The Redis
// counter still counts acquisitions. It applies to exclusive leases only
// (Acquire, TryAcquire, AcquireAll): shared leases refuse it. Default: the
// Redis counter, incremented inside the acquire script.
func WithFenceSource(src FenceSource) LeaseOption {
	return forLease(func(c *config) { c.fences = src })
}

// outage is how long an acquire that waits rides out an outage; 0: until
// its context ends.
func (c *config) outage() time.Duration {
	if !c.outageSet {
		return c.ttl
	}
	return c.maxOutage
}

func (c *config) margin() time.Duration {
	if !c.marginSet {
		return c.ttl / 10
	}
	return c.safetyMargin
}

// lifetime is how long after sending a confirmed acquire or renew the lease
// is considered held locally.
func (c *config) lifetime() time.Duration {
	return c.ttl - time.Duration(float64(c.ttl)*DriftFactor) - c.margin()
}

// leaseTail is the end of an exclusive lease's value: the holder's
// description, and the lock delay for break.lua to honour.
func (c *config) leaseTail() string { return wire.LeaseTail(c.holder, c.lockDelay.Milliseconds()) }

func (c *config) interval() time.Duration {
	if c.renewInterval == 0 {
		return c.ttl / 3
	}
	return c.renewInterval
}

// nextRenewal is when the watchdog renews a lease again after a confirmed
// renewal that fell due at due and was sent at sent. The watchdog sends what
// falls due within a tenth of an interval together, so a renewal often goes
// early; the next then falls due an interval after this one was due, which
// keeps the lease's cadence. Counted from the send time, every interval
// would pull leases taken together earlier: at 100,000 leases (the bench
// module's scale part) that sent 7 % more renewals than the interval asks
// for. The next renewal is put off by at most a quarter of the time that
// the lifetime leaves after the interval, so that an interval set close to
// the lifetime (WithRenewInterval) keeps three quarters of that time for
// the renewal to be confirmed.
func (c *config) nextRenewal(sent, due time.Time) time.Time {
	next := sent.Add(c.interval())
	if early := due.Sub(sent); early > 0 {
		next = next.Add(min(early, (c.lifetime()-c.interval())/4))
	}
	return next
}

func (c *config) validate() error {
	c.ttlArg = wire.Millis((c.ttl + c.lockDelay).Milliseconds())
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		// The braces around the resource name must be the keys' hash tag.
		return invalidf("key prefix %q contains a brace", c.prefix)
	case c.ttl < MinTTL:
		return invalidf("TTL %v is below MinTTL (%v): its local lifetime could not outlast an acquire's round trip", c.ttl, MinTTL)
	case c.ttl%time.Millisecond != 0:
		return invalidf("TTL %v is not a whole number of milliseconds", c.ttl)
	case c.safetyMargin < 0:
		return invalidf("safety margin %v is negative", c.safetyMargin)
	case c.lifetime() <= 0:
		return invalidf("safety margin %v leaves no lifetime of TTL %v", c.margin(), c.ttl)
	case c.renewInterval < 0:
		// With the TTL at least 1ms, interval() is now positive: TTL/3 is at
		// least 333µs, and a set interval is above 0.
		return invalidf("renew interval %v is negative", c.renewInterval)
	case c.interval() >= c.lifetime():
		return invalidf("renew interval %v is not below the lease's local lifetime %v (TTL %v)",
			c.interval(), c.lifetime(), c.ttl)
	case c.autoRenew && c.interval() < time.Millisecond:
		// Redis counts TTLs in ms; renewing faster is a busy loop of round
		// trips (a 1 ns interval sent 7,000 renewals per 500 ms).
		return invalidf("renew interval %v (default TTL/3) is below 1ms", c.interval())
	case c.releaseTimeout < time.Millisecond:
		return invalidf("release timeout %v is below 1ms", c.releaseTimeout)
	case c.maxWait < 0 || c.maxWait > 0 && c.maxWait < time.Millisecond:
		return invalidf("max wait %v is not 0 or at least 1ms", c.maxWait)
	case c.maxOutage < 0 || c.maxOutage > 0 && c.maxOutage < time.Millisecond:
		return invalidf("max outage %v is not 0 or at least 1ms", c.maxOutage)
	case c.lockDelay < 0 || c.lockDelay%time.Millisecond != 0:
		return invalidf("lock delay %v is not 0 or a whole number of milliseconds", c.lockDelay)
	case c.maxHold < 0 || c.maxHold > 0 && c.maxHold < time.Millisecond:
		return invalidf("max hold %v is not 0 or at least 1ms", c.maxHold)
	case len(c.holder) > MaxHolder:
		return invalidf("holder description of %d bytes is over MaxHolder (%d)", len(c.holder), MaxHolder)
	case strings.IndexByte(c.holder, 0) >= 0:
		// A NUL ends a lease value that a waiter marked (internal/wire/lua/acquire.lua).
		return invalidf("holder description %q holds a NUL byte", c.holder)
	case c.replicas < 0:
		return invalidf("replica count %d is negative", c.replicas)
	case c.replicas > 0 && c.replicaTimeout < time.Millisecond:
		return invalidf("replica ack timeout %v is below 1ms", c.replicaTimeout)
	case c.replicas > 0 && c.replicaTimeout >= c.lifetime():
		// A WAIT that runs out would always return after the lease's local
		// deadline, and the lease would be given up anyway.
		return invalidf("replica ack timeout %v is not below the lease's local lifetime %v", c.replicaTimeout, c.lifetime())
	}
	return nil
}
