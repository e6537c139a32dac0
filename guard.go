package redlease

import (
	"context"
	"errors"
	"time"
)

// Guards: the resource-side half of fencing.
//
// A fencing token protects nothing until the resource checks it, in the same
// atomic step as the write: a check on the client side followed by a write is
// a race. The guards in this package do that check for three kinds of
// resource: SQL databases (SQLGuard, RowGuard), Redis (RedisGuard,
// FencedScript) and HTTP services (HTTPGuard with a FenceStore).
//
// All of them apply one rule. A write that presents fence f and owner token o
// is accepted iff
//
//	f > newest, or f == newest and o == the owner recorded with newest,
//
// where newest is the highest fence the resource has accepted so far; an
// accepted write records f and o as the new newest. The second half exists
// because the fence counter can go back (see Lease.Fence): after a failover
// two holders can draw the same fence, and only the first of them to write
// may go on. The same holder may write several times with its fence.
//
// A guard refuses with a *StaleFenceError (matching ErrStaleFence) and leaves
// the resource unchanged. Every write path of a resource must pass a guard:
// one unchecked path voids the rest.

// MaxFence is the largest fence the guards that compare fences in Lua
// (RedisGuard, FencedScript, RedisFenceStore) and Client.AdvanceFence accept:
// Lua numbers are doubles, which hold every integer up to 2^53 exactly. A
// counter that starts at 1 and rises by one per acquisition never gets there.
const MaxFence int64 = 1 << 53

// admits applies the fencing rule: may a write with fence and owner follow
// the newest accepted write, which had newest and newestOwner?
func admits(fence int64, owner string, newest int64, newestOwner string) bool {
	return fence > newest || fence == newest && owner == newestOwner
}

// checkToken validates what a writer presents to a guard, before any round
// trip.
func checkToken(fence int64, owner string) error {
	switch {
	case fence <= 0:
		return invalidf("fence %d is not positive", fence)
	case owner == "":
		return invalidf("empty owner token")
	}
	return nil
}

// checkLuaToken is checkToken for the guards that compare fences in Lua.
func checkLuaToken(fence int64, owner string) error {
	if fence > MaxFence {
		return invalidf("fence %d is above MaxFence (2^53)", fence)
	}
	return checkToken(fence, owner)
}

// reportStale tells observers (WithObserver given to a guard) about a write
// the guard refused, as an EventStaleFence.
func reportStale(ctx context.Context, observers []Observer, start time.Time, err error) {
	var stale *StaleFenceError
	if len(observers) == 0 || !errors.As(err, &stale) {
		return
	}
	e := Event{Kind: EventStaleFence, Outcome: OutcomeStale, Resource: stale.Resource, Owner: stale.Owner,
		Fence: stale.Fence, Start: start, End: time.Now(), Err: err}
	for _, o := range observers {
		o.Observe(ctx, e)
	}
}

// guardConfig reads a guard's options. The guards take the Client's Option
// type for WithObserver and WithLogger and, those that keep records in
// Redis, WithPrefix (default DefaultPrefix); they ignore the other options.
func guardConfig(opts []Option) config {
	c := config{prefix: DefaultPrefix}
	c.apply(opts)
	return c
}

// observersOf returns the observers among a guard's options.
func observersOf(opts []Option) []Observer {
	return guardConfig(opts).observers
}
