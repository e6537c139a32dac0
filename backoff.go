package redlease

import (
	"context"
	"math/rand/v2"
	"time"
)

// Bounds of the retry backoff between acquire attempts.
const (
	minBackoff = 2 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// backoff yields exponentially growing delays with full jitter: each delay is
// uniform in [0, ceiling), and the ceiling doubles from minBackoff up to
// maxBackoff. Jitter keeps waiters from retrying in lockstep.
type backoff struct{ n uint }

func (b *backoff) next() time.Duration {
	ceiling := maxBackoff
	if b.n < 16 {
		ceiling = min(minBackoff<<b.n, maxBackoff)
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceiling))) + 1
}

// sleep waits for d or until ctx ends, whichever comes first, and returns
// context.Cause(ctx) in the latter case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
