package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Waiting for a lease on a real server, on every library: the queue, the
// wake-ups, giving up. (From the core's waiter_test.go.)

func TestIntegrationReleaseWakesOnlyTheFirstWaiter(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		// Fair: without it, a waiter whose backoff timer fires just after the
		// release may take the lease before the woken one.
		holder := e.client(redlease.WithFair(true))
		l, err := holder.TryAcquire(ctx, "r")
		require.NoError(t, err)

		// Listen on every Client's wake channel as a third party.
		ps := rdb.PSubscribe(ctx, "redlease:{r}:wake:*")
		defer ps.Close()
		_, err = ps.Receive(ctx) // the subscription confirmation
		require.NoError(t, err)

		var waits []<-chan integResult
		for i := range 3 {
			c := e.client(redlease.WithFair(true))
			waits = append(waits, integWaiter(ctx, c, "r"))
			servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("r")) == i+1 })
		}
		order := e.queued("r") // members: <owner>/<client id>, the first of the first waiter's Client
		ids := map[string]bool{}
		for _, m := range order {
			ids[integClientID(t, m)] = true
		}
		require.Len(t, ids, 3, "each Client has an id of its own: %q", order)

		require.NoError(t, l.Release(ctx))
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(mctx)
		require.NoError(t, err)
		first0 := integClientID(t, order[0])
		owner, fence, _, handed := wire.ParseWake(msg.Payload)
		require.True(t, handed, "release hands the lease over: %q", msg.Payload)
		require.Equal(t, order[0], owner+"/"+first0, "release names the first waiter")
		require.Equal(t, "redlease:{r}:wake:"+first0, msg.Channel, "on its Client's channel only")
		first := servertest.Recv(t, waits[0], 30*time.Second)
		require.NoError(t, first.err)
		require.Equal(t, owner, first.l.Owner())
		require.Equal(t, fence, first.l.Fence())
		require.Equal(t, order[1:], e.queued("r"), "the others keep their places")

		require.NoError(t, first.l.Release(ctx))
		for _, w := range waits[1:] {
			got := servertest.Recv(t, w, 30*time.Second)
			require.NoError(t, got.err)
			require.NoError(t, got.l.Release(ctx))
		}
		require.Empty(t, e.queued("r"))
	})
}

// release.lua finds the wake channel from the lease key (it is not sent):
// the key's last word is swapped, whatever the prefix holds, even the word
// itself.
func TestIntegrationReleaseWakesOnTheChannelOfItsPrefix(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		const prefix = "lease:lease:"
		holder, waiter := e.client(redlease.WithPrefix(prefix)), e.client(redlease.WithPrefix(prefix))
		l, err := holder.TryAcquire(ctx, "r")
		require.NoError(t, err)
		ps := rdb.PSubscribe(ctx, "*")
		defer ps.Close()
		_, err = ps.Receive(ctx)
		require.NoError(t, err)

		wait := integWaiter(ctx, waiter, "r")
		servertest.WaitFor(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, prefix+"{r}:queue").Val() == 1 })
		member := integQueued(t, rdb, prefix, "r")[0] // <owner>/<the waiter's Client's id>
		require.NoError(t, l.Release(ctx))
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(mctx)
		require.NoError(t, err)
		require.Equal(t, prefix+"{r}:wake:"+integClientID(t, member), msg.Channel)
		got := servertest.Recv(t, wait, 30*time.Second)
		require.NoError(t, got.err)
		owner, _, _, _ := wire.ParseWake(msg.Payload)
		require.Equal(t, owner, got.l.Owner())
		require.Equal(t, got.l.Owner()+"/"+integClientID(t, member), member)
		require.NoError(t, got.l.Release(ctx))
	})
}

func TestIntegrationWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client()
		l, err := c.TryAcquire(t.Context(), "r")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		w := integWaiter(ctx, c, "r")
		// Queued is not enough: the waiter's reply may still be on its way,
		// and a wait cut before Redis answered it is ErrUnavailable. It
		// subscribes to its wake channel once it has heard the lease is busy.
		servertest.WaitFor(t, 10*time.Second, func() bool { return e.waiting("r") })
		cancel()
		got := servertest.Recv(t, w, 30*time.Second)
		// Subscribed, the waiter attempts once more at once (the lease may
		// have been freed before the subscription): a cancel during that
		// attempt's check that Redis answers is a wait cut before Redis
		// answered, ErrUnavailable, as Acquire documents (seen once on
		// valkey-go in a fresh-clone .ci/run); after it, ErrNotAcquired.
		if !errors.Is(got.err, redlease.ErrUnavailable) {
			require.ErrorIs(t, got.err, redlease.ErrNotAcquired)
		}
		require.ErrorIs(t, got.err, context.Canceled)
		servertest.WaitFor(t, 5*time.Second, func() bool { return len(e.queued("r")) == 0 }) // a release in the background
		require.NoError(t, l.Release(t.Context()))
	})
}

func TestIntegrationFairWaitersGoInArrivalOrder(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		holder := e.client()
		l, err := holder.TryAcquire(ctx, "r", redlease.WithFair(true))
		require.NoError(t, err)

		var (
			mu    sync.Mutex
			order []int
			waits []<-chan integResult
		)
		for i := range 4 {
			c := e.client(redlease.WithFair(true))
			waits = append(waits, integGo(func() (*redlease.Lease, error) {
				l, err := c.Acquire(ctx, "r")
				if err == nil {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					err = l.Release(ctx)
				}
				return l, err
			}))
			servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("r")) == i+1 })
		}
		// A newcomer cannot barge in while others queue.
		_, err = e.client(redlease.WithFair(true)).TryAcquire(ctx, "r")
		require.ErrorIs(t, err, redlease.ErrNotAcquired)

		require.NoError(t, l.Release(ctx))
		for _, w := range waits {
			require.NoError(t, servertest.Recv(t, w, 30*time.Second).err)
		}
		require.Equal(t, []int{0, 1, 2, 3}, order)
	})
}

func TestIntegrationVanishedWaiterIsDroppedFromQueue(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		c := e.client(redlease.WithFair(true))
		l, err := c.TryAcquire(ctx, "r", redlease.WithFair(true))
		require.NoError(t, err)
		// A waiter whose process died: queued first, alive for 300ms more, never refreshed.
		tm, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, rdb.ZAdd(ctx, "redlease:{r}:queue", redis.Z{Score: 1, Member: "dead"}).Err())
		require.NoError(t, rdb.HSet(ctx, "redlease:{r}:alive", "dead", tm.UnixMilli()+300).Err())

		w := integWaiter(ctx, c, "r")
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("r")) == 2 })
		require.NoError(t, l.Release(ctx))           // wakes "dead", which never comes
		got := servertest.Recv(t, w, 30*time.Second) // the live waiter gets it once "dead" has timed out
		require.NoError(t, got.err)
		require.NotContains(t, e.queued("r"), "dead")
		require.NoError(t, got.l.Release(ctx))
	})
}

func TestIntegrationWaiterWakesWhenHolderExpires(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		dead := e.client(redlease.WithTTL(300*time.Millisecond), redlease.WithAutoRenew(false))
		a, err := dead.TryAcquire(ctx, "r") // never released: it expires
		require.NoError(t, err)
		b, err := e.client().Acquire(ctx, "r", redlease.WithMaxWait(10*time.Second))
		require.NoError(t, err)
		require.Greater(t, b.Fence(), a.Fence())
		require.NoError(t, b.Release(ctx))
	})
}

// The contention test of the waiting design: many goroutines, one resource,
// a plain GET/SET counter with no atomic increment. A lost update or two
// overlapping holders would show.
func TestIntegrationContentionNoLostUpdateNoOverlap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		opts   []redlease.Option
	}{
		{"shared client", true, nil},
		{"client per goroutine", false, nil},
		{"fair", false, []redlease.Option{redlease.WithFair(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// On Valkey on one library: the test runs the scripts of the
			// waiting design much more than it runs the client.
			integRun(t, integProtocol(), false, func(t *testing.T, e *integ) {
				data := e.rdb
				const workers, rounds = 32, 50
				shared := e.client(tc.opts...)
				type interval struct {
					fence      int64
					start, end time.Time
				}
				var (
					mu        sync.Mutex
					intervals []interval
					wg        sync.WaitGroup
					errs      = make(chan error, workers)
				)
				for range workers {
					c := shared
					if !tc.shared {
						c = e.client(tc.opts...)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						defer cancel()
						for range rounds {
							l, err := c.Acquire(ctx, "counter")
							if err != nil {
								errs <- err
								return
							}
							start := time.Now()
							n, err := data.Get(ctx, "count").Int()
							if err != nil && !errors.Is(err, redis.Nil) {
								errs <- err
								return
							}
							if err := data.Set(ctx, "count", n+1, 0).Err(); err != nil {
								errs <- err
								return
							}
							end := time.Now()
							if err := l.Release(ctx); err != nil {
								errs <- err
								return
							}
							mu.Lock()
							intervals = append(intervals, interval{l.Fence(), start, end})
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				n, err := data.Get(t.Context(), "count").Int()
				require.NoError(t, err)
				require.Equal(t, workers*rounds, n, "no lost update")
				slices.SortFunc(intervals, func(a, b interval) int { return a.start.Compare(b.start) })
				for i := 1; i < len(intervals); i++ {
					prev, cur := intervals[i-1], intervals[i]
					require.False(t, cur.start.Before(prev.end), "holders %d and %d overlap", prev.fence, cur.fence)
					require.Greater(t, cur.fence, prev.fence, "fences follow the holder order")
				}
			})
		})
	}
}

// A reply lost after the request was delivered: the proxy closes the
// connection instead of forwarding it. With a client library's own retries
// (go-redis resends after a reset) the final answer must still be right;
// without them, the outcome must be reported unknown, never as success or as
// lost. (rueidis and valkey-go never resend a script: they have the second
// case only.)
func TestIntegrationLostReplies(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		proxy := servertest.StartProxy(t, e.srv.Addr)
		for _, noRetry := range []bool{false, true} {
			resends := e.lib.resends && !noRetry
			if !noRetry && !e.lib.resends {
				continue
			}
			t.Run(fmt.Sprint("resends=", resends), func(t *testing.T) {
				e := e.in(t)
				c := e.clientAt(proxy.Addr(), noRetry, redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
				integWarm(t, c) // the acquire below is sent without asking first whether Redis answers
				// A lease held throughout keeps the Client's break channel
				// subscribed, through the proxy on a connection of its own
				// with go-redis: subscribed before the first loss, its
				// handshake replies cannot take the losses meant for the
				// requests below.
				keep, err := c.TryAcquire(ctx, fmt.Sprint("keep-", noRetry))
				require.NoError(t, err)
				defer func() { require.NoError(t, keep.Release(ctx)) }()
				integWatchingBreaks(t, prefixOwner(redlease.DefaultPrefix, keep), e.rdb)
				for _, name := range []string{"acquire.lua", "refresh.lua", "release.lua"} {
					// The reply lost is the script's, not a NOSCRIPT error's.
					require.NoError(t, e.rdb.ScriptLoad(ctx, wire.Named(name).Source()).Err())
				}
				res := fmt.Sprint("lost-", resends)
				key := "redlease:{" + res + "}:lease"
				loseNextReply := func() {
					// A live connection, after the one the last loss closed:
					// the next reply is that of the next request.
					_, err := c.LastFence(ctx, res)
					require.NoError(t, err)
					proxy.DropReplies(1)
				}

				loseNextReply()
				l, err := c.TryAcquire(ctx, res)
				require.NoError(t, err, "the retry with the same owner token resolves it")
				require.Equal(t, int64(1), l.Fence())
				// go-redis's retry draws a fence it skips, finding the lease
				// its own: no second lease, no second fence handed out.
				require.True(t, strings.HasPrefix(e.rdb.Get(ctx, key).Val(), l.Owner()+":1:"), "the lease is the first attempt's")

				require.NoError(t, e.rdb.PExpire(ctx, key, 30*time.Second).Err())
				loseNextReply()
				err = l.Refresh(ctx)
				if !resends {
					require.ErrorIs(t, err, redlease.ErrOutcomeUnknown)
					require.NotErrorIs(t, err, redlease.ErrLeaseLost)
				} else {
					require.NoError(t, err)
				}
				require.NoError(t, l.Context().Err())
				require.Greater(t, e.rdb.PTTL(ctx, key).Val(), 50*time.Second, "the renewal did happen")

				loseNextReply()
				err = l.Release(ctx)
				if !resends {
					require.ErrorIs(t, err, redlease.ErrOutcomeUnknown)
					require.NotErrorIs(t, err, redlease.ErrLeaseLost)
					require.NoError(t, l.Release(ctx), "asked again, Redis remembers that this owner released")
				} else {
					require.NoError(t, err, "go-redis's retry is recognised as the same release")
				}
				require.Zero(t, e.rdb.Exists(ctx, key).Val(), "the delete did happen")
			})
		}
	})
}

func TestIntegrationMaxHold(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		// Renewed every 333 ms, each with 890 ms of lifetime: on time even on
		// a loaded machine.
		c := e.client(redlease.WithTTL(time.Second))
		start := time.Now()
		l, err := c.TryAcquire(ctx, "r", redlease.WithMaxHold(3*time.Second))
		require.NoError(t, err)
		servertest.WaitDone(t, l.Context(), 10*time.Second)
		require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrMaxHold)
		require.NotErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
		require.GreaterOrEqual(t, time.Since(start), 2900*time.Millisecond, "renewed until the hold limit")
		// The stuck holder never releases; the lease lapses within a TTL and another takes it.
		b, err := e.client().Acquire(ctx, "r", redlease.WithMaxWait(5*time.Second))
		require.NoError(t, err)
		require.Greater(t, b.Fence(), l.Fence())
		require.NoError(t, b.Release(ctx))
	})
}

// Close releases the Client's leases, ends its waits, and leaves no
// goroutine behind (the client library's own, for its connections, aside).
func TestIntegrationCloseReleasesLeasesAndStopsWaiters(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		require.NoError(t, rdb.Ping(ctx).Err())
		before := servertest.Goroutines()

		other := e.client()
		blocker, err := other.TryAcquire(ctx, "blocked")
		require.NoError(t, err)

		c := e.client(redlease.WithTTL(time.Minute))
		a, err := c.TryAcquire(ctx, "a")
		require.NoError(t, err)
		b, err := c.TryAcquire(ctx, "b", redlease.WithAutoRenew(false))
		require.NoError(t, err)
		w := integWaiter(ctx, c, "blocked")
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(e.queued("blocked")) == 1 })

		require.NoError(t, c.Close(ctx))
		require.ErrorIs(t, servertest.Recv(t, w, 30*time.Second).err, redlease.ErrClientClosed)
		require.ErrorIs(t, context.Cause(a.Context()), redlease.ErrReleased)
		require.ErrorIs(t, context.Cause(b.Context()), redlease.ErrReleased)
		require.Zero(t, rdb.Exists(ctx, "redlease:{a}:lease", "redlease:{b}:lease").Val())
		_, err = c.TryAcquire(ctx, "c")
		require.ErrorIs(t, err, redlease.ErrClientClosed)

		require.NoError(t, other.Close(ctx))
		require.ErrorIs(t, context.Cause(blocker.Context()), redlease.ErrReleased)
		integCheckLeaks(t, before, time.Second)
	})
}
