package redlease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// dropIdle sends its UNSUBSCRIBE outside h.mu; a waiter that joins the
// same channel meanwhile subscribes it again through the same connection.
// Its SUBSCRIBE must reach Redis after the UNSUBSCRIBE: the other way round,
// Redis ended up unsubscribed while the hub believed the channel subscribed,
// so no waiter subscribed again and every wake-up was lost (hit within a few
// iterations before the fix).
func TestHubSubscribeAfterDropIdleReachesRedisLast(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	h := testHub(t, rdb)
	defer h.close(context.Background())
	ctx := context.Background()

	// A second channel keeps the connection open, so dropIdle's release is
	// not the last and it sends UNSUBSCRIBE.
	keep := h.join("keep", "k", make(chan struct{}, 1))
	if !keep.subscribe(ctx) {
		t.Fatal("keep channel not subscribed")
	}
	defer keep.leave()

	const channel = "redlease:{r}:wake:x"
	for i := range 300 {
		a := h.join(channel, "a", make(chan struct{}, 1))
		if !a.subscribe(ctx) {
			t.Fatal("not subscribed")
		}
		a.leave()
		h.mu.Lock()
		ch := h.chans[channel]
		ch.idle.Stop() // we fire it ourselves, concurrently with a new waiter
		h.mu.Unlock()

		owner := fmt.Sprint("b", i)
		wake := make(chan struct{}, 1)
		var b *waiter
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); h.dropIdle(channel, ch) }()
		go func() {
			defer wg.Done()
			for j := rand.IntN(200); j > 0; j-- { // vary the interleaving a little
				_ = j * j
			}
			b = h.join(channel, owner, wake)
			b.subscribe(ctx)
		}()
		wg.Wait()
		time.Sleep(5 * time.Millisecond) // let both commands reach Redis

		believed := b.subscribed(context.Background())
		n, err := rdb.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if believed && n[channel] == 0 {
			// Prove the consequence: a release's wake-up for b is lost.
			rdb.Publish(ctx, channel, owner)
			select {
			case <-wake:
				t.Logf("iteration %d: server says unsubscribed but the message arrived?", i)
			case <-time.After(300 * time.Millisecond):
				b2 := h.join(channel, "c", make(chan struct{}, 1))
				t.Fatalf("iteration %d: the hub believes %s subscribed (a new waiter's subscribed()=%v, so it will not subscribe again), "+
					"Redis has 0 subscribers, and a wake-up published for %s was lost", i, channel, b2.subscribed(context.Background()), owner)
			}
		}
		b.leave()
		h.mu.Lock()
		ch = h.chans[channel]
		if ch != nil && ch.idle != nil {
			ch.idle.Stop()
		}
		h.mu.Unlock()
		if ch != nil {
			h.dropIdle(channel, ch)
		}
	}
}

// The hub closes a subscription connection without holding h.mu: go-redis
// holds a PubSub's own lock across a reconnect (dial and handshake), and
// every join, leave and delivery of the Client, on every resource, would
// wait for that (9 s here before the fix).
func TestHubClosesSubscriptionsWithoutItsLock(t *testing.T) {
	srv := servertest.Redis(t)
	p := servertest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	h := testHub(t, rdb)
	defer h.close(context.Background())
	ctx := context.Background()

	w := h.join("redlease:{a}:wake:x", "a", make(chan struct{}, 1))
	if !w.subscribe(ctx) {
		t.Fatal("not subscribed")
	}
	w.leave() // idle: dropIdle in 500 ms closes the connection under h.mu
	p.Blackhole()
	p.Reset() // the subscription connection breaks; go-redis redials into the blackhole
	time.Sleep(700 * time.Millisecond)

	start := time.Now()
	jctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w2 := h.join("redlease:{b}:wake:x", "b", make(chan struct{}, 1)) // another resource; no I/O
		w2.leave()
	}()
	select {
	case <-done:
	case <-jctx.Done():
		<-done
		t.Fatalf("join+leave (no I/O) of an unrelated resource took %v: h.mu was held across a PubSub reconnect", time.Since(start))
	}
	p.Heal()
}

// A sleep whose context has ended, or whose Client has closed, returns that
// end, also when asked to sleep for 0. (It returned nil about half the time,
// and the acquire call tried once more on a dead context.)
func TestHubSleepReturnsAnEndThatCameFirst(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := testHub(t, rdb)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("gone"))
	for range 200 {
		require.EqualError(t, h.sleep(ctx, nil, 0), "gone")
	}
	h.close(context.Background())
	for range 200 {
		require.ErrorIs(t, h.sleep(context.Background(), nil, 0), ErrClientClosed)
	}
}

// A *redis.Ring is refused at once, on every call, with a reason: it would
// spread a resource's keys over shards that no one script can reach.
func TestRingIsRefused(t *testing.T) {
	srv := servertest.Redis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	c := New(ring)
	_, err := c.TryAcquire(t.Context(), "r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "*redis.Ring is not supported")
	_, err = c.Acquire(t.Context(), "r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = c.Inspect(t.Context(), "r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.NoError(t, c.Close(t.Context()))
}
