package redlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Election elects one leader at a time among the campaigners for a name:
// the cron runner, the shard owner, the singleton worker. A term is a lease
// on the name: Campaign waits until it gets one, the watchdog holds it, its
// context ends when leadership is lost, and Release resigns. Every term has
// its own fence, larger than every earlier term's, for the leader to pass
// with its writes.
//
// It follows etcd's concurrency.Election, on a Redis lease: leadership is
// only as safe as the lease (see the package documentation), so a leader
// that writes to shared state must fence those writes.
type Election struct {
	c    *Client
	name string
	opts []Option
}

// ErrNoLeader is returned by Election.Leader when nobody leads.
var ErrNoLeader = errors.New("redlease: no leader")

// NewElection returns the election for name on c. opts apply to each
// campaign's lease.
func NewElection(c *Client, name string, opts ...Option) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Leader describes the current term.
type Leader struct {
	Value     string        // what the leader campaigned with, "" if not yet recorded
	Owner     string        // the term's owner token
	Fence     int64         // the term's fence
	Remaining time.Duration // how long the term's lease had left
}

// Campaign waits until this caller is elected or ctx ends, and returns the
// term's lease. value (a host name, an address) is published for Leader;
// followers can use it to find the leader. Watch lease.Context() for the end
// of the term; call lease.Release to resign.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	l, err := e.c.Acquire(ctx, e.name, e.opts...)
	if err != nil {
		return nil, err
	}
	// Recorded after the lease is taken, and keyed by owner, so a stale
	// value of an earlier term is never shown for this one.
	err = e.c.rdb.Set(ctx, l.cfg.key(e.name, "leader"), l.owner+" "+value, 0).Err()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("redlease: campaign %q: record value: %w", e.name, err), l.Release(ctx))
	}
	return l, nil
}

// Leader returns the current term, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	cfg, err := e.c.leaseConfig([]string{e.name}, e.opts)
	if err != nil {
		return Leader{}, err
	}
	var lease, value *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err = e.c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lease = p.Get(ctx, cfg.key(e.name, "lease"))
		ttl = p.PTTL(ctx, cfg.key(e.name, "lease"))
		value = p.Get(ctx, cfg.key(e.name, "leader"))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Leader{}, fmt.Errorf("redlease: leader of %q: %w", e.name, err)
	}
	owner, fence, ok := parseLease(lease.Val())
	if !ok {
		return Leader{}, ErrNoLeader
	}
	ld := Leader{Owner: owner, Fence: fence, Remaining: ttl.Val()}
	if o, v, ok := strings.Cut(value.Val(), " "); ok && o == owner {
		ld.Value = v
	}
	return ld, nil
}
