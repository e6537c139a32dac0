package fencing

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redlease/redlease"
)

// admits applies the fencing rule: may a write with fence and owner follow
// the newest accepted write, which had newest and newestOwner?
//
// Model: model/redlease.pml, inline guard_write.
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

// Key returns the name under which a resource fences the holder of l: its
// resource, and for a semaphore's permit the resource and the permit
// ("<resource>#<permit>"), since each permit has fences of its own. Use it
// as the guard's resource (SQLGuard.Check, the HTTP guard's resource via
// SetHeaders) or in the data key of a RedisGuard, so that a permit holder
// that paused past its TTL is refused once its permit went to someone else,
// while the holders of other permits write on.
func Key(l *redlease.Lease) string {
	if l == nil {
		return ""
	}
	if _, isPermit := l.Semaphore(); isPermit {
		return l.Resource() + "#" + strconv.Itoa(l.Permit())
	}
	return l.Resource()
}
