package redlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/wire"
)

// TryAcquire takes the lease of resource if it is free, without waiting.
//
// If another owner holds it, TryAcquire returns a *BusyError, which matches
// ErrNotAcquired and says how long the holder's lease has left. If Redis did
// not answer (the request may or may not have taken effect), TryAcquire
// retries a few times with the same owner token, which the acquire script
// recognises, so a retry never creates a second holder or draws a second
// fence. If the outcome is still unknown, it returns an error matching both
// ErrNotAcquired and ErrOutcomeUnknown, after releasing by owner token (best
// effort, bounded by the release timeout, and sent in the background when
// ctx's deadline is nearer than that); the TTL removes a lease that the
// release could not reach.
//
// It returns within 50 ms of ctx's deadline (the time it gives a reply
// already on its way), even when Redis is silent and the go-redis client
// does not bound requests by their context (ContextTimeoutEnabled).
// The lease's context keeps the values of ctx but not its cancellation.
func (c *Client) TryAcquire(ctx context.Context, resource string, opts ...LeaseOption) (*Lease, error) {
	ls, err := c.acquire(ctx, []string{resource}, options(opts), false, kindExclusive, 0) // the slice does not escape
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// Acquire takes the lease of resource, waiting while another owner holds it,
// until it is acquired, ctx ends, or the wait limit (WithMaxWait) passes.
//
// A waiter does not poll. It queues itself in Redis and sleeps until the
// holder's Release hands it the lease (release hands it to one waiter, the
// first in the queue, with a new fence, and tells that one only), until the
// holder's lease would expire, or until a backoff timer with full jitter
// (25 ms growing to 1 s) fires, which bounds the cost of a lost message. A
// handed lease's local deadline counts from the waiter's last attempt before
// the release. Without WithFair, a free lease goes to whoever asks first,
// queued or not; with it, to the waiters in arrival order.
//
// A wait rides out a Redis outage, retrying with backoff; the observers
// (and WithLogger, at Warn) hear once that Redis cannot be reached
// (EventOutage) and once that it answers again (EventRecovered). When ctx
// ends first, Acquire leaves the queue and returns an error that matches
// both ErrNotAcquired and ctx.Err() and holds the last attempt's error, if
// Redis could not be reached (a refused connection matches
// syscall.ECONNREFUSED). It returns within 50 ms of ctx's deadline, as
// TryAcquire does; unknown outcomes are resolved as in TryAcquire, retrying
// with the same owner token for as long as ctx allows.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...WaitOption) (*Lease, error) {
	ls, err := c.acquire(ctx, []string{resource}, options(opts), true, kindExclusive, 0) // the slice does not escape
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// AcquireAll takes the leases of several resources, all or none, waiting as
// Acquire does. It returns them in the order of resources; each lease has its
// own fence, context and renewals, and is released on its own.
//
// When all keys share a Redis Cluster hash slot (always, without Cluster),
// one script takes every lease or none, in one round trip. Otherwise it
// takes them one by one in sorted order, so that two calls never wait for
// each other in a cycle, and releases those it took if one cannot be had.
// A resource named twice, and WithFair, are invalid here.
func (c *Client) AcquireAll(ctx context.Context, resources []string, opts ...WaitOption) ([]*Lease, error) {
	return c.acquire(ctx, resources, options(opts), true, kindExclusive, 0)
}

// TryAcquireAll is AcquireAll without waiting: if any resource is held, it
// takes none and returns a *BusyError naming it.
func (c *Client) TryAcquireAll(ctx context.Context, resources []string, opts ...LeaseOption) ([]*Lease, error) {
	return c.acquire(ctx, resources, options(opts), false, kindExclusive, 0)
}

// options returns opts as Options: the acquire calls' options of their
// own types. Without options, no slice.
func options[O Option](opts []O) []Option {
	if len(opts) == 0 {
		return nil
	}
	out := make([]Option, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// Do acquires the lease of resource (waiting as Acquire does), runs fn with
// the lease's context, and releases the lease on every path out of fn,
// panics included. It returns fn's error joined with the release error, so a
// lease that was lost while fn ran shows as ErrLeaseLost even when fn
// succeeded. fn should stop when its context ends.
func (c *Client) Do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, opts ...WaitOption) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, opts...)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, l.Release(ctx))
	}()
	return fn(l.Context(), l)
}

// maxUnknownRetries bounds how often TryAcquire repeats an acquire whose
// outcome it could not learn.
const maxUnknownRetries = 2

// acquisition is one acquire call: its resources, their keys and one owner
// token used for every attempt.
type acquisition struct {
	c         *Client
	cfg       *config
	resources []string
	owner     string // a UUID, the Client's id then random bits (newOwner)
	member    string // the owner's queue member, '<owner>/<client id>'; see internal/wire/lua/queue.lua
	names     []wire.Keys
	wait      bool
	queued    bool // an attempt may have put the owner in a queue
	sent      bool // an attempt may have reached Redis: the owner may hold a lease
	heard     bool // Redis answered an attempt: the acquire is not ErrUnavailable
	kind      leaseKind
	permits   int              // kindPermit: how many the semaphore has
	permit    int              // kindPermit: the one the attempt got
	sk        *wire.SharedKeys // a shared lease's keys
	// A wait that asks for a direct handoff (see waitState.claim): when its
	// stamps count from (zero: it asks for none), and the stamp of the
	// attempt being sent, in µs since then.
	base  time.Time
	stamp string

	// The storage of an acquisition of one resource, the common case, so
	// that the acquisition is one allocation.
	resource [1]string
	name     [1]wire.Keys
	fence    [1]int64
	lease    [1]*Lease
}

// acquire is every acquire call: it checks the options, runs the attempts
// (waiting or not) and reports to the observers.
//
// Model: model/redlease.pml, proctype Client, label acquire.
func (c *Client) acquire(ctx context.Context, resources []string, opts []Option, wait bool, kind leaseKind, permits int) ([]*Lease, error) {
	cfg, err := c.leaseConfig(resources, opts)
	if err != nil {
		return nil, err
	}
	if kind != kindExclusive && cfg.fences != nil {
		return nil, invalidf("WithFenceSource does not apply to shared leases")
	}
	if err := ctx.Err(); err != nil {
		return nil, notAcquired(resources[0], context.Cause(ctx))
	}
	if wait && cfg.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	if len(resources) > 1 && c.conn.Sharded() && !oneSlot(resources) {
		// One script cannot touch keys in several slots: take them one by
		// one (the key layout puts all of a resource's keys, its fence
		// counter included, in the slot of its name).
		return c.acquireInOrder(ctx, resources, opts, wait)
	}
	a := &acquisition{c: c, cfg: cfg, wait: wait, kind: kind, permits: permits}
	a.owner, a.member = newOwner(c.hub.id)
	if len(resources) == 1 {
		a.resource[0], a.name[0] = resources[0], wire.KeysOf(cfg.prefix, resources[0])
		a.resources, a.names = a.resource[:], a.name[:]
		if kind != kindExclusive {
			a.sk = wire.SharedKeysOf(cfg.prefix, resources[0])
		}
	} else {
		a.resources, a.names = slices.Clone(resources), make([]wire.Keys, len(resources))
		for i, r := range resources {
			a.names[i] = wire.KeysOf(cfg.prefix, r)
		}
	}
	var start time.Time // for the observers only: reading the clock is not free
	if len(cfg.observers) > 0 {
		start = c.clk.Now()
	}
	var leases []*Lease
	if wait {
		leases, err = a.waitFor(ctx)
	} else {
		leases, err = a.try(ctx)
	}
	if len(cfg.observers) > 0 {
		a.report(ctx, start, leases, err)
	}
	return leases, err
}

// oneSlot reports whether the keys of all resources are in one hash slot.
func oneSlot(resources []string) bool {
	s := wire.SlotOf(resources[0])
	for _, r := range resources[1:] {
		if wire.SlotOf(r) != s {
			return false
		}
	}
	return true
}

// newOwner returns a new owner token, a UUID (version 4), and its queue
// member, '<owner>/<client id>': one string, of which the owner is the
// head. The token's first 8 hex digits are the client id, when it is 8 hex
// digits (a hub's id, itself random), so that break.lua can tell the
// holder's Client of a Break (see Client.onBreak); its other 90 bits are
// random.
func newOwner(clientID string) (owner, member string) {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	var text [36]byte
	if isClientID(clientID) {
		copy(text[0:8], clientID)
	} else {
		hex.Encode(text[0:8], u[0:4])
	}
	hex.Encode(text[9:13], u[4:6])
	hex.Encode(text[14:18], u[6:8])
	hex.Encode(text[19:23], u[8:10])
	hex.Encode(text[24:36], u[10:16])
	text[8], text[13], text[18], text[23] = '-', '-', '-', '-'
	var b strings.Builder
	b.Grow(len(text) + 1 + len(clientID))
	b.Write(text[:])
	b.WriteByte('/')
	b.WriteString(clientID)
	member = b.String()
	return member[:len(text)], member
}

// isClientID reports whether s has the form of a hub's id: 8 hex digits in
// lower case, as an owner token begins.
func isClientID(s string) bool {
	return len(s) == 8 && isLowerHex(s)
}

// report sends the acquire events: one per lease taken, or one for the failure.
func (a *acquisition) report(ctx context.Context, start time.Time, leases []*Lease, err error) {
	end := a.c.clk.Now()
	if err != nil {
		e := Event{Kind: EventAcquire, Outcome: outcomeOf(err), Resource: a.resources[0], Start: start, End: end, Err: err}
		var busy *BusyError
		if errors.As(err, &busy) {
			e.Resource = busy.Resource
		}
		a.cfg.observe(ctx, e)
		return
	}
	for _, l := range leases {
		a.cfg.observe(ctx, Event{Kind: EventAcquire, Outcome: OutcomeOK, Resource: l.resource, Owner: l.owner,
			Fence: l.fence, Start: start, End: end})
	}
}

// acquireInOrder takes leases one by one, in sorted order of their names.
func (c *Client) acquireInOrder(ctx context.Context, resources []string, opts []Option, wait bool) ([]*Lease, error) {
	order := make([]int, len(resources))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(resources[i], resources[j]) })
	leases := make([]*Lease, len(resources))
	for _, i := range order {
		ls, err := c.acquire(ctx, resources[i:i+1], opts, wait, kindExclusive, 0)
		if err != nil {
			for _, l := range leases {
				if l != nil {
					_ = l.Release(ctx)
				}
			}
			return nil, err
		}
		leases[i] = ls[0]
	}
	return leases, nil
}

// try makes one attempt, repeated only while its outcome is unknown.
//
// Model: model/redlease.pml, inline again.
func (a *acquisition) try(ctx context.Context) ([]*Lease, error) {
	a.c.hub.calls.Add(1)
	defer a.c.hub.calls.Add(-1)
	bo := backoff{min: minBackoff, max: maxBackoff}
	var lastUnknown error // an earlier attempt's, whose lease may exist
	for attempt := 0; ; attempt++ {
		ls, err := a.attempt(ctx)
		if err == nil {
			return ls, nil
		}
		if errors.Is(err, ErrNotAcquired) {
			if lastUnknown != nil {
				// Busy now, but an earlier attempt of unknown outcome may
				// still be on its way and land: give back what it may take.
				a.undo(ctx)
			}
			return nil, err
		}
		if class := a.classify(err); class != driver.Unknown {
			if class == driver.NotSent {
				err = a.unavailable(nil, err)
			}
			if lastUnknown != nil {
				return nil, a.giveUp(ctx, err, lastUnknown)
			}
			return nil, notAcquired(a.resources[0], err)
		}
		lastUnknown = err
		if attempt >= maxUnknownRetries {
			return nil, a.giveUp(ctx, nil, err)
		}
		if serr := a.c.hub.sleep(ctx, nil, bo.next()); serr != nil {
			return nil, a.giveUp(ctx, serr, err)
		}
	}
}

// unreachableError is the error of an attempt that was never sent: the
// check before it, whether Redis answers, failed (see acquisition.send).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// classify is the driver's view of an attempt's error, except that an
// attempt that never left (an unreachableError) was not sent, and one that
// Redis refused for the name's kind (ErrWrongKind) was refused.
func (a *acquisition) classify(err error) driver.ErrorClass {
	var ue *unreachableError
	switch {
	case errors.As(err, &ue):
		return driver.NotSent
	case errors.Is(err, ErrWrongKind):
		return driver.Refused
	}
	return a.c.conn.Classify(err)
}
