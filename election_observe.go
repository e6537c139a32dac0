package redlease

import (
	"context"

	"github.com/redlease/redlease/internal/wire"
)

// What followers learn of an election: its winners announce each term on
// the election's leader channel, and Observe reports them.

// announce tells the election's observers (Observe) that term began, on
// the election's leader channel. It costs one round trip per term; if it
// fails, the observers still find the term at their next poll.
func (e *Election) announce(ctx context.Context, term *Lease) {
	actx, cancel := context.WithTimeout(detach(ctx), term.cfg.releaseTimeout)
	defer cancel()
	_ = e.c.conn.Run(actx, wire.Announce(&term.keys, e.c.conn.Sharded()))
}

// Observe reports the leaders of the election, each new term once, in the
// order of their fences, on the channel it returns, until ctx ends or the
// Client closes; then it closes the channel. The first value is the
// current leader, if there is one. Like etcd's Observe and client-go's
// OnNewLeader, it is for followers that route to the leader, and for
// dashboards; it grants nothing (only the term's lease does).
//
// A new term is announced by its winner right after Campaign (or Run)
// wins it, on the election's channel (<prefix>{<name>}:leader); each
// observer then reads the leader (as Leader does, one script) and reports
// it if its fence is larger than the last reported. An observer also reads
// the leader every renew interval (TTL/3 by default), for announcements
// that were lost. Its limits: a term that ends before the observer has read
// it (shorter than a round trip after its announcement, or than the renew
// interval if the announcement was lost) is not reported; the end of a
// term without a new one is not reported either: call Leader. Reading the
// channel slowly holds the observer up, not the election.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	if e == nil {
		close(out)
		return out
	}
	cfg, err := e.c.leaseConfig([]string{e.name}, options(e.opts))
	if err != nil {
		close(out)
		return out
	}
	go e.observe(ctx, cfg, out)
	return out
}

// observe is the goroutine of an Observe call: it ends when ctx ends or
// the Client closes.
func (e *Election) observe(ctx context.Context, cfg *config, out chan<- Leader) {
	defer close(out)
	k := wire.KeysOf(cfg.prefix, e.name)
	owner, _ := newOwner(e.c.hub.id) // names this observer on the channel
	wake := make(chan struct{}, 1)
	w := e.c.hub.join(k.LeaderChannel(), owner, wake)
	defer w.leave()
	poll := e.c.clk.NewTimer(cfg.interval())
	defer poll.Stop()
	var last int64
	for {
		if !w.subscribed(ctx) {
			w.subscribe(ctx) // a failure costs only latency: the poll goes on
		}
		sts, err := e.c.inspect(ctx, cfg, []string{e.name})
		if err == nil && sts[0].Held && sts[0].Fence > last {
			st := sts[0]
			last = st.Fence
			select {
			case out <- Leader{Value: st.Holder, Owner: st.Owner, Fence: st.Fence, Remaining: st.Remaining}:
			case <-ctx.Done():
				return
			case <-e.c.hub.closed:
				return
			}
		}
		poll.Reset(cfg.interval())
		select {
		case <-wake:
		case <-poll.C():
		case <-ctx.Done():
			return
		case <-e.c.hub.closed:
			return
		}
	}
}
