package redlease

import (
	"context"
	"strconv"
	"strings"
)

// Fencing tokens.
//
// Every acquisition of a resource increments the fence counter of the
// resource's hash slot (see keys.go) in the same script that creates the
// lease, so the fence of a lease is larger than that of every earlier
// holder of the resource (and of every other resource in that slot). The
// counter has no TTL and nothing in redlease decrements or deletes it. It can still go
// backwards if Redis loses it: a restart without persistence, a failover to a
// replica that had not received the last INCR, an eviction policy that evicts
// keys without a TTL (use noeviction or a volatile-* policy), or a FLUSHALL.
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

// LastFence returns the value of the fence counter that resource draws
// from: at least the fence of its most recent acquisition (the counter is
// shared by the resources of one hash slot, so it may be larger), and 0 if
// no resource of that slot was ever acquired. It reads only; it is meant
// for operators and tests.
func (c *Client) LastFence(ctx context.Context, resource string) (int64, error) {
	st, err := c.Inspect(ctx, resource)
	if err != nil {
		return 0, err
	}
	return st.LastFence, nil
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
	k := keys(cfg.prefix, resource)
	r := c.b.eval(ctx, advanceCall(&k, atLeast))
	if r.err != nil {
		return 0, requestError("advance fence of", resource, c.b.classify(r.err), r.err)
	}
	return r.n, nil
}

// parseLease splits a lease value, "<owner>:<fence>[:<holder>]", less the
// NUL byte that marks a lease waited for (see lua/acquire.lua).
func parseLease(v string) (owner string, fence int64, holder string, ok bool) {
	v = strings.TrimSuffix(v, "\x00")
	owner, rest, found := strings.Cut(v, ":")
	if !found || owner == "" {
		return "", 0, "", false
	}
	digits, holder, _ := strings.Cut(rest, ":")
	fence, err := strconv.ParseInt(digits, 10, 64)
	return owner, fence, holder, err == nil && fence > 0
}

// FenceCounter is one fence counter in Redis, as ScanFences finds it.
type FenceCounter struct {
	Key   string // the counter's key
	Slot  int    // its Redis Cluster hash slot
	Value int64  // at least the newest fence of every resource of that slot
	// Resource is, for a per-resource counter of an earlier version of
	// redlease (see MigrateFences), its resource; "" for a slot's counter.
	Resource string
}

// ScanFences calls fn with every fence counter under the Client's prefix:
// at most one per hash slot (16,384), and the per-resource counters that an
// earlier version left and MigrateFences has not folded in yet. It uses
// SCAN, as Scan does; fn's error stops it.
func (c *Client) ScanFences(ctx context.Context, fn func(FenceCounter) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	prefix := c.cfg.prefix
	return c.b.scan(ctx, escapeGlob(prefix)+"{*}:fence*", func(ks []string) error {
		var counters []FenceCounter
		for _, k := range ks {
			tag, kind, ok := resourceOf(prefix, k)
			switch {
			case !ok:
			case kind == kindFences:
				counters = append(counters, FenceCounter{Key: k, Slot: slotOf(tag)})
			case kind == kindFence:
				counters = append(counters, FenceCounter{Key: k, Slot: slotOf(tag), Resource: tag})
			}
		}
		if len(counters) == 0 {
			return nil
		}
		replies := c.b.evalAll(ctx, len(counters), func(i int) call { return counterCall(&counters[i].Key) })
		for i, r := range replies {
			if r.err != nil {
				return errorf("scan fences: %w", r.err)
			}
			counters[i].Value = r.n
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
// atomic script per counter. It is idempotent and safe while leases are
// taken. It returns how many counters it folded in.
//
// Run it once before the first Client of this version acquires (an old
// counter that is not folded in yet lets a new holder draw a fence that a
// guard has seen, and refuses it: safe, but not live until AdvanceFence);
// run it again once the last Client of an earlier version has stopped, for
// the counters those recreated meanwhile. The redlease command runs it as
// 'redlease migrate-fences'.
func (c *Client) MigrateFences(ctx context.Context) (int, error) {
	n := 0
	err := c.ScanFences(ctx, func(fc FenceCounter) error {
		if fc.Resource == "" {
			return nil
		}
		counter := slotCounter(c.cfg.prefix, fc.Slot)
		if r := c.b.eval(ctx, migrateCall(&fc.Key, &counter)); r.err != nil {
			return errorf("migrate the fence counter of %s: %w", quote(fc.Resource), r.err)
		}
		n++
		return nil
	})
	return n, err
}
