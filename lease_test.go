package redlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ---- unit tests on miniredis ----

func TestAcquireRelease(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second))
	ctx := t.Context()

	l, err := c.TryAcquire(ctx, "billing:42")
	require.NoError(t, err)
	require.Equal(t, "billing:42", l.Resource())
	require.Equal(t, int64(1), l.Fence())
	require.Regexp(t, uuidV4, l.Owner())
	require.NoError(t, l.Context().Err())

	// Keys of one resource share a hash slot; the lease has the TTL, the counter none.
	require.Equal(t, fmt.Sprintf("%s:%d:%s", l.Owner(), l.Fence(), DefaultHolder()), mustGet(t, mr, "redlease:{billing:42}:lease"))
	require.Equal(t, 10*time.Second, mr.TTL("redlease:{billing:42}:lease"))
	require.Equal(t, "1", mustGet(t, mr, counterKey("billing:42")))
	require.Zero(t, mr.TTL(counterKey("billing:42")))

	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
	require.False(t, mr.Exists("redlease:{billing:42}:lease"))
	require.Equal(t, fmt.Sprintf("%s:%d:%s", l.Owner(), l.Fence(), DefaultHolder()), mustGet(t, mr, "redlease:{billing:42}:released"),
		"the lease was renamed: a retried release is recognised")
	require.Greater(t, mr.TTL("redlease:{billing:42}:released"), 9*time.Second, "kept as long as the lease had left")
	require.Equal(t, "1", mustGet(t, mr, counterKey("billing:42")), "release never touches the fence counter")
	require.ErrorIs(t, l.Refresh(ctx), ErrReleased)

	n, err := c.LastFence(ctx, "billing:42")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = c.LastFence(ctx, "never-taken")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestNewOwner(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		owner, member := newOwner("c1d2e3f4")
		require.Regexp(t, uuidV4, owner)
		u, err := uuid.Parse(owner)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(4), u.Version())
		require.Equal(t, uuid.RFC4122, u.Variant())
		require.Equal(t, owner+"/c1d2e3f4", member)
		require.Equal(t, "c1d2e3f4", owner[:8], "the Client's id begins the token (see broken.go)")
		require.False(t, seen[owner], "owner tokens are unique")
		seen[owner] = true
	}
}

func mustGet(t *testing.T, mr interface{ Get(string) (string, error) }, key string) string {
	t.Helper()
	v, err := mr.Get(key)
	require.NoError(t, err, key)
	return v
}

func TestTryAcquireBusy(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(10*time.Second), WithAutoRenew(false))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	defer l.Release(ctx)

	mr.FastForward(3 * time.Second)
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	var busy *BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, "r", busy.Resource)
	require.Equal(t, 7*time.Second, busy.Remaining)
	require.Equal(t, DefaultHolder(), busy.Holder)
	require.Contains(t, err.Error(), "held by another owner ("+DefaultHolder()+"); its lease lapses in 7s unless the holder renews it")
	require.Equal(t, "2", mustGet(t, mr, counterKey("r")), "a first attempt draws a fence, used or not (fences need only rise)")
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Equal(t, "3", mustGet(t, mr, counterKey("r")))
}

func TestExpiredHolderIsReplacedAndItsLateReleaseDeletesNothing(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Minute), WithAutoRenew(false))
	ctx := t.Context()
	a, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)

	mr.FastForward(time.Minute) // A paused past its TTL
	b, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Greater(t, b.Fence(), a.Fence())

	err = a.Release(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost, "a second Release repeats the verdict")
	require.Equal(t, fmt.Sprintf("%s:%d:%s", b.Owner(), b.Fence(), DefaultHolder()), mustGet(t, mr, "redlease:{r}:lease"),
		"the stale release left the new lease alone")
	require.ErrorIs(t, a.Refresh(ctx), ErrReleased)
	require.NoError(t, b.Release(ctx))
}

func TestRefreshAfterLossEndsContext(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Minute), WithAutoRenew(false))
	ctx := t.Context()
	a, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)

	require.NoError(t, a.Refresh(ctx))
	mr.FastForward(time.Minute)
	b, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)

	err = a.Refresh(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, context.Cause(a.Context()), ErrLeaseLost)
	require.Equal(t, b.Owner()+":2:"+DefaultHolder(), mustGet(t, mr, "redlease:{r}:lease"), "refresh never recreates or takes over")
	require.ErrorIs(t, a.Refresh(ctx), ErrLeaseLost, "no renew is sent for a lost lease")
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost)
	require.NoError(t, b.Release(ctx))
}

func TestRefreshResetsTTL(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Minute), WithAutoRenew(false))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	before := l.Deadline()
	mr.FastForward(40 * time.Second)
	require.Equal(t, 20*time.Second, mr.TTL("redlease:{r}:lease"))
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, l.Refresh(ctx))
	require.Equal(t, time.Minute, mr.TTL("redlease:{r}:lease"))
	require.True(t, l.Deadline().After(before), "refresh moves the local deadline")
	require.NoError(t, l.Release(ctx))
}

func TestReleaseWithCancelledContextStillReleases(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb)
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, l.Release(ctx))
	require.False(t, mr.Exists("redlease:{r}:lease"))

	// The common case: a deferred Release given the lease's own context.
	l, err = c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	func() {
		defer l.Release(l.Context())
	}()
	require.False(t, mr.Exists("redlease:{r}:lease"))
}

func TestSecondReleaseMakesNoRoundTrip(t *testing.T) {
	_, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb)
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	sent := hook.Cmds.Load()
	require.NoError(t, l.Release(ctx))
	require.Equal(t, sent, hook.Cmds.Load())
}

type ctxKey struct{}

func TestLeaseContextKeepsValuesNotCancellation(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "trace-7"))
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	cancel()
	require.NoError(t, l.Context().Err())
	require.Equal(t, "trace-7", l.Context().Value(ctxKey{}))
	require.NoError(t, l.Release(ctx))
}

func TestBadInputFailsBeforeAnyRoundTrip(t *testing.T) {
	_, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	var typedNil *redis.Client
	cases := []struct {
		name     string
		client   *Client
		resource string
		opts     []LeaseOption
	}{
		{"empty resource", New(rdb), "", nil},
		{"nil client", New(nil), "r", nil},
		{"typed nil client", New(typedNil), "r", nil},
		{"zero TTL", New(rdb), "r", []LeaseOption{WithTTL(0)}},
		{"negative TTL", New(rdb), "r", []LeaseOption{WithTTL(-time.Second)}},
		{"TTL below 1ms", New(rdb), "r", []LeaseOption{WithTTL(500 * time.Microsecond)}},
		{"TTL not whole ms", New(rdb), "r", []LeaseOption{WithTTL(1500 * time.Microsecond)}},
		{"bad TTL in New", New(rdb, WithTTL(0)), "r", nil},
		{"renew interval at lifetime", New(rdb), "r", []LeaseOption{WithTTL(time.Second), WithRenewInterval(890 * time.Millisecond)}},
		{"renew interval above TTL", New(rdb), "r", []LeaseOption{WithTTL(time.Second), WithRenewInterval(2 * time.Second)}},
		{"negative renew interval", New(rdb), "r", []LeaseOption{WithRenewInterval(-time.Second)}},
		{"negative margin", New(rdb), "r", []LeaseOption{WithSafetyMargin(-time.Millisecond)}},
		{"margin eats TTL", New(rdb), "r", []LeaseOption{WithTTL(time.Second), WithSafetyMargin(time.Second)}},
		{"zero release timeout", New(rdb), "r", []LeaseOption{WithReleaseTimeout(0)}},
		{"release timeout below 1ms", New(rdb), "r", []LeaseOption{WithReleaseTimeout(time.Microsecond)}},
		{"renew interval of 1ns", New(rdb), "r", []LeaseOption{WithRenewInterval(time.Nanosecond)}},
		{"TTL too short to renew every TTL/3", New(rdb), "r", []LeaseOption{WithTTL(2 * time.Millisecond)}},
		{"max hold of 1ns", New(rdb), "r", []LeaseOption{WithMaxHold(time.Nanosecond)}},
		{"holder over MaxHolder", New(rdb), "r", []LeaseOption{WithHolder(strings.Repeat("h", MaxHolder+1))}},
	}
	// WithMaxWait is for the calls that wait only.
	l, err := New(rdb).Acquire(t.Context(), "r", WithMaxWait(time.Nanosecond))
	require.Nil(t, l)
	require.ErrorIs(t, err, ErrInvalidArgument, "max wait of 1ns")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.client.TryAcquire(t.Context(), tc.resource, tc.opts...)
			require.Nil(t, l)
			require.ErrorIs(t, err, ErrInvalidArgument)
			l, err = tc.client.Acquire(t.Context(), tc.resource, waitOptions(tc.opts)...)
			require.Nil(t, l)
			require.ErrorIs(t, err, ErrInvalidArgument)
			if tc.opts == nil {
				_, err := tc.client.LastFence(t.Context(), tc.resource)
				require.ErrorIs(t, err, ErrInvalidArgument)
			}
		})
	}
	require.Zero(t, hook.Cmds.Load(), "no command may be sent for bad input")

	// Nil handles answer instead of panicking.
	var nilClient *Client
	_, err = nilClient.TryAcquire(t.Context(), "r")
	require.ErrorIs(t, err, ErrInvalidArgument)
	var nilLease *Lease
	require.ErrorIs(t, nilLease.Release(t.Context()), ErrInvalidArgument)
	require.ErrorIs(t, nilLease.Refresh(t.Context()), ErrInvalidArgument)
	require.Error(t, nilLease.Context().Err())
	require.Zero(t, nilLease.Fence())
}

func TestAcquireWaitsForRelease(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	ctx := t.Context()
	a, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)

	got := make(chan *Lease, 1)
	go func() {
		b, err := c.Acquire(ctx, "r")
		if err != nil {
			b = nil
		}
		got <- b
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, a.Release(ctx))
	select {
	case b := <-got:
		require.NotNil(t, b)
		require.Greater(t, b.Fence(), a.Fence())
		require.NoError(t, b.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return after the release")
	}
}

func TestAcquireEndsWithContext(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	a, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	defer a.Release(t.Context())

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond) // the first attempt is answered first, even on a loaded machine
	defer cancel()
	_, err = c.Acquire(ctx, "r")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = c.Acquire(ctx, "r") // already ended: no round trip needed
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestAcquireWithLostReplyKeepsOneFence(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb)
	ctx := t.Context()
	warm(t, c)

	hook.LoseReplies.Store(1) // the first acquire runs, its reply is lost
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Fence(), "the retry with the same owner gets the same fence")
	require.Equal(t, "1", mustGet(t, mr, counterKey("r")), "no second fence was drawn")
	require.NoError(t, l.Release(ctx))

	// Every reply lost: TryAcquire gives up, says so, and releases by owner.
	hook.LoseReplies.Store(maxUnknownRetries + 1)
	_, err = c.TryAcquire(ctx, "r")
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.False(t, mr.Exists("redlease:{r}:lease"), "the lease of unknown outcome was released by owner")
	require.Equal(t, "2", mustGet(t, mr, counterKey("r")))
}

func TestReleaseAndRefreshWithLostReplyAreReportedUnknown(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb, WithAutoRenew(false))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id) // its SUBSCRIBE is not the request whose reply is lost

	hook.LoseReplies.Store(1)
	err = l.Refresh(ctx)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrLeaseLost)
	require.NoError(t, l.Context().Err(), "an unknown renew outcome does not end the lease; its deadline does")

	hook.LoseReplies.Store(1)
	err = l.Release(ctx)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrLeaseLost)
	require.False(t, mr.Exists("redlease:{r}:lease"), "the delete did happen; only its reply was lost")
	require.NoError(t, l.Release(ctx), "a retry learns that this owner did release it")
}

func TestLocalDeadlineEndsLeaseWithoutRenewal(t *testing.T) {
	_, rdb := servertest.Mini(t)
	// A TTL long enough for the acquire's reply on a loaded machine.
	c := New(rdb, WithTTL(time.Second), WithAutoRenew(false))
	start := time.Now()
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	require.False(t, l.Deadline().After(start.Add(time.Second)))
	servertest.WaitDone(t, l.Context(), 10*time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
	require.GreaterOrEqual(t, time.Since(start), 890*time.Millisecond, "lifetime is TTL less drift and margin")
	require.NoError(t, l.Release(t.Context()), "the key was still there: miniredis does not expire without FastForward")
}

func TestWatchdogOnMiniredis(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	c := New(rdb, WithTTL(time.Second)) // renewals every 333 ms, each with 890 ms to spare on a loaded machine
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	time.Sleep(3 * time.Second) // three local lifetimes: only renewals keep it
	require.NoError(t, l.Context().Err())

	// The key disappears (an operator deleted it): the next renewal notices.
	mr.Del("redlease:{r}:lease")
	servertest.WaitDone(t, l.Context(), 10*time.Second)
	require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
	require.ErrorIs(t, l.Release(t.Context()), ErrLeaseLost)
}

// The integration tests on real servers are in the tests module
// (tests/integ_*_test.go), on every client library; those that need the
// Client's internals or go-redis's stay here.

func TestNoGoroutineOutlivesReleaseOrLoss(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	_ = rdb.Ping(t.Context()).Err() // the pool's connection is not the lease's doing
	before := servertest.Goroutines()
	c := New(rdb, WithTTL(time.Second))
	ctx := t.Context()
	var leases []*Lease
	for i := range 20 {
		l, err := c.TryAcquire(ctx, fmt.Sprint("g", i))
		require.NoError(t, err)
		leases = append(leases, l)
	}
	for _, l := range leases[:10] {
		require.NoError(t, l.Release(ctx))
	}
	for i := 10; i < 20; i++ { // the rest are lost: the watchdog finds them gone
		mr.Del(fmt.Sprintf("redlease:{g%d}:lease", i))
	}
	for _, l := range leases[10:] {
		servertest.WaitDone(t, l.Context(), 10*time.Second)
	}
	// Closing the connections ends the server's and the pool's goroutines;
	// a watchdog goroutine would remain.
	require.NoError(t, rdb.Close())
	mr.Close()
	servertest.CheckLeaks(t, before, time.Second)
}

// warm makes c take and release a lease, so that it knows Redis answers and
// sends its next acquire without first asking whether Redis can be reached.
func warm(t testing.TB, c *Client) {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), "warm-up")
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
}

// A long resource name makes a bounded error and log line: the longest a
// lease takes, and a 1 MiB one that it refuses. (A 1 MiB name, which was
// taken, made a 1 MiB error.)
func TestHugeResourceNamesAreCutInMessages(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := New(rdb, WithLogger(logger))
	ctx := t.Context()
	huge := strings.Repeat("x", MaxResourceName)
	l, err := c.TryAcquire(ctx, huge)
	require.NoError(t, err)
	_, err = c.TryAcquire(ctx, huge)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Less(t, len(err.Error()), 512, "the error is bounded")
	require.Contains(t, err.Error(), "(1024 bytes)")
	mr.Del(wire.Key(DefaultPrefix, huge, wire.KindLease))
	err = l.Release(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	require.Less(t, len(err.Error()), 512)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		require.Less(t, len(line), 1024, "a log line is bounded")
	}
	for _, bad := range []string{"}" + huge[1:], strings.Repeat("x", 1<<20)} {
		_, err = c.TryAcquire(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Less(t, len(err.Error()), 512)
	}
}

// Refresh sends no renewal once the lease has ended locally: one that waits
// for a connection past the local deadline gives up instead of renewing in
// Redis a lease whose holder was told it is lost. (Refresh sent it late, and
// Redis held the lease for another full TTL.)
func TestRefreshIsNotSentAfterTheLeaseEnded(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, PoolTimeout: 20 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	const ttl = 3 * time.Second
	c := New(rdb, WithTTL(ttl), WithAutoRenew(false))
	defer c.Close(context.Background())
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	// Redis keeps the lease for the drift allowance and the safety margin
	// (330 ms) past the local deadline; the pool's only connection is busy
	// until halfway through that.
	conn := rdb.Conn()
	require.NoError(t, conn.Ping(ctx).Err())
	gap := ttl - l.cfg.lifetime()
	go func() {
		time.Sleep(time.Until(l.Deadline().Add(gap / 2)))
		_ = conn.Close()
	}()
	require.Error(t, l.Refresh(ctx))
	<-l.Context().Done()
	time.Sleep(time.Until(l.Deadline().Add(gap/2 + 100*time.Millisecond))) // the connection is free again
	pttl := srv.Client(t).PTTL(ctx, "redlease:{r}:lease").Val()
	require.Less(t, pttl, time.Second, "no renewal after the lease ended (PTTL %v)", pttl)
}

// gateRenewal holds up the first script call after it is armed (the
// watchdog's renewal) until opened or its context ends.
type gateRenewal struct {
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func (g *gateRenewal) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gateRenewal) hold(ctx context.Context) error {
	if !g.armed.CompareAndSwap(true, false) {
		return nil
	}
	close(g.entered)
	select {
	case <-g.open:
		return errors.New("held up by the test")
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (g *gateRenewal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.hold(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (g *gateRenewal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.hold(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// A Refresh waits for the watchdog's renewal of the lease on its way (so
// that Redis applies their TTLs in order), but no longer than its ctx.
func TestRefreshWaitsForTheWatchdogsRenewalWithinItsContext(t *testing.T) {
	_, rdb := servertest.Mini(t)
	g := &gateRenewal{entered: make(chan struct{}), open: make(chan struct{})}
	rdb.AddHook(g)
	c := New(rdb, WithRenewInterval(100*time.Millisecond)) // TTL 30 s: the held renewal may wait ~27 s
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	watchingBreaks(t, c, DefaultPrefix, c.hub.id) // its SUBSCRIBE is not the renewal to hold up
	g.armed.Store(true)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not renew")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Refresh(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was sent")
	require.Less(t, time.Since(start), 10*time.Second, "ctx was kept, not the watchdog's ~27 s")
	require.Error(t, l.Extend(ctx, time.Minute), "ctx has ended")
	close(g.open)
	require.NoError(t, l.Refresh(t.Context()), "once the watchdog is done with it")
	require.NoError(t, l.Release(t.Context()))
}

// inflightRefreshes counts the refresh scripts on their way at once, alone
// or in the watchdog's pipelines, and the most seen.
type inflightRefreshes struct {
	now, most, total atomic.Int64
}

func (h *inflightRefreshes) refreshes(cmds ...redis.Cmder) int64 {
	var n int64
	for _, cmd := range cmds {
		a := cmd.Args()
		if len(a) < 2 || a[0] != "evalsha" {
			continue
		}
		hash, _ := a[1].(string)
		if p, ok := a[1].(*string); ok { // the driver's, to spare an allocation
			hash = *p
		}
		if hash == wire.Named("refresh.lua").Hash() {
			n++
		}
	}
	return n
}

func (h *inflightRefreshes) around(n int64, next func() error) error {
	if n == 0 {
		return next()
	}
	now := h.now.Add(n)
	for m := h.most.Load(); now > m && !h.most.CompareAndSwap(m, now); m = h.most.Load() {
	}
	h.total.Add(n)
	time.Sleep(time.Millisecond) // long enough for another renewal to overlap, were it let through
	defer h.now.Add(-n)
	return next()
}

func (h *inflightRefreshes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *inflightRefreshes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around(h.refreshes(cmd), func() error { return next(ctx, cmd) })
	}
}
func (h *inflightRefreshes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(h.refreshes(cmds...), func() error { return next(ctx, cmds) })
	}
}

// Renewals of one lease go one at a time, whoever sends them: Refresh,
// Extend and the watchdog, from many goroutines at once. Each waiting call
// gets its turn when the renewal before it is done.
func TestRenewalsOfALeaseGoOneAtATime(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &inflightRefreshes{}
	rdb.AddHook(h)
	c := New(rdb, WithTTL(10*time.Second), WithRenewInterval(5*time.Millisecond)) // a stalled machine does not end it
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l, err := c.TryAcquire(t.Context(), "r")
	require.NoError(t, err)
	const callers, calls = 8, 20
	errs := make(chan error, callers*calls)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				if (g+i)%4 == 0 {
					errs <- l.Extend(t.Context(), 10*time.Second)
				} else {
					errs <- l.Refresh(t.Context())
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, l.Release(t.Context()))
	require.GreaterOrEqual(t, h.total.Load(), int64(callers*calls), "every call renewed")
	require.Equal(t, int64(1), h.most.Load(), "renewals of the lease on their way at once")
}
