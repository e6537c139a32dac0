package redlease

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Waiting for a busy lease.
//
// A waiter queues itself in Redis (see queue.lua) and sleeps. Release wakes
// the first live waiter only, by publishing its owner token on the wake
// channel of the waiter's Client for that resource, <prefix>{R}:wake:<id>.
// The waiters of one Client share one subscription connection (one per
// master node on Redis Cluster, where the channels are shard channels of the
// resource's slot), and the hub below hands each message to the one waiter it
// names. So a release costs one message, delivered to one process, and one
// acquire attempt, however many wait.
//
// Expiry publishes nothing, and messages can be lost (a reconnecting
// subscription, a waiter that died at the head of the queue); so each waiter
// also wakes on a timer: the first waiter when the holder's reported TTL runs
// out, every waiter at least after a backoff with full jitter. Every attempt
// refreshes the waiter's place in the queue; a waiter that stops trying is
// dropped from it after waiterTimeout.

// Timing of waiters.
const (
	waitBackoffMin = 25 * time.Millisecond
	waitBackoffMax = time.Second
	waiterTimeout  = 3 * waitBackoffMax // > the longest sleep between attempts
	// subscribeWait bounds how long a new subscription may take to be
	// confirmed before the waiter goes on without it (on its timers).
	subscribeWait = time.Second
	// linger keeps an idle channel subscribed for a while, so a resource
	// waited on again and again is not subscribed again and again.
	linger = 500 * time.Millisecond
)

// waiterTimeoutArg is waiterTimeout in ms, boxed once for the script's
// arguments.
var waiterTimeoutArg any = waiterTimeout.Milliseconds()

// hub multiplexes the wake channels of one Client's waiters.
type hub struct {
	rdb     redis.UniversalClient
	sharded bool   // Redis Cluster: SSUBSCRIBE, one connection per master
	id      string // names this Client's wake channels

	mu     sync.Mutex
	subs   map[string]*subscription // by node address ("" without Cluster)
	chans  map[string]*wakeChannel
	closed chan struct{}  // closed by close: waiters stop
	recv   sync.WaitGroup // the receive goroutines
}

type subscription struct {
	ps    *redis.PubSub
	addr  string // the node's address on Cluster, else ""
	count int    // channels subscribed through it
}

type wakeChannel struct {
	sub     *subscription // nil while not subscribed
	ready   chan struct{} // closed when Redis confirmed the subscription
	waiters map[string]chan struct{}
	idle    *time.Timer // runs while no one waits: unsubscribes
	// dropping is closed once dropIdle's unsubscribe has been sent: a
	// subscribe waits for it, so that Redis gets the two in the order the
	// hub decided them, and the channel ends up subscribed.
	dropping chan struct{}
	// missed holds the last wake-ups that named no waiter here: a waiter
	// registers only after its first attempt found the lease busy, so its
	// wake-up may arrive just before it joins.
	missed [8]string
	next   int
}

// waiter is one Acquire call's registration with the hub for one resource.
type waiter struct {
	h       *hub
	channel string
	owner   string
}

func newHub(rdb redis.UniversalClient) *hub {
	_, sharded := rdb.(*redis.ClusterClient)
	return &hub{rdb: rdb, sharded: sharded, id: uuid.NewString()[:8], subs: map[string]*subscription{},
		chans: map[string]*wakeChannel{}, closed: make(chan struct{})}
}

// close ends every subscription and waits for the receive goroutines; the
// waiters of Acquire calls still running stop with ErrClientClosed.
func (h *hub) close() {
	h.mu.Lock()
	select {
	case <-h.closed:
	default:
		close(h.closed)
	}
	subs := h.subs
	h.subs = map[string]*subscription{}
	for _, ch := range h.chans {
		ch.sub = nil
		if ch.idle != nil {
			ch.idle.Stop()
		}
	}
	h.mu.Unlock()
	// Closed without h.mu: go-redis holds a PubSub's lock while it
	// reconnects, and the hub's waiters must not wait for that.
	for _, sub := range subs {
		_ = sub.ps.Close()
	}
	h.recv.Wait()
}

// join registers owner as a waiter on channel: a message naming owner is
// signalled on wake. It does no I/O: messages arrive once the channel is
// subscribed (see subscribe).
func (h *hub) join(channel, owner string, wake chan struct{}) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		ch = &wakeChannel{waiters: map[string]chan struct{}{}}
		h.chans[channel] = ch
	}
	if ch.idle != nil {
		ch.idle.Stop()
		ch.idle = nil
	}
	ch.waiters[owner] = wake
	for i, m := range ch.missed {
		if m == owner {
			ch.missed[i] = ""
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	return &waiter{h: h, channel: channel, owner: owner}
}

// leave unregisters the waiter. The channel stays subscribed for linger.
func (w *waiter) leave() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[w.channel]
	delete(ch.waiters, w.owner)
	if len(ch.waiters) > 0 {
		return
	}
	if ch.sub == nil {
		h.forgetLocked(w.channel, ch)
		return
	}
	ch.idle = time.AfterFunc(linger, func() { h.dropIdle(w.channel, ch) })
}

// forgetLocked removes a channel that nobody waits on and that has no
// subscription, nor an unsubscribe on its way.
func (h *hub) forgetLocked(channel string, ch *wakeChannel) {
	if h.chans[channel] == ch && len(ch.waiters) == 0 && ch.sub == nil && ch.dropping == nil {
		delete(h.chans, channel)
	}
}

// subscribed reports whether Redis confirmed the subscription of the
// waiter's channel, through the node that serves it now. A waiter that finds
// it is not calls subscribe, which also drops a subscription that stays
// unconfirmed; and on Cluster it drops one through a node that no longer
// serves the channel's slot: after a failover, or a migration whose
// sunsubscribe was lost with its connection, go-redis keeps subscribing
// through the old node's address, and no message would come.
func (w *waiter) subscribed() bool {
	h := w.h
	var addr string
	// The slot map is the one the waiter's acquire attempts keep up to date
	// (they follow MOVED); reading it does no I/O once loaded.
	if master, err := h.master(context.Background(), w.channel); err == nil && master != nil {
		addr = master.Options().Addr
	}
	h.mu.Lock()
	ch := h.chans[w.channel]
	switch {
	case ch.sub == nil || !isClosed(ch.ready):
		h.mu.Unlock()
		return false
	case addr != "" && ch.sub.addr != addr:
		h.unsubscribeLocked(w.channel, ch)
		return false
	}
	h.mu.Unlock()
	return true
}

// subscribe subscribes the waiter's channel if it is not, and waits up to
// subscribeWait (or until ctx ends) for Redis to confirm. It reports whether
// the subscription is confirmed. A failure only costs latency: the waiter's
// timers still run.
func (w *waiter) subscribe(ctx context.Context) bool {
	h := w.h
	// On Cluster, find the channel's node before taking h.mu: it may have
	// to load the cluster's slots, and deliveries must not wait for that.
	var node redis.UniversalClient = h.rdb
	master, err := h.master(ctx, w.channel)
	if err != nil {
		return false
	}
	if master != nil {
		node = master
	}
	h.mu.Lock()
	ch := h.chans[w.channel]
	if sub := ch.sub; sub != nil { // subscribed, or being subscribed
		ready := ch.ready
		h.mu.Unlock()
		if waitReady(ctx, ready) {
			return true
		}
		if ctx.Err() == nil {
			h.abandon(w.channel, ch, sub, ready)
		}
		return false
	}
	if dropping := ch.dropping; dropping != nil {
		h.mu.Unlock()
		if !waitReady(ctx, dropping) {
			return false
		}
		return w.subscribe(ctx) // once: dropIdle is done with the channel
	}
	select {
	case <-h.closed:
		h.mu.Unlock()
		return false
	default:
	}
	ch.ready = make(chan struct{})
	ready := ch.ready
	sub := h.subscriptionLocked(ctx, node)
	ch.sub = sub
	sub.count++
	h.mu.Unlock()

	// Sent outside h.mu: the connection may be slow. go-redis remembers the
	// channel and subscribes again after a reconnect.
	if h.sharded {
		err = sub.ps.SSubscribe(ctx, w.channel)
	} else {
		err = sub.ps.Subscribe(ctx, w.channel)
	}
	if err == nil && waitReady(ctx, ready) {
		return true
	}
	if err != nil || ctx.Err() == nil {
		h.abandon(w.channel, ch, sub, ready)
	}
	return false
}

// master returns the Cluster master that serves channel's slot, or nil
// without Cluster.
func (h *hub) master(ctx context.Context, channel string) (*redis.Client, error) {
	if cc, ok := h.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, channel)
	}
	return nil, nil
}

// abandon drops a subscription that was not sent, or not confirmed within
// subscribeWait (the slot may have moved, and the node answered MOVED), so
// that a later attempt subscribes again instead of waiting for a
// confirmation that will not come.
func (h *hub) abandon(channel string, ch *wakeChannel, sub *subscription, ready chan struct{}) {
	h.mu.Lock()
	if ch.sub != sub || ch.ready != ready || isClosed(ready) { // confirmed, or dropped, meanwhile
		h.mu.Unlock()
		return
	}
	h.unsubscribeLocked(channel, ch)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func waitReady(ctx context.Context, ready chan struct{}) bool {
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// subscriptionLocked returns the subscription connection to conn (the
// Client's Redis, or on Cluster the channel's master), opening it if needed.
func (h *hub) subscriptionLocked(ctx context.Context, conn redis.UniversalClient) *subscription {
	addr := "" // one connection without Cluster
	if master, ok := conn.(*redis.Client); ok && h.sharded {
		addr = master.Options().Addr
	}
	if sub := h.subs[addr]; sub != nil {
		return sub
	}
	var ps *redis.PubSub
	if h.sharded {
		ps = conn.SSubscribe(ctx)
	} else {
		ps = conn.Subscribe(ctx)
	}
	sub := &subscription{ps: ps, addr: addr}
	h.subs[addr] = sub
	msgs := ps.ChannelWithSubscriptions()
	h.recv.Add(1)
	go h.receive(sub, msgs)
	return sub
}

// receive delivers the messages of one subscription connection until it is
// closed.
func (h *hub) receive(sub *subscription, msgs <-chan any) {
	defer h.recv.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Message:
			h.deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			unsubscribe, last := h.confirm(sub, m)
			if unsubscribe {
				// Make go-redis forget the channel too, or it would subscribe
				// it again on this node after a reconnect.
				ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
				_ = sub.ps.SUnsubscribe(ctx, m.Channel) // the node answers MOVED
				cancel()
			}
			if last {
				_ = sub.ps.Close() // this loop then ends
			}
		}
	}
}

func (h *hub) deliver(channel, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		return
	}
	wake := ch.waiters[owner]
	if wake == nil { // another Client's waiter, or ours about to join
		ch.missed[ch.next] = owner
		ch.next = (ch.next + 1) % len(ch.missed)
		return
	}
	select {
	case wake <- struct{}{}:
	default:
	}
}

// confirm records a subscription message. It reports whether it was an
// unasked unsubscribe from a connection that stays open (which go-redis must
// then be told of), or one that left the connection without channels (which
// must then be closed).
func (h *hub) confirm(sub *subscription, m *redis.Subscription) (unsubscribe, last bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[m.Channel]
	if ch == nil {
		return false, false // not ours
	}
	switch m.Kind {
	case "subscribe", "ssubscribe":
		if ch.sub == sub {
			select {
			case <-ch.ready:
			default:
				close(ch.ready)
			}
		}
	case "unsubscribe", "sunsubscribe":
		// The answer to the hub's own unsubscribe arrives while the
		// channel has no subscription or, if a waiter subscribed it again
		// since, before that subscribe is confirmed: Redis answers one
		// connection in order, and the subscribe was sent after the
		// unsubscribe. An sunsubscribe to a confirmed subscription is taken
		// for a slot migration (and if it was a late answer after all, the
		// cost is one more subscribe): waiters fall back on their timers
		// and subscribe again through the new owner.
		if m.Kind == "sunsubscribe" && ch.sub == sub && isClosed(ch.ready) {
			ch.sub = nil
			last := h.releaseLocked(sub)
			h.forgetLocked(m.Channel, ch)
			return !last, last
		}
	}
	return false, false
}

// dropIdle unsubscribes a channel nobody waited on for linger.
func (h *hub) dropIdle(channel string, ch *wakeChannel) {
	h.mu.Lock()
	if h.chans[channel] != ch || len(ch.waiters) > 0 || ch.sub == nil {
		h.mu.Unlock()
		return
	}
	h.unsubscribeLocked(channel, ch)
}

// unsubscribeLocked takes ch off its subscription, and unlocks h.mu. The
// last channel of a connection closes it; otherwise it sends the
// unsubscribe (outside h.mu), while ch.dropping holds back a new subscribe.
func (h *hub) unsubscribeLocked(channel string, ch *wakeChannel) {
	sub := ch.sub
	ch.sub = nil
	if h.releaseLocked(sub) {
		h.forgetLocked(channel, ch)
		h.mu.Unlock()
		_ = sub.ps.Close()
		return
	}
	dropping := make(chan struct{})
	ch.dropping = dropping
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
	defer cancel()
	if h.sharded {
		_ = sub.ps.SUnsubscribe(ctx, channel)
	} else {
		_ = sub.ps.Unsubscribe(ctx, channel)
	}
	h.mu.Lock()
	ch.dropping = nil
	close(dropping)
	h.forgetLocked(channel, ch)
	h.mu.Unlock()
}

// releaseLocked drops one channel from sub and reports whether it was the
// last; then sub is forgotten, and the caller closes its connection (which
// ends its goroutine) once it has let go of h.mu.
func (h *hub) releaseLocked(sub *subscription) bool {
	sub.count--
	if sub.count > 0 {
		return false
	}
	for node, s := range h.subs {
		if s == sub {
			delete(h.subs, node)
		}
	}
	return true
}

// sleep waits for d, a wake-up (wake may be nil), or the end of ctx (then
// returning its cause) or of the Client.
func (h *hub) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-h.closed:
		return ErrClientClosed
	case <-wake:
	case <-t.C:
	}
	return nil
}

// shardedArg tells the scripts which publish command the waiters listen to.
func (h *hub) shardedArg() any { return flag(h.sharded) }
