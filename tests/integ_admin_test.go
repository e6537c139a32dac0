package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// The administrative calls on a real server, on every library. (From the
// core's admin_test.go.)

// A holder whose lease an operator broke finds out (at once, see
// integ_break_test.go); the first waiter is woken at once, and the next
// holder's fence is larger.
func TestIntegrationBreakWakesWaiterAndHolderSeesLoss(t *testing.T) {
	eachIntegParallel(t, func(t *testing.T, e *integ) {
		ctx := t.Context()
		holder := e.client(redlease.WithTTL(900 * time.Millisecond))
		waiter := e.client()
		admin := e.client()

		a, err := holder.TryAcquire(ctx, "job")
		require.NoError(t, err)

		wake := e.rdb.PSubscribe(ctx, "redlease:{job}:wake:*") // every Client's wake channel
		defer wake.Close()
		_, err = wake.Receive(ctx) // the subscription is confirmed
		require.NoError(t, err)

		got := make(chan *redlease.Lease, 1)
		go func() {
			b, err := waiter.Acquire(ctx, "job", redlease.WithMaxWait(30*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- b
		}()
		servertest.WaitFor(t, 10*time.Second, func() bool {
			st, err := admin.Inspect(ctx, "job")
			return err == nil && st.Waiters == 1
		})
		queued := e.queued("job") // the waiter's <owner>/<client id>

		st, removed, err := admin.Break(ctx, "job", 0)
		require.NoError(t, err)
		require.True(t, removed)
		require.Equal(t, a.Owner(), st.Owner)
		require.Equal(t, a.Fence(), st.Fence)
		require.Equal(t, int64(1), st.Waiters)
		require.Positive(t, st.Remaining)

		msgCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := wake.ReceiveMessage(msgCtx)
		require.NoError(t, err, "break wakes the first waiter")
		b := <-got
		require.NotNil(t, b)
		defer b.Release(ctx)
		require.Equal(t, b.Owner(), msg.Payload)
		require.Equal(t, []string{b.Owner() + "/" + integClientID(t, queued[0])}, queued)
		require.Equal(t, "redlease:{job}:wake:"+integClientID(t, queued[0]), msg.Channel, "only the waiter's Client hears it")
		require.Greater(t, b.Fence(), a.Fence())

		servertest.WaitDone(t, a.Context(), 10*time.Second)
		require.ErrorIs(t, context.Cause(a.Context()), redlease.ErrLeaseLost)
		require.ErrorIs(t, a.Release(ctx), redlease.ErrLeaseLost)
		require.NoError(t, b.Context().Err(), "the old holder's release left the new lease alone")
	})
}

func TestIntegrationScan(t *testing.T) {
	eachInteg(t, func(t *testing.T, e *integ) {
		rdb := e.rdb
		ctx := t.Context()
		// A prefix with glob characters must match only itself.
		c := e.client(redlease.WithPrefix("ops*[x]:"), redlease.WithAutoRenew(false))
		other := e.client(redlease.WithPrefix("opsA[x]:"), redlease.WithAutoRenew(false))

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

		collect := func(pattern string) map[string]redlease.Status {
			t.Helper()
			found := map[string]redlease.Status{}
			err := c.Scan(ctx, pattern, func(st redlease.Status) error {
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
		require.Equal(t, redlease.DefaultHolder(), a["a:held"].Holder)
		require.True(t, a["a:held"].Held)
		require.Equal(t, "ghost", a["a:orphan"].Owner)
		require.Equal(t, int64(7), a["a:orphan"].Fence)
		require.Equal(t, redlease.Status{Resource: "a:waited", Waiters: 1, LastFence: a["a:waited"].LastFence}, a["a:waited"])

		all := collect("")
		require.Len(t, all, 3+many)
		require.Equal(t, int64(many), all[fmt.Sprintf("b:%d", many-1)].Fence)

		stop := errors.New("stop")
		calls := 0
		err = c.Scan(ctx, "*", func(redlease.Status) error { calls++; return stop })
		require.ErrorIs(t, err, stop)
		require.True(t, err == stop, "fn's error is returned as it is, not wrapped: %v", err)
		require.Equal(t, 1, calls)
		require.ErrorIs(t, c.Scan(ctx, "*", nil), redlease.ErrInvalidArgument)
	})
}
