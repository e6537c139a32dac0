package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease"
)

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

// reportStale tells observers about a write the guard refused, as a
// redlease.EventStaleFence; it ignores every other error.
func reportStale(ctx context.Context, observers []redlease.Observer, start time.Time, err error) {
	var stale *StaleFenceError
	if len(observers) == 0 || !errors.As(err, &stale) {
		return
	}
	e := redlease.Event{Kind: redlease.EventStaleFence, Outcome: redlease.OutcomeStale, Resource: stale.Resource,
		Owner: stale.Owner, Fence: stale.Fence, Start: start, End: time.Now(), Err: err}
	for _, o := range observers {
		o.Observe(ctx, e)
	}
}
