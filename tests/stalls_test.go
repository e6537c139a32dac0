package tests

import (
	"sync"
	"testing"
	"time"
)

// A lease's timer cannot fire while the process does not run: a loaded CI
// machine (several test processes under -race on two cores), a VM's steal, a
// long stop of the garbage collector. Such a pause is the holder's pause
// that fencing exists for, not a late deadline of the library's. The
// deadline check (S3) therefore counts a lease's end as on time when it
// came no later past the bound than the process stood still during the
// lease's life; a deadline that fires late in a process that runs is still
// a violation. (On CI, a lease ended 536 ms after its local deadline, 286 ms
// past the bound, in a scenario that took 2.5 s instead of its usual
// 0.7–1.4 s.)

// stallTick is how often the watch looks at the clock; stallMin the
// shortest gap between two looks that counts as a stall: shorter ones are
// the scheduling delays of a loaded machine, which the safety margin is for.
const (
	stallTick = 5 * time.Millisecond
	stallMin  = 50 * time.Millisecond
)

// stallWatch records the stalls of the process: the gaps between the ticks
// of a ticker longer than stallMin.
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall
}

// stall is a time during which the process stood still.
type stall struct{ from, to time.Time }

// watchStalls records the stalls of the process until t ends.
func watchStalls(t *testing.T) *stallWatch {
	w := &stallWatch{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		prev := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			now := time.Now()
			if now.Sub(prev) > stallMin {
				w.add(stall{prev, now})
			}
			prev = now
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return w
}

func (w *stallWatch) add(s stall) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stalls = append(w.stalls, s)
}

// within returns how long the process stood still between from and to.
func (w *stallWatch) within(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		if lo, hi := later(s.from, from), earlier(s.to, to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// longest returns the longest stall recorded.
func (w *stallWatch) longest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		d = max(d, s.to.Sub(s.from))
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
