package redlease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/redlease/redlease/internal/clock"
)

// The hub: how the waiters of one Client are woken.
//
// A waiter queues itself in Redis (see lua/queue.lua) and sleeps (waiter.go). Release wakes
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
	b       backend
	clk     clock.Clock // of the waiters' timers
	sharded bool        // Redis Cluster: SSUBSCRIBE, one connection per master
	id      string      // names this Client's wake channels

	mu     sync.Mutex
	subs   map[string]*subConn // by node address ("" without Cluster)
	chans  map[string]*wakeChannel
	closed chan struct{}  // closed by close: waiters stop
	recv   sync.WaitGroup // the receive goroutines

	// For Client.quiet: the acquire calls at work (waitFor, try), and how
	// many of them are asleep in sleep.
	calls, asleep atomic.Int32
}

// subConn is one subscription connection and the channels it carries.
type subConn struct {
	conn  subscription
	addr  string // the node's address on Cluster, else ""
	count int    // channels subscribed through it
}

type wakeChannel struct {
	sub     *subConn      // nil while not subscribed
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

func newHub(b backend) *hub {
	return &hub{b: b, sharded: b.sharded(), id: uuid.NewString()[:8], subs: map[string]*subConn{},
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
	h.subs = map[string]*subConn{}
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
		_ = sub.conn.close()
	}
	h.recv.Wait()
}

// forgetLocked removes a channel that nobody waits on and that has no
// subscription, nor an unsubscribe on its way.
func (h *hub) forgetLocked(channel string, ch *wakeChannel) {
	if h.chans[channel] == ch && len(ch.waiters) == 0 && ch.sub == nil && ch.dropping == nil {
		delete(h.chans, channel)
	}
}

// abandon drops a subscription that was not sent, or not confirmed within
// subscribeWait (the slot may have moved, and the node answered MOVED), so
// that a later attempt subscribes again instead of waiting for a
// confirmation that will not come.
func (h *hub) abandon(channel string, ch *wakeChannel, sub *subConn, ready chan struct{}) {
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

// subscriptionLocked returns the subscription connection to n (on Cluster,
// the channel's master; else the Client's Redis), opening it if needed.
func (h *hub) subscriptionLocked(ctx context.Context, n node) *subConn {
	if sub := h.subs[n.addr]; sub != nil {
		return sub
	}
	sub := &subConn{conn: h.b.subscribe(ctx, n), addr: n.addr}
	h.subs[n.addr] = sub
	h.recv.Add(1)
	go h.receive(sub)
	return sub
}

// receive delivers the messages of one subscription connection until it is
// closed.
func (h *hub) receive(sub *subConn) {
	defer h.recv.Done()
	sub.conn.receive(func(m subMessage) {
		if m.kind == subMessageKind {
			h.deliver(m.channel, m.payload)
			return
		}
		unsubscribe, last := h.confirm(sub, m)
		if unsubscribe {
			// Make the client forget the channel too, or it would subscribe
			// it again on this node after a reconnect.
			ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
			_ = sub.conn.remove(ctx, m.channel) // the node answers MOVED
			cancel()
		}
		if last {
			_ = sub.conn.close() // receive then returns
		}
	})
}

func (h *hub) deliver(channel, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		return
	}
	if owner == "*" { // a writer's release: every waiting reader may go
		for _, wake := range ch.waiters {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
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

// confirm records a subscription change. It reports whether it was an
// unasked unsubscribe from a connection that stays open (which the client
// must then be told of), or one that left the connection without channels
// (which must then be closed).
func (h *hub) confirm(sub *subConn, m subMessage) (unsubscribe, last bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[m.channel]
	if ch == nil {
		return false, false // not ours
	}
	switch m.kind {
	case subConfirmed:
		if ch.sub == sub && !isClosed(ch.ready) {
			close(ch.ready)
		}
	case subDropped:
		// The answer to the hub's own unsubscribe arrives while the
		// channel has no subscription or, if a waiter subscribed it again
		// since, before that subscribe is confirmed: Redis answers one
		// connection in order, and the subscribe was sent after the
		// unsubscribe. An sunsubscribe to a confirmed subscription is taken
		// for a slot migration (and if it was a late answer after all, the
		// cost is one more subscribe): waiters fall back on their timers
		// and subscribe again through the new owner.
		if ch.sub == sub && isClosed(ch.ready) {
			ch.sub = nil
			last := h.releaseLocked(sub)
			h.forgetLocked(m.channel, ch)
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
		_ = sub.conn.close()
		return
	}
	dropping := make(chan struct{})
	ch.dropping = dropping
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
	defer cancel()
	_ = sub.conn.remove(ctx, channel)
	h.mu.Lock()
	ch.dropping = nil
	close(dropping)
	h.forgetLocked(channel, ch)
	h.mu.Unlock()
}

// releaseLocked drops one channel from sub and reports whether it was the
// last; then sub is forgotten, and the caller closes its connection (which
// ends its goroutine) once it has let go of h.mu.
func (h *hub) releaseLocked(sub *subConn) bool {
	sub.count--
	if sub.count > 0 {
		return false
	}
	for addr, s := range h.subs {
		if s == sub {
			delete(h.subs, addr)
		}
	}
	return true
}

// sleep waits for d, a wake-up (wake may be nil), or the end of ctx (then
// returning its cause) or of the Client.
func (h *hub) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	// An end that came first wins: the select below picks at random among
	// ready cases, and d may be 0.
	if err := context.Cause(ctx); err != nil {
		return err
	}
	select {
	case <-h.closed:
		return ErrClientClosed
	default:
	}
	t := h.clk.NewTimer(d)
	defer t.Stop()
	h.asleep.Add(1)
	defer h.asleep.Add(-1) // before Stop: see clock.Fake.Pending
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-h.closed:
		return ErrClientClosed
	case <-wake:
	case <-t.C():
	}
	return nil
}
