package redlease

import (
	"context"
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
	opts []WaitOption
}

// NewElection returns the election for name on c. opts apply to each
// campaign's lease.
func NewElection(c *Client, name string, opts ...WaitOption) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Leader describes the current term.
type Leader struct {
	Value     string        // what the leader campaigned with
	Owner     string        // the term's owner token
	Fence     int64         // the term's fence
	Remaining time.Duration // how long the term's lease had left
}

// Campaign waits until this caller is elected or ctx ends, and returns the
// term's lease. value (a host name, an address; at most MaxHolder bytes) is
// published for Leader: it is the term's lease's holder description, written
// in the same step that takes the lease, so it exists exactly as long as the
// term does and Leader never shows one term's value for another. Followers
// can use it to find the leader. Watch lease.Context() for the end of the
// term; call lease.Release to resign. Campaign waits, keeps its deadline and
// fails as Acquire does. As with every lease, being returned a term does not
// mean it still holds an instant later: watch its context, and fence writes.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if e == nil {
		return nil, invalidf("nil Election")
	}
	opts := append(e.opts[:len(e.opts):len(e.opts)], WithHolder(value))
	l, err := e.c.Acquire(ctx, e.name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Leader returns the current term, or ErrNoLeader. It reads the term's
// lease in one script, so its value and its owner belong together.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if e == nil {
		return Leader{}, invalidf("nil Election")
	}
	cfg, err := e.c.leaseConfig([]string{e.name}, options(e.opts)) // the prefix may be the election's
	if err != nil {
		return Leader{}, err
	}
	sts, err := e.c.inspect(ctx, cfg, []string{e.name})
	if err != nil {
		return Leader{}, err
	}
	st := sts[0]
	if !st.Held || st.Fence == 0 {
		return Leader{}, ErrNoLeader
	}
	return Leader{Value: st.Holder, Owner: st.Owner, Fence: st.Fence, Remaining: st.Remaining}, nil
}
