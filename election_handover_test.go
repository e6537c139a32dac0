package redlease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/redleasetest"
)

// Handovers on the test kit's clock (TTL 30 s: renewals every 10 s).

// campaign runs e.Campaign(value) on a goroutine; its term or error comes
// on the channel.
func campaign(ctx context.Context, e *redlease.Election, value string) <-chan *redlease.Lease {
	won := make(chan *redlease.Lease, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			l = nil
		}
		won <- l
	}()
	return won
}

// The leader learns of a handover at its next renewal: its term's context
// ends with ErrHandover while Redis still holds the term, and once it
// resigns the preferred campaigner is elected ahead of one that has waited
// longer in a fair queue. The handover then ends: the next term goes to the
// one left waiting.
func TestElectionHandoverGoesToThePreferredCampaigner(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	var (
		mu       sync.Mutex
		outcomes []redlease.Outcome
	)
	lost := redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		if e.Kind == redlease.EventLost || e.Kind == redlease.EventRenew {
			mu.Lock()
			outcomes = append(outcomes, e.Outcome)
			mu.Unlock()
		}
	})
	a := redlease.NewElection(k.Client(), "cron", redlease.WithFair(true), redlease.WithObserver(lost))
	termA, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	b := redlease.NewElection(k.NewClient(), "cron", redlease.WithFair(true))
	wonB := campaign(ctx, b, "host-b")
	k.AwaitWaiters("cron", 1)
	k.FastForward(time.Millisecond) // b arrived first
	// c's term has a lock delay, which acquire.lua gets after its value
	// (wire.LeaseTail): the handover is to its value alone.
	c := redlease.NewElection(k.NewClient(), "cron", redlease.WithFair(true), redlease.WithLockDelay(time.Second))
	wonC := campaign(ctx, c, "host-c")
	k.AwaitWaiters("cron", 2)

	require.NoError(t, redlease.NewElection(k.NewClient(), "cron").Handover(ctx, "host-c"))
	require.NoError(t, termA.Context().Err(), "the leader hears of it at its next renewal, not before")
	k.FastForward(10 * time.Second)
	cause := context.Cause(termA.Context())
	require.ErrorIs(t, cause, redlease.ErrHandover)
	require.NotErrorIs(t, cause, redlease.ErrLeaseLost)
	require.Equal(t, `redlease: term handed over: election "cron": another campaigner is to lead (Election.Handover)`, cause.Error())
	mu.Lock()
	require.Equal(t, []redlease.Outcome{redlease.OutcomeHandover, redlease.OutcomeHandover}, outcomes,
		"the renewal's event and the end's")
	mu.Unlock()
	leader, err := a.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "host-a", leader.Value, "Redis keeps the unrenewed term until it is resigned")
	require.Less(t, leader.Remaining, 21*time.Second, "not renewed at 10 s")
	require.Empty(t, wonB)
	require.Empty(t, wonC)

	require.NoError(t, a.Resign(ctx))
	termC := servertest.Recv(t, wonC, 10*time.Second)
	require.NotNil(t, termC)
	require.Greater(t, termC.Fence(), termA.Fence())
	require.Empty(t, wonB, "b waited longer, but the handover is c's")
	k.AwaitWaiters("cron", 1)

	require.NoError(t, c.Resign(ctx))
	termB := servertest.Recv(t, wonB, 10*time.Second)
	require.NotNil(t, termB, "the handover ended with c's term")
	require.Greater(t, termB.Fence(), termC.Fence())
	require.NoError(t, b.Resign(ctx))
}

// Run hands over as it resigns: lead's context ends with ErrHandover, Run
// resigns once lead returns and campaigns again, and the preferred
// campaigner leads; the old leader waits its turn.
func TestElectionRunHandsOver(t *testing.T) {
	k := redleasetest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := redlease.NewElection(k.Client(), "cron")
	causes := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, func(lctx context.Context) error {
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return nil
		})
	}()
	servertest.WaitFor(t, 10*time.Second, func() bool { return a.Term() != nil })
	b := redlease.NewElection(k.NewClient(), "cron")
	wonB := campaign(ctx, b, "host-b")
	k.AwaitWaiters("cron", 1)

	require.NoError(t, b.Handover(ctx, "host-b"), "any campaigner may ask")
	k.FastForward(10 * time.Second)
	require.ErrorIs(t, servertest.Recv(t, causes, 10*time.Second), redlease.ErrHandover)
	termB := servertest.Recv(t, wonB, 10*time.Second)
	require.NotNil(t, termB)
	leader, err := b.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "host-b", leader.Value)
	k.AwaitWaiters("cron", 1) // Run campaigns again, and waits

	require.NoError(t, b.Resign(ctx))
	servertest.WaitFor(t, 10*time.Second, func() bool { return a.Term() != nil })
	cancel()
	require.ErrorIs(t, servertest.Recv(t, done, 10*time.Second), context.Canceled)
}

// A handover whose preferred campaigner never comes keeps the others away
// for the term's time left plus one TTL, then expires: the leader that
// neither resigned nor renewed is replaced once its lease and the handover
// have run out, by a campaigner that was not preferred.
func TestElectionHandoverExpiresWithoutThePreferredCampaigner(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	a := redlease.NewElection(k.Client(), "cron")
	termA, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	b := redlease.NewElection(k.NewClient(), "cron")
	wonB := campaign(ctx, b, "host-b")
	k.AwaitWaiters("cron", 1)

	require.NoError(t, a.Handover(ctx, "host-z"))
	k.FastForward(10 * time.Second) // a's renewal is refused: its lease has 20 s left
	require.ErrorIs(t, context.Cause(termA.Context()), redlease.ErrHandover)
	k.FastForward(20 * time.Second) // a's lease expires; the handover lasts 30 s more
	require.False(t, k.Status("cron").Held)
	k.FastForward(29 * time.Second)
	require.Empty(t, wonB, "promised to host-z")
	k.FastForward(2 * time.Second)
	termB := servertest.Recv(t, wonB, 10*time.Second)
	require.NotNil(t, termB)
	require.ErrorIs(t, a.Resign(ctx), redlease.ErrLeaseLost, "a never resigned; its term expired")
	require.NoError(t, b.Resign(ctx))
}

// What Handover refuses, and when it records nothing.
func TestElectionHandoverArguments(t *testing.T) {
	k := redleasetest.New(t)
	ctx := t.Context()
	a := redlease.NewElection(k.Client(), "cron")
	err := a.Handover(ctx, "host-b")
	require.ErrorIs(t, err, redlease.ErrNoLeader)
	require.Equal(t, `redlease: election "cron": no leader to hand over`, err.Error())
	for _, to := range []string{"", "a\x00b", strings.Repeat("x", redlease.MaxHolder+1)} {
		require.ErrorIs(t, a.Handover(ctx, to), redlease.ErrInvalidArgument, "%q", to)
	}
	var none *redlease.Election
	require.ErrorIs(t, none.Handover(ctx, "x"), redlease.ErrInvalidArgument)

	term, err := a.Campaign(ctx, "host-a")
	require.NoError(t, err)
	require.NoError(t, a.Handover(ctx, "host-a"), "host-a leads already")
	k.FastForward(time.Minute)
	require.NoError(t, term.Context().Err(), "nothing was recorded: the term goes on")
	require.NoError(t, a.Resign(ctx))
}
