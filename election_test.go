package redlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// After Close, the calls that only read or repair (and an election's) return
// ErrClientClosed before any round trip, as the acquire calls do.
func TestAdminCallsAfterCloseReturnErrClientClosed(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	_, err := c.LastFence(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	mr.Close() // a call that tried a round trip would fail otherwise

	_, err = c.Inspect(ctx, "r")
	require.ErrorIs(t, err, ErrClientClosed)
	require.ErrorIs(t, c.Scan(ctx, "*", func(Status) error { return nil }), ErrClientClosed)
	_, err = c.LastFence(ctx, "r")
	require.ErrorIs(t, err, ErrClientClosed)
	_, err = c.AdvanceFence(ctx, "r", 10)
	require.ErrorIs(t, err, ErrClientClosed)
	_, _, err = c.Break(ctx, "r", 0)
	require.ErrorIs(t, err, ErrClientClosed)
	e := NewElection(c, "cron")
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrClientClosed)
	_, err = e.Campaign(ctx, "host-a")
	require.ErrorIs(t, err, ErrClientClosed)
}

// Resign releases the Election's term: another campaigner is elected at
// once, and resigning again, or with no term at all, is a no-op.
func TestElectionResignFreesTheName(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	a, b := NewElection(New(rdb), "cron"), NewElection(New(rdb), "cron")
	require.NoError(t, NewElection(New(rdb), "cron").Resign(ctx), "never campaigned: nothing to resign")

	termA, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	require.True(t, a.Term() == termA, "the Election remembers its term")
	require.NoError(t, a.Resign(ctx))
	require.Nil(t, a.Term())
	require.ErrorIs(t, context.Cause(termA.Context()), ErrReleased)
	_, err = a.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)

	// Redis here never expires a lease in real time: b is elected only
	// because a's term was deleted.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	termB, err := b.Campaign(cctx, "host-b")
	require.NoError(t, err)
	require.Greater(t, termB.Fence(), termA.Fence())
	require.NoError(t, a.Resign(ctx), "resigned already: nothing to resign")
	require.NoError(t, termB.Context().Err(), "a's second Resign cannot touch b's term")
	require.NoError(t, b.Resign(ctx))

	var none *Election
	require.ErrorIs(t, none.Resign(ctx), ErrInvalidArgument)
	require.Nil(t, none.Term())
}

// A term lost before Resign: Resign says so (ErrLeaseLost), whether the
// loss had been noticed or not, forgets the term, and leaves the next
// leader's term alone.
func TestElectionResignAfterLossReturnsErrLeaseLost(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	ops := New(rdb)
	for _, noticed := range []bool{false, true} {
		a, b := NewElection(New(rdb), "cron"), NewElection(New(rdb), "cron")
		termA, err := a.Campaign(ctx, "host-a")
		require.NoError(t, err)
		_, removed, err := ops.Break(ctx, "cron", termA.Fence()) // an operator's forced release
		require.NoError(t, err)
		require.True(t, removed)
		termB, err := b.Campaign(ctx, "host-b")
		require.NoError(t, err)
		if noticed {
			require.ErrorIs(t, termA.Refresh(ctx), ErrLeaseLost)
		}

		require.ErrorIs(t, a.Resign(ctx), ErrLeaseLost, "noticed %v", noticed)
		require.Nil(t, a.Term())
		require.NoError(t, a.Resign(ctx), "forgotten: nothing left to resign")
		ld, err := b.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, termB.Owner(), ld.Owner)
		require.NoError(t, b.Resign(ctx))
	}
}

var errStop = errors.New("stop leading")

// Run calls lead in a live term, with the values of Run's context; a lead
// that returns an error ends Run with that error, after resigning. Run
// campaigns with the lease options' holder description when the Election
// has never campaigned.
func TestElectionRunLeadsInALiveTermAndEndsWithLeadsError(t *testing.T) {
	_, rdb := servertest.Mini(t)
	type key struct{}
	ctx := context.WithValue(t.Context(), key{}, "v")
	e := NewElection(New(rdb), "worker", WithHolder("worker-1"))
	var term *Lease
	err := e.Run(ctx, func(lctx context.Context) error {
		term = e.Term()
		require.NotNil(t, term)
		require.NoError(t, lctx.Err())
		require.NoError(t, term.Context().Err())
		require.Equal(t, "v", lctx.Value(key{}))
		ld, err := e.Leader(lctx)
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "worker-1", Owner: term.Owner(), Fence: term.Fence(), Remaining: ld.Remaining}, ld)
		require.NoError(t, e.Healthy(0))
		return fmt.Errorf("job failed: %w", errStop)
	})
	require.ErrorIs(t, err, errStop)
	require.Equal(t, "job failed: stop leading", err.Error(), "lead's error as is")
	require.ErrorIs(t, context.Cause(term.Context()), ErrReleased, "Run resigned")
	require.Nil(t, e.Term())
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader, "the name is free")
}

// A lead that returns nil is done with its term: Run resigns and is elected
// again, each term with a higher fence, campaigning with the value of the
// Election's last Campaign. A term that ends under lead (resigned, lost)
// is followed by the next; a lead that returns its context's error then
// does not end Run.
func TestElectionRunCampaignsAgainAfterEachTerm(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	ops := New(rdb)
	e := NewElection(New(rdb), "worker")
	first, err := e.Campaign(ctx, "host-a")
	require.NoError(t, err)
	require.NoError(t, e.Resign(ctx))

	var fences []int64
	var causes []error
	err = e.Run(ctx, func(lctx context.Context) error {
		term := e.Term()
		fences = append(fences, term.Fence())
		ld, err := e.Leader(lctx)
		require.NoError(t, err)
		require.Equal(t, "host-a", ld.Value)
		switch len(fences) {
		case 1, 2:
			return nil
		case 3: // resigned from outside: lead's context ends
			require.NoError(t, e.Resign(context.Background()))
		case 4: // lost: an operator broke it, and the holder hears of it
			_, _, err := ops.Break(ctx, "worker", term.Fence())
			require.NoError(t, err)
			require.ErrorIs(t, term.Refresh(ctx), ErrLeaseLost)
		default:
			return errStop
		}
		<-lctx.Done()
		causes = append(causes, context.Cause(lctx))
		return lctx.Err()
	})
	require.ErrorIs(t, err, errStop)
	require.Len(t, fences, 5)
	prev := first.Fence()
	for _, f := range fences {
		require.Greater(t, f, prev, "fences %v after %d", fences, first.Fence())
		prev = f
	}
	require.ErrorIs(t, causes[0], ErrReleased)
	require.ErrorIs(t, causes[1], ErrLeaseLost)
}

// Run ends when its context ends: lead's context ends with Run's cause, and
// Run resigns and returns an error matching ctx.Err() and the cause. A Run
// whose context has already ended does not campaign.
func TestElectionRunEndsWithItsContextAndResigns(t *testing.T) {
	_, rdb := servertest.Mini(t)
	e := NewElection(New(rdb), "cron")
	ctx, cancel := context.WithCancelCause(t.Context())
	shutdown := errors.New("shutting down")
	var term *Lease
	err := e.Run(ctx, func(lctx context.Context) error {
		term = e.Term()
		cancel(shutdown)
		<-lctx.Done()
		require.ErrorIs(t, context.Cause(lctx), shutdown)
		return lctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, shutdown)
	require.Contains(t, err.Error(), `"cron"`)
	require.ErrorIs(t, context.Cause(term.Context()), ErrReleased)
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, ErrNoLeader)

	err = e.Run(ctx, func(context.Context) error {
		t.Error("lead called after ctx ended")
		return nil
	})
	require.ErrorIs(t, err, shutdown)
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, ErrNoLeader)
}

// Run's misuse and its final errors: a nil lead, a second Run on one
// Election, a closed Client.
func TestElectionRunRefusesWhatCannotWork(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	c := New(rdb)
	e := NewElection(c, "cron")
	require.ErrorIs(t, e.Run(ctx, nil), ErrInvalidArgument)
	var none *Election
	require.ErrorIs(t, none.Run(ctx, func(context.Context) error { return nil }), ErrInvalidArgument)

	err := e.Run(ctx, func(context.Context) error {
		require.ErrorIs(t, e.Run(ctx, func(context.Context) error { return nil }), ErrInvalidArgument,
			"one Run at a time")
		require.NoError(t, c.Close(ctx)) // releases the term
		return nil
	})
	require.ErrorIs(t, err, ErrClientClosed)
	require.ErrorIs(t, NewElection(c, "cron").Run(ctx, func(context.Context) error { return nil }), ErrClientClosed)
}

// A lead that panics: the panic goes up through Run, which resigned the
// term on the way, and the Election can Run again.
func TestElectionRunResignsWhenLeadPanics(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	e := NewElection(New(rdb), "cron")
	var term *Lease
	require.PanicsWithValue(t, "boom", func() {
		_ = e.Run(ctx, func(context.Context) error {
			term = e.Term()
			panic("boom")
		})
	})
	require.ErrorIs(t, context.Cause(term.Context()), ErrReleased)
	require.Nil(t, e.Term())
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	require.ErrorIs(t, e.Run(ctx, func(context.Context) error { return errStop }), errStop)
}

// Two Runs on one name never lead at the same time, and each term's fence
// is above the one before. With WithFair they take turns.
func TestElectionTwoRunsNeverLeadTogether(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const minTerms, maxTerms = 10, 1000 // each leads twice; bounded all the same
	var (
		active atomic.Int32
		mu     sync.Mutex
		fences []int64
		led    [2]int
	)
	run := func(i int) <-chan error {
		done := make(chan error, 1)
		e := NewElection(New(rdb), "cron", WithFair(true))
		go func() {
			done <- e.Run(ctx, func(lctx context.Context) error {
				if n := active.Add(1); n != 1 {
					t.Errorf("%d leaders at once", n)
				}
				defer active.Add(-1)
				f := e.Term().Fence()
				mu.Lock()
				defer mu.Unlock()
				fences = append(fences, f)
				led[i]++
				if n := len(fences); n >= maxTerms || n >= minTerms && led[0] >= 2 && led[1] >= 2 {
					cancel()
				}
				return nil
			})
		}()
		return done
	}
	a, b := run(0), run(1)
	for _, done := range []<-chan error{a, b} {
		require.ErrorIs(t, servertest.Recv(t, done, 30*time.Second), context.Canceled)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, len(fences), maxTerms, "the Runs did not take turns: %v", led)
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1])
	}
	_, err := NewElection(New(rdb), "cron").Leader(t.Context())
	require.ErrorIs(t, err, ErrNoLeader)
}

// A follower is healthy; so is a leader whose renewals are on time.
func TestElectionHealthyFollowerAndLeader(t *testing.T) {
	_, rdb := servertest.Mini(t)
	ctx := t.Context()
	a, b := NewElection(New(rdb), "cron"), NewElection(New(rdb), "cron")
	require.NoError(t, a.Healthy(0), "never campaigned")
	_, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	require.NoError(t, a.Healthy(time.Second))
	require.NoError(t, b.Healthy(0), "a follower")
	require.ErrorIs(t, a.Healthy(-time.Second), ErrInvalidArgument)
	require.NoError(t, a.Resign(ctx))
	require.NoError(t, a.Healthy(0), "resigned")
	var none *Election
	require.ErrorIs(t, none.Healthy(0), ErrInvalidArgument)
}

func TestObserveReportsEachNewTermAtOnce(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb) // TTL 30 s: the polls are 10 s apart, so a term seen within 5 s was announced
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx, cancel := context.WithCancel(t.Context())
	observer := NewElection(c, "e")
	leaders := observer.Observe(ctx)
	next := func() Leader {
		t.Helper()
		select {
		case l, ok := <-leaders:
			require.True(t, ok, "closed")
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no leader reported within 5 s")
			return Leader{}
		}
	}

	a, b := NewElection(c, "e"), NewElection(c, "e")
	ta, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	got := next()
	require.Equal(t, Leader{Value: "a", Owner: ta.Owner(), Fence: ta.Fence(), Remaining: got.Remaining}, got)
	require.NoError(t, a.Resign(ctx))
	tb, err := b.Campaign(ctx, "b")
	require.NoError(t, err)
	got = next()
	require.Equal(t, "b", got.Value)
	require.Equal(t, tb.Fence(), got.Fence)
	require.Greater(t, got.Fence, ta.Fence())

	cancel()
	select {
	case _, ok := <-leaders:
		require.False(t, ok, "closed when ctx ends")
	case <-time.After(5 * time.Second):
		t.Fatal("not closed within 5 s of ctx's end")
	}
	require.NoError(t, b.Resign(t.Context()))
}

func TestObserveStartsWithTheCurrentLeaderAndEndsWithTheClient(t *testing.T) {
	_, rdb := servertest.Mini(t)
	c := New(rdb)
	leader := NewElection(c, "e")
	term, err := leader.Campaign(t.Context(), "a")
	require.NoError(t, err)
	leaders := NewElection(c, "e").Observe(t.Context())
	got := <-leaders
	require.Equal(t, term.Fence(), got.Fence)
	require.NoError(t, c.Close(t.Context()))
	for range leaders { // closed when the Client closes
	}
	var nilElection *Election
	_, ok := <-nilElection.Observe(t.Context())
	require.False(t, ok)
}
