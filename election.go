package redlease

import (
	"context"
	"errors"
	"strings"
	"time"
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
//
// A term is returned only if its value was recorded while Redis still held
// the term's lease, and its context had not ended by the time the record was
// confirmed: the value is written in one atomic step with the check that the
// lease is ours, so a campaigner that stalls after being elected, past its
// TTL, can neither overwrite the value of the term that came next nor be told
// it leads. It then gets an error matching ErrLeaseLost (and its lease is
// released, best effort) instead. As with every lease, being returned a term
// does not mean it still holds an instant later: watch its context, and fence
// writes. If recording the value fails (a request error), the lease is
// released and the error returned, joined with the release's.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	l, err := e.c.Acquire(ctx, e.name, e.opts...)
	if err != nil {
		return nil, err
	}
	// The context is checked before the record (a term already over writes
	// none) and after it: a term that ended locally (its local deadline
	// passed without a confirmed renewal) may still be ours in Redis, so the
	// script's answer alone does not show that it is alive.
	if l.Context().Err() != nil {
		return nil, e.lost(ctx, l)
	}
	// The record has no TTL: the watchdog renews only the lease key, so a
	// record with one could expire while its term still runs. It outlives its
	// term until the next term's record replaces it (one key per election
	// name, like the fence counter), but Leader shows it only while the lease
	// holds the same owner, so it is never shown for another term.
	k := electionKeys(l.cfg.prefix, e.name)
	r := e.c.b.eval(ctx, leaderScript, leaderCall(&k, &l.owner, &value))
	if r.err != nil {
		// Not requestError: ErrOutcomeUnknown would say the campaign may
		// have succeeded, but the term is given up here either way.
		return nil, errors.Join(errorf("campaign %s: record value: %w", quote(e.name), r.err), l.Release(ctx))
	}
	if r.n != 1 || l.Context().Err() != nil {
		return nil, e.lost(ctx, l)
	}
	return l, nil
}

// lost releases a term that ended before its value was recorded, and returns
// the error that says so. The release is best effort: its error is dropped,
// because the caller learns all it can act on (it is not the leader) from
// ErrLeaseLost; a lease it could not delete expires within its TTL, as the
// watchdog no longer renews it.
func (e *Election) lost(ctx context.Context, l *Lease) error {
	cause := context.Cause(l.Context()) // nil if only Redis said the term is over
	_ = l.Release(ctx)
	if e.c.closed.Load() { // Close released the term
		return errorf("campaign %s: %w", quote(e.name), ErrClientClosed)
	}
	err := errorf("campaign %s: %w: the term ended before its value was recorded", quote(e.name), ErrLeaseLost)
	if cause != nil {
		err = errorf("%w (%w)", err, cause)
	}
	return err
}

// Leader returns the current term, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	cfg, err := e.c.leaseConfig([]string{e.name}, e.opts)
	if err != nil {
		return Leader{}, err
	}
	k := electionKeys(cfg.prefix, e.name)
	r := e.c.b.eval(ctx, leaderReadScript, leaderReadCall(&k))
	if r.err != nil {
		return Leader{}, requestError("leader of", e.name, e.c.b.classify(r.err), r.err)
	}
	if len(r.vals) != 3 {
		return Leader{}, errorf("leader of %s: script replied %v", quote(e.name), r.vals)
	}
	lease, _ := r.vals[0].(string)
	pttl, _ := r.vals[1].(int64)
	record, _ := r.vals[2].(string)
	owner, fence, ok := parseLease(lease)
	if !ok {
		return Leader{}, ErrNoLeader
	}
	ld := Leader{Owner: owner, Fence: fence, Remaining: time.Duration(pttl) * time.Millisecond}
	if o, v, ok := strings.Cut(record, " "); ok && o == owner {
		ld.Value = v
	}
	return ld, nil
}
