package redlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// lateDriver holds back the first acquire call on one lease key, as
// rueidis and valkey-go do with a request queued for a busy connection:
// when the call's context ends first, Eval returns and the request is
// written once gate is closed, after whatever was sent meanwhile.
type lateDriver struct {
	driver.Driver
	lease, fence string        // the held call's first two keys
	arrived      chan struct{} // closed when the held call has come
	gate         chan struct{} // closed by the test: send the held call
	once         sync.Once
	sent         chan driver.Reply // the held call's reply, once written
}

var errLate = errors.New("test: the context ended before the request was written")

func (d *lateDriver) SendsLate() bool { return true }

func (d *lateDriver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	held := false
	if len(c.Keys) > 1 && c.Keys[0] == d.lease && c.Keys[1] == d.fence {
		d.once.Do(func() { held = true })
	}
	if !held {
		return d.Driver.Eval(ctx, c)
	}
	close(d.arrived)
	select {
	case <-d.gate:
		r := d.Driver.Eval(ctx, c)
		d.sent <- r
		return r
	case <-ctx.Done():
		go func() { // still queued: written later, after the caller's release
			<-d.gate
			d.sent <- d.Driver.Eval(context.Background(), c)
		}()
		return driver.Reply{Err: fmt.Errorf("%w: %w", errLate, ctx.Err())}
	}
}

func (d *lateDriver) Classify(err error) driver.ErrorClass {
	if errors.Is(err, errLate) {
		return driver.Unknown // it may yet reach Redis
	}
	return d.Driver.Classify(err)
}

// An acquire whose caller stopped waiting while its request was still held
// by a client that writes it later (driver.LateSender) takes the lease when
// it reaches Redis, after the caller's undo found nothing to release (it
// overtook the held request, as it can on another connection of rueidis or
// valkey-go). The lease must still be released then, by the next of the
// releases sent again after the give-up (on the fake clock), or by Close,
// not left for its TTL.
func TestAcquireThatReachesRedisAfterItsCallerGaveUpIsReleased(t *testing.T) {
	for _, name := range []string{"cancel", "deadline", "close"} {
		t.Run(name, func(t *testing.T) {
			srv := servertest.Redis(t)
			rdb := srv.Client(t)
			gd, err := goredis.New(rdb)
			require.NoError(t, err)
			k := wire.KeysOf(DefaultPrefix, "late")
			d := &lateDriver{Driver: gd, lease: k.Lease, fence: k.Fence,
				arrived: make(chan struct{}), gate: make(chan struct{}), sent: make(chan driver.Reply, 1)}
			clk := clock.NewFake(time.Now())
			c := NewWithDriver(d, WithTTL(time.Minute), clock.Option(clk).(Option))
			closeAtEnd(t, c)
			warm, err := c.TryAcquire(t.Context(), "warm") // loads the scripts: the held call's EVALSHA finds its script
			require.NoError(t, err)
			require.NoError(t, warm.Release(t.Context()))

			var (
				ctx    context.Context
				cancel context.CancelFunc
			)
			if name == "deadline" {
				ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(t.Context())
			}
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.TryAcquire(ctx, "late")
				done <- err
			}()
			servertest.Recv(t, d.arrived, 10*time.Second)
			if name != "deadline" {
				cancel()
			}
			err = servertest.Recv(t, done, 10*time.Second)
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.Zero(t, rdb.Exists(t.Context(), k.Lease).Val(), "nothing taken yet")

			close(d.gate) // the held acquire reaches Redis now, and takes the lease
			r := servertest.Recv(t, d.sent, 10*time.Second)
			require.NoError(t, r.Err)
			fence, ok := r.Value.(int64)
			require.True(t, ok, "a fence, not %v", r.Value)
			require.Positive(t, fence, "the fence of the lease it took")
			require.EqualValues(t, 1, rdb.Exists(t.Context(), k.Lease).Val(), "taken after the undo")
			gone := func() bool { return rdb.Exists(t.Context(), k.Lease).Val() == 0 }
			if name == "close" {
				require.NoError(t, c.Close(t.Context()))
				require.True(t, gone(), "Close waited for the last release")
				return
			}
			servertest.WaitFor(t, 10*time.Second, func() bool {
				clk.Advance(10 * time.Millisecond)
				return gone()
			})
			l, err := c.TryAcquire(t.Context(), "late")
			require.NoError(t, err, "the resource is free")
			require.NoError(t, l.Release(t.Context()))
		})
	}
}
