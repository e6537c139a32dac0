package tests

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Semaphores and read/write leases on a real server, on every library.
// (From the core's shared_lease_test.go, which keeps their miniredis cases.)

func TestIntegrationSemaphoreHoldsAtMostNPermits(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client(redlease.WithAutoRenew(false))
		ctx := t.Context()
		var held []*redlease.Lease
		seen := map[int]bool{}
		var last int64
		for range 3 {
			l, err := c.TryAcquireSemaphore(ctx, "payments", 3)
			require.NoError(t, err)
			require.False(t, seen[l.Permit()], "permit %d twice", l.Permit())
			seen[l.Permit()] = true
			require.Greater(t, l.Fence(), last)
			last = l.Fence()
			held = append(held, l)
		}
		_, err := c.TryAcquireSemaphore(ctx, "payments", 3)
		var busy *redlease.BusyError
		require.ErrorAs(t, err, &busy, "a fourth holder")
		require.Positive(t, busy.Remaining)

		_, err = c.TryAcquireSemaphore(ctx, "payments", 5)
		require.ErrorIs(t, err, redlease.ErrNotAcquired)
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "another number of permits while held")
		require.ErrorContains(t, err, "in use with 3 permits, not 5")

		require.NoError(t, held[1].Release(ctx))
		require.NoError(t, held[1].Release(ctx), "the verdict again")
		next, err := c.TryAcquireSemaphore(ctx, "payments", 3)
		require.NoError(t, err)
		require.Equal(t, held[1].Permit(), next.Permit(), "the released permit is the next one taken")
		require.Greater(t, next.Fence(), last, "its fence rises with its new holder")
		require.ErrorIs(t, held[1].Refresh(ctx), redlease.ErrReleased)
		require.NoError(t, next.Refresh(ctx))
		for _, l := range []*redlease.Lease{held[0], held[2], next} {
			require.NoError(t, l.Release(ctx))
		}
		l, err := c.TryAcquireSemaphore(ctx, "payments", 5)
		require.NoError(t, err, "none held: the number may change")
		require.NoError(t, l.Release(ctx))

		for _, n := range []int{0, -1, redlease.MaxPermits + 1} {
			_, err := c.TryAcquireSemaphore(ctx, "p", n)
			require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%d permits", n)
		}
	})
}

// A permit holder that paused past its TTL: its permit lapses, the next
// holder takes that very permit with a higher fence, and the old holder's
// renewal and release find it gone.
func TestIntegrationSemaphorePermitGoesToTheNextHolderWithAHigherFence(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client()
		a, err := c.TryAcquireSemaphore(ctx, "s", 1, redlease.WithTTL(300*time.Millisecond), redlease.WithAutoRenew(false))
		require.NoError(t, err)
		servertest.WaitDone(t, a.Context(), 5*time.Second)
		// Past the TTL in Redis too: the permits key expires with its
		// longest-lived holder, here the only one.
		permits := wire.SharedKeysOf(redlease.DefaultPrefix, "s").Permits
		servertest.WaitFor(t, 5*time.Second, func() bool { return e.rdb.Exists(ctx, permits).Val() == 0 })
		b, err := c.TryAcquireSemaphore(ctx, "s", 1)
		require.NoError(t, err)
		require.Equal(t, a.Permit(), b.Permit())
		require.Greater(t, b.Fence(), a.Fence())
		require.ErrorIs(t, a.Release(ctx), redlease.ErrLeaseLost)
		require.NoError(t, b.Refresh(ctx), "the old holder's release left the new one alone")
		require.NoError(t, b.Release(ctx))
	})
}

// Waiters for a full semaphore take turns as permits are released (that
// each is woken by a wake-up, not a timer, is the core's
// TestIntegrationSemaphoreQuickReleasesWakeOneWaiterEach's); the watchdog
// renews permits.
func TestIntegrationSemaphoreWaitersAreWokenByReleases(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithTTL(time.Second))
		const permits, workers = 2, 6
		var (
			inside, most atomic.Int32
			wg           sync.WaitGroup
		)
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					l, err := c.AcquireSemaphore(ctx, "pool", permits)
					if err != nil {
						errs <- err
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		require.NoError(t, <-errs)
		require.LessOrEqual(t, most.Load(), int32(permits))

		// A lease held past several renew intervals stays held.
		l, err := c.TryAcquireSemaphore(ctx, "pool", permits)
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, l.Context().Err())
		require.NoError(t, l.Release(ctx))
	})
}

func TestIntegrationReadersShareAndWritersExclude(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		c := e.client(redlease.WithAutoRenew(false))
		ctx := t.Context()
		r1, err := c.TryAcquireRead(ctx, "config")
		require.NoError(t, err)
		r2, err := c.TryAcquireRead(ctx, "config")
		require.NoError(t, err, "readers share")
		require.Greater(t, r2.Fence(), r1.Fence())
		_, err = c.TryAcquireWrite(ctx, "config")
		var busy *redlease.BusyError
		require.ErrorAs(t, err, &busy, "a writer waits for the readers")
		require.NoError(t, errors.Join(r1.Release(ctx), r2.Release(ctx)))
		require.NoError(t, r1.Release(ctx), "the verdict again")

		w, err := c.TryAcquireWrite(ctx, "config", redlease.WithHolder("the writer"))
		require.NoError(t, err)
		require.Greater(t, w.Fence(), r2.Fence())
		_, err = c.TryAcquireRead(ctx, "config")
		require.ErrorAs(t, err, &busy, "no reader beside the writer")
		require.Equal(t, "the writer", busy.Holder)
		_, err = c.TryAcquireWrite(ctx, "config")
		require.ErrorAs(t, err, &busy, "no second writer")
		require.NoError(t, w.Refresh(ctx))
		require.NoError(t, w.Release(ctx))
		r3, err := c.TryAcquireRead(ctx, "config")
		require.NoError(t, err)
		require.Greater(t, r3.Fence(), w.Fence(), "a read fence follows the writes before it")
		require.NoError(t, r3.Refresh(ctx))
		require.NoError(t, r3.Release(ctx))

		l, err := c.TryAcquire(ctx, "config")
		require.NoError(t, err, "nothing held or waited for: the exclusive lease is free too (holders are kept in keys of their own)")
		require.NoError(t, l.Release(ctx))
	})
}

// A waiting writer is not starved by a stream of readers: once it waits, new
// readers wait behind it; its release wakes every waiting reader at once.
func TestIntegrationWriterFirstThenEveryReader(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client()
		r1, err := c.TryAcquireRead(ctx, "doc")
		require.NoError(t, err)

		writer := integGo(func() (*redlease.Lease, error) { return c.AcquireWrite(ctx, "doc") })
		servertest.WaitFor(t, 5*time.Second, func() bool { return len(e.queued("doc")) == 1 })
		_, err = c.TryAcquireRead(ctx, "doc")
		var busy *redlease.BusyError
		require.ErrorAs(t, err, &busy, "a new reader waits behind the waiting writer")

		const readers = 4
		got := make(chan integResult, readers)
		for range readers {
			go func() {
				l, err := c.AcquireRead(ctx, "doc")
				got <- integResult{l, err}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, got)
		require.NoError(t, r1.Release(ctx)) // the last reader out: the writer goes
		w := servertest.Recv(t, writer, 5*time.Second)
		require.NoError(t, w.err)
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, got, "no reader beside the writer")

		start := time.Now()
		require.NoError(t, w.l.Release(ctx))
		for range readers {
			r := servertest.Recv(t, got, 5*time.Second)
			require.NoError(t, r.err)
			require.Greater(t, r.l.Fence(), w.l.Fence())
			defer r.l.Release(ctx)
		}
		t.Logf("the writer's release let %d readers in within %v", readers, time.Since(start))
		require.Less(t, time.Since(start), 500*time.Millisecond, "woken together, not one poll after another")
	})
}

// Inspect and Scan show shared leases and their holders; Break removes one
// by its fence, and its holder's release reports the loss.
func TestIntegrationAdminOfSharedLeases(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		c := e.client(redlease.WithAutoRenew(false))
		p0, err := c.TryAcquireSemaphore(ctx, "pool", 3, redlease.WithHolder("worker 0"))
		require.NoError(t, err)
		p1, err := c.TryAcquireSemaphore(ctx, "pool", 3)
		require.NoError(t, err)
		r, err := c.TryAcquireRead(ctx, "doc", redlease.WithHolder("reader"))
		require.NoError(t, err)

		st, err := c.Inspect(ctx, "pool")
		require.NoError(t, err)
		require.True(t, st.Held, "a permit holds it")
		require.Equal(t, "semaphore", st.Kind)
		require.Empty(t, st.Owner, "no exclusive lease")
		require.Equal(t, 3, st.Permits)
		require.Len(t, st.Shared, 2)
		byPermit := map[int]redlease.SharedLease{}
		for _, h := range st.Shared {
			require.Equal(t, "permit", h.Kind)
			byPermit[h.Permit] = h
		}
		require.Equal(t, redlease.SharedLease{Kind: "permit", Permit: p0.Permit(), Owner: p0.Owner(), Fence: p0.Fence(), Holder: "worker 0",
			Remaining: byPermit[p0.Permit()].Remaining}, byPermit[p0.Permit()])
		require.Positive(t, byPermit[p0.Permit()].Remaining)

		st, err = c.Inspect(ctx, "doc")
		require.NoError(t, err)
		require.True(t, st.Held, "a read lease holds it")
		require.Equal(t, "read/write", st.Kind)
		require.Equal(t, []redlease.SharedLease{{Kind: "read", Owner: r.Owner(), Fence: r.Fence(), Holder: "reader", Remaining: st.Shared[0].Remaining}}, st.Shared)

		found := map[string]int{}
		require.NoError(t, c.Scan(ctx, "*", func(st redlease.Status) error { found[st.Resource] += len(st.Shared); return nil }))
		require.Equal(t, map[string]int{"pool": 2, "doc": 1}, found)

		st, removed, err := c.Break(ctx, "pool", p1.Fence())
		require.NoError(t, err)
		require.True(t, removed)
		require.Len(t, st.Shared, 2, "the status before the break")
		require.ErrorIs(t, p1.Release(ctx), redlease.ErrLeaseLost, "the broken holder learns of it")
		next, err := c.TryAcquireSemaphore(ctx, "pool", 3)
		require.NoError(t, err)
		require.Greater(t, next.Fence(), p1.Fence())
		_, removed, err = c.Break(ctx, "doc", 0)
		require.NoError(t, err)
		require.True(t, removed)
		require.ErrorIs(t, r.Refresh(ctx), redlease.ErrLeaseLost)
		w, err := c.TryAcquireWrite(ctx, "doc")
		require.NoError(t, err, "the reader is gone: the writer goes in")
		require.NoError(t, errors.Join(w.Release(ctx), p0.Release(ctx), next.Release(ctx)))
	})
}

// A release whose reply was lost, repeated after the next holder took the
// lease, is recognised as done, for every kind of lease. (For a permit the
// record lasted only until the permit was taken again, for a read lease
// until a later reader's acquire trimmed it: the retry reported
// ErrLeaseLost. Found by the shared fault scenarios.)
func TestIntegrationRetriedReleaseAfterTheNextHolderIsRecognised(t *testing.T) {
	kinds := []struct {
		name string
		take func(context.Context, *redlease.Client) (*redlease.Lease, error)
	}{
		{"lease", func(ctx context.Context, c *redlease.Client) (*redlease.Lease, error) { return c.TryAcquire(ctx, "r") }},
		{"permit", func(ctx context.Context, c *redlease.Client) (*redlease.Lease, error) {
			return c.TryAcquireSemaphore(ctx, "r", 1)
		}},
		{"read", func(ctx context.Context, c *redlease.Client) (*redlease.Lease, error) {
			return c.TryAcquireRead(ctx, "r")
		}},
		{"write", func(ctx context.Context, c *redlease.Client) (*redlease.Lease, error) {
			return c.TryAcquireWrite(ctx, "r")
		}},
	}
	each(t, func(t *testing.T, lib library, kind servertest.Kind) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				e := newInteg(t, lib, kind)
				ctx := t.Context()
				proxy := servertest.StartProxy(t, e.srv.Addr)
				lossy := e.clientAt(proxy.Addr(), true, redlease.WithAutoRenew(false))
				other := e.client(redlease.WithAutoRenew(false))
				warmUp, err := k.take(ctx, other) // the scripts in the server's cache
				require.NoError(t, err)
				require.NoError(t, warmUp.Release(ctx))

				// The next reply on lossy's connection is to be the release's.
				// rueidis and valkey-go may PING an idle connection at any
				// time, and the proxy may drop that reply instead: then the
				// release went through, and the case is tried again with a
				// new lease, twice at most.
				var a *redlease.Lease
				for attempt := 1; ; attempt++ {
					a, err = k.take(ctx, lossy) // and lossy's connection open
					require.NoError(t, err)
					// and its break channel subscribed, on a connection of its own
					// with go-redis, whose handshake replies would count
					integWatchingBreaks(t, prefixOwner(redlease.DefaultPrefix, a), e.rdb)
					proxy.DropReplies(1)
					err = a.Release(ctx)
					if err == nil && attempt < 3 {
						t.Logf("attempt %d: the release's reply came through (another reply was dropped): again", attempt)
						proxy.Heal()
						continue
					}
					break
				}
				require.ErrorIs(t, err, redlease.ErrOutcomeUnknown, "the release ran, its reply was lost")
				b, err := k.take(ctx, other)
				require.NoError(t, err)
				require.NoError(t, a.Release(ctx), "asked again, the release that happened is recognised")
				require.NoError(t, b.Release(ctx))
			})
		}
	})
}

// A released reader's entry in readinfo goes with its release. (It stayed:
// the trimming in rw_read.lua reaches only readers still in readers, and
// each new reader lengthened readinfo's TTL, so while readers overlapped the
// hash grew by one entry per read lease: 51 here, beside one reader.)
func TestIntegrationReleasedReadersLeaveReadInfo(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		c := e.client(redlease.WithAutoRenew(false))
		long, err := c.TryAcquireRead(ctx, "doc")
		require.NoError(t, err)
		for range 50 {
			r, err := c.TryAcquireRead(ctx, "doc")
			require.NoError(t, err)
			require.NoError(t, r.Release(ctx))
		}
		readers := wire.Key(redlease.DefaultPrefix, "doc", wire.KindReaders)
		readinfo := wire.Key(redlease.DefaultPrefix, "doc", wire.KindReadInfo)
		require.Equal(t, int64(1), rdb.ZCard(ctx, readers).Val())
		require.Equal(t, []string{long.Owner()}, rdb.HKeys(ctx, readinfo).Val(), "only the reader still inside")
		require.NoError(t, long.Release(ctx))
		require.Zero(t, rdb.HLen(ctx, readinfo).Val())
	})
}

// A permit's release whose reply was lost, retried after the semaphore's
// number of permits changed, is recognised. (The change deleted the holders
// hash, and with it the record of the release: the retry reported
// ErrLeaseLost.)
func TestIntegrationRetriedPermitReleaseAfterTheNumberChangedIsRecognised(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		proxy := servertest.StartProxy(t, e.srv.Addr)
		lossy := e.clientAt(proxy.Addr(), true, redlease.WithAutoRenew(false))
		other := e.client(redlease.WithAutoRenew(false))
		warmUp, err := other.TryAcquireSemaphore(ctx, "s", 1) // the scripts in the server's cache
		require.NoError(t, err)
		require.NoError(t, warmUp.Release(ctx))

		a, err := lossy.TryAcquireSemaphore(ctx, "s", 1) // and lossy's connection open: the next reply is the release's
		require.NoError(t, err)
		integWatchingBreaks(t, prefixOwner(redlease.DefaultPrefix, a), e.rdb) // and its break channel subscribed
		proxy.DropReplies(1)
		require.ErrorIs(t, a.Release(ctx), redlease.ErrOutcomeUnknown, "the release ran, its reply was lost")
		b, err := other.TryAcquireSemaphore(ctx, "s", 2)
		require.NoError(t, err, "none held: the number may change")
		require.Equal(t, a.Permit(), b.Permit())
		require.NoError(t, a.Release(ctx), "asked again, the release that happened is recognised")
		require.NoError(t, b.Release(ctx))
	})
}
