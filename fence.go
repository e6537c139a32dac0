package redlease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fencing tokens.
//
// Every acquisition of a resource increments the resource's fence counter,
// <prefix>{resource}:fence, in the same script that creates the lease, so the
// fence of a lease is larger than that of every earlier holder. The counter
// has no TTL and nothing in redlease decrements or deletes it. It can still go
// backwards if Redis loses it: a restart without persistence, a failover to a
// replica that had not received the last INCR, an eviction policy that evicts
// keys without a TTL (use noeviction or a volatile-* policy), or a FLUSHALL.
// That is why the resource must check fences itself, and why the checks accept
// an equal fence only from the same owner.

// LastFence returns the fence of the most recent acquisition of resource (the
// counter's value), or 0 if it was never acquired. It reads only; it is meant
// for operators and tests.
func (c *Client) LastFence(ctx context.Context, resource string, opts ...Option) (int64, error) {
	cfg, err := c.leaseConfig([]string{resource}, opts)
	if err != nil {
		return 0, err
	}
	n, err := c.rdb.Get(ctx, cfg.key(resource, "fence")).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redlease: fence of %q: %w", resource, err)
	}
	return n, nil
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
