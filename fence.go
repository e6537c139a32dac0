package redlease

import (
	"context"

	"github.com/redlease/redlease/internal/wire"
)

// Fencing tokens.
//
// Every acquisition of a resource increments the fence counter of the
// resource's hash slot (see internal/wire/keys.go) in the same script that creates the
// lease, so the fence of a lease is larger than that of every earlier
// holder of the resource (and of every other resource in that slot). With
// WithFenceSource the fence comes from the source instead; the script still
// increments the counter, which then counts acquisitions and bounds no
// fence (LastFence, Status.LastFence and FenceCounter.Value say so). The
// counter has no TTL and nothing in redlease decrements or deletes it. It can still go
// backwards if Redis loses it: a restart without persistence, a failover to a
// replica that had not received the last INCR, an eviction policy that evicts
// keys without a TTL (use noeviction: a volatile-* policy keeps counters but
// may evict a live lease), or a FLUSHALL.
// That is why the resource must check fences itself (package fencing), and
// why the checks accept an equal fence only from the same owner.

// FenceSource hands out fencing tokens from outside Redis (WithFenceSource);
// fencing.Sequence, a PostgreSQL sequence, is one.
type FenceSource interface {
	// NextFence returns a token larger than every token it returned before,
	// for any resource, even across restarts and failovers of the source.
	NextFence(ctx context.Context, resource string) (int64, error)
}

// MaxFence is the largest fence that AdvanceFence and the guards that compare
// fences in Lua accept: Lua numbers are doubles, which hold every integer up
// to 2^53 exactly. A counter that starts at 1 and rises with each
// acquisition (and each first attempt that finds a lease busy) of the
// resources of its hash slot does not get there in practice.
const MaxFence int64 = 1 << 53

// CheckFence asks Redis whether fence is the fence of a lease that holds
// resource now (Chubby's CheckSequencer): nil if so, an error matching
// ErrStaleFence if not (the lease ended, or another holder took the
// resource since), read in one script, so the answer is that of one moment.
// It serves a resource that can reach Redis but cannot store a fence to
// compare: before an action that cannot be undone, it asks whether the
// caller's lease is still current. Every kind of lease counts: the
// exclusive lease, a semaphore permit, the write lease or a read lease; a
// lease that Break removed does not, also while its lock delay keeps it.
//
// The answer can be out of date by the time the caller acts on it: a lease
// that holds now may lapse an instant later. A resource that can store the
// newest fence it accepted (package fencing) is the safer arbiter; this is
// the check for one that cannot.
func (c *Client) CheckFence(ctx context.Context, resource string, fence int64) error {
	if fence <= 0 {
		return invalidf("fence %d is not positive", fence)
	}
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return err
	}
	sts, err := c.inspect(ctx, cfg, []string{resource})
	if err != nil {
		return err
	}
	st := sts[0]
	if st.Held && st.Fence == fence && st.Owner != wire.BrokenOwner {
		return nil
	}
	for _, s := range st.Shared {
		if s.Fence == fence && s.Owner != wire.BrokenOwner {
			return nil
		}
	}
	if !st.Held {
		return errorf("%w: %s: fence %d: no lease holds it", ErrStaleFence, quote(resource), fence)
	}
	return errorf("%w: %s: fence %d is not the fence of a lease that holds it", ErrStaleFence, quote(resource), fence)
}

// LastFence returns the value of the fence counter that resource draws
// from: at least the fence of its most recent acquisition that drew from it
// (the counter is shared by the resources of one hash slot, so it may be
// larger), and 0 if no resource of that slot was ever acquired. With
// WithFenceSource the fences come from the source and the counter only
// counts acquisitions, so it is no bound on them. It reads only; it is
// meant for operators and tests.
//
// A counter that holds something else than a fence count (a decimal integer
// 0..2^63-1, as INCR counts; every acquisition of its slot fails on it)
// returns an error naming it; AdvanceFence repairs it.
func (c *Client) LastFence(ctx context.Context, resource string) (int64, error) {
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return 0, err
	}
	// The counter alone, not Inspect's ten keys.
	counter := wire.SlotCounter(cfg.prefix, wire.SlotOf(resource))
	r := c.conn.Run(ctx, wire.Counter(counter))
	if r.Err != nil {
		return 0, requestError("read the fence counter of", resource, c.conn.Classify(r.Err), r.Err)
	}
	return wire.ParseCounterReply(counter, r)
}

// AdvanceFence moves the fence counter that resource draws from forward to
// at least atLeast, atomically, and returns the counter's value afterwards.
// It never moves the counter back: if the counter is already at atLeast or
// above, it is left as it is and its value returned. The next acquisition of
// resource (or of any resource of its hash slot, which share the counter)
// then gets a fence above the returned value.
//
// It is the repair for a counter that went back (a failover to a replica that
// had not received the last INCR, a restart without persistence, a FLUSHALL):
// a guard then refuses every new holder with a *fencing.StaleFenceError whose
// Newest is the newest fence it accepted, and
//
//	client.AdvanceFence(ctx, resource, staleErr.Newest)
//
// lets the next holder through. If several guards protect the resource, pass
// the largest Newest among them. It does not change a lease that is already
// held: its fence stays what it was, and stays refused.
//
// It is also the repair for a counter that holds something else than a
// decimal integer that INCR counts from ("0x10", "1.5", "-3", written by
// hand), on which every acquisition of its slot fails: it sets the counter
// to atLeast, since no fence was drawn from that value. Pass the guards'
// largest Newest, or a fence above every one handed out.
//
// atLeast must be in 1..MaxFence (Lua compares it as a double); other values
// return ErrInvalidArgument before any round trip.
//
// Model: model/redlease.pml, proctype Client, action advance.
func (c *Client) AdvanceFence(ctx context.Context, resource string, atLeast int64) (int64, error) {
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return 0, err
	}
	if atLeast < 1 || atLeast > MaxFence {
		return 0, errorf("advance fence of %s: %w", quote(resource), invalidf("%d is not in 1..MaxFence (2^53)", atLeast))
	}
	k := wire.KeysOf(cfg.prefix, resource)
	r := c.conn.Run(ctx, wire.Advance(&k, atLeast))
	if r.Err != nil {
		return 0, requestError("advance fence of", resource, c.conn.Classify(r.Err), r.Err)
	}
	return wire.Int(r) // in decimal: exact above 2^53
}

// FenceCounter is one fence counter in Redis, as ScanFences finds it.
type FenceCounter struct {
	Key   string // the counter's key
	Slot  int    // its Redis Cluster hash slot
	Value int64  // at least every fence drawn from it (none with WithFenceSource)
	// Resource is, for a per-resource counter of an earlier version of
	// redlease (see MigrateFences), its resource; "" for a slot's counter.
	Resource string
}

// ScanFences calls fn with every fence counter under the Client's prefix:
// at most one per hash slot (16,384), and the per-resource counters that an
// earlier version left and MigrateFences has not folded in yet. It uses
// SCAN, as Scan does; fn's error stops it. A counter that holds something
// else than a fence count stops it with an error naming the counter
// (AdvanceFence repairs a slot's counter).
func (c *Client) ScanFences(ctx context.Context, fn func(FenceCounter) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	prefix := c.cfg.prefix
	return c.conn.Scan(ctx, wire.EscapeGlob(prefix)+"{*}:fence*", func(ks []string) error {
		var counters []FenceCounter
		for _, k := range ks {
			tag, kind, ok := wire.ResourceOf(prefix, k)
			switch {
			case !ok:
			case kind == wire.KindFences:
				counters = append(counters, FenceCounter{Key: k, Slot: wire.SlotOf(tag)})
			case kind == wire.KindFence:
				counters = append(counters, FenceCounter{Key: k, Slot: wire.SlotOf(tag), Resource: tag})
			}
		}
		if len(counters) == 0 {
			return nil
		}
		replies := c.conn.RunMany(ctx, len(counters), func(i int) wire.Call { return wire.Counter(counters[i].Key) })
		for i, r := range replies {
			if r.Err != nil {
				return errorf("scan fences: %w", r.Err)
			}
			v, err := wire.ParseCounterReply(counters[i].Key, r)
			if err != nil {
				return errorf("scan fences: %w", err)
			}
			counters[i].Value = v
			if err := fn(counters[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// MigrateFences folds the per-resource fence counters that versions before
// the per-slot counter left (<prefix>{R}:fence) into the counters of their
// hash slots, so that no resource's fence goes back, and deletes them; one
// atomic script per counter, sent in pipelines. It is idempotent and safe
// while leases are taken. It returns how many counters it folded in; on an
// error, which names the first counter that failed, those folded in until
// then (the rest of that SCAN batch is still sent).
//
// Run it once before the first Client of this version acquires (an old
// counter that is not folded in yet lets a new holder draw a fence that a
// guard has seen, and refuses it: safe, but not live until AdvanceFence);
// run it again once the last Client of an earlier version has stopped, for
// the counters those recreated meanwhile. The redlease command runs it as
// 'redlease migrate-fences'.
func (c *Client) MigrateFences(ctx context.Context) (int, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	prefix := c.cfg.prefix
	n := 0
	// Exactly the old key form: ScanFences's "{*}:fence*" also matches the
	// slots' counters (up to 16,384), which have nothing to migrate. The old
	// counters are not read first either: migrate.lua reads them.
	err := c.conn.Scan(ctx, wire.EscapeGlob(prefix)+"{*}:"+wire.KindFence, func(ks []string) error {
		var olds, counters, resources []string
		for _, k := range ks {
			if r, kind, ok := wire.ResourceOf(prefix, k); ok && kind == wire.KindFence {
				olds, resources = append(olds, k), append(resources, r)
				counters = append(counters, wire.SlotCounter(prefix, wire.SlotOf(r)))
			}
		}
		if len(olds) == 0 {
			return nil
		}
		// One atomic script per counter, sent in pipelines: no order among
		// them is needed, each folds into its own slot's counter.
		replies := c.conn.RunMany(ctx, len(olds), func(i int) wire.Call { return wire.Migrate(olds[i], counters[i]) })
		var first error
		for i, r := range replies {
			switch {
			case r.Err == nil:
				n++
			case first == nil:
				first = errorf("migrate the fence counter of %s: %w", quote(resources[i]), r.Err)
			}
		}
		return first
	})
	return n, err
}
