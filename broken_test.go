package redlease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// watchingBreaks waits until c's hub has Redis's confirmation of its break
// channel for leases of the Client with id under prefix.
func watchingBreaks(t *testing.T, c *Client, prefix, id string) {
	t.Helper()
	channel := wire.BreakChannel(prefix, id)
	servertest.WaitFor(t, 5*time.Second, func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		ch := c.hub.chans[channel]
		return ch != nil && ch.sub != nil && isClosed(ch.sub.Ready())
	})
}

// breakSub returns the subscription of c's break channel under the default
// prefix, nil if it has none.
func breakSub(c *Client) any {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	if ch := c.hub.chans[wire.BreakChannel(DefaultPrefix, c.hub.id)]; ch != nil && ch.sub != nil {
		return ch.sub
	}
	return nil
}

// closeAtEnd closes c when the test ends.
func closeAtEnd(t *testing.T, c *Client) {
	t.Cleanup(func() { _ = c.Close(context.Background()) })
}

// A Break by another Client ends the holder's lease context within a round
// trip, not at its next renewal (TTL/3 = 10 s here), for every kind of
// lease; its Release then reports the loss.
func TestBreakEndsTheHolderAtOnce(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	holder := New(rdb, WithTTL(30*time.Second))
	closeAtEnd(t, holder)
	operator := New(rdb)
	closeAtEnd(t, operator)
	for _, tc := range []struct {
		kind    string
		acquire func(r string) (*Lease, error)
	}{
		{"exclusive", func(r string) (*Lease, error) { return holder.TryAcquire(ctx, r) }},
		{"permit", func(r string) (*Lease, error) { return holder.TryAcquireSemaphore(ctx, r, 2) }},
		{"read", func(r string) (*Lease, error) { return holder.TryAcquireRead(ctx, r) }},
		{"write", func(r string) (*Lease, error) { return holder.TryAcquireWrite(ctx, r) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			r := "broken-" + tc.kind
			l, err := tc.acquire(r)
			require.NoError(t, err)
			watchingBreaks(t, holder, DefaultPrefix, holder.hub.id)
			at := time.Now()
			_, removed, err := operator.Break(ctx, r, 0)
			require.NoError(t, err)
			require.True(t, removed)
			servertest.WaitDone(t, l.Context(), 5*time.Second)
			t.Logf("%s on miniredis: TTL 30s, Break at t, the holder's context ends at t + %v", tc.kind, time.Since(at))
			require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
			require.Contains(t, context.Cause(l.Context()).Error(), "broken")
			require.ErrorIs(t, l.Release(ctx), ErrLeaseLost)
		})
	}
}

// The Client that breaks its own lease ends it before Break returns.
func TestBreakOfTheClientsOwnLeaseEndsItAtOnce(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithTTL(30*time.Second))
	closeAtEnd(t, c)
	l, err := c.TryAcquire(ctx, "own")
	require.NoError(t, err)
	other, err := c.TryAcquire(ctx, "own-other")
	require.NoError(t, err)
	_, removed, err := c.Break(ctx, "own", l.Fence()+1)
	require.NoError(t, err)
	require.False(t, removed)
	require.NoError(t, l.Context().Err(), "not removed: still held")
	_, removed, err = c.Break(ctx, "own", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
	require.NoError(t, other.Context().Err(), "another resource's lease stays")
	require.NoError(t, other.Release(ctx))
}

// A message that names no lease of the Client's (another owner, another
// fence, another resource, or no message of break.lua's) ends nothing.
func TestBreakMessageForAnotherLeaseIsIgnored(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithTTL(30*time.Second))
	closeAtEnd(t, c)
	l, err := c.TryAcquire(ctx, "kept")
	require.NoError(t, err)
	m, err := c.TryAcquire(ctx, "ended")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id)
	channel := wire.BreakChannel(DefaultPrefix, c.hub.id)
	key := l.keys.Lease
	other, _ := newOwner(c.hub.id)
	for _, msg := range []string{
		other + ":1:" + key,
		l.Owner() + ":99:" + key,
		l.Owner() + ":1:" + m.keys.Lease,
		l.Owner(), "", "garbage:x:" + key,
	} {
		require.NoError(t, rdb.Publish(ctx, channel, msg).Err())
	}
	// The messages come in order on one subscription: once the last one's
	// lease has ended, the others have been read.
	_, _, err = New(rdb).Break(ctx, "ended", 0)
	require.NoError(t, err)
	servertest.WaitDone(t, m.Context(), 5*time.Second)
	require.NoError(t, l.Context().Err())
	require.NoError(t, l.Release(ctx))
}

// One subscription serves every lease of the Client: taking and releasing
// leases one after the other subscribes once.
func TestBreakChannelIsSubscribedOnceForManyLeases(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	closeAtEnd(t, c)
	l, err := c.TryAcquire(ctx, "first")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id)
	sub := breakSub(c)
	require.NoError(t, l.Release(ctx))
	for range 20 {
		l, err := c.TryAcquire(ctx, "next")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.True(t, sub == breakSub(c), "the same subscription")
	servertest.WaitFor(t, 5*time.Second, func() bool { return breakSub(c) == nil }) // dropped after linger

	// And again: a lease after the drop subscribes anew, and its release
	// lets the channel go after linger once more.
	l, err = c.TryAcquire(ctx, "after")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id)
	require.False(t, sub == breakSub(c), "a new subscription")
	require.NoError(t, l.Release(ctx))
	servertest.WaitFor(t, 5*time.Second, func() bool { return breakSub(c) == nil })
}

// A lease taken up with Resume hears of a Break on the channel of the
// Client that took it first, whose id its owner token carries.
func TestBreakReachesAResumedLease(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	first := New(rdb, WithTTL(30*time.Second))
	closeAtEnd(t, first)
	second := New(rdb)
	closeAtEnd(t, second)
	l, err := first.TryAcquire(ctx, "resumed")
	require.NoError(t, err)
	require.Equal(t, first.hub.id, l.Owner()[:8])
	require.NoError(t, l.Handoff())
	r, err := second.Resume(ctx, l.Token())
	require.NoError(t, err)
	watchingBreaks(t, second, DefaultPrefix, first.hub.id)
	_, removed, err := New(rdb).Break(ctx, "resumed", 0)
	require.NoError(t, err)
	require.True(t, removed)
	servertest.WaitDone(t, r.Context(), 5*time.Second)
	require.ErrorIs(t, context.Cause(r.Context()), ErrLeaseLost)
	// The count of the first Client's channel goes with the lease: a Client
	// that resumes the leases of many others keeps no count of each. The
	// lease's end untracks it after ending its context, in one hold of its
	// lock: once the lock is free, that is done.
	r.mu.Lock()
	r.mu.Unlock()
	second.mu.Lock()
	defer second.mu.Unlock()
	_, counted := second.held[breakWatch{prefix: DefaultPrefix, id: first.hub.id}]
	require.False(t, counted, "a count of the first Client's channel after its lease ended")
}

// On a real Redis too; the delay is logged for comparison with the
// renewal that found out before (TTL/3).
func TestBreakEndsTheHolderAtOnceOnRedis(t *testing.T) {
	for _, k := range servertest.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			srv := servertest.Start(t, k)
			rdb := srv.Client(t)
			ctx := t.Context()
			holder := New(rdb, WithTTL(30*time.Second))
			closeAtEnd(t, holder)
			l, err := holder.TryAcquire(ctx, "r")
			require.NoError(t, err)
			watchingBreaks(t, holder, DefaultPrefix, holder.hub.id)
			at := time.Now()
			_, removed, err := New(rdb).Break(ctx, "r", 0)
			require.NoError(t, err)
			require.True(t, removed)
			servertest.WaitDone(t, l.Context(), 5*time.Second)
			t.Logf("%s: TTL 30s, Break at t, the holder's context ends at t + %v", k, time.Since(at))
			require.ErrorIs(t, l.Release(ctx), ErrLeaseLost)
		})
	}
}

// failingSubscribes is a driver whose first subscribes fail.
type failingSubscribes struct {
	driver.Driver
	fail atomic.Int32 // subscribes left to fail
	made atomic.Int32 // subscribes tried
}

func (d *failingSubscribes) Subscribe(ctx context.Context, channel string, handle func(string)) (driver.Subscription, error) {
	d.made.Add(1)
	if d.fail.Add(-1) >= 0 {
		return nil, errors.New("test: subscribe refused")
	}
	return d.Driver.Subscribe(ctx, channel, handle)
}

// failingClient returns a Client on miniredis whose driver refuses the
// first fails subscribes, that driver, and a go-redis client of the server.
func failingClient(t *testing.T, fails int32, opts ...Option) (*redis.Client, *failingSubscribes, *Client) {
	_, rdb := servertest.Mini(t)
	gd, err := goredis.New(rdb)
	require.NoError(t, err)
	d := &failingSubscribes{Driver: gd}
	d.fail.Store(fails)
	c := NewWithDriver(d, opts...)
	closeAtEnd(t, c)
	return rdb, d, c
}

// A break channel whose subscribe failed is subscribed again while the
// Client holds leases (not only at its next first lease), so that a
// holder of a long lease hears of a Break.
func TestBreakChannelIsSubscribedAgainAfterAFailure(t *testing.T) {
	rdb, d, c := failingClient(t, 2, WithTTL(30*time.Second))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "long")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id) // after 100 ms and 200 ms more
	require.Equal(t, int32(3), d.made.Load(), "two failures, then the subscription")

	operator := New(rdb)
	closeAtEnd(t, operator)
	_, removed, err := operator.Break(ctx, "long", 0)
	require.NoError(t, err)
	require.True(t, removed)
	servertest.WaitDone(t, l.Context(), 5*time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
}

// Once the Client holds no lease, a failed break channel is not tried
// again.
func TestBreakChannelIsNotSubscribedAgainWhenNothingIsHeld(t *testing.T) {
	_, d, c := failingClient(t, 1000)
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "short")
	require.NoError(t, err)
	servertest.WaitFor(t, 5*time.Second, func() bool { return d.made.Load() >= 1 })
	require.NoError(t, l.Release(ctx))
	made := d.made.Load()
	time.Sleep(3 * resubscribeMin)
	require.LessOrEqual(t, d.made.Load(), made+1, "at most a retry already under way")
}
