package redleasetest_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/redleasetest"
)

// Each helper against the real core: what a holder, a waiter and a fencing
// guard see. No test sleeps for a TTL; a TTL of the default 30 s passes in
// FastForward.

// The option sets that every helper is tried with: the defaults, and a
// user's short TTL with an interval and margin of its own.
var optionSets = []struct {
	name     string
	opts     []redlease.Option
	ttl      time.Duration
	interval time.Duration
	lifetime time.Duration // TTL − TTL·DriftFactor − margin
	long     time.Duration // a few hundred renewals
}{
	{"defaults", nil, redlease.DefaultTTL, redlease.DefaultTTL / 3, 26700 * time.Millisecond, time.Hour},
	{"short", []redlease.Option{redlease.WithTTL(100 * time.Millisecond), redlease.WithRenewInterval(20 * time.Millisecond),
		redlease.WithSafetyMargin(5 * time.Millisecond)}, 100 * time.Millisecond, 20 * time.Millisecond, 94 * time.Millisecond,
		5 * time.Second},
}

func TestFastForwardKeepsRenewedLeases(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			ctx := t.Context()
			l, err := k.Client().TryAcquire(ctx, "job")
			require.NoError(t, err)
			start := time.Now()
			k.FastForward(o.long)
			t.Logf("%v of renewals every %v in %v", o.long, o.interval, time.Since(start))
			require.NoError(t, l.Context().Err(), "the watchdog renewed the lease all along")
			st := k.Status("job")
			require.True(t, st.Held)
			require.Equal(t, l.Fence(), st.Fence)
			require.Greater(t, st.Remaining, o.ttl-o.interval-o.ttl/10, "renewed within the last interval or so")
			require.WithinDuration(t, k.Now().Add(o.lifetime), l.Deadline(), o.interval+o.interval/10)
			require.NoError(t, l.Release(ctx))
		})
	}
}

// A lease that is not renewed lapses at its local deadline, and Redis
// expires it at its TTL, both on the Kit's clock.
func TestFastForwardLapsesALeaseThatIsNotRenewed(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			l, err := k.Client().TryAcquire(t.Context(), "job", redlease.WithAutoRenew(false))
			require.NoError(t, err)
			require.Equal(t, k.Now().Add(o.lifetime), l.Deadline())

			k.FastForward(o.lifetime - time.Millisecond)
			require.NoError(t, l.Context().Err())
			k.FastForward(time.Millisecond)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "ends at the local deadline, to the ms")
			require.True(t, k.Status("job").Held, "Redis still holds it until the TTL")

			k.FastForward(o.ttl - o.lifetime)
			require.False(t, k.Status("job").Held, "expired in Redis at the TTL")
			l2, err := k.NewClient().TryAcquire(t.Context(), "job")
			require.NoError(t, err)
			require.Greater(t, l2.Fence(), l.Fence())
		})
	}
}

func TestStealEndsTheHolder(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			ctx := t.Context()
			l, err := k.Client().TryAcquire(ctx, "job")
			require.NoError(t, err)
			fence := k.Steal("job")
			require.Greater(t, fence, l.Fence())
			st := k.Status("job")
			require.Equal(t, fence, st.Fence)
			require.Equal(t, redleasetest.OtherHolder, st.Holder)
			require.NotEqual(t, l.Owner(), st.Owner)
			require.NoError(t, l.Context().Err(), "the holder is told at its next renewal, not before")

			k.FastForward(o.interval)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "the next renewal was refused")
			require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
			require.Equal(t, fence, k.Status("job").Fence, "the holder's Release left the other owner's lease alone")
		})
	}
}

// The holder that Refresh tells at once, without moving the clock.
func TestStealIsSeenByRefresh(t *testing.T) {
	k := redleasetest.New(t)
	l, err := k.Client().TryAcquire(t.Context(), "job", redlease.WithAutoRenew(false))
	require.NoError(t, err)
	k.Steal("job")
	require.ErrorIs(t, l.Refresh(t.Context()), redlease.ErrLeaseLost)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
}

func TestStealOfAFreeResourceAndAgain(t *testing.T) {
	k := redleasetest.New(t)
	f1 := k.Steal("job")
	f2 := k.Steal("job") // from the other owner itself
	require.Greater(t, f2, f1)
	_, err := k.Client().TryAcquire(t.Context(), "job")
	var busy *redlease.BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, redleasetest.OtherHolder, busy.Holder)
}

// The other owner does not renew: its lease lapses in Redis one TTL after
// Steal, and the holder that waited gets it, with a higher fence.
func TestStolenLeaseLapsesAfterItsTTL(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			fence := k.Steal("job")
			k.FastForward(o.ttl - time.Millisecond)
			require.True(t, k.Status("job").Held)
			k.FastForward(time.Millisecond)
			require.False(t, k.Status("job").Held)
			l, err := k.Client().TryAcquire(t.Context(), "job")
			require.NoError(t, err)
			require.Greater(t, l.Fence(), fence)
		})
	}
}

// A fencing guard that saw the new owner's fence rejects the old holder's
// writes, on the Kit's Redis and in memory.
func TestStealIsRejectedByAFencingGuard(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "invoice:7")
	require.NoError(t, err)
	guard := fencing.NewRedisGuard(k.Redis())
	var store fencing.MemoryStore
	admit := func(fence int64, owner string) error {
		done, err := store.Admit(ctx, "invoice:7", fence, owner)
		if err == nil {
			done()
		}
		return err
	}
	require.NoError(t, guard.Set(ctx, "invoice:7:total", "100", 0, l.Fence(), l.Owner()))
	require.NoError(t, admit(l.Fence(), l.Owner()))

	fence := k.Steal("invoice:7")
	other := k.Status("invoice:7").Owner
	require.NoError(t, guard.Set(ctx, "invoice:7:total", "120", 0, fence, other))
	require.NoError(t, admit(fence, other))

	var stale *fencing.StaleFenceError
	err = guard.Set(ctx, "invoice:7:total", "90", 0, l.Fence(), l.Owner())
	require.ErrorAs(t, err, &stale)
	require.Equal(t, fence, stale.Newest)
	require.ErrorIs(t, admit(l.Fence(), l.Owner()), fencing.ErrStaleFence)
	v, err := k.Redis().Get(ctx, "invoice:7:total").Result()
	require.NoError(t, err)
	require.Equal(t, "120", v)
}

// Steal holds back the Kit's Clients while it takes the lease: a waiter
// that its Break wakes finds the other owner's lease, and gets the resource
// only once that lapses.
func TestStealIsOneStepForWaiters(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "job")
	require.NoError(t, err)
	got := acquireAsync(t, k.NewClient(), "job")
	k.AwaitWaiters("job", 1)

	fence := k.Steal("job")
	k.FastForward(0)
	require.Equal(t, fence, k.Status("job").Fence, "the waiter did not slip in between Break and acquire")
	select {
	case r := <-got:
		t.Fatalf("the waiter got the lease, fence %d", r.l.Fence())
	default:
	}
	k.FastForward(redlease.DefaultTTL / 3)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)

	k.FastForward(redlease.DefaultTTL)
	r := recv(t, got)
	require.NoError(t, r.err)
	require.Greater(t, r.l.Fence(), fence)
}

func TestExpire(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			ctx := t.Context()
			l, err := k.Client().TryAcquire(ctx, "job")
			require.NoError(t, err)
			k.Expire("job")
			st := k.Status("job")
			require.False(t, st.Held)
			require.Equal(t, l.Fence(), st.LastFence, "the fence counter stays")

			l2, err := k.NewClient().TryAcquire(ctx, "job")
			require.NoError(t, err)
			require.Greater(t, l2.Fence(), l.Fence())

			require.NoError(t, l.Context().Err(), "the holder is told at its next renewal")
			k.FastForward(o.interval)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
			require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
			require.NoError(t, l2.Context().Err(), "the new holder renews")
			require.NoError(t, l2.Release(ctx))
		})
	}
}

// Expire wakes the first waiter, which takes the lease at once: no clock
// needs to move.
func TestExpireWakesTheFirstWaiter(t *testing.T) {
	k := redleasetest.New(t)
	l, err := k.Client().TryAcquire(t.Context(), "job")
	require.NoError(t, err)
	got := acquireAsync(t, k.NewClient(), "job")
	k.AwaitWaiters("job", 1)
	before := k.Now()
	k.Expire("job")
	r := recv(t, got)
	require.NoError(t, r.err)
	require.Greater(t, r.l.Fence(), l.Fence())
	require.Equal(t, before, k.Now())
}

func TestExpireFailsOnAFreeResource(t *testing.T) {
	ft := &fatalT{TB: t}
	k := redleasetest.New(ft)
	ft.run(func() { k.Expire("nobody") })
	require.Contains(t, ft.msg, "not held")
}

// Expire and Steal model the loss of an exclusive lease. On a resource with
// shared leases they fail the test, and leave the holders be: Break would
// remove every holder, and Steal's exclusive lease would not keep a new
// permit or reader out.
func TestExpireAndStealRefuseSharedLeases(t *testing.T) {
	acquire := map[string]func(*redlease.Client) (*redlease.Lease, error){
		"semaphore": func(c *redlease.Client) (*redlease.Lease, error) {
			return c.TryAcquireSemaphore(t.Context(), "calls", 2)
		},
		"read":  func(c *redlease.Client) (*redlease.Lease, error) { return c.TryAcquireRead(t.Context(), "calls") },
		"write": func(c *redlease.Client) (*redlease.Lease, error) { return c.TryAcquireWrite(t.Context(), "calls") },
	}
	for kind, take := range acquire {
		for op, fault := range map[string]func(*redleasetest.Kit){
			"Expire": func(k *redleasetest.Kit) { k.Expire("calls") },
			"Steal":  func(k *redleasetest.Kit) { k.Steal("calls") },
		} {
			t.Run(kind+"/"+op, func(t *testing.T) {
				ft := &fatalT{TB: t}
				k := redleasetest.New(ft)
				l, err := take(k.Client())
				require.NoError(t, err)
				ft.run(func() { fault(k) })
				require.Contains(t, ft.msg, "acts on exclusive leases only")
				st := k.Status("calls")
				require.Len(t, st.Shared, 1, "the holder is left in place")
				require.Equal(t, l.Fence(), st.Shared[0].Fence)
				require.NotEqual(t, "lease", st.Kind, "no exclusive lease was taken")
				require.NoError(t, l.Refresh(t.Context()))
				require.NoError(t, l.Release(t.Context()))
			})
		}
	}
}

// A waiter asleep on the Kit's clock retries as time passes, and takes the
// lease once Redis expires it, within 1 ms after its TTL (its timer is set
// for the TTL the holder's lease had left, in Redis's whole milliseconds).
func TestWaiterTakesTheLeaseWhenItExpires(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			l, err := k.Client().TryAcquire(t.Context(), "job", redlease.WithAutoRenew(false))
			require.NoError(t, err)
			start := k.Now()
			got := acquireAsync(t, k.NewClient(), "job")
			k.AwaitWaiters("job", 1)

			k.FastForward(o.ttl - time.Millisecond)
			select {
			case r := <-got:
				t.Fatalf("acquired before the TTL ran out: %v", r.err)
			default:
			}
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
			k.FastForward(2 * time.Millisecond)
			r := recv(t, got)
			require.NoError(t, r.err)
			require.Greater(t, r.l.Fence(), l.Fence())
			sent := r.l.Deadline().Add(-o.lifetime)
			require.True(t, sent.After(start.Add(o.ttl)) && !sent.After(start.Add(o.ttl+time.Millisecond)),
				"the waiter took it %v after the holder", sent.Sub(start))
		})
	}
}

// Fair waiters get the lease in arrival order, each as the one before
// releases it. Redis's clock stands still between steps, so the waiters
// arrive a millisecond apart: at one instant their order would be random.
func TestFairWaitersInOrder(t *testing.T) {
	k := redleasetest.New(t, redlease.WithFair(true))
	ctx := t.Context()
	l, err := k.Client().TryAcquire(ctx, "job")
	require.NoError(t, err)
	var waits []<-chan result
	for i := range 3 {
		waits = append(waits, acquireAsync(t, k.NewClient(), "job"))
		k.AwaitWaiters("job", i+1)
		k.FastForward(time.Millisecond)
	}
	k.FastForward(time.Minute) // renewals; the waiters poll and keep their places
	require.NoError(t, l.Context().Err())
	last := l.Fence()
	require.NoError(t, l.Release(ctx))
	for _, w := range waits {
		r := recv(t, w)
		require.NoError(t, r.err)
		require.Greater(t, r.l.Fence(), last)
		last = r.l.Fence()
		require.NoError(t, r.l.Release(ctx))
	}
}

func TestOutage(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			ctx := t.Context()
			l, err := k.Client().TryAcquire(ctx, "job")
			require.NoError(t, err)
			k.FastForward(o.interval / 2)
			deadline := l.Deadline()

			k.Outage()
			_, err = k.NewClient().TryAcquire(ctx, "other")
			require.ErrorIs(t, err, redlease.ErrUnavailable)
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			_, err = k.Redis().Ping(ctx).Result()
			require.ErrorIs(t, err, syscall.ECONNREFUSED)

			k.FastForward(deadline.Sub(k.Now()) - time.Millisecond)
			require.NoError(t, l.Context().Err(), "alive until its local deadline")
			k.FastForward(time.Millisecond)
			require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost, "its renewals failed: it lapses at its deadline")
			require.Equal(t, deadline, k.Now())

			k.FastForward(o.ttl - o.lifetime) // Redis expires the lease meanwhile
			k.Restore()
			l2, err := k.NewClient().TryAcquire(ctx, "job")
			require.NoError(t, err)
			require.Greater(t, l2.Fence(), l.Fence())
			require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
		})
	}
}

// An outage shorter than the lease's lifetime is ridden out: the watchdog
// retries, and the first renewal after it succeeds.
func TestShortOutageIsRiddenOut(t *testing.T) {
	for _, o := range optionSets {
		t.Run(o.name, func(t *testing.T) {
			k := redleasetest.New(t, o.opts...)
			l, err := k.Client().TryAcquire(t.Context(), "job")
			require.NoError(t, err)
			k.Unreachable(o.lifetime / 2)
			k.FastForward(o.interval)
			require.NoError(t, l.Context().Err())
			k.FastForward(o.long / 4)
			require.NoError(t, l.Context().Err())
			require.True(t, k.Status("job").Held)
		})
	}
}

// A waiter rides an outage out, retrying with backoff on the Kit's clock,
// and takes the lease at its first retry after it (within half a second),
// however long the outage with WithMaxOutage(0).
func TestWaiterRidesOutAnOutage(t *testing.T) {
	k := redleasetest.New(t)
	holder := k.NewClient()
	l, err := holder.TryAcquire(t.Context(), "job", redlease.WithAutoRenew(false))
	require.NoError(t, err)
	got := acquireAsync(t, k.Client(), "job", redlease.WithMaxOutage(0))
	k.AwaitWaiters("job", 1)
	k.Unreachable(redlease.DefaultTTL + time.Second)
	select {
	case r := <-got:
		t.Fatalf("acquired without the clock moving: %v", r.err)
	default:
	}
	k.FastForward(500 * time.Millisecond)
	r := recv(t, got)
	require.NoError(t, r.err)
	require.Greater(t, r.l.Fence(), l.Fence())
}

// By default a waiter rides an outage out for one TTL, on the Kit's clock,
// and then says that Redis was unavailable.
func TestWaiterGivesUpAfterAnOutageOfOneTTL(t *testing.T) {
	k := redleasetest.New(t)
	_, err := k.NewClient().TryAcquire(t.Context(), "job", redlease.WithAutoRenew(false), redlease.WithTTL(time.Hour))
	require.NoError(t, err)
	got := acquireAsync(t, k.Client(), "job")
	k.AwaitWaiters("job", 1)
	k.Unreachable(redlease.DefaultTTL + time.Second)
	r := recv(t, got)
	require.ErrorIs(t, r.err, redlease.ErrUnavailable)
	require.NotErrorIs(t, r.err, redlease.ErrNotAcquired)
}

// Helpers that need Redis fail the test, by name, during an outage.
func TestHelpersNeedRedisUp(t *testing.T) {
	for name, f := range map[string]func(k *redleasetest.Kit){
		"Expire": func(k *redleasetest.Kit) { k.Expire("job") },
		"Steal":  func(k *redleasetest.Kit) { k.Steal("job") },
		"Status": func(k *redleasetest.Kit) { k.Status("job") },
	} {
		t.Run(name, func(t *testing.T) {
			ft := &fatalT{TB: t}
			k := redleasetest.New(ft)
			k.Outage()
			k.Outage() // a second is nothing
			ft.run(func() { f(k) })
			require.Contains(t, ft.msg, name+": the embedded Redis is down")
		})
	}
}

// Leases of different lifetimes and renewals on one clock: a step may land
// anywhere between two renewals, and the watchdog still renews on time.
func TestManyLeasesOnOneClock(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	c := k.Client()
	renewed, err := c.TryAcquire(ctx, "renewed")
	require.NoError(t, err)
	k.FastForward(500 * time.Millisecond)
	// Its deadline falls within a tenth of an interval before renewed's
	// first renewal, where the watchdog batches renewals.
	lapsing, err := c.TryAcquire(ctx, "lapsing", redlease.WithTTL(10*time.Second), redlease.WithAutoRenew(false))
	require.NoError(t, err)
	fast, err := c.TryAcquire(ctx, "fast", redlease.WithTTL(time.Second))
	require.NoError(t, err)
	k.FastForward(time.Minute)
	require.ErrorIs(t, context.Cause(lapsing.Context()), redlease.ErrLeaseLost)
	require.NoError(t, renewed.Context().Err())
	require.NoError(t, fast.Context().Err())
}

func TestMaxHold(t *testing.T) {
	k := redleasetest.New(t, redlease.WithMaxHold(time.Minute))
	l, err := k.Client().TryAcquire(t.Context(), "job")
	require.NoError(t, err)
	k.FastForward(time.Minute - time.Millisecond)
	require.NoError(t, l.Context().Err())
	k.FastForward(time.Millisecond)
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrMaxHold)
}

// The observers given to New hear of the Kit's Clients' leases only, not
// of the other owner's acquires and breaks.
func TestObserversHearOnlyTheKitsClients(t *testing.T) {
	var mu sync.Mutex
	var events []redlease.Event
	obs := redlease.WithObserver(redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}))
	k := redleasetest.New(t, obs)
	l, err := k.Client().TryAcquire(t.Context(), "job")
	require.NoError(t, err)
	k.Steal("job")
	k.FastForward(redlease.DefaultTTL) // the other owner's lease lapses too
	k.Steal("job")
	k.Expire("job")
	mu.Lock()
	defer mu.Unlock()
	var kinds []redlease.EventKind
	for _, e := range events {
		if e.Kind != redlease.EventRenew {
			kinds = append(kinds, e.Kind)
			require.Equal(t, l.Owner(), e.Owner, "%v", e.Kind)
		}
	}
	require.Equal(t, []redlease.EventKind{redlease.EventAcquire, redlease.EventLost}, kinds)
}

// A prefix given to New is the other owner's and the Kit's reads' too.
func TestPrefix(t *testing.T) {
	k := redleasetest.New(t, redlease.WithPrefix("app:"))
	l, err := k.Client().TryAcquire(t.Context(), "job")
	require.NoError(t, err)
	require.Equal(t, l.Owner(), k.Status("job").Owner)
	require.Greater(t, k.Steal("job"), l.Fence())
	n, err := k.Redis().Exists(t.Context(), "redlease:{job}:lease").Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing under the default prefix")
}

func TestFastForwardRefusesToGoBack(t *testing.T) {
	ft := &fatalT{TB: t}
	k := redleasetest.New(ft)
	ft.run(func() { k.FastForward(-time.Second) })
	require.Contains(t, ft.msg, "negative")
}

// The Kit closes its Clients when the test ends, which releases their
// leases; a Client the test closed itself is closed once more, harmlessly.
func TestCleanupReleases(t *testing.T) {
	var k *redleasetest.Kit
	released := make(chan redlease.Event, 2)
	obs := redlease.WithObserver(redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		if e.Kind == redlease.EventRelease {
			released <- e
		}
	}))
	t.Run("kit", func(t *testing.T) {
		k = redleasetest.New(t, obs)
		_, err := k.Client().TryAcquire(t.Context(), "job")
		require.NoError(t, err)
		c := k.NewClient()
		_, err = c.TryAcquire(t.Context(), "other")
		require.NoError(t, err)
		require.NoError(t, c.Close(t.Context()))
		require.Equal(t, "other", (<-released).Resource)
	})
	e := <-released
	require.Equal(t, "job", e.Resource)
	require.Equal(t, redlease.OutcomeOK, e.Outcome)
	_, err := k.Client().TryAcquire(context.Background(), "job")
	require.ErrorIs(t, err, redlease.ErrClientClosed)
}

type result struct {
	l   *redlease.Lease
	err error
}

// acquireAsync starts an Acquire of resource on its own goroutine.
func acquireAsync(t *testing.T, c *redlease.Client, resource string, opts ...redlease.WaitOption) <-chan result {
	t.Helper()
	ch := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := c.Acquire(ctx, resource, opts...)
		ch <- result{l, err}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

// recv waits a little real time for an acquire's result: the wake-ups and
// the requests are real.
func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no result")
		return result{}
	}
}

// fatalT records a Fatalf of the Kit's instead of failing the test.
type fatalT struct {
	testing.TB
	msg string
}

func (t *fatalT) Fatalf(format string, args ...any) {
	t.msg = fmt.Sprintf(format, args...)
	panic(t)
}

// run runs f, which must fail through Fatalf.
func (t *fatalT) run(f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != t {
			if r != nil {
				panic(r)
			}
			t.TB.Fatal("no Fatalf")
		}
	}()
	f()
}
