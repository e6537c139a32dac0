package redlease

import (
	"context"
	"strconv"
	"strings"
)

// Fencing tokens.
//
// Every acquisition of a resource increments the resource's fence counter
// (see keys.go) in the same script that creates the lease, so the fence of a
// lease is larger than that of every earlier holder. The counter has no TTL
// and nothing in redlease decrements or deletes it. It can still go
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
// to 2^53 exactly. A counter that starts at 1 and rises by one per
// acquisition never gets there.
const MaxFence int64 = 1 << 53

// LastFence returns the fence of the most recent acquisition of resource (the
// counter's value), or 0 if it was never acquired. It reads only; it is meant
// for operators and tests.
func (c *Client) LastFence(ctx context.Context, resource string) (int64, error) {
	st, err := c.Inspect(ctx, resource)
	if err != nil {
		return 0, err
	}
	return st.LastFence, nil
}

// AdvanceFence moves the fence counter of resource forward to at least
// atLeast, atomically, and returns the counter's value afterwards. It never
// moves the counter back: if the counter is already at atLeast or above, it
// is left as it is and its value returned. The next acquisition of resource
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
func (c *Client) AdvanceFence(ctx context.Context, resource string, atLeast int64) (int64, error) {
	cfg, err := c.leaseConfig([]string{resource}, nil)
	if err != nil {
		return 0, err
	}
	if atLeast < 1 || atLeast > MaxFence {
		return 0, errorf("advance fence of %s: %w", quote(resource), invalidf("%d is not in 1..MaxFence (2^53)", atLeast))
	}
	k := keys(cfg.prefix, resource)
	r := c.b.eval(ctx, advanceScript, advanceCall(&k, atLeast))
	if r.err != nil {
		return 0, requestError("advance fence of", resource, c.b.classify(r.err), r.err)
	}
	return r.n, nil
}

// parseLease splits a lease value, "<owner>:<fence>".
func parseLease(v string) (owner string, fence int64, ok bool) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return "", 0, false
	}
	fence, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], fence, err == nil
}
