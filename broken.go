package redlease

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redlease/redlease/internal/wire"
)

// How a Break reaches the holder of the lease it removes, at once rather
// than at the holder's next renewal.
//
// An owner token begins with the 8 hex digits of its Client's id (see
// newOwner), so break.lua, which reads the lease's value, knows whose it
// is: it publishes '<owner>:<fence>:<lease key>' on that Client's break
// channel, <prefix>break:<id> (wire.BreakChannel), a classic channel on
// Cluster too. While a Client tracks leases (client.go), its hub keeps
// subscribed the break channel of each key prefix they were taken under,
// and for linger more after the last one, so that taking and releasing
// leases costs no subscribe: one subscription for all of them, made on a
// goroutine of the hub's, never on an acquire's way. A message ends the
// lease it names with ErrLeaseLost; one that names no lease of the Client's
// is ignored. A lease taken up with Resume watches its first holder's
// Client's channel, whose id its owner token carries.
//
// A message can be lost (a subscription not confirmed yet, a reconnect, a
// driver without driver.ClassicSubscriber on Cluster, an ACL that denies
// the channel): then the holder finds out at its next renewal, as it did
// before. A subscribe that failed is tried again while the Client holds
// leases under the prefix, after 100 ms, doubling up to 30 s; a
// subscription that ended by itself (its client library was closed) is
// made again only when the Client holds a lease under the prefix again
// after holding none. A lease deleted by hand (DEL) publishes nothing.

// breakWatch names a break channel by its parts: the key prefix and the
// Client id, the first 8 characters of an owner token. As a map key it
// costs no allocation.
type breakWatch struct{ prefix, id string }

func (w breakWatch) channel() string { return wire.BreakChannel(w.prefix, w.id) }

// watchOf is the break channel that tells l of a Break.
func watchOf(l *Lease) breakWatch {
	return breakWatch{prefix: l.cfg.prefix, id: l.owner[:min(8, len(l.owner))]}
}

// holdLocked counts l, just tracked, on its break channel, which the hub
// subscribes from its first lease on (c.mu held).
func (c *Client) holdLocked(l *Lease) {
	w := watchOf(l)
	h := c.held[w]
	if h.channel == "" {
		h.channel = w.channel()
	}
	if h.n++; h.n == 1 {
		c.hub.watch(h.channel, c.breakHandler)
	}
	c.held[w] = h
}

// unholdLocked undoes holdLocked for l, just untracked (c.mu held). The
// count of the Client's own channel under a prefix stays in c.held at 0,
// with the channel's name, which one lease after another then does not
// make again; another Client's (a resumed lease's) goes.
func (c *Client) unholdLocked(l *Lease) {
	w := watchOf(l)
	h := c.held[w]
	if h.n--; h.n > 0 {
		c.held[w] = h
		return
	}
	if w.id == c.hub.id {
		c.held[w] = heldCount{channel: h.channel}
	} else {
		delete(c.held, w)
	}
	c.hub.unwatch(h.channel)
}

// heldCount is how many tracked leases a break channel tells, and the
// channel's name.
type heldCount struct {
	n       int
	channel string
}

// onBreak is the handler of the break channels' messages. It must not
// block: it ends the lease on a goroutine of the Client's.
func (c *Client) onBreak(payload string) {
	key, owner, fence, ok := parseBroken(payload)
	if !ok {
		return
	}
	c.spawn(func() { c.endBroken(key, owner, fence) })
}

// parseBroken reads a break channel's message, '<owner>:<fence>:<lease key>'.
func parseBroken(payload string) (key, owner string, fence int64, ok bool) {
	owner, rest, ok := strings.Cut(payload, ":")
	if !ok {
		return "", "", 0, false
	}
	fenceText, key, ok := strings.Cut(rest, ":")
	if !ok {
		return "", "", 0, false
	}
	fence, err := strconv.ParseInt(fenceText, 10, 64)
	if err != nil {
		return "", "", 0, false
	}
	return key, owner, fence, true
}

// endBroken ends the Client's lease of lease key key with owner and fence,
// if it holds one, with ErrLeaseLost: Break removed it from Redis.
//
// Model: model/redlease.pml, inline onbreak.
func (c *Client) endBroken(key, owner string, fence int64) {
	c.mu.Lock()
	var found []*Lease
	for l := range c.leases {
		if l.owner == owner && l.fence == fence && l.keys.Lease == key {
			found = append(found, l)
		}
	}
	c.mu.Unlock()
	for _, l := range found {
		l.mu.Lock()
		var lost pending
		switch l.state {
		case stateActive:
			lost = l.endLocked(stateLost, errorf("%w: %s was broken (Client.Break): its lease was removed from Redis",
				ErrLeaseLost, quote(l.resource)))
		case stateLapsed: // Redis holds nothing left for Close to release
			l.untrackLocked()
		}
		l.mu.Unlock()
		lost.emit(context.Background()) // lease events carry the lease's own context
	}
}

// endBrokenHere ends at once, before Break returns, the leases of the
// Client's that its own Break removed (the break channel would tell it a
// round trip later): of the status st read before the removal, those with
// fence, or all for fence 0.
func (c *Client) endBrokenHere(key string, st Status, fence int64) {
	if st.Kind == "lease" && (fence == 0 || st.Fence == fence) {
		c.endBroken(key, st.Owner, st.Fence)
	}
	for _, h := range st.Shared {
		if fence == 0 || h.Fence == fence {
			c.endBroken(key, h.Owner, h.Fence)
		}
	}
}

// The hub's side: the break channels it keeps subscribed (see hub).

// holding is the waiter of a break channel that the Client watches.
const holding = ""

// watch keeps the break channel subscribed, with onMessage as the handler
// of its messages, until unwatch (and linger more). It subscribes on a
// goroutine of the hub's and does not wait for it: a message published
// before Redis confirms the subscription is lost. A subscribe that fails
// is tried again after a backoff while the channel is watched
// (retryLocked), and at the next watch.
func (h *hub) watch(channel string, onMessage func(payload string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if isClosed(h.closed) {
		return
	}
	ch := h.chans[channel]
	if ch == nil {
		ch = &wakeChannel{waiters: map[string]chan struct{}{}, classic: true, onMessage: onMessage}
		h.chans[channel] = ch
	}
	stopIdleLocked(ch)
	ch.waiters[holding] = nil
	h.startSubscribeLocked(channel, ch)
}

// unwatch ends a watch: the break channel stays subscribed for linger.
func (h *hub) unwatch(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.chans[channel]; ch != nil {
		delete(ch.waiters, holding)
		if ch.retry != nil {
			ch.retry.Stop()
			ch.retry = nil
		}
		h.leftLocked(channel, ch)
	}
}

// retryLocked subscribes a watched break channel again, after a backoff,
// once its subscribe has failed: a Client that holds leases for long (an
// election's leader) must not stay deaf to breaks because one subscribe
// failed. A wake channel needs no such timer: its waiters subscribe again
// at their next attempt.
func (h *hub) retryLocked(channel string, ch *wakeChannel) {
	if _, watched := ch.waiters[holding]; !watched || !ch.classic || isClosed(h.closed) || h.chans[channel] != ch || ch.retry != nil {
		return
	}
	d := min(resubscribeMin<<min(ch.failures, 16), resubscribeMax)
	ch.failures++
	ch.retry = time.AfterFunc(d, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		ch.retry = nil
		if _, watched := ch.waiters[holding]; watched && h.chans[channel] == ch {
			h.startSubscribeLocked(channel, ch)
		}
	})
}
