package redlease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// On miniredis; on real servers, every library: tests/integ_resume_test.go.

// A lease passes from one Client to another (as from a parent process to
// its child) by its token: same owner and fence, renewed at once to the
// lease's own TTL, and the parent's Handoff leaves it in Redis.
func TestResumeTakesUpAHandedOffLease(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	parent := New(rdb, WithHolder("parent"))
	l, err := parent.TryAcquire(ctx, "jobs:nightly", WithTTL(20*time.Second))
	require.NoError(t, err)
	tok := l.Token()
	require.Equal(t, Token{Resource: "jobs:nightly", Owner: l.Owner(), Fence: l.Fence(), Kind: ExclusiveLease,
		TTL: 20 * time.Second}, tok)

	mr.FastForward(5 * time.Second) // 15 s left in Redis
	child := New(rdb, WithTTL(time.Second), WithHolder("child"))
	parsed, err := ParseToken(tok.String())
	require.NoError(t, err)
	before := time.Now()
	r, err := child.Resume(ctx, parsed, WithTTL(2*time.Second))
	after := time.Now()
	require.NoError(t, err)
	require.Equal(t, l.Fence(), r.Fence())
	require.Equal(t, l.Owner(), r.Owner())
	require.Equal(t, "jobs:nightly", r.Resource())
	require.Equal(t, "parent", r.Holder(), "the holder description that Redis keeps")
	require.Equal(t, -1, r.Permit())
	require.Equal(t, tok, r.Token(), "the resumed lease's token is the same")
	require.Equal(t, 20*time.Second, mr.TTL("redlease:{jobs:nightly}:lease"), "renewed to the token's TTL, not the Client's nor WithTTL's")
	lifetime := r.cfg.lifetime()
	require.Equal(t, 20*time.Second-200*time.Millisecond-2*time.Second, lifetime)
	require.False(t, r.Deadline().Before(before.Add(lifetime)), "the deadline counts from the send time")
	require.False(t, r.Deadline().After(after.Add(lifetime)))
	require.NoError(t, r.Context().Err())
	require.Equal(t, 1, child.tracked())

	require.NoError(t, l.Handoff())
	require.ErrorIs(t, context.Cause(l.Context()), ErrHandedOff)
	require.ErrorIs(t, l.Refresh(ctx), ErrHandedOff)
	require.ErrorIs(t, l.Release(ctx), ErrHandedOff, "a deferred Release after Handoff")
	require.ErrorIs(t, l.Handoff(), ErrHandedOff)
	require.Zero(t, parent.tracked())
	require.NoError(t, parent.Close(ctx))
	require.True(t, mr.Exists("redlease:{jobs:nightly}:lease"), "neither Release nor Close of the parent released it")

	require.NoError(t, r.Refresh(ctx))
	require.NoError(t, r.Release(ctx))
	require.False(t, mr.Exists("redlease:{jobs:nightly}:lease"))
	require.NoError(t, child.Close(ctx))
}

// Each kind of shared lease resumes as itself: a permit keeps its number,
// a read lease and the write lease their fences.
func TestResumeSharedLeases(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	first := New(rdb, WithAutoRenew(false))
	second := New(rdb, WithAutoRenew(false))
	t.Cleanup(func() { _ = first.Close(ctx); _ = second.Close(ctx) })

	_, err := first.TryAcquireSemaphore(ctx, "pool", 3)
	require.NoError(t, err)
	p, err := first.TryAcquireSemaphore(ctx, "pool", 3)
	require.NoError(t, err)
	rd, err := first.TryAcquireRead(ctx, "catalog")
	require.NoError(t, err)
	other, err := first.TryAcquireRead(ctx, "catalog")
	require.NoError(t, err)
	w, err := first.TryAcquireWrite(ctx, "index")
	require.NoError(t, err)

	for _, tc := range []struct {
		l    *Lease
		kind LeaseKind
	}{{p, SemaphorePermit}, {rd, ReadLease}, {w, WriteLease}} {
		tok := tc.l.Token()
		require.Equal(t, tc.kind, tok.Kind)
		r, err := second.Resume(ctx, tok)
		require.NoError(t, err, "%v", tok.Kind)
		require.Equal(t, tc.l.Fence(), r.Fence())
		require.Equal(t, tc.l.Permit(), r.Permit())
		n, ok := r.Semaphore()
		m, ok2 := tc.l.Semaphore()
		require.Equal(t, m, n)
		require.Equal(t, ok2, ok)
		require.Equal(t, DefaultHolder(), r.Holder())
		require.Equal(t, tok, r.Token())
		require.NoError(t, tc.l.Handoff())
		require.NoError(t, r.Refresh(ctx), "%v", tok.Kind)
		require.NoError(t, r.Release(ctx), "%v", tok.Kind)
		_, err = second.Resume(ctx, tok)
		require.ErrorIs(t, err, ErrLeaseLost, "%v: released", tok.Kind)
	}
	require.Equal(t, 1, p.Permit())
	require.NoError(t, other.Refresh(ctx), "the other reader's lease is its own")
	require.True(t, mr.Exists("redlease:{pool}:permits"))
}

// Resume finds out in Redis whether the token's lease is still held, and
// writes nothing when it is not.
func TestResumeOfALeaseNoLongerHeld(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithAutoRenew(false))
	t.Cleanup(func() { _ = c.Close(ctx) })
	const key = "redlease:{r}:lease"

	l, err := c.TryAcquire(ctx, "r", WithTTL(10*time.Second))
	require.NoError(t, err)
	tok := l.Token()

	wrong := tok
	wrong.Fence++
	mr.FastForward(time.Second)
	_, err = c.Resume(ctx, wrong)
	require.ErrorIs(t, err, ErrLeaseLost, "another fence")
	require.Equal(t, 9*time.Second, mr.TTL(key), "not renewed")
	wrong = tok
	wrong.Owner, _ = newOwner("")
	_, err = c.Resume(ctx, wrong)
	require.ErrorIs(t, err, ErrLeaseLost, "another owner")
	_, err = c.Resume(ctx, tok, WithPrefix("other:"))
	require.ErrorIs(t, err, ErrLeaseLost, "another prefix")
	require.ErrorContains(t, err, "key prefix")
	wrong = tok
	wrong.Kind = WriteLease
	_, err = c.Resume(ctx, wrong)
	require.ErrorIs(t, err, ErrLeaseLost, "another kind")
	require.Equal(t, 9*time.Second, mr.TTL(key), "not renewed")

	mr.FastForward(10 * time.Second) // expired
	_, err = c.Resume(ctx, tok)
	require.ErrorIs(t, err, ErrLeaseLost, "expired")
	stolen, err := c.TryAcquire(ctx, "r")
	require.NoError(t, err)
	_, err = c.Resume(ctx, tok)
	require.ErrorIs(t, err, ErrLeaseLost, "another holder's")
	require.NoError(t, stolen.Release(ctx))
	require.Equal(t, 1, c.tracked(), "l alone: a failed Resume leaves nothing for Close")

	// A permit whose token names another number of permits is not a
	// permit lost: the token is wrong.
	p, err := c.TryAcquireSemaphore(ctx, "pool", 3)
	require.NoError(t, err)
	wrong = p.Token()
	wrong.Permits = 5
	_, err = c.Resume(ctx, wrong)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "the semaphore has 3")
}

// Two processes that resume one token share the lease: the first Release
// ends it in Redis, and the other's next renewal finds it lost.
func TestResumeTwiceSharesTheLease(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	holder := New(rdb)
	l, err := holder.TryAcquire(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, l.Handoff())
	a, b := New(rdb, WithAutoRenew(false)), New(rdb, WithAutoRenew(false))
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx); _ = holder.Close(ctx) })
	ra, err := a.Resume(ctx, l.Token())
	require.NoError(t, err)
	rb, err := b.Resume(ctx, l.Token())
	require.NoError(t, err)
	require.Equal(t, ra.Fence(), rb.Fence())
	require.Equal(t, ra.Owner(), rb.Owner())
	require.NoError(t, ra.Refresh(ctx))
	require.NoError(t, rb.Refresh(ctx))

	require.NoError(t, ra.Release(ctx))
	require.False(t, mr.Exists("redlease:{r}:lease"))
	require.ErrorIs(t, rb.Refresh(ctx), ErrLeaseLost)
	require.ErrorIs(t, context.Cause(rb.Context()), ErrLeaseLost)
	require.ErrorIs(t, rb.Release(ctx), ErrLeaseLost, "its Release reports the loss")
	_, err = b.Resume(ctx, l.Token())
	require.ErrorIs(t, err, ErrLeaseLost)
}

// Handoff of a lease that has ended: one that lapsed is handed off all the
// same (Redis may still hold it), with the cause of its end; one released
// or lost stays as it is.
func TestHandoffOfALeaseThatEnded(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb, WithTTL(10*time.Second))
	l, err := c.TryAcquire(ctx, "lapsed", WithMaxHold(50*time.Millisecond))
	require.NoError(t, err)
	servertest.WaitDone(t, l.Context(), 5*time.Second)
	require.Equal(t, 1, c.tracked(), "Close would release it")
	require.ErrorIs(t, l.Handoff(), ErrMaxHold)
	require.Zero(t, c.tracked(), "Close leaves it in Redis")
	require.ErrorIs(t, l.Release(ctx), ErrHandedOff)
	require.True(t, mr.Exists("redlease:{lapsed}:lease"))
	r, err := c.Resume(ctx, l.Token())
	require.NoError(t, err, "Redis still held it")
	require.NoError(t, r.Release(ctx))

	l, err = c.TryAcquire(ctx, "released")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, l.Handoff(), ErrReleased)
	require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)

	l, err = c.TryAcquire(ctx, "lost", WithAutoRenew(false))
	require.NoError(t, err)
	mr.Del("redlease:{lost}:lease")
	require.ErrorIs(t, l.Refresh(ctx), ErrLeaseLost)
	require.ErrorIs(t, l.Handoff(), ErrLeaseLost)

	var nilLease *Lease
	require.ErrorIs(t, nilLease.Handoff(), ErrInvalidArgument)
	require.Equal(t, Token{}, nilLease.Token())
	require.NoError(t, c.Close(ctx))
}

// A resumed lease is one like any other: the watchdog renews it, Close
// releases it, the observers hear of it.
func TestResumedLeaseIsRenewedAndClosed(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	holder := New(rdb)
	t.Cleanup(func() { _ = holder.Close(ctx) })
	l, err := holder.TryAcquire(ctx, "r", WithTTL(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, l.Handoff())

	rec := &recorder{}
	c := New(rdb, WithObserver(rec))
	r, err := c.Resume(ctx, l.Token())
	require.NoError(t, err)
	first := r.Deadline()
	servertest.WaitFor(t, 5*time.Second, func() bool { return r.Deadline().After(first) })
	require.NoError(t, r.Context().Err(), "renewed by the watchdog")
	events := rec.take()
	require.GreaterOrEqual(t, len(events), 2)
	require.Equal(t, []string{"renew:ok", "renew:ok"}, events[:2], "Resume is a renewal, and so is the watchdog's")
	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, context.Cause(r.Context()), ErrReleased)
	require.False(t, mr.Exists("redlease:{r}:lease"), "Close released it")
	require.Contains(t, rec.take(), "release:ok")

	_, err = c.Resume(ctx, l.Token())
	require.ErrorIs(t, err, ErrClientClosed)
}

// Resume refuses, before any round trip, a token no lease has, and a
// context that has ended.
func TestResumeRefusesBadInput(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	hook := &servertest.CountingHook{}
	rdb.AddHook(hook)
	c := New(rdb)
	t.Cleanup(func() { _ = c.Close(ctx) })
	_, err := c.Resume(ctx, Token{})
	require.ErrorIs(t, err, ErrInvalidArgument)
	owner, _ := newOwner("")
	tok := Token{Resource: "r", Owner: owner, Fence: 1, TTL: time.Second}
	_, err = c.Resume(ctx, tok, WithRenewInterval(time.Second))
	require.ErrorIs(t, err, ErrInvalidArgument, "an interval not below the lifetime of the token's TTL")
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Resume(done, tok)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, hook.Cmds.Load(), "no round trip")
	var nilClient *Client
	_, err = nilClient.Resume(ctx, tok)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// The script's keys are the same for every kind, all of the resource's
// (so in its slot).
func TestResumeCallKeys(t *testing.T) {
	k, sk := wire.KeysOf("p:", "r"), wire.SharedKeysOf("p:", "r")
	for _, kind := range resumeKinds {
		c := wire.Resume(&k, sk, kind, "o", 1, "1000", 0, 1)
		require.Len(t, c.Keys, 6, kind)
		for _, key := range c.Keys {
			require.True(t, strings.HasPrefix(key, "p:{r}:"), key)
		}
	}
}

// A lease extended before it is handed off passes its new TTL on: the
// resumer renews to it, not to the TTL the lease was taken with.
func TestTokenCarriesTheExtendedTTL(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l, err := c.TryAcquire(ctx, "r", WithTTL(3*time.Second))
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.Equal(t, time.Minute, l.Token().TTL)
	require.NoError(t, l.Handoff())
	r, err := c.Resume(ctx, l.Token())
	require.NoError(t, err)
	require.Equal(t, time.Minute, mr.TTL("redlease:{r}:lease"))
	require.NoError(t, r.Release(ctx))
}
