package redlease

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// countScript counts the calls of the named script that rdb sends.
func countScript(t *testing.T, rdb *redis.Client, name string) *atomic.Int64 {
	s := wire.Named(name)
	hash, err := rdb.ScriptLoad(t.Context(), s.Source()).Result() // the server's: under FIPS 140-only, the process has none
	require.NoError(t, err)
	h := &scriptCounter{hash: hash, src: s.Source()}
	rdb.AddHook(h)
	return &h.n
}

type scriptCounter struct {
	hash, src string
	n         atomic.Int64
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	arg := args[1]
	if p, ok := arg.(*string); ok { // how the driver sends the hash
		arg = *p
	}
	if cmd.Name() == "evalsha" && arg == h.hash || cmd.Name() == "eval" && arg == h.src {
		h.n.Add(1)
	}
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// waitAsleep waits until the Client's one waiter sleeps: it found the lease
// busy, asked for a handoff and has its wake channel subscribed.
func waitAsleep(t *testing.T, c *Client) {
	t.Helper()
	servertest.WaitFor(t, 10*time.Second, func() bool { return c.hub.asleep.Load() == 1 })
}

// A release hands the lease to the waiter that asked, in the same step: a
// new fence, the waiter's TTL and holder, and the waiter holds it without
// another attempt.
func TestReleaseHandsTheLeaseToTheWaiter(t *testing.T) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	holder := New(srv.Client(t))
	rdb := srv.Client(t)
	attempts := countScript(t, rdb, "acquire.lua")
	clk := clock.NewFake(time.Now()) // the waiter's timers stay still: only a wake-up moves it
	waiter := New(rdb, clock.Option(clk).(Option))
	t.Cleanup(func() { _ = waiter.Close(context.Background()) })

	l, err := holder.TryAcquire(ctx, "r", WithTTL(10*time.Second))
	require.NoError(t, err)
	got := make(chan acquired, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "r", WithTTL(20*time.Second), WithHolder("b"))
		got <- acquired{w, err}
	}()
	waitAsleep(t, waiter)
	before := attempts.Load()
	start := clk.Now()

	require.NoError(t, l.Release(ctx))
	a := servertest.Recv(t, got, 10*time.Second)
	require.NoError(t, a.err)
	require.Greater(t, a.l.Fence(), l.Fence())
	require.Equal(t, strconv.FormatInt(a.l.Fence(), 10), rdb.Get(ctx, counterKey("r")).Val()) // drawn by the release
	require.Equal(t, before, attempts.Load(), "acquire attempts after the wake-up")
	value, err := rdb.Get(ctx, "redlease:{r}:lease").Result()
	require.NoError(t, err)
	require.Equal(t, a.l.Owner()+":"+strconv.FormatInt(a.l.Fence(), 10)+":b", value)
	require.Greater(t, rdb.PTTL(ctx, "redlease:{r}:lease").Val(), 19*time.Second) // the waiter's TTL
	require.Equal(t, int64(0), rdb.Exists(ctx, "redlease:{r}:queue", "redlease:{r}:alive").Val())
	// The waiter's clock did not move: its deadline counts from its attempt.
	require.Equal(t, start.Add(a.l.cfg.lifetime()), a.l.Deadline())
	require.NoError(t, a.l.Release(ctx))
}

// A wake-up that does not arrive costs the waiter only its timer: its next
// attempt finds the lease handed to it, and takes it with the same fence.
func TestHandoffWithoutItsWakeUp(t *testing.T) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	holder := New(srv.Client(t))
	rdb := srv.Client(t)
	attempts := countScript(t, rdb, "acquire.lua")
	clk := clock.NewFake(time.Now())
	waiter := New(rdb, clock.Option(clk).(Option))
	t.Cleanup(func() { _ = waiter.Close(context.Background()) })

	l, err := holder.TryAcquire(ctx, "r")
	require.NoError(t, err)
	got := make(chan acquired, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "r", WithHolder("w"))
		got <- acquired{w, err}
	}()
	waitAsleep(t, waiter)
	k := wire.KeysOf(DefaultPrefix, "r")
	channel := k.WakeChannel(waiter.hub.id)
	h := waiter.hub
	h.mu.Lock()
	ch := h.chans[channel]
	h.mu.Unlock()
	h.drop(ctx, channel, ch, h.subOf(ch)) // the message finds no subscriber
	before := attempts.Load()

	require.NoError(t, l.Release(ctx))
	value := rdb.Get(ctx, "redlease:{r}:lease").Val()
	counter := rdb.Get(ctx, counterKey("r")).Val() // the handed lease's fence
	select {
	case a := <-got:
		t.Fatalf("the waiter returned without a wake-up: %v", a.err)
	case <-time.After(100 * time.Millisecond):
	}
	clk.Advance(waitBackoffMax + time.Millisecond) // the waiter's timer
	a := servertest.Recv(t, got, 10*time.Second)
	require.NoError(t, a.err)
	require.Equal(t, before+1, attempts.Load())
	require.Equal(t, counter, strconv.FormatInt(a.l.Fence(), 10))
	require.Equal(t, a.l.Owner()+":"+counter+":w", value)          // handed over before the attempt
	require.Equal(t, counter, rdb.Get(ctx, counterKey("r")).Val()) // no fence burnt by the attempt
	require.NoError(t, a.l.Release(ctx))
}

// handoffScene is a resource "r" held by l, on Client c, and a subscription
// to the wake channel of the Client "c1d2e3f4", whose waiters the test
// plays by sending acquire.lua itself (asking).
func handoffScene(t *testing.T) (*redis.Client, *Client, *Lease, *redis.PubSub) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	rdb := srv.Client(t)
	c := New(rdb)
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	k := wire.KeysOf(DefaultPrefix, "r")
	sub := rdb.Subscribe(ctx, k.WakeChannel(sceneClient))
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Receive(ctx) // the confirmation
	require.NoError(t, err)
	return rdb, c, l, sub
}

const sceneClient = "c1d2e3f4"

// asking queues owner (member) on "r" as a waiter that asks for a handoff
// with stamp.
func asking(t *testing.T, c *Client, owner, member, stamp string) {
	k := wire.KeysOf(DefaultPrefix, "r")
	got, err := wire.ParseAcquire(c.conn.Run(t.Context(), wire.Acquire(&k, owner, member, "10000", true, false, false, "", stamp)), 1)
	require.NoError(t, err)
	require.NotNil(t, got.Busy)
}

// A waiter handed a lease that leaves instead (its context ended) releases
// it, and the release hands it on to the next waiter; each message carries
// the fence and the stamp that its waiter sent.
func TestHandoffToAWaiterThatLeftIsHandedOn(t *testing.T) {
	ctx := t.Context()
	rdb, c, l, sub := handoffScene(t)
	k := wire.KeysOf(DefaultPrefix, "r")
	x, xm := newOwner(sceneClient)
	y, ym := newOwner(sceneClient)
	asking(t, c, x, xm, "5")
	asking(t, c, y, ym, "7")

	require.NoError(t, l.Release(ctx))
	f, err := rdb.Get(ctx, counterKey("r")).Int64() // x's and y's busy attempts drew fences too
	require.NoError(t, err)
	require.Greater(t, f, l.Fence())
	require.Equal(t, x+":"+strconv.FormatInt(f, 10)+"\x00", rdb.Get(ctx, k.Lease).Val()) // marked: y waits
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, x+":"+strconv.FormatInt(f, 10)+":5", msg.Payload)

	ok, err := wire.Done(c.conn.Run(ctx, wire.Release(&k, x, xm, false))) // x leaves
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, y+":"+strconv.FormatInt(f+1, 10), rdb.Get(ctx, k.Lease).Val())
	msg, err = sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, y+":"+strconv.FormatInt(f+1, 10)+":7", msg.Payload)
	require.Equal(t, int64(0), rdb.Exists(ctx, k.Queue, k.Alive).Val())
}

// A handoff counts the lease's deadline from the stamp of the attempt that
// asked for it. One younger than half the lease's lifetime is taken as it
// is, without a request; an older one, and a stamp the waiter cannot have
// sent, are confirmed by an attempt.
func TestHandoffIsTakenOnlyWhileFresh(t *testing.T) {
	srv := servertest.Redis(t)
	ctx := t.Context()
	rdb := srv.Client(t)
	clk := clock.NewFake(time.Now())
	c := New(rdb, WithTTL(10*time.Second), clock.Option(clk).(Option))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	cfg, err := c.leaseConfig([]string{"r"}, nil)
	require.NoError(t, err)
	half := cfg.lifetime() / 2

	// claim on a waiter that was handed fence 41 by a message with stamp,
	// age after its base.
	claim := func(stamp int64, age time.Duration) *Lease {
		a := &acquisition{c: c, cfg: cfg, wait: true, kind: kindExclusive, sent: true, queued: true}
		a.owner, a.member = newOwner(c.hub.id)
		a.resource[0], a.name[0] = "r", wire.KeysOf(cfg.prefix, "r")
		a.resources, a.names = a.resource[:], a.name[:]
		require.True(t, a.asksHandoff())
		a.base = clk.Now()
		w := &waitState{wake: make(chan struct{}, 1)}
		w.waiters = []*waiter{c.hub.join(a.names[0].WakeChannel(c.hub.id), a.owner, w.wake)}
		defer w.leave()
		c.hub.deliver(a.names[0].WakeChannel(c.hub.id), a.owner+":41:"+strconv.FormatInt(stamp, 10))
		clk.Advance(age)
		ls, err := a.claim(ctx, w)
		require.NoError(t, err)
		return ls[0]
	}

	l := claim(0, half-time.Millisecond)
	require.Equal(t, int64(41), l.Fence())
	require.Equal(t, l.acquired.Add(cfg.lifetime()), l.Deadline())
	require.Equal(t, clk.Now().Add(-(half - time.Millisecond)), l.acquired)
	require.Equal(t, int64(0), rdb.Exists(ctx, "redlease:{r}:lease").Val()) // no request was sent
	require.ErrorIs(t, l.Release(ctx), ErrLeaseLost)                        // it was never in Redis

	l = claim(0, half+time.Millisecond) // too old: an attempt takes the (free) lease
	require.Equal(t, int64(1), l.Fence())
	require.Equal(t, clk.Now(), l.acquired)
	require.NoError(t, l.Release(ctx))

	l = claim(time.Hour.Microseconds(), 0) // from the future
	require.Equal(t, int64(2), l.Fence())
	require.NoError(t, l.Release(ctx))
}

// A handoff's message that arrives before its waiter joins the hub is kept
// for it, with its fence.
func TestHandoffBeforeTheWaiterJoins(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	k := wire.KeysOf(DefaultPrefix, "r")
	channel := k.WakeChannel(c.hub.id)
	owner, _ := newOwner(c.hub.id)
	other, _ := newOwner(c.hub.id)
	w0 := c.hub.join(channel, other, make(chan struct{}, 1)) // so that the hub knows the channel
	defer w0.leave()
	c.hub.deliver(channel, owner+":9:1234")
	wake := make(chan struct{}, 1)
	w := c.hub.join(channel, owner, wake)
	defer w.leave()
	require.Len(t, wake, 1)
	ho, ok := w.handoff()
	require.True(t, ok)
	require.Equal(t, handoff{fence: 9, stamp: 1234}, ho)
	_, ok = w.handoff()
	require.False(t, ok) // taken once
}

// A waiter that has not asked for 1.5 s may have died in the queue: the
// release wakes it instead of handing it the lease, so a dead waiter cannot
// hold the resource until its TTL.
func TestHandoffOnlyToAWaiterThatAskedRecently(t *testing.T) {
	ctx := t.Context()
	rdb, c, l, sub := handoffScene(t)
	k := wire.KeysOf(DefaultPrefix, "r")
	x, xm := newOwner(sceneClient)
	asking(t, c, x, xm, "5")
	ask, err := rdb.HGet(ctx, k.Alive, ">"+xm).Result()
	require.NoError(t, err)
	var ttl, stamp, at int64
	_, err = fmt.Sscanf(ask, "%d %d %d", &ttl, &stamp, &at)
	require.NoError(t, err)
	require.Equal(t, []int64{10000, 5}, []int64{ttl, stamp})
	require.NoError(t, rdb.HSet(ctx, k.Alive, ">"+xm, fmt.Sprintf("10000 5 %d", at-1501)).Err()) // asked 1.501 s ago

	require.NoError(t, l.Release(ctx))
	require.Equal(t, int64(0), rdb.Exists(ctx, k.Lease).Val()) // free: not handed over
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, x, msg.Payload) // woken
}
