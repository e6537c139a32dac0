package redlease

import (
	"math/rand/v2"
	"time"
)

// Bounds of the backoff between attempts that failed on the network.
const (
	minBackoff = 2 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// backoff yields exponentially growing delays with full jitter: each delay is
// uniform in (0, ceiling], and the ceiling doubles from min up to max.
// Jitter keeps waiters from retrying in lockstep.
type backoff struct {
	min, max time.Duration
	n        uint
}

func (b *backoff) next() time.Duration {
	ceiling := b.max
	if b.n < 32 && b.min<<b.n < b.max {
		ceiling = b.min << b.n
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceiling))) + 1
}
