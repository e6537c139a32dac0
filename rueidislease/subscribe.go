package rueidislease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/driver"
)

// Subscriptions. Each is one Receive call of the client, on a goroutine
// that the subscription owns: SUBSCRIBE, or on Cluster SSUBSCRIBE on the
// master that serves the channel's slot (SubscribeClassic: SUBSCRIBE there,
// and UNSUBSCRIBE sent to the same node).
//
// Without Cluster (a single server, Sentinel), every subscription of the
// driver goes on one connection of its own, taken from the client with
// Dedicate when the first one starts and closed when the last one ends:
// rueidis writes and reads a request on the caller's goroutine while
// nothing else uses the connection and the request's context allows it,
// and a Receive on the shared connection would end that for good (every
// request would then go through the pipelining goroutines: the bench's
// uncontended fenced floor took 1.3 to 1.7 times as long on a subscribed
// client, see docs/PERFORMANCE.md). The connection breaks: each
// subscription on it takes a new one and subscribes again, after a backoff
// (10 ms, doubling up to 1 s), for as long as it is not closed, as rueidis
// does on the shared connection; messages published meanwhile are lost, which
// redlease's timers cover. A dedicated connection is not closed by the
// client's Close: a subscription made before the client was closed lasts
// until its own Close (or until its connection breaks), so close the
// redlease Client before the rueidis client. (With RESP2, rueidis puts
// the dedicated connection's subscriptions on one more connection of
// their own.)
//
// On Cluster, rueidis puts a subscription on the connection to the node
// that it shares with other commands, and what Receive does when things
// change (unless ClientOption.DisableRetry, and as of the versions named
// in the package documentation):
//   - The connection breaks: Receive subscribes again on a new one, with
//     backoff (at most 1 s), for as long as its context lasts. Each try
//     goes to the node that the slot map names then, and the failure has
//     the map refreshed in the background, so the subscription follows a
//     failover; a MOVED answer is retried the same way. The subscription
//     stays: messages published meanwhile are lost.
//   - The channel's slot moves to another node: the node sends
//     sunsubscribe, Receive returns nil, and the subscription ends (Done).
//
// Everywhere, the subscription ends (Done) with Receive's error when the
// server refuses the subscribe, or the rueidis client is closed
// (ErrClosing) when a subscription needs a connection.

// subscription is one channel subscribed with Subscribe.
type subscription struct {
	client  rueidis.Client
	ps      *pubsub           // the dedicated connection's keeper; nil on Cluster
	unsub   rueidis.Completed // UNSUBSCRIBE or SUNSUBSCRIBE channel
	handle  func(string)
	cancel  context.CancelFunc // ends Receive
	ready   chan struct{}
	confirm sync.Once
	done    chan struct{} // closed when Receive returned without Close
	exited  chan struct{} // closed when the goroutine has ended
	err     error         // Receive's error, set before exited is closed

	mu     sync.Mutex // held while handle runs, so that Close can stop it
	closed bool
	dc     rueidis.DedicatedClient // the connection the subscription is on; nil on Cluster
}

// Subscribe implements driver.Driver: it starts Receive on a goroutine of
// the subscription's and returns once Redis has confirmed the subscription,
// or with the error of Receive if it ended first, or with the error of ctx
// if ctx ended first. Then it closes the subscription as Close does, with
// ctx, which has ended: the goroutine ends as soon as Receive sees its
// context cancelled (at once, unless rueidis is dialling), after Subscribe
// has returned; and a SUBSCRIBE that was on its way is not undone (the
// server delivers that channel to the connection, for nothing, until the
// next UNSUBSCRIBE of it or the connection's end).
func (d *rdriver) Subscribe(ctx context.Context, channel string, handle func(payload string)) (driver.Subscription, error) {
	return d.subscribe(ctx, channel, handle, false)
}

var _ driver.ClassicSubscriber = (*rdriver)(nil)

// SubscribeClassic implements driver.ClassicSubscriber as Subscribe does,
// with SUBSCRIBE on Cluster too. A classic channel has no slot, and rueidis
// would send its SUBSCRIBE and UNSUBSCRIBE to any node, each to its own: both
// are sent to the master of the channel's slot instead, as if it were a key.
func (d *rdriver) SubscribeClassic(ctx context.Context, channel string, handle func(payload string)) (driver.Subscription, error) {
	return d.subscribe(ctx, channel, handle, d.cluster)
}

// subscribe is Subscribe, of a classic channel on Cluster if classic.
func (d *rdriver) subscribe(ctx context.Context, channel string, handle func(payload string), classic bool) (driver.Subscription, error) {
	b := d.client.B()
	var sub rueidis.Completed
	s := &subscription{client: d.client, ps: d.pubsub, handle: handle,
		ready: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{})}
	switch {
	case classic:
		sub = b.Subscribe().Channel(channel).Build().SetSlot(channel)
		s.unsub = b.Unsubscribe().Channel(channel).Build().SetSlot(channel)
	case d.cluster:
		sub, s.unsub = b.Ssubscribe().Channel(channel).Build(), b.Sunsubscribe().Channel(channel).Build()
	default:
		sub, s.unsub = b.Subscribe().Channel(channel).Build(), b.Unsubscribe().Channel(channel).Build()
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// The hook runs on the goroutine that reads the connection: it must not
	// block. It is called at every confirmation (after a reconnect too).
	rctx = rueidis.WithOnSubscriptionHook(rctx, func(m rueidis.PubSubSubscription) {
		if (m.Kind == "subscribe" || m.Kind == "ssubscribe") && m.Channel == channel {
			s.confirm.Do(func() { close(s.ready) })
		}
	})
	go s.receive(rctx, sub)

	select {
	case <-s.ready:
		return s, nil
	case <-s.exited:
		if s.err == nil {
			return nil, errors.New("rueidislease: the subscription to " + channel + " ended before Redis confirmed it")
		}
		return nil, s.err
	case <-ctx.Done():
		_ = s.Close(ctx)
		return nil, ctx.Err()
	}
}

// receive runs Receive until it returns, then closes done unless Close was
// called.
func (s *subscription) receive(ctx context.Context, sub rueidis.Completed) {
	defer close(s.exited)
	fn := func(m rueidis.PubSubMessage) { s.deliver(m.Message) }
	if s.ps == nil {
		s.err = s.client.Receive(ctx, sub, fn)
	} else {
		s.err = s.receiveDedicated(ctx, sub, fn)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		close(s.done)
	}
}

// Backoff of a subscription whose dedicated connection broke.
const (
	resubscribeMin = 10 * time.Millisecond
	resubscribeMax = time.Second
)

// receiveDedicated runs Receive on the driver's dedicated connection, and
// again on a new one when the connection breaks, until ctx ends, the
// server ends the subscription (nil) or refuses it, or the client is
// closed.
func (s *subscription) receiveDedicated(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	for failures := 0; ; failures++ {
		dc := s.ps.take()
		s.mu.Lock()
		s.dc = dc
		s.mu.Unlock()
		began := time.Now()
		err := dc.Receive(ctx, sub, fn)
		// Broken: an error of the connection. ErrDedicatedClientRecycled is
		// one too: another subscription found the connection broken and
		// closed it between this take and this Receive.
		var rerr *rueidis.RedisError
		broken := err != nil && ctx.Err() == nil && !errors.As(err, &rerr) && !errors.Is(err, rueidis.ErrClosing)
		s.ps.give(dc, broken)
		if !broken {
			return err
		}
		if time.Since(began) > resubscribeMax { // it had been up: not a failure in a row
			failures = 0
		}
		t := time.NewTimer(min(resubscribeMin<<min(failures, 7), resubscribeMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// pubsub keeps the dedicated connection that a non-Cluster driver's
// subscriptions share (see the top of this file).
type pubsub struct {
	client rueidis.Client

	mu    sync.Mutex
	dc    rueidis.DedicatedClient // nil when no subscription has it
	users int                     // subscriptions between take and give
}

// take returns the connection, dedicating one if there is none. Dedicate
// dials (bounded by the client's dial timeout) under p.mu: the other
// subscriptions would wait for that connection anyway.
func (p *pubsub) take() rueidis.DedicatedClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dc == nil {
		p.dc, _ = p.client.Dedicate() // closed, not given back: see give
	}
	p.users++
	return p.dc
}

// give ends a take of dc: its Receive has returned. The connection closes
// when dc broke (the next take dedicates another) or nobody uses it any
// more; closing, rather than giving it back to the client's pool, also
// ends on the server whatever it was still subscribed to.
func (p *pubsub) give(dc rueidis.DedicatedClient, broken bool) {
	p.mu.Lock()
	p.users--
	var end rueidis.DedicatedClient
	if p.dc != nil && (p.users == 0 || broken && p.dc == dc) {
		end, p.dc = p.dc, nil
	}
	p.mu.Unlock()
	if end != nil {
		end.Close()
	}
}

// deliver passes a message to handle, unless the subscription is closed.
func (s *subscription) deliver(payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.handle(payload)
	}
}

// Ready implements driver.Subscription.
func (s *subscription) Ready() <-chan struct{} { return s.ready }

// Done implements driver.Subscription. rueidis resubscribes by itself after
// a reconnect, and on Cluster after a failover, so Done closes only when
// Receive has returned (see the top of this file).
func (s *subscription) Done() <-chan struct{} { return s.done }

// Close implements driver.Subscription. It sends UNSUBSCRIBE (SUNSUBSCRIBE)
// with ctx, on the subscription's dedicated connection, or on Cluster
// through the client, which routes it to the connection that carries the
// subscription (by the channel's slot); the server's confirmation ends
// Receive. Then it ends Receive by its context, in case the unsubscribe
// did not, and waits for the goroutine until ctx ends. An UNSUBSCRIBE is
// needed: a Receive ended by its context alone leaves the connection
// subscribed on the server (a dedicated connection that nobody uses any
// more is closed instead). handle is not called once Close has begun.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	dc := s.dc
	// Done closed: Receive returned by itself (on Cluster, the server
	// unsubscribed the channel when its slot moved), and an unsubscribe
	// now would get NOSUB. exited closes a moment later.
	ended := isClosed(s.done)
	s.mu.Unlock()

	var err error
	switch {
	case !first || ended || isClosed(s.exited):
	case s.ps == nil:
		err = errorOf(s.client.Do(ctx, s.unsub))
	case dc != nil:
		// A connection that broke meanwhile, or that was given up, has
		// nothing left to unsubscribe.
		if err = errorOf(dc.Do(ctx, s.unsub)); errors.Is(err, rueidis.ErrDedicatedClientRecycled) {
			err = nil
		}
	}
	s.cancel()
	select {
	case <-s.exited:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
