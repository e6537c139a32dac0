package redlease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/wire"
)

// The hub: how the waiters of one Client are woken.
//
// A waiter queues itself in Redis (see internal/wire/lua/queue.lua) and sleeps (waiter.go). Release wakes
// the first live waiter only, by publishing its owner token on the wake
// channel of the waiter's Client for that resource, <prefix>{R}:wake:<id>,
// with the fence of the lease it handed that waiter, if it did (see
// acquisition.claim).
// The hub subscribes each channel once for all the Client's waiters on it
// (the driver shares connections among channels: a shard channel on Redis
// Cluster) and hands each message to the one waiter it names. So a release
// costs one message, delivered to one process, and, unless it handed the
// lease over, one acquire attempt, however many wait.
//
// Expiry publishes nothing, and messages can be lost (a reconnecting
// subscription, a waiter that died at the head of the queue); so each waiter
// also wakes on a timer: the first waiter when the holder's reported TTL runs
// out, every waiter at least after a backoff with full jitter. Every attempt
// refreshes the waiter's place in the queue; a waiter that stops trying is
// dropped from it after the waiter timeout.
//
// The hub also keeps the Client's break channels subscribed (watch), one
// per key prefix in use, while the Client holds leases and for linger
// more: Client.Break tells a lease's holder there that it removed the lease
// (see Client.onBreak). A break channel is a classic channel on Cluster too,
// and its messages go to one handler rather than to waiters.
//
// The hub holds h.mu only to read and write its own state, never across a
// call into the driver: a driver that blocks delays only the waiters of its
// channel (up to subscribeWait each), one that panics fails that
// subscription, and neither stops a waiter from keeping its deadline. The
// driver's Subscribe runs on a goroutine of the hub's; its Close on the
// goroutine that drops the subscription.

// Timing of waiters.
const (
	waitBackoffMin = 25 * time.Millisecond
	waitBackoffMax = time.Second
	// subscribeWait bounds how long a new subscription may take to be
	// confirmed before the waiter goes on without it (on its timers), and
	// how long an unsubscribe may take.
	subscribeWait = time.Second
	// linger keeps an idle channel subscribed for a while, so a resource
	// waited on again and again is not subscribed again and again.
	linger = 500 * time.Millisecond
	// A watched break channel whose subscribe failed is subscribed again
	// after resubscribeMin, doubling up to resubscribeMax (see watch).
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 30 * time.Second
)

// hub multiplexes the wake channels of one Client's waiters.
type hub struct {
	conn *wire.Conn
	clk  clock.Clock // of the waiters' timers
	id   string      // names this Client's wake channels

	mu     sync.Mutex
	chans  map[string]*wakeChannel
	closed chan struct{}  // closed by close: waiters stop
	work   sync.WaitGroup // the subscribe goroutines

	// For Client.quiet: the acquire calls at work (waitFor, try), and how
	// many of them are asleep in sleep.
	calls, asleep atomic.Int32
}

// wakeChannel is one wake channel and its waiters. A channel has at most one
// subscription, one subscribe on its way (subscribing) or one unsubscribe on
// its way (dropping) at a time, so that the driver sees them in the order
// the hub decided them.
type wakeChannel struct {
	waiters     map[string]chan struct{}
	sub         driver.Subscription // nil while not subscribed
	subscribing chan struct{}       // closed when the subscribe on its way has returned
	dropping    chan struct{}       // closed when the unsubscribe on its way has returned
	idle        *time.Timer         // runs while no one waits: unsubscribes; made once, then Reset
	idling      bool                // idle is armed
	retry       *time.Timer         // runs after a watched break channel's subscribe failed
	failures    int                 // subscribes in a row that failed
	// A break channel's: SUBSCRIBE on Cluster too, and the handler of its
	// messages, called outside h.mu. Set when the channel is made.
	classic   bool
	onMessage func(payload string)
	// missed holds the last wake-ups that named no waiter here: a waiter
	// registers only after its first attempt found the lease busy, so its
	// wake-up may arrive just before it joins.
	missed [8]string
	next   int
	// handed holds, per waiter, the lease that a release handed it over
	// (see acquisition.claim), until the waiter takes it or leaves.
	handed map[string]handoff
}

// handoff is a lease that a release handed a waiter over: its fence, and
// the stamp of the waiter's attempt that asked for it (wire.ParseWake).
type handoff struct{ fence, stamp int64 }

func newHub(conn *wire.Conn, clk clock.Clock) *hub {
	return &hub{conn: conn, clk: clk, id: uuid.NewString()[:8], chans: map[string]*wakeChannel{},
		closed: make(chan struct{})}
}

// close ends every subscription; the waiters of Acquire calls still running
// stop with ErrClientClosed. It waits for the subscribe goroutines, until
// ctx's deadline.
func (h *hub) close(ctx context.Context) {
	for _, s := range h.shut() {
		closeSub(detach(ctx), s)
	}
	wait(ctx, &h.work)
}

// shut marks the hub closed, forgets its channels, and returns their
// subscriptions for the caller to close.
func (h *hub) shut() (subs []driver.Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !isClosed(h.closed) {
		close(h.closed)
	}
	for name, ch := range h.chans {
		stopIdleLocked(ch)
		if ch.retry != nil {
			ch.retry.Stop()
		}
		if ch.sub != nil {
			subs = append(subs, ch.sub)
			ch.sub = nil
		}
		delete(h.chans, name)
	}
	return subs
}

// closeSub unsubscribes s, bounded by subscribeWait and by ctx.
func closeSub(ctx context.Context, s driver.Subscription) {
	ctx, cancel := context.WithTimeout(ctx, subscribeWait)
	defer cancel()
	_ = s.Close(ctx)
}

// wait waits for wg, or until ctx's deadline (not its cancellation).
func wait(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	var deadline <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-done:
	case <-deadline:
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// deliver hands a message of channel to the waiter it names, or to a break
// channel's handler (outside h.mu).
func (h *hub) deliver(channel, msg string) {
	if f := h.deliverLocked(channel, msg); f != nil {
		f(msg)
	}
}

// deliverLocked is deliver under h.mu, up to a break channel's handler,
// which it returns.
func (h *hub) deliverLocked(channel, msg string) func(string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	switch {
	case ch == nil:
		return nil
	case ch.onMessage != nil:
		return ch.onMessage
	case msg == "*": // a writer's release: every waiting reader may go
		for _, wake := range ch.waiters {
			signal(wake)
		}
		return nil
	}
	owner, fence, stamp, handed := wire.ParseWake(msg)
	wake := ch.waiters[owner]
	if wake == nil { // another Client's waiter, or ours about to join
		ch.missed[ch.next] = msg
		ch.next = (ch.next + 1) % len(ch.missed)
		return nil
	}
	if handed {
		ch.handOverLocked(owner, handoff{fence, stamp})
	}
	signal(wake)
	return nil
}

// handOverLocked records that a release handed owner, a waiter of ch, the
// lease (see acquisition.claim).
func (ch *wakeChannel) handOverLocked(owner string, ho handoff) {
	if ch.handed == nil {
		ch.handed = map[string]handoff{}
	}
	ch.handed[owner] = ho
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// join registers owner as a waiter on channel: a message naming owner is
// signalled on wake. It does no I/O: messages arrive once the channel is
// subscribed (see waiter.subscribe).
func (h *hub) join(channel, owner string, wake chan struct{}) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		ch = &wakeChannel{waiters: map[string]chan struct{}{}}
		h.chans[channel] = ch
	}
	stopIdleLocked(ch)
	ch.waiters[owner] = wake
	for i, m := range ch.missed {
		if o, fence, stamp, handed := wire.ParseWake(m); o == owner {
			ch.missed[i] = ""
			if handed {
				ch.handOverLocked(owner, handoff{fence, stamp})
			}
			signal(wake)
		}
	}
	return &waiter{h: h, ch: ch, channel: channel, owner: owner}
}

// leftLocked unsubscribes ch after linger if nobody waits on it any more.
func (h *hub) leftLocked(channel string, ch *wakeChannel) {
	switch {
	case len(ch.waiters) > 0:
	case ch.sub == nil || isClosed(h.closed):
		h.forgetLocked(channel, ch) // a subscribe on its way sets the timer when it lands
	case !ch.idling:
		h.idleLocked(channel, ch)
	}
}

// idleLocked starts ch's idle timer: ch is unsubscribed after linger unless
// someone waits on it again. The timer is reused: a Client that takes one
// lease after another idles its break channel at every release.
func (h *hub) idleLocked(channel string, ch *wakeChannel) {
	ch.idling = true
	if ch.idle == nil {
		ch.idle = time.AfterFunc(linger, func() { h.dropIdle(channel, ch) })
		return
	}
	ch.idle.Reset(linger)
}

// stopIdleLocked stops ch's idle timer. (A dropIdle that fired already
// finds the waiter and leaves ch alone.)
func stopIdleLocked(ch *wakeChannel) {
	if ch.idling {
		ch.idle.Stop()
		ch.idling = false
	}
}

// forgetLocked removes a channel that nobody waits on and that has no
// subscription, nor a subscribe or an unsubscribe on its way.
func (h *hub) forgetLocked(channel string, ch *wakeChannel) {
	if h.chans[channel] == ch && len(ch.waiters) == 0 && ch.sub == nil && ch.subscribing == nil && ch.dropping == nil {
		delete(h.chans, channel)
	}
}

// drop unsubscribes the channel's subscription s, if it is still the
// channel's, outside h.mu and bounded by ctx; meanwhile ch.dropping holds
// back a new subscribe.
func (h *hub) drop(ctx context.Context, channel string, ch *wakeChannel, s driver.Subscription) {
	if s == nil || !h.beginDrop(ch, s) {
		return
	}
	closeSub(ctx, s)
	h.endDrop(channel, ch)
}

// beginDrop takes s off ch, if it is still ch's subscription, and reports
// whether it was.
func (h *hub) beginDrop(ch *wakeChannel, s driver.Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch.sub != s {
		return false
	}
	ch.sub, ch.dropping = nil, make(chan struct{})
	return true
}

// endDrop lets a subscribe of ch go on, once its unsubscribe has returned.
func (h *hub) endDrop(channel string, ch *wakeChannel) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(ch.dropping)
	ch.dropping = nil
	if ch.onMessage != nil && len(ch.waiters) > 0 { // watched again meanwhile
		h.startSubscribeLocked(channel, ch)
	}
	h.forgetLocked(channel, ch)
}

// dropIdle unsubscribes a channel nobody waited on for linger.
func (h *hub) dropIdle(channel string, ch *wakeChannel) {
	if s := h.idleSub(channel, ch); s != nil {
		h.drop(context.Background(), channel, ch, s)
	}
}

// idleSub returns the subscription of ch if nobody waits on it.
func (h *hub) idleSub(channel string, ch *wakeChannel) driver.Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.chans[channel] != ch || len(ch.waiters) > 0 {
		return nil
	}
	ch.idling = false // the timer has fired
	return ch.sub
}

// subOf returns ch's subscription, nil if it has none.
func (h *hub) subOf(ch *wakeChannel) driver.Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	return ch.sub
}

// startSubscribe subscribes the channel on a goroutine of the hub's, unless
// a subscription, a subscribe or an unsubscribe is already there; it
// returns what to wait for: the subscribe's end, or the unsubscribe's
// (then try again), or nil if the channel has a subscription.
func (h *hub) startSubscribe(channel string, ch *wakeChannel) (subscribing, dropping chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.startSubscribeLocked(channel, ch)
}

// startSubscribeLocked is startSubscribe under h.mu.
func (h *hub) startSubscribeLocked(channel string, ch *wakeChannel) (subscribing, dropping chan struct{}) {
	switch {
	case ch.dropping != nil:
		return nil, ch.dropping
	case ch.subscribing != nil:
		return ch.subscribing, nil
	case ch.sub != nil:
		return nil, nil
	case isClosed(h.closed):
		return nil, h.closed
	}
	done := make(chan struct{})
	ch.subscribing = done
	h.work.Add(1)
	go h.subscribe(channel, ch, done)
	return done, nil
}

// subscribe makes the channel's subscription, and closes done.
func (h *hub) subscribe(channel string, ch *wakeChannel, done chan struct{}) {
	defer h.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeWait)
	defer cancel()
	s, err := h.driverSubscribe(ctx, channel, ch.classic)
	if !h.subscribed(channel, ch, done, s, err) && err == nil {
		closeSub(context.Background(), s)
	}
}

// subscribed records the end of ch's subscribe, which closes done: it keeps
// the subscription s and reports true, unless the subscribe failed or
// nobody needs it any more (the Client closed).
func (h *hub) subscribed(channel string, ch *wakeChannel, done chan struct{}, s driver.Subscription, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch.subscribing = nil
	close(done)
	if err != nil || isClosed(h.closed) || h.chans[channel] != ch {
		h.forgetLocked(channel, ch)
		if err != nil {
			h.retryLocked(channel, ch)
		}
		return false
	}
	ch.sub, ch.failures = s, 0
	if len(ch.waiters) == 0 && !ch.idling { // the waiters left meanwhile
		h.idleLocked(channel, ch)
	}
	return true
}

// driverSubscribe calls the driver's Subscribe; a panic there fails the
// subscription (the waiters go on on their timers) instead of the process.
func (h *hub) driverSubscribe(ctx context.Context, channel string, classic bool) (s driver.Subscription, err error) {
	defer func() {
		if v := recover(); v != nil {
			s, err = nil, fmt.Errorf("redlease: the Redis driver panicked in Subscribe: %v", v)
		}
	}()
	handle := func(payload string) { h.deliver(channel, payload) }
	if classic {
		s, err = h.conn.SubscribeClassic(ctx, channel, handle)
	} else {
		s, err = h.conn.Subscribe(ctx, channel, handle)
	}
	if err == nil && s == nil {
		err = fmt.Errorf("redlease: the Redis driver returned no subscription")
	}
	return s, err
}

// sleep waits for d, a wake-up (wake may be nil), or the end of ctx (then
// returning its cause) or of the Client.
func (h *hub) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	// An end that came first wins: the select below picks at random among
	// ready cases, and d may be 0.
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if isClosed(h.closed) {
		return ErrClientClosed
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
