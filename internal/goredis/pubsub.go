package goredis

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
)

// Subscriptions. The channels of one Driver share one go-redis PubSub, a
// connection of its own, per node: the client's Redis, or on Cluster each
// master, subscribed with SSUBSCRIBE to the shard channels of its slots,
// and one more for the classic channels (SubscribeClassic), subscribed with
// SUBSCRIBE through the master of the first one's slot.
// go-redis remembers a PubSub's channels and subscribes them again after a
// reconnect. A PubSub is closed with its last channel, which ends the
// goroutine that reads it.
//
// No lock of the Driver is held across a call into go-redis.

// subs are a Driver's subscriptions.
type subs struct {
	mu    sync.Mutex
	nodes map[string]*nodeSub // by node address ("" without Cluster)
}

// nodeSub is one PubSub and the subscriptions it carries.
type nodeSub struct {
	ps      *redis.PubSub
	addr    string // the master's on Cluster, classicNode for the classic channels, else ""
	classic bool   // on Cluster: SUBSCRIBE, not SSUBSCRIBE
	chans   map[string]*subscription
	read    chan struct{} // closed when its reading goroutine has ended
}

// subscription is one channel of a nodeSub.
type subscription struct {
	d       *Driver
	n       *nodeSub
	channel string
	handle  func(string)
	ready   chan struct{}
	done    chan struct{}

	mu     sync.Mutex // held while handle runs, so that Close can stop it
	closed bool
	// Under d.subs.mu:
	confirmed bool
	ended     bool // done is closed
}

// subscribeWait bounds the requests a subscription sends on its own: an
// unsubscribe, and the check of a Cluster's slot map.
const subscribeWait = time.Second

// classicNode is the key of the classic channels' nodeSub on Cluster in
// subs.nodes, where the others are addresses.
const classicNode = "classic"

var _ driver.ClassicSubscriber = (*Driver)(nil)

// Subscribe implements driver.Driver.
func (d *Driver) Subscribe(ctx context.Context, channel string, handle func(string)) (driver.Subscription, error) {
	return d.subscribe(ctx, channel, handle, false)
}

// SubscribeClassic implements driver.ClassicSubscriber.
func (d *Driver) SubscribeClassic(ctx context.Context, channel string, handle func(string)) (driver.Subscription, error) {
	return d.subscribe(ctx, channel, handle, d.cluster != nil)
}

// subscribe is Subscribe, of a classic channel on Cluster if classic.
func (d *Driver) subscribe(ctx context.Context, channel string, handle func(string), classic bool) (driver.Subscription, error) {
	var master *redis.Client // on Cluster, the master of the channel's slot
	addr := ""
	if classic {
		addr = classicNode
	} else if d.cluster != nil {
		m, err := d.cluster.MasterForKey(ctx, channel)
		if err != nil {
			return nil, err
		}
		master, addr = m, m.Options().Addr
	}
	s := &subscription{d: d, channel: channel, handle: handle,
		ready: make(chan struct{}), done: make(chan struct{})}

	d.subs.mu.Lock()
	n := d.subs.nodes[addr]
	if n == nil {
		n = &nodeSub{addr: addr, classic: classic, chans: map[string]*subscription{}, read: make(chan struct{})}
		switch {
		case classic:
			n.ps = d.cluster.Subscribe(ctx) // no channel: no I/O
		case master != nil:
			n.ps = master.SSubscribe(ctx) // no channel: no I/O
		default:
			n.ps = d.rdb.Subscribe(ctx)
		}
		d.subs.nodes[addr] = n
		go n.receive(d)
	}
	s.n = n
	n.chans[channel] = s
	d.subs.mu.Unlock()

	var err error
	if master != nil {
		err = n.ps.SSubscribe(ctx, channel)
	} else {
		err = n.ps.Subscribe(ctx, channel)
	}
	if err != nil {
		_ = s.Close(ctx)
		return nil, err
	}
	return s, nil
}

func (s *subscription) Ready() <-chan struct{} { return s.ready }

// Done implements driver.Subscription. On Cluster it ends a subscription
// of a shard channel through a node that, by the client's slot map, no
// longer serves the channel: after a failover, or a migration whose
// sunsubscribe was lost with its connection, go-redis would keep
// subscribing through the old node's address, and no message would come.
// A classic channel's messages reach every node: its subscription stays.
func (s *subscription) Done() <-chan struct{} {
	d := s.d
	if d.cluster == nil || s.n.classic || isClosed(s.done) {
		return s.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
	defer cancel()
	if m, err := d.cluster.MasterForKey(ctx, s.channel); err == nil && m.Options().Addr != s.n.addr {
		d.subs.mu.Lock()
		s.endLocked()
		d.subs.mu.Unlock()
	}
	return s.done
}

// endLocked ends the subscription: it is no longer s.n's.
func (s *subscription) endLocked() {
	if !s.ended {
		s.ended = true
		close(s.done)
	}
	if s.n.chans[s.channel] == s {
		delete(s.n.chans, s.channel)
	}
}

// Close implements driver.Subscription: it unsubscribes the channel, or
// closes the node's PubSub with its last channel and waits for its reader.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()

	d, n := s.d, s.n
	d.subs.mu.Lock()
	mine := n.chans[s.channel] == s
	s.endLocked()
	last := len(n.chans) == 0 && d.subs.nodes[n.addr] == n
	if last {
		delete(d.subs.nodes, n.addr)
	}
	d.subs.mu.Unlock()

	switch {
	case last:
		err := n.ps.Close()
		select {
		case <-n.read:
		case <-ctx.Done():
		}
		return err
	case !mine: // dropped already
		return nil
	case d.cluster != nil && !n.classic:
		return n.ps.SUnsubscribe(ctx, s.channel)
	}
	return n.ps.Unsubscribe(ctx, s.channel)
}

// receive reads the PubSub until it is closed, by Close or with the
// go-redis client: then it closes the PubSub, whose health check would
// otherwise run on, and ends its subscriptions.
func (n *nodeSub) receive(d *Driver) {
	defer close(n.read)
	defer n.closed(d)
	for m := range n.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Message:
			if s := d.lookup(n, m.Channel); s != nil {
				s.deliver(m.Payload)
			}
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				d.confirm(n, m.Channel)
			case "sunsubscribe":
				// Unasked (our own unsubscribe forgot the channel first),
				// it means the slot moved: the subscription ends, and the
				// client must forget the channel too, or it would subscribe
				// it again on this node after a reconnect.
				if d.dropped(n, m.Channel) {
					ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
					_ = n.ps.SUnsubscribe(ctx, m.Channel)
					cancel()
				}
			}
		}
	}
}

// closed ends the subscriptions of n, whose PubSub can receive no more
// messages, and closes it (again, if Close did).
func (n *nodeSub) closed(d *Driver) {
	_ = n.ps.Close()
	d.subs.mu.Lock()
	defer d.subs.mu.Unlock()
	for _, s := range n.chans {
		s.endLocked()
	}
	if d.subs.nodes[n.addr] == n {
		delete(d.subs.nodes, n.addr)
	}
}

func (d *Driver) lookup(n *nodeSub, channel string) *subscription {
	d.subs.mu.Lock()
	defer d.subs.mu.Unlock()
	return n.chans[channel]
}

func (d *Driver) confirm(n *nodeSub, channel string) {
	d.subs.mu.Lock()
	defer d.subs.mu.Unlock()
	if s := n.chans[channel]; s != nil && !s.confirmed {
		s.confirmed = true
		close(s.ready)
	}
}

// dropped ends the confirmed subscription of channel on n, if there is
// one, and reports whether there was. (A sunsubscribe that answers an
// unsubscribe of ours arrives before a new subscription of the channel is
// confirmed: Redis answers one connection in order.)
func (d *Driver) dropped(n *nodeSub, channel string) bool {
	d.subs.mu.Lock()
	defer d.subs.mu.Unlock()
	s := n.chans[channel]
	if s == nil || !s.confirmed {
		return false
	}
	s.endLocked()
	return true
}

// deliver passes a message to handle, unless the subscription is closed.
func (s *subscription) deliver(payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.handle(payload)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
