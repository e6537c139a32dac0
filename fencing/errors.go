package fencing

import (
	"errors"
	"fmt"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
)

var (
	// ErrStaleFence means a guard refused a write because its fence is older
	// than the newest the resource has accepted, or equal to it but presented
	// by another owner. The write did not happen. It is always carried by a
	// *StaleFenceError. It is redlease.ErrStaleFence, which
	// Client.CheckFence returns too.
	ErrStaleFence = redlease.ErrStaleFence

	// ErrNoRowMatched means a fenced UPDATE of the per-row pattern (RowGuard)
	// changed no row and the fence was not the reason: the row is missing, or
	// its other conditions (its state) did not hold. The write did not happen.
	ErrNoRowMatched = errors.New("redlease: no row matched")
)

// MaxFence is the largest fence that the guards comparing fences in Lua
// (RedisGuard, Script, RedisStore) accept: Lua numbers are doubles, which
// hold every integer up to 2^53 exactly. It is redlease.MaxFence.
const MaxFence = redlease.MaxFence

// StaleFenceError is returned by the guards when they refuse a write by the
// fencing rule (see the package documentation). It matches ErrStaleFence
// with errors.Is.
//
// For fences drawn from the Redis counter (the default), Newest above
// redlease.Client.LastFence means the fence counter went back (a Redis
// failover, a restart without persistence, a FLUSHALL): repair it with
// Client.AdvanceFence(ctx, resource, Newest), or every new holder is
// refused. With redlease.WithFenceSource the fences come from the source and
// the Redis counter only counts acquisitions, so a LastFence below Newest
// says nothing there; a source that went back is repaired at the source.
type StaleFenceError struct {
	// Resource names what refused the write: the guard's resource name, the
	// Redis data key, or the table row.
	Resource string
	Fence    int64  // the fence offered
	Owner    string // the owner token offered with it
	// Newest is the newest fence the resource has accepted, NewestOwner the
	// owner it was accepted from.
	Newest      int64
	NewestOwner string
}

func (e *StaleFenceError) Error() string {
	if e.Fence == e.Newest {
		from := ""
		if e.NewestOwner != "" && e.NewestOwner != e.Owner {
			from = " from another owner"
		}
		return fmt.Sprintf("redlease: stale fence %d for %s: it was already accepted%s", e.Fence, quote(e.Resource), from)
	}
	return fmt.Sprintf("redlease: stale fence %d for %s: newest accepted is %d", e.Fence, quote(e.Resource), e.Newest)
}

// Unwrap makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Unwrap() error { return ErrStaleFence }

// invalidf returns an error matching redlease.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return shared.Errorf("%w: "+format, append([]any{redlease.ErrInvalidArgument}, args...)...)
}

// quote quotes a resource name for a message, cut to a bounded length.
func quote(resource string) string { return shared.Quote(resource) }
