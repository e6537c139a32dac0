package tests

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Elections on a real server, on every library. (From the core's
// election_test.go.)

func TestIntegrationElectionHandOverWhenLeaderStalls(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		proxy := servertest.StartProxy(t, e.srv.Addr)
		ctx := t.Context()
		const ttl = 600 * time.Millisecond
		// The first leader reaches Redis through a proxy that will stall.
		a := redlease.NewElection(e.clientAt(proxy.Addr(), false), "cron", redlease.WithTTL(ttl))
		b := redlease.NewElection(e.client(), "cron", redlease.WithTTL(ttl))

		_, err := b.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
		termA, err := a.Campaign(ctx, "host-a")
		require.NoError(t, err)
		leader, err := b.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, redlease.Leader{Value: "host-a", Owner: termA.Owner(), Fence: termA.Fence(), Remaining: leader.Remaining}, leader)

		elected := make(chan *redlease.Lease, 1)
		go func() {
			l, err := b.Campaign(ctx, "host-b")
			if err != nil {
				l = nil
			}
			elected <- l
		}()
		time.Sleep(3 * ttl) // A keeps the lease: B waits
		require.NoError(t, termA.Context().Err())
		require.Empty(t, elected)

		proxy.Blackhole() // A stalls: its renewals go nowhere
		servertest.WaitDone(t, termA.Context(), 10*time.Second)
		require.ErrorIs(t, context.Cause(termA.Context()), redlease.ErrLeaseLost)
		termB := servertest.Recv(t, elected, 30*time.Second)
		require.NotNil(t, termB)
		require.Greater(t, termB.Fence(), termA.Fence(), "the new term has a higher fence")
		leader, err = b.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "host-b", leader.Value)

		proxy.Heal()
		require.ErrorIs(t, termA.Release(ctx), redlease.ErrLeaseLost, "A's resignation cannot touch B's term")
		require.NoError(t, termB.Release(ctx)) // resign
		_, err = b.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
	})
}

// The leader's value is its term's holder description, written with the
// lease in one step: a stalled campaigner cannot overwrite the value of the
// term that came after its own, a reader never sees a value without its
// term, and a resigned election leaves nothing in Redis but its slot's fence
// counter. (Campaign recorded the value after Acquire, once in a plain SET
// that a stalled campaigner could overwrite the next leader's value with,
// and in a record without a TTL that outlived every term.)
func TestIntegrationLeaderValueLivesInTheTermsLease(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		a := e.client(redlease.WithTTL(300*time.Millisecond), redlease.WithAutoRenew(false))
		b := e.client(redlease.WithTTL(5 * time.Second))
		ea, eb := redlease.NewElection(a, "cron"), redlease.NewElection(b, "cron")

		termA, err := ea.Campaign(ctx, "host-a")
		require.NoError(t, err)
		require.Equal(t, "host-a", termA.Holder())
		termB, err := eb.Campaign(ctx, "host-b") // once A's term lapses: A stalled
		require.NoError(t, err)
		require.Greater(t, termB.Fence(), termA.Fence())
		require.ErrorIs(t, termA.Refresh(ctx), redlease.ErrLeaseLost, "A wakes up: its term is over")
		ld, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, redlease.Leader{Value: "host-b", Owner: termB.Owner(), Fence: termB.Fence(), Remaining: ld.Remaining}, ld)

		require.NoError(t, termB.Release(ctx)) // resign
		_, err = eb.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
		keys, err := rdb.Keys(ctx, "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			if k != integCounterKey(redlease.DefaultPrefix, "cron") {
				require.Positive(t, ttl, "%s has no TTL", k)
			}
		}
		_, err = ea.Campaign(ctx, strings.Repeat("v", redlease.MaxHolder+1))
		require.ErrorIs(t, err, redlease.ErrInvalidArgument)
	})
}

// Resign frees the name for the next campaigner at once; after a loss it
// says so (ErrLeaseLost) and leaves the next leader's term alone; with no
// term it does nothing. (From the core's election_test.go.)
func TestIntegrationElectionResign(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		a := redlease.NewElection(e.client(), "cron")
		b := redlease.NewElection(e.client(), "cron")
		require.NoError(t, a.Resign(ctx), "never campaigned")

		termA, err := a.Campaign(ctx, "host-a")
		require.NoError(t, err)
		require.NoError(t, a.Resign(ctx))
		require.Nil(t, a.Term())
		require.ErrorIs(t, context.Cause(termA.Context()), redlease.ErrReleased)
		// Within the 30 s TTL: b is elected because a's term was deleted.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		termB, err := b.Campaign(cctx, "host-b")
		require.NoError(t, err)
		require.Greater(t, termB.Fence(), termA.Fence())
		require.NoError(t, a.Resign(ctx), "resigned already")
		require.NoError(t, b.Resign(ctx))

		// a's term is broken by an operator and b takes over.
		termA, err = a.Campaign(ctx, "host-a")
		require.NoError(t, err)
		_, removed, err := e.client().Break(ctx, "cron", termA.Fence())
		require.NoError(t, err)
		require.True(t, removed)
		termB, err = b.Campaign(cctx, "host-b")
		require.NoError(t, err)
		require.ErrorIs(t, a.Resign(ctx), redlease.ErrLeaseLost)
		require.Nil(t, a.Term())
		ld, err := a.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, termB.Owner(), ld.Owner, "a's resignation cannot touch b's term")
		require.NoError(t, b.Resign(ctx))
		_, err = a.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader)
	})
}

// Run: lead runs in a live term; a lead that returns nil is followed by
// the next term, with a higher fence; a lead's error ends Run after it
// resigned; the end of ctx ends Run after it resigned; and two Runs on one
// name take turns, never leading at once. (From the core's
// election_test.go.)
func TestIntegrationElectionRun(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		errStop := errors.New("stop leading")
		el := redlease.NewElection(e.client(), "worker")
		var fences []int64
		err := el.Run(ctx, func(lctx context.Context) error {
			term := el.Term()
			require.NoError(t, lctx.Err())
			require.NoError(t, term.Context().Err())
			fences = append(fences, term.Fence())
			if len(fences) < 3 {
				return nil
			}
			return errStop
		})
		require.ErrorIs(t, err, errStop)
		require.Len(t, fences, 3)
		require.Greater(t, fences[1], fences[0])
		require.Greater(t, fences[2], fences[1])
		_, err = el.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader, "Run resigned")

		rctx, cancel := context.WithCancel(ctx)
		err = el.Run(rctx, func(lctx context.Context) error {
			cancel()
			<-lctx.Done()
			return lctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		_, err = el.Leader(ctx)
		require.ErrorIs(t, err, redlease.ErrNoLeader, "Run resigned")

		// Two Runs, fair: they take turns.
		rctx, cancel = context.WithCancel(ctx)
		defer cancel()
		const minTerms, maxTerms = 6, 500
		var (
			active atomic.Int32
			mu     sync.Mutex
			order  []int64
			led    [2]int
		)
		done := make(chan error, 2)
		for i := range 2 {
			el := redlease.NewElection(e.client(), "cron", redlease.WithFair(true))
			go func() {
				done <- el.Run(rctx, func(context.Context) error {
					if n := active.Add(1); n != 1 {
						t.Errorf("%d leaders at once", n)
					}
					defer active.Add(-1)
					f := el.Term().Fence()
					mu.Lock()
					defer mu.Unlock()
					order = append(order, f)
					led[i]++
					if n := len(order); n >= maxTerms || n >= minTerms && led[0] >= 2 && led[1] >= 2 {
						cancel()
					}
					return nil
				})
			}()
		}
		for range 2 {
			require.ErrorIs(t, servertest.Recv(t, done, 60*time.Second), context.Canceled)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Less(t, len(order), maxTerms, "the Runs did not take turns: %v", led)
		for i := 1; i < len(order); i++ {
			require.Greater(t, order[i], order[i-1])
		}
		// A Run that ended while its campaign was on its way returned at
		// once (Acquire keeps to its ctx), and the term that campaign may
		// have taken is released in the background when its reply comes
		// (see acquisition.send): on a loaded machine that may be after Run
		// returned. The term's TTL is 30 s: a term left behind fails this.
		watcher := redlease.NewElection(e.client(), "cron")
		servertest.WaitFor(t, 10*time.Second, func() bool {
			_, err = watcher.Leader(ctx)
			return errors.Is(err, redlease.ErrNoLeader)
		})
		require.ErrorIs(t, err, redlease.ErrNoLeader, "the last Run resigned")
	})
}

func TestIntegrationElectionObserve(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		testObserveWith(t, e.client(), e.client())
	})
}

func testObserve(t *testing.T, lib library, cl *integCluster, prefix string) {
	testObserveWith(t, cl.client(t, lib, redlease.WithPrefix(prefix)), cl.client(t, lib, redlease.WithPrefix(prefix)))
}

// testObserveWith: an observer on one Client hears of each new term won on
// another, announced: within 5 s, where its polls are 10 s apart (TTL 30 s).
func testObserveWith(t *testing.T, observer, campaigner *redlease.Client) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leaders := redlease.NewElection(observer, "observed").Observe(ctx)
	next := func() redlease.Leader {
		t.Helper()
		select {
		case l, ok := <-leaders:
			require.True(t, ok, "closed")
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no leader reported within 5 s")
			return redlease.Leader{}
		}
	}
	var last int64
	for _, value := range []string{"a", "b", "c"} {
		e := redlease.NewElection(campaigner, "observed")
		term, err := e.Campaign(ctx, value)
		require.NoError(t, err)
		got := next()
		require.Equal(t, value, got.Value)
		require.Equal(t, term.Fence(), got.Fence)
		require.Greater(t, got.Fence, last)
		last = got.Fence
		require.NoError(t, e.Resign(ctx))
	}
	cancel()
	for range leaders { // closed once ctx ended
	}
}

// A handover on a real server, on every library: the leader, in Run, ends
// its term at its next renewal and resigns; the preferred campaigner is
// elected ahead of one that has waited longer in a fair queue (woken by
// that one's refused attempt, or by its own retry), and the handover key is
// gone with its term.
func TestIntegrationElectionHandover(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		testHandoverWith(t, func(opts ...redlease.Option) *redlease.Client { return e.client(opts...) }, e.rdb, "redlease:")
	})
}

func testHandover(t *testing.T, lib library, cl *integCluster, prefix string) {
	testHandoverWith(t, func(opts ...redlease.Option) *redlease.Client {
		return cl.client(t, lib, append(opts, redlease.WithPrefix(prefix))...)
	}, cl.cc, prefix)
}

func testHandoverWith(t *testing.T, client func(...redlease.Option) *redlease.Client, rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// TTL 3 s: renewals every second, and room for replies on a loaded machine.
	opts := []redlease.WaitOption{redlease.WithTTL(3 * time.Second), redlease.WithFair(true)}
	a := redlease.NewElection(client(), "handed", opts...)
	leading := make(chan int64, 4)
	causes := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, func(lctx context.Context) error {
			leading <- a.Term().Fence()
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return nil
		})
	}()
	fenceA := servertest.Recv(t, leading, 10*time.Second)

	b := redlease.NewElection(client(), "handed", opts...)
	c := redlease.NewElection(client(), "handed", opts...)
	won := make(chan *redlease.Lease, 2)
	goCampaign := func(e *redlease.Election, value string) {
		go func() {
			l, err := e.Campaign(ctx, value)
			if err != nil {
				l = nil
			}
			won <- l
		}()
	}
	goCampaign(b, "host-b")
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(integQueued(t, rdb, prefix, "handed")) == 1 })
	goCampaign(c, "host-c")
	servertest.WaitFor(t, 10*time.Second, func() bool { return len(integQueued(t, rdb, prefix, "handed")) == 2 })

	start := time.Now()
	require.NoError(t, b.Handover(ctx, "host-c"))
	require.ErrorIs(t, servertest.Recv(t, causes, 10*time.Second), redlease.ErrHandover)
	stepped := time.Since(start)
	term := servertest.Recv(t, won, 20*time.Second)
	elected := time.Since(start)
	require.NotNil(t, term)
	require.True(t, c.Term() == term, "elected: %q, not the preferred host-c", term.Holder())
	require.Greater(t, term.Fence(), fenceA)
	t.Logf("the leader stepped down %v after the handover; host-c was elected %v after it", stepped, elected)
	n, err := rdb.Exists(ctx, wire.Key(prefix, "handed", wire.KindHandover)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the handover ends with the preferred campaigner's term")

	require.NoError(t, c.Resign(ctx))
	termB := servertest.Recv(t, won, 20*time.Second)
	require.NotNil(t, termB, "b goes next, ahead of a's new campaign")
	require.True(t, b.Term() == termB)
	require.NoError(t, b.Resign(ctx))
	require.Greater(t, servertest.Recv(t, leading, 20*time.Second), termB.Fence(), "then a leads again")
	cancel()
	require.ErrorIs(t, servertest.Recv(t, done, 10*time.Second), context.Canceled)
}
