package redlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/redlease/redlease/internal/wire"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

func TestInspect(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Minute), WithAutoRenew(false))
	ctx := t.Context()

	st, err := c.Inspect(ctx, "never")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "never"}, st)

	l, err := c.TryAcquire(ctx, "inv:1")
	require.NoError(t, err)
	waiting := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := c.Acquire(wctx, "inv:1")
		waiting <- err
	}()
	servertest.WaitFor(t, 5*time.Second, func() bool {
		st, err := c.Inspect(ctx, "inv:1")
		return err == nil && st.Waiters == 1
	})
	cancel()
	require.ErrorIs(t, <-waiting, ErrNotAcquired)

	st, err = c.Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, "inv:1", st.Resource)
	require.True(t, st.Held)
	require.Equal(t, l.Owner(), st.Owner)
	require.Equal(t, l.Fence(), st.Fence)
	require.Equal(t, l.Fence()+1, st.LastFence, "the waiter's first attempt drew a fence it did not use")
	require.Equal(t, time.Minute, st.TTL)
	require.NoError(t, l.Release(ctx))

	st, err = c.Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "inv:1", LastFence: 2}, st, "released: free, the counter stays")

	// A key written by hand, without a TTL: shown as it is.
	require.NoError(t, mr.Set("redlease:{manual}:lease", "someone"))
	st, err = c.Inspect(ctx, "manual")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "manual", Held: true, Kind: "lease", Owner: "someone", TTL: -1}, st)

	_, err = c.Inspect(ctx, "")
	require.ErrorIs(t, err, ErrInvalidArgument)
	st, err = New(rdb, WithPrefix("other:")).Inspect(ctx, "inv:1")
	require.NoError(t, err)
	require.Equal(t, Status{Resource: "inv:1"}, st, "another prefix is another namespace")
}

func TestBreakOnMiniredis(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithAutoRenew(false))
	ctx := t.Context()

	st, removed, err := c.Break(ctx, "free", 0)
	require.NoError(t, err)
	require.False(t, removed)
	require.Equal(t, Status{Resource: "free"}, st)

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	st, removed, err = c.Break(ctx, "r", l.Fence()+1)
	require.NoError(t, err)
	require.False(t, removed, "another fence than the holder's: nothing removed")
	require.Equal(t, l.Owner(), st.Owner)
	require.True(t, mr.Exists("redlease:{r}:lease"))

	st, removed, err = c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, l.Owner(), st.Owner)
	require.Equal(t, l.Fence(), st.Fence)
	require.False(t, mr.Exists("redlease:{r}:lease"))
	require.Equal(t, "1", mustGet(t, mr, counterKey("r")), "the counter stays")
	require.ErrorIs(t, l.Release(ctx), ErrLeaseLost, "the broken holder's release reports the loss")

	_, _, err = c.Break(ctx, "r", -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// Break reports every call that reaches Redis to the Client's observers,
// with the lease it found.
func TestBreakReportsToObservers(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	def := &recorder{}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := New(rdb, WithObserver(def), WithLogger(logger), WithAutoRenew(false))
	ctx := t.Context()

	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	def.take()
	before := time.Now()
	_, removed, err := c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	{
		def.mu.Lock()
		require.Len(t, def.events, 1)
		e := def.events[0]
		def.mu.Unlock()
		require.Equal(t, EventBreak, e.Kind)
		require.Equal(t, OutcomeOK, e.Outcome)
		require.Equal(t, "r", e.Resource)
		require.Equal(t, l.Owner(), e.Owner)
		require.Equal(t, l.Fence(), e.Fence)
		require.False(t, e.Start.Before(before))
		require.False(t, e.End.Before(e.Start))
		require.NoError(t, e.Err)
	}
	require.Contains(t, buf.String(), "level=WARN msg=\"redlease break\" resource=r result=ok fence=1 owner="+l.Owner()[:8])

	// Nothing to remove: lost, with the lease found, if any.
	_, removed, err = c.Break(ctx, "r", 0)
	require.NoError(t, err)
	require.False(t, removed)
	m, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	_, removed, err = c.Break(ctx, "r", l.Fence())
	require.NoError(t, err)
	require.False(t, removed, "another holder's fence")
	def.mu.Lock()
	last := def.events[len(def.events)-1]
	def.mu.Unlock()
	require.Equal(t, m.Owner(), last.Owner)
	require.Equal(t, m.Fence(), last.Fence)

	// A Redis error: its outcome; invalid input: no event.
	mr.SetError("LOADING Redis is loading the dataset in memory")
	_, _, err = c.Break(ctx, "r", 0)
	require.Error(t, err)
	mr.SetError("")
	def.mu.Lock()
	last = def.events[len(def.events)-1]
	def.mu.Unlock()
	require.ErrorIs(t, last.Err, err)
	require.Empty(t, last.Owner)
	_, _, err = c.Break(ctx, "r", -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, []string{"break:ok", "break:lost", "acquire:ok", "break:lost", "break:error"}, def.take())
	require.Equal(t, 4, strings.Count(buf.String(), "level=WARN msg=\"redlease break\""), buf.String())
}

// A holder whose lease an operator broke finds out at its next renewal; the
// first waiter is woken at once, and the next holder's fence is larger.
func TestIntegrationBreakWakesWaiterAndHolderSeesLoss(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	holder := New(rdb, WithTTL(900*time.Millisecond))
	defer holder.Close(ctx)
	waiter := New(srv.Client(t))
	defer waiter.Close(ctx)
	admin := New(srv.Client(t))

	a, err := holder.TryAcquire(ctx, "job")
	require.NoError(t, err)

	wake := rdb.PSubscribe(ctx, "redlease:{job}:wake:*") // every Client's wake channel
	defer wake.Close()
	_, err = wake.Receive(ctx) // the subscription is confirmed
	require.NoError(t, err)

	got := make(chan *Lease, 1)
	go func() {
		b, err := waiter.Acquire(ctx, "job", WithMaxWait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	servertest.WaitFor(t, 10*time.Second, func() bool {
		st, err := admin.Inspect(ctx, "job")
		return err == nil && st.Waiters == 1
	})

	st, removed, err := admin.Break(ctx, "job", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.Equal(t, a.Owner(), st.Owner)
	require.Equal(t, a.Fence(), st.Fence)
	require.Equal(t, int64(1), st.Waiters)
	require.Positive(t, st.TTL)

	msgCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := wake.ReceiveMessage(msgCtx)
	require.NoError(t, err, "break wakes the first waiter")
	b := <-got
	require.NotNil(t, b)
	defer b.Release(ctx)
	require.Equal(t, b.Owner(), msg.Payload)
	require.Equal(t, "redlease:{job}:wake:"+waiter.hub.id, msg.Channel, "only the waiter's Client hears it")
	require.Greater(t, b.Fence(), a.Fence())

	servertest.WaitDone(t, a.Context(), 10*time.Second)
	require.ErrorIs(t, context.Cause(a.Context()), ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost)
	require.NoError(t, b.Context().Err(), "the old holder's release left the new lease alone")
}

func TestIntegrationScan(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	// A prefix with glob characters must match only itself.
	c := New(rdb, WithPrefix("ops*[x]:"), WithAutoRenew(false))
	other := New(rdb, WithPrefix("opsA[x]:"), WithAutoRenew(false))

	held, err := c.TryAcquire(ctx, "a:held")
	require.NoError(t, err)
	defer held.Release(ctx)
	free, err := c.TryAcquire(ctx, "a:free")
	require.NoError(t, err)
	require.NoError(t, free.Release(ctx))
	_, err = other.TryAcquire(ctx, "a:other")
	require.NoError(t, err)
	// A lease written by hand is found by its lease key.
	require.NoError(t, rdb.Set(ctx, "ops*[x]:{a:orphan}:lease", "ghost:7", time.Minute).Err())
	// A resource only waited for is found by its queue.
	require.NoError(t, rdb.ZAdd(ctx, "ops*[x]:{a:waited}:queue", redis.Z{Score: 1, Member: "w/c"}).Err())
	// Many more, to take several SCAN pages.
	const many = 3 * wire.ScanCount
	pipe := rdb.Pipeline()
	for i := range many {
		pipe.Set(ctx, fmt.Sprintf("ops*[x]:{b:%d}:lease", i), fmt.Sprintf("o:%d", i+1), time.Minute)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)

	collect := func(pattern string) map[string]Status {
		t.Helper()
		found := map[string]Status{}
		err := c.Scan(ctx, pattern, func(st Status) error {
			if _, dup := found[st.Resource]; dup {
				t.Errorf("%q reported twice", st.Resource)
			}
			found[st.Resource] = st
			return nil
		})
		require.NoError(t, err)
		return found
	}

	a := collect("a:*")
	require.Len(t, a, 3, "held, written by hand, waited for; not a:free, which nothing holds or waits for: %v", a)
	require.Equal(t, held.Owner(), a["a:held"].Owner)
	require.Equal(t, DefaultHolder(), a["a:held"].Holder)
	require.True(t, a["a:held"].Held)
	require.Equal(t, "ghost", a["a:orphan"].Owner)
	require.Equal(t, int64(7), a["a:orphan"].Fence)
	require.Equal(t, Status{Resource: "a:waited", Waiters: 1, LastFence: a["a:waited"].LastFence}, a["a:waited"])

	all := collect("")
	require.Len(t, all, 3+many)
	require.Equal(t, int64(many), all[fmt.Sprintf("b:%d", many-1)].Fence)

	stop := errors.New("stop")
	calls := 0
	err = c.Scan(ctx, "*", func(Status) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.True(t, err == stop, "fn's error is returned as it is, not wrapped: %v", err)
	require.Equal(t, 1, calls)
	require.ErrorIs(t, c.Scan(ctx, "*", nil), ErrInvalidArgument)
}

func TestIntegrationAdminOnCluster(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	c := New(cc, WithAutoRenew(false))
	var names []string
	for i := range 30 { // spread over the slots of all three masters
		r := fmt.Sprintf("shard:%d", i)
		l, err := c.TryAcquire(ctx, r)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, l.Release(ctx)) // not found: nothing of it is left but its slot's counter
		} else {
			names = append(names, r)
		}
	}
	var found []string
	require.NoError(t, c.Scan(ctx, "shard:*", func(st Status) error {
		found = append(found, st.Resource)
		return nil
	}))
	slices.Sort(found)
	slices.Sort(names)
	require.Equal(t, names, found)

	st, removed, err := c.Break(ctx, "shard:1", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.Positive(t, st.Fence)
	fence := st.Fence
	st, err = c.Inspect(ctx, "shard:1")
	require.NoError(t, err)
	require.False(t, st.Held)
	require.GreaterOrEqual(t, st.LastFence, fence)
	require.NoError(t, cc.Get(ctx, counterKey("shard:1")).Err())
	require.ErrorIs(t, cc.Get(ctx, "redlease:{shard:1}:lease").Err(), redis.Nil)
}
