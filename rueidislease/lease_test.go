package rueidislease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/servertest"
)

// The lease operations, each on both kinds of server, plain and as a
// cluster.
func TestLeases(t *testing.T) {
	each(t, []testCase{
		{"TryAcquire", testTryAcquire},
		{"Contention", testContention},
		{"ManyGoroutines", testManyGoroutines},
		{"Renewals", testRenewals},
		{"ReleaseWakesWaiter", testReleaseWakesWaiter},
		{"AcquireAll", testAcquireAll},
		{"Semaphore", testSemaphore},
		{"ReadWrite", testReadWrite},
		{"Election", testElection},
		{"Admin", testAdmin},
		{"ScriptFlush", testScriptFlush},
		{"FencingGuard", testFencingGuard},
	})
}

func testTryAcquire(t *testing.T, e *env) {
	ctx := t.Context()
	locks := e.locks(t)
	r := resource(t, "r")
	l, err := locks.TryAcquire(ctx, r)
	must(t, err)
	_, err = locks.TryAcquire(ctx, r)
	var busy *redlease.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, redlease.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want a BusyError", err)
	}
	eq(t, busy.Holder, l.Holder(), "busy holder")
	if busy.Remaining <= 0 {
		t.Fatalf("busy lease has %v left", busy.Remaining)
	}
	must(t, l.Refresh(ctx))
	must(t, l.Release(ctx))
	eq(t, context.Cause(l.Context()), redlease.ErrReleased, "cause")
	next, err := locks.TryAcquire(ctx, r)
	must(t, err)
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), l.Fence())
	}
	must(t, next.Release(ctx))
}

// Many goroutines, through one rueidis client and its auto-pipelining,
// try one resource at once: exactly one wins.
func testContention(t *testing.T, e *env) {
	ctx := t.Context()
	locks := e.locks(t)
	r := resource(t, "r")
	const n = 64
	results := make(chan acquired, n)
	for range n {
		go func() {
			l, err := locks.TryAcquire(ctx, r)
			results <- acquired{l, err}
		}()
	}
	var won []*redlease.Lease
	for range n {
		a := servertest.Recv(t, results, 20*time.Second)
		switch {
		case a.err == nil:
			won = append(won, a.l)
		case !errors.Is(a.err, redlease.ErrNotAcquired):
			t.Errorf("TryAcquire: %v", a.err)
		}
	}
	eq(t, len(won), 1, "winners")
	must(t, won[0].Release(ctx))
}

// Many goroutines on keys of their own, more than the Client has requests
// in flight before it combines calls (redlease.WithCombinedRequests): every
// pair succeeds, with fences that rise, whether its calls went alone or in
// a batch (DoMulti, split by node on Cluster).
func testManyGoroutines(t *testing.T, e *env) {
	ctx := t.Context()
	rec := &batches{Driver: Driver(e.client)}
	locks := closed(t, redlease.NewWithDriver(rec))
	const goroutines, pairs = 64, 20
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			r := resource(t, fmt.Sprint(g))
			var last int64
			for range pairs {
				l, err := locks.TryAcquire(ctx, r)
				if err != nil {
					errs <- err
					return
				}
				if l.Fence() <= last {
					errs <- fmt.Errorf("fence %d after %d", l.Fence(), last)
					return
				}
				last = l.Fence()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range goroutines {
		must(t, servertest.Recv(t, errs, time.Minute))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("%d of %d calls went in %d batches", rec.calls, 2*goroutines*pairs, rec.n)
	if rec.n == 0 {
		t.Error("no calls were combined")
	}
}

// Auto-renewed leases that fall due together are renewed together: in one
// refresh_many.lua call on a server that is no cluster, by a refresh.lua
// call each on Cluster. Each is renewed in Redis (one PEXPIRE each) and
// here (its local deadline moves on).
func testRenewals(t *testing.T, e *env) {
	ctx := t.Context()
	rec := &batches{Driver: Driver(e.client)}
	clk := clock.NewFake(time.Now())
	const ttl, n = 30 * time.Second, 5
	locks := closed(t, redlease.NewWithDriver(rec, redlease.WithTTL(ttl), clock.Option(clk).(redlease.Option)))
	leases := make([]*redlease.Lease, n)
	for i := range leases {
		l, err := locks.TryAcquire(ctx, resource(t, fmt.Sprint(i)))
		must(t, err)
		leases[i] = l
	}
	taken := leases[0].Deadline()
	pexpire := e.calls(t, "pexpire")
	clk.Advance(ttl / 3) // the renew interval: every lease falls due
	for _, l := range leases {
		for deadline := time.Now().Add(20 * time.Second); !l.Deadline().After(taken); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("lease %s not renewed: deadline %v", l.Resource(), l.Deadline())
			}
		}
		must(t, l.Context().Err())
	}
	eq(t, e.calls(t, "pexpire")-pexpire, n, "PEXPIRE calls")
	rec.mu.Lock()
	many, manyKeys, refresh := rec.many, rec.manyKeys, rec.refresh
	rec.mu.Unlock()
	if e.cluster {
		eq(t, many, 0, "refresh_many.lua calls")
		eq(t, refresh, n, "refresh.lua calls")
	} else {
		eq(t, many, 1, "refresh_many.lua calls")
		eq(t, manyKeys, n, "leases they renewed")
		eq(t, refresh, 0, "refresh.lua calls")
	}
	for _, l := range leases {
		must(t, l.Release(ctx))
	}
}

// A waiter whose Client runs on a clock that never moves has no timer that
// can fire: only the release's wake-up, delivered through the driver's
// subscription, can get it the lease.
func testReleaseWakesWaiter(t *testing.T, e *env) {
	ctx := t.Context()
	r := resource(t, "r")
	holder := e.locks(t)
	l, err := holder.TryAcquire(ctx, r, redlease.WithTTL(time.Minute))
	must(t, err)

	rec := &recorder{Driver: Driver(e.client)}
	frozen := clock.NewFake(time.Now())
	waiter := closed(t, redlease.NewWithDriver(rec, clock.Option(frozen).(redlease.Option)))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := startWaiter(func() (*redlease.Lease, error) { return waiter.Acquire(wctx, r) })
	waiters(t, holder, r, 1)
	servertest.WaitFor(t, 10*time.Second, rec.subscribed)

	released := time.Now()
	must(t, l.Release(ctx))
	w := servertest.Recv(t, got, 20*time.Second)
	must(t, w.err)
	t.Logf("acquired %v after the release", time.Since(released))
	// The waiter may have taken the lease on the attempt it makes once its
	// subscription is confirmed (the release may have come first), before
	// the wake-up reached it: on a loaded machine, a goroutine may run late.
	// The wake-up must come through the subscription all the same: the
	// waiter's owner, or, as the release handed it the lease, its owner and
	// fence and the stamp of its attempt.
	handed := w.l.Owner() + ":" + strconv.FormatInt(w.l.Fence(), 10) + ":"
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(rec.delivered(), func(m string) bool { return m == w.l.Owner() || strings.HasPrefix(m, handed) }) {
		if time.Now().After(deadline) {
			t.Fatalf("the subscription delivered %q, not the waiter's owner %q", rec.delivered(), w.l.Owner())
		}
		time.Sleep(time.Millisecond)
	}
	if w.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", w.l.Fence(), l.Fence())
	}
	must(t, w.l.Release(ctx))
}

func testAcquireAll(t *testing.T, e *env) {
	ctx := t.Context()
	locks := e.locks(t)
	// Three resources in three slots (one script on a single server, one
	// by one on Cluster), and two in one slot (one script everywhere).
	for _, rs := range [][]string{
		{resource(t, "a"), resource(t, "b"), resource(t, "c")},
		{"{" + resource(t, "tag") + "}x", "{" + resource(t, "tag") + "}y"},
	} {
		ls, err := locks.TryAcquireAll(ctx, rs)
		must(t, err)
		eq(t, len(ls), len(rs), "leases")
		_, err = locks.TryAcquire(ctx, rs[1])
		if !errors.Is(err, redlease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a resource held: %v", err)
		}
		for _, l := range ls {
			must(t, l.Release(ctx))
		}
		ls, err = locks.AcquireAll(ctx, rs)
		must(t, err)
		for _, l := range ls {
			must(t, l.Release(ctx))
		}
	}
}

func testSemaphore(t *testing.T, e *env) {
	ctx := t.Context()
	locks := e.locks(t)
	r := resource(t, "s")
	a, err := locks.TryAcquireSemaphore(ctx, r, 2)
	must(t, err)
	b, err := locks.TryAcquireSemaphore(ctx, r, 2)
	must(t, err)
	permits := []int{a.Permit(), b.Permit()}
	slices.Sort(permits)
	deepEq(t, permits, []int{0, 1}, "permits")
	if _, err := locks.TryAcquireSemaphore(ctx, r, 2); !errors.Is(err, redlease.ErrNotAcquired) {
		t.Fatalf("third permit: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := startWaiter(func() (*redlease.Lease, error) { return locks.AcquireSemaphore(wctx, r, 2) })
	waiters(t, locks, r, 1)
	must(t, a.Release(ctx))
	w := servertest.Recv(t, got, 20*time.Second)
	must(t, w.err)
	eq(t, w.l.Permit(), a.Permit(), "the permit released")
	if w.l.Fence() <= a.Fence() {
		t.Fatalf("fence %d after %d", w.l.Fence(), a.Fence())
	}
	must(t, w.l.Release(ctx))
	must(t, b.Release(ctx))
}

func testReadWrite(t *testing.T, e *env) {
	ctx := t.Context()
	locks := e.locks(t)
	r := resource(t, "rw")
	r1, err := locks.TryAcquireRead(ctx, r)
	must(t, err)
	r2, err := locks.TryAcquireRead(ctx, r)
	must(t, err)
	if _, err := locks.TryAcquireWrite(ctx, r); !errors.Is(err, redlease.ErrNotAcquired) {
		t.Fatalf("write while read: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := startWaiter(func() (*redlease.Lease, error) { return locks.AcquireWrite(wctx, r) })
	waiters(t, locks, r, 1)
	if _, err := locks.TryAcquireRead(ctx, r); !errors.Is(err, redlease.ErrNotAcquired) {
		t.Fatalf("read while a writer waits: %v", err)
	}
	must(t, r1.Release(ctx))
	must(t, r2.Release(ctx))
	w := servertest.Recv(t, got, 20*time.Second)
	must(t, w.err)
	if w.l.Fence() <= max(r1.Fence(), r2.Fence()) {
		t.Fatalf("write fence %d after read fences %d, %d", w.l.Fence(), r1.Fence(), r2.Fence())
	}
	must(t, w.l.Release(ctx))
}

func testElection(t *testing.T, e *env) {
	ctx := t.Context()
	name := resource(t, "leader")
	a := redlease.NewElection(e.locks(t), name)
	b := redlease.NewElection(e.locks(t), name)
	if _, err := a.Leader(ctx); !errors.Is(err, redlease.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}
	termA, err := a.Campaign(ctx, "host-a")
	must(t, err)
	leader, err := b.Leader(ctx)
	must(t, err)
	eq(t, leader.Value, "host-a", "leader")
	eq(t, leader.Fence, termA.Fence(), "leader's fence")

	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := startWaiter(func() (*redlease.Lease, error) { return b.Campaign(bctx, "host-b") })
	waiters(t, e.locks(t), name, 1)
	must(t, termA.Release(ctx)) // resign
	w := servertest.Recv(t, got, 20*time.Second)
	must(t, w.err)
	leader, err = a.Leader(ctx)
	must(t, err)
	eq(t, leader.Value, "host-b", "leader")
	if leader.Fence <= termA.Fence() {
		t.Fatalf("term fence %d after %d", leader.Fence, termA.Fence())
	}
	must(t, w.l.Release(ctx))
}

// Inspect, Scan (every master on Cluster), Break and LastFence, under a
// prefix of the test's own.
func testAdmin(t *testing.T, e *env) {
	ctx := t.Context()
	prefix := resource(t, "") // ends with ':'
	locks := e.locks(t, redlease.WithPrefix(prefix))
	var held []*redlease.Lease
	var names []string
	for _, s := range []string{"a", "b", "c", "d", "e", "f"} { // spread over the masters
		l, err := locks.TryAcquire(ctx, s)
		must(t, err)
		held = append(held, l)
		names = append(names, s)
	}
	st, err := locks.Inspect(ctx, "a")
	must(t, err)
	if !st.Held || st.Owner != held[0].Owner() || st.Fence != held[0].Fence() || st.Remaining <= 0 {
		t.Fatalf("Inspect: %+v", st)
	}
	var found []string
	must(t, locks.Scan(ctx, "*", func(st redlease.Status) error {
		found = append(found, st.Resource)
		return nil
	}))
	slices.Sort(found)
	found = slices.Compact(found)
	deepEq(t, found, names, "Scan")

	st, removed, err := locks.Break(ctx, "a", held[0].Fence())
	must(t, err)
	eq(t, removed, true, "removed")
	eq(t, st.Owner, held[0].Owner(), "broken owner")
	if err := held[0].Refresh(ctx); !errors.Is(err, redlease.ErrLeaseLost) {
		t.Fatalf("Refresh of a broken lease: %v", err)
	}
	last, err := locks.LastFence(ctx, "a")
	must(t, err)
	if last < held[0].Fence() {
		t.Fatalf("LastFence %d below the broken lease's fence %d", last, held[0].Fence())
	}
	next, err := locks.TryAcquire(ctx, "a")
	must(t, err)
	if next.Fence() <= held[0].Fence() {
		t.Fatalf("fence %d after a broken %d", next.Fence(), held[0].Fence())
	}
	must(t, next.Release(ctx))
	for _, l := range held[1:] {
		must(t, l.Release(ctx))
	}
}

// SCRIPT FLUSH on every node mid-run: the next call (EVALSHA) meets
// NOSCRIPT and succeeds with EVAL; so does a pipeline of releases (Close).
func testScriptFlush(t *testing.T, e *env) {
	ctx := t.Context()
	locks := New(e.client)
	var held []*redlease.Lease
	for _, s := range []string{"a", "b", "c", "d"} {
		l, err := locks.TryAcquire(ctx, resource(t, s))
		must(t, err)
		held = append(held, l)
	}
	e.do(t, "SCRIPT", "FLUSH")
	evals := e.calls(t, "eval")
	l, err := locks.TryAcquire(ctx, resource(t, "e"))
	must(t, err)
	must(t, l.Refresh(ctx))
	held = append(held, l)
	if e.calls(t, "eval") < evals+2 {
		t.Fatalf("%d EVAL calls after the flush, want 2 more than %d", e.calls(t, "eval"), evals)
	}

	e.do(t, "SCRIPT", "FLUSH")
	evals = e.calls(t, "eval")
	must(t, locks.Close(ctx)) // releases the five in pipelines
	if e.calls(t, "eval") < evals+5 {
		t.Fatalf("%d EVAL calls after the flush, want 5 more than %d", e.calls(t, "eval"), evals)
	}
	for _, l := range held {
		st, err := e.locks(t).Inspect(ctx, l.Resource())
		must(t, err)
		if st.Held {
			t.Fatalf("%s still held after Close", l.Resource())
		}
	}
}

// A fencing guard on the driver writes with a newer fence and refuses an
// older one.
func testFencingGuard(t *testing.T, e *env) {
	ctx := t.Context()
	g := fencing.NewRedisGuardWithDriver(Driver(e.client))
	key := resource(t, "doc")
	must(t, g.Set(ctx, key, "v2", 0, 2, "owner-2"))
	err := g.Set(ctx, key, "v1", 0, 1, "owner-1")
	var stale *fencing.StaleFenceError
	if !errors.As(err, &stale) || !errors.Is(err, fencing.ErrStaleFence) {
		t.Fatalf("Set with a stale fence: %v", err)
	}
	eq(t, stale.Newest, int64(2), "newest fence")
	v, err := e.client.Do(ctx, e.client.B().Get().Key(key).Build()).ToString()
	must(t, err)
	eq(t, v, "v2", "value")
	existed, err := g.Del(ctx, key, 3, "owner-3")
	must(t, err)
	eq(t, existed, true, "deleted")

	// A fenced script, run through the driver.
	s := fencing.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	n, err := s.RunWithDriver(ctx, Driver(e.client), []string{resource(t, "counter")}, 5, "owner-5", 7)
	must(t, err)
	eq(t, n, any(int64(7)), "fenced INCRBY")
	_, err = s.RunWithDriver(ctx, Driver(e.client), []string{resource(t, "counter")}, 4, "owner-4", 1)
	if !errors.Is(err, fencing.ErrStaleFence) {
		t.Fatalf("fenced script with a stale fence: %v", err)
	}
}

// WithReplicaAck on a master with one replica: the script and WAIT on one
// connection (on Cluster, the master of the resource's slot).
func TestReplicaAck(t *testing.T) { eachEnv(t, testReplicaAck) }

func testReplicaAck(t *testing.T, e *env) {
	ctx := t.Context()
	r := resource(t, "r")
	e.withReplica(t, r)
	locks := e.locks(t, redlease.WithReplicaAck(1, 2*time.Second))
	l, err := locks.TryAcquire(ctx, r)
	must(t, err)
	must(t, l.Release(ctx))
	l, err = locks.Acquire(ctx, r)
	must(t, err)
	must(t, l.Release(ctx))

	// Two replicas cannot acknowledge: refused, and given back.
	two := e.locks(t, redlease.WithReplicaAck(2, 100*time.Millisecond))
	_, err = two.TryAcquire(ctx, r)
	if !errors.Is(err, redlease.ErrNotReplicated) || !errors.Is(err, redlease.ErrNotAcquired) {
		t.Fatalf("TryAcquire with two replicas asked: %v", err)
	}
	servertest.WaitFor(t, 10*time.Second, func() bool {
		st, err := locks.Inspect(ctx, r)
		return err == nil && !st.Held
	})
	l, err = locks.TryAcquire(ctx, r)
	must(t, err)
	must(t, l.Release(ctx))
}
