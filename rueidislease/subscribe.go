package rueidislease

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/driver"
)

// Subscriptions. Each is one Receive call of the client, on a goroutine
// that the subscription owns: SUBSCRIBE, or on Cluster SSUBSCRIBE on the
// master that serves the channel's slot (SubscribeClassic: SUBSCRIBE there,
// and UNSUBSCRIBE sent to the same node). rueidis puts it on a connection
// that it shares with other commands (RESP3; with RESP2, on a connection
// of its own for all subscriptions), and delivers its messages to the
// goroutine.
//
// What Receive does when things change (unless ClientOption.DisableRetry,
// and as of the versions named in the package documentation):
//   - The connection breaks: Receive subscribes again on a new one, with
//     backoff (at most 1 s), for as long as its context lasts. On Cluster
//     each try goes to the node that the slot map names then, and the
//     failure has the map refreshed in the background, so the
//     subscription follows a failover; a MOVED answer is retried the same
//     way. The subscription stays: messages published meanwhile are lost,
//     which redlease's timers cover.
//   - On Cluster the channel's slot moves to another node: the node sends
//     sunsubscribe, Receive returns nil, and the subscription ends (Done).
//   - The rueidis client is closed (ErrClosing), the server refuses the
//     subscribe, or DisableRetry is set and the connection breaks: Receive
//     returns its error, and the subscription ends.

// subscription is one channel subscribed with Subscribe.
type subscription struct {
	client  rueidis.Client
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
	s := &subscription{client: d.client, handle: handle,
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
	s.err = s.client.Receive(ctx, sub, func(m rueidis.PubSubMessage) { s.deliver(m.Message) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		close(s.done)
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
// with ctx; the server's confirmation ends Receive, which rueidis routes to
// the connection that carries the subscription (by the channel's slot on
// Cluster). Then it ends Receive by its context, in case the unsubscribe
// did not, and waits for the goroutine until ctx ends. An UNSUBSCRIBE is
// needed: a Receive ended by its context alone leaves the connection
// subscribed on the server. handle is not called once Close has begun.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()

	var err error
	if first && !isClosed(s.exited) {
		err = errorOf(s.client.Do(ctx, s.unsub))
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
