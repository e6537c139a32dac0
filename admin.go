package redlease

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/wire"
)

// Administration: what an operator needs to see, and rarely to force.
//
// Inspect and Scan only read. Break removes a lease that its holder did not
// release; it is the one call here that can let two holders overlap, so it
// leaves the fence counter alone: the next holder's fence is larger than the
// removed one's, and a resource that checks fences rejects the old holder.

// Status is what Redis holds for one resource at one moment.
type Status struct {
	// Resource is the resource's name.
	Resource string
	// Held says that a lease of any kind holds the resource: its exclusive
	// lease, a permit of its semaphore, its write lease or a read lease.
	Held bool
	// Kind is the kind of lease the name is in use as (one name is one
	// kind's: ErrWrongKind): "lease" while its exclusive lease is held,
	// "semaphore" or "read/write" while leases of those kinds hold it or
	// wait for it, "" when none does.
	Kind string
	// Owner, Fence and Holder are the exclusive lease's owner token, fence
	// and description (WithHolder), parsed from the lease value
	// "<owner>:<fence>[:<holder>]". A lease value of another form (not
	// written by redlease) is all in Owner, with Fence 0. Owner is "broken"
	// while a lease that Break removed keeps the resource for its lock
	// delay (WithLockDelay). The holders of shared leases are in Shared.
	Owner  string
	Fence  int64
	Holder string
	// Remaining is the time the exclusive lease has left: 0 when it is not
	// held, -1 when the lease key has no expiry (not written by redlease;
	// only an operator can remove it).
	Remaining time.Duration
	// LastFence is the fence counter the resource draws from: at least the
	// newest fence drawn from it for the resource (the counter is its hash
	// slot's), 0 if no resource of that slot was ever acquired (or the
	// counter was lost). With WithFenceSource the fences come from the
	// source, and the counter only counts acquisitions: it says nothing of
	// them. A counter that holds something else than a fence count is an
	// error of Inspect and Scan (Break reports LastFence 0; its removal is
	// done by then).
	LastFence int64
	// Waiters is the number of acquirers queued for the lease (or a shared
	// lease). It may count waiters that died and are not dropped yet (for up
	// to 3 s).
	Waiters int64
	// Permits is a semaphore's number of permits, 0 if the resource has none
	// (AcquireSemaphore).
	Permits int
	// Shared are the resource's shared leases: its semaphore's permits, its
	// write lease, its read leases.
	Shared []SharedLease
}

// SharedLease is one lease of a resource's semaphore or read/write
// leases, in a Status.
type SharedLease struct {
	Kind      string        // "permit", "write" or "read"
	Permit    int           // the permit, for kind "permit"
	Owner     string        // its owner token; "broken" for a broken one kept for its lock delay (Break)
	Fence     int64         // its fence
	Holder    string        // its holder's description (WithHolder)
	Remaining time.Duration // the time it has left
}

// setLease fills the holder's fields from a lease value and its remaining
// TTL (negative: no expiry).
func (s *Status) setLease(value string, ttl time.Duration) {
	s.Held = true
	if owner, fence, holder, ok := wire.ParseLease(value); ok {
		s.Owner, s.Fence, s.Holder = owner, fence, holder
	} else {
		s.Owner = value
	}
	s.Remaining = max(ttl, -1)
}

// Inspect returns what Redis holds for resource: the lease and its holder,
// the fence counter and the number of waiters, read in one script, so they
// belong to one moment. It only reads.
func (c *Client) Inspect(ctx context.Context, resource string) (Status, error) {
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return Status{}, err
	}
	st, err := c.inspect(ctx, cfg, []string{resource})
	if err != nil {
		return Status{}, err
	}
	return st[0], nil
}

// inspect reads the status of resources, each in one script run (atomic;
// a resource's keys share a Redis Cluster hash slot), sent in pipelines.
func (c *Client) inspect(ctx context.Context, cfg *config, resources []string) ([]Status, error) {
	names := make([]wire.Keys, len(resources))
	shared := make([]*wire.SharedKeys, len(resources))
	for i, r := range resources {
		names[i], shared[i] = wire.KeysOf(cfg.prefix, r), wire.SharedKeysOf(cfg.prefix, r)
	}
	replies := c.conn.RunMany(ctx, len(resources), func(i int) wire.Call { return wire.Inspect(&names[i], shared[i]) })
	out := make([]Status, len(resources))
	for i, r := range resources {
		if err := replies[i].Err; err != nil {
			return nil, requestError("inspect", r, c.conn.Classify(err), err)
		}
		st, err := wire.ParseStatus(r, replies[i], false)
		if err != nil {
			return nil, err
		}
		if out[i], err = statusOf(r, names[i].Fence, st); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// statusOf is the Status of resource that inspect.lua or break.lua read;
// counter is the fence counter's key. A corrupt counter is an error
// (wire.ErrCorruptCounter) with the rest of the Status filled in.
func statusOf(resource, counter string, w wire.Status) (Status, error) {
	last, counterErr := wire.ParseCounter(counter, w.Counter)
	st := Status{Resource: resource, LastFence: last, Waiters: w.Waiters, Permits: int(w.Permits)}
	if kind, ok := wire.Mark(w.Value); ok && w.PTTL != -2 {
		st.Kind, st.Held = kind, len(w.Holders) > 0
	} else if w.PTTL != -2 { // the lease key exists
		st.Kind = "lease"
		st.setLease(w.Value, time.Duration(w.PTTL)*time.Millisecond)
	}
	for _, h := range w.Holders {
		owner, fence, desc, _ := wire.ParseLease(h.Value)
		st.Shared = append(st.Shared, SharedLease{Kind: h.Kind, Permit: int(h.Permit), Owner: owner, Fence: fence,
			Holder: desc, Remaining: time.Duration(h.PTTL) * time.Millisecond})
	}
	if counterErr != nil {
		return st, errorf("%s: %w", quote(resource), counterErr)
	}
	return st, nil
}

// Scan calls fn with the Status of every resource whose name matches
// pattern, a Redis glob ("*", "?", "[a-z]"; "" means "*"), in no particular
// order. It finds them with SCAN, never KEYS: it does not block Redis, but
// like SCAN it may miss a resource first acquired while it runs, and on
// Redis Cluster it scans every master in turn. A resource is found by its
// lease or by its waiters' queue: the resources that are held, or waited
// for (then Status.Held is false). fn is called from the calling goroutine,
// one Status at a time; if it returns an error, Scan stops and returns it.
func (c *Client) Scan(ctx context.Context, pattern string, fn func(Status) error) error {
	if pattern == "" {
		pattern = "*"
	}
	if fn == nil {
		return invalidf("nil function")
	}
	cfg, err := c.leaseConfig([]string{pattern}, nil)
	if err != nil {
		return err
	}
	seen := map[string]bool{} // resources reported through another key than their lease
	var stopped error         // fn's error, or inspect's (already described): returned as it is
	err = c.conn.Scan(ctx, wire.ResourcePattern(cfg.prefix, pattern), func(keys []string) error {
		stopped = c.scanBatch(ctx, cfg, keys, seen, fn)
		return stopped
	})
	if err != nil && err != stopped && c.conn.Classify(err) != driver.Refused {
		return errorf("scan: %w", err)
	}
	return err
}

// scanBatch inspects the resources named by one SCAN reply's keys and calls
// fn for each of them.
func (c *Client) scanBatch(ctx context.Context, cfg *config, keys []string, seen map[string]bool, fn func(Status) error) error {
	var resources []string
	var byQueue []bool // found by another key than the lease: report only if it has no lease
	for _, k := range keys {
		r, kind, ok := wire.ResourceOf(cfg.prefix, k)
		switch {
		case !ok:
		case kind == wire.KindLease:
			resources, byQueue = append(resources, r), append(byQueue, false)
		case kind == wire.KindQueue, kind == wire.KindPermits, kind == wire.KindWriter, kind == wire.KindReaders:
			resources, byQueue = append(resources, r), append(byQueue, true)
		}
	}
	if len(resources) == 0 {
		return nil
	}
	sts, err := c.inspect(ctx, cfg, resources)
	if err != nil {
		return err
	}
	for i, st := range sts {
		switch {
		case !byQueue[i]:
		case st.Kind != "", seen[st.Resource]:
			continue // reported through its lease key, or another of its keys
		default:
			seen[st.Resource] = true
		}
		if err := fn(st); err != nil {
			return err
		}
	}
	return nil
}

// Break is an operator's forced release: it deletes the lease of resource,
// whoever holds it, and wakes the first live waiter, as Release does. If
// fence is > 0, it deletes the lease only while it has that fence (the
// holder the operator saw in Inspect), so it cannot remove a newer holder
// that took over meanwhile; 0 removes any lease. Of shared leases it
// removes the holder with that fence (a semaphore's permit, the write
// lease, a read lease), or with 0 every holder, and wakes waiters as their
// releases would. The read and the delete are one script, one atomic step.
//
// It returns the Status found just before (the removed lease, when removed
// is true) and whether it deleted a lease. It never touches the fence
// counter, so the next holder gets a larger fence than the removed one.
//
// Break tells the removed holder: its lease context ends with ErrLeaseLost
// about one round trip after the removal (a message on its Client's break
// channel, see broken.go; at once, before Break returns, when the holder
// is this Client), and its Release returns ErrLeaseLost. A holder that the
// message misses (its Client's subscription was not made or is
// reconnecting, a lease taken less than a round trip before, a driver that
// cannot subscribe to a classic channel on Cluster) finds out at its next
// renewal, within the renew interval (TTL/3 by default), as a lease
// removed by hand always does. Either way the holder may still be writing
// when the next holder starts: its context ending does not stop work
// already under way, and only a resource that checks fences keeps the two
// apart. Use Break for a holder that is gone or stuck, not to hurry one
// that is working.
//
// A lease taken WithLockDelay(d), of any kind, is broken, not removed: its
// holder can no longer renew or release it, and it keeps the resource for d
// (or for the time it had left, if less), as a lease that lapsed would;
// waiters are woken and wait that out. Meanwhile Inspect shows it with the
// owner "broken" (read leases: one reader "broken"), its fence and
// description, and CheckFence refuses its fence. A second Break removes it
// at once, for an operator who knows the holder has stopped. Redis keeps
// the delay in the lease's value, so Break honours the holder's delay,
// whatever the breaking Client's options.
//
// Each call that reaches Redis sends an EventBreak to the Client's observers
// (WithObserver, WithLogger given to New); invalid input does not.
func (c *Client) Break(ctx context.Context, resource string, fence int64) (st Status, removed bool, err error) {
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return Status{}, false, err
	}
	if fence < 0 {
		return Status{}, false, invalidf("negative fence %d", fence)
	}
	start := c.clk.Now()
	st, removed, err = c.breakLease(ctx, cfg, resource, fence)
	if len(cfg.observers) > 0 {
		e := Event{Kind: EventBreak, Outcome: outcomeOf(err), Resource: resource, Owner: st.Owner, Fence: st.Fence,
			Start: start, End: c.clk.Now(), Err: err}
		if err == nil && !removed {
			e.Outcome = OutcomeLost
		}
		cfg.observe(ctx, e)
	}
	if removed { // after the break's event: the loss follows from it
		c.endBrokenHere(wire.KeysOf(cfg.prefix, resource).Lease, st, fence)
	}
	return st, removed, err
}

// breakLease runs break.lua.
func (c *Client) breakLease(ctx context.Context, cfg *config, resource string, fence int64) (Status, bool, error) {
	k := wire.KeysOf(cfg.prefix, resource)
	stem := wire.BreakStem(cfg.prefix)
	if cfg.quietBreak {
		stem = ""
	}
	r := c.conn.Run(ctx, wire.Break(&k, wire.SharedKeysOf(cfg.prefix, resource), fence, c.conn.Sharded(), stem))
	if r.Err != nil {
		return Status{}, false, requestError("break", resource, c.conn.Classify(r.Err), r.Err)
	}
	w, err := wire.ParseStatus(resource, r, true)
	if err != nil {
		return Status{}, false, err
	}
	st, err := statusOf(resource, k.Fence, w)
	if errors.Is(err, wire.ErrCorruptCounter) {
		// The leases are removed by now; a corrupt counter (LastFence 0) is
		// no failure of Break's, and Inspect or LastFence report it.
		err = nil
	}
	if err != nil {
		return Status{}, false, err
	}
	return st, w.Removed > 0, nil
}
