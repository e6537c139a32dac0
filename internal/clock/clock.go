// Package clock is the time that redlease's leases run on: the real clock,
// or, in tests and in the test kit redleasetest, a fake one that moves only
// when told to. It is not part of the API.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and runs timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer sends the time on the timer's C once d has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is a time.Timer of a Clock. As with time.Timer since Go 1.23, Stop
// and Reset discard a value that fired but was not received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the machine's clock (monotonic readings included).
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Hooks that the redlease package sets when it is initialised, so that
// redleasetest can run a Client on a fake clock without an exported option.
var (
	// Option returns a redlease.Option (as any) that makes a Client run on c.
	Option func(c Clock) any
	// Quiet reports whether a *redlease.Client (as any) has nothing due at
	// its clock's now: no renewal due or on its way, no lease past its local
	// deadline that is still active, no acquire call at work that is not
	// asleep on the clock.
	Quiet func(client any) bool
	// Unobserved returns a redlease.Option (as any) that drops the observers
	// given before it (WithObserver, WithLogger): redleasetest's stand-in for
	// another owner is a Client with the user's options, whose events are not
	// the user's.
	Unobserved func() any
	// QuietBreaks returns a redlease.Option (as any) that makes the Client's
	// Break tell no holder of the lease it removes: redleasetest's Expire
	// and Steal stand for an expiry and a takeover, which the holder learns
	// of at its next renewal.
	QuietBreaks func() any
)

// Fake is a Clock that moves only when Advance is called. Its timers fire
// in the order of their times, each with the fake time at its moment.
//
// It also tells whether what its timers set off may still be under way
// (Pending), so that redleasetest can wait for it before it moves on.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*fakeTimer]struct{}
	fired   map[*fakeTimer]struct{} // channel timers fired and neither stopped nor reset since
	running int                     // AfterFunc functions called and not returned
}

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: map[*fakeTimer]struct{}{}, fired: map[*fakeTimer]struct{}{}}
}

// Pending reports how many fired timers may still be acted on: AfterFunc
// functions that have not returned, and channel timers that fired and have
// been neither stopped nor reset since. Their owners stop or reset them
// once they are done with a firing (a sleep returns and stops its timer, a
// loop resets its timer for its next wait), so a fired channel timer counts
// until its owner has acted, not merely received.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running + len(f.fired)
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc implements Clock.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer { return f.add(d, fn) }

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, nil) }

func (f *Fake) add(d time.Duration, fn func()) *fakeTimer {
	t := &fakeTimer{f: f, fn: fn, c: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.when = f.now.Add(d)
	f.timers[t] = struct{}{}
	f.fireLocked()
	return t
}

// Next returns when the next timer fires, and false if none is set.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for t := range f.timers {
		if next.IsZero() || t.when.Before(next) {
			next = t.when
		}
	}
	return next, !next.IsZero()
}

// Advance moves the clock forward by d (not back), firing the timers that
// fall due on the way, in order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	target := f.now.Add(max(d, 0))
	for {
		var next *fakeTimer
		for t := range f.timers {
			if !t.when.After(target) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		if next.when.After(f.now) {
			f.now = next.when
		}
		f.fireLocked()
	}
	f.now = target
}

// fireLocked fires every timer due at f.now.
func (f *Fake) fireLocked() {
	for t := range f.timers {
		if t.when.After(f.now) {
			continue
		}
		delete(f.timers, t)
		if t.fn != nil {
			f.running++
			go func() {
				defer f.returned()
				t.fn()
			}()
		} else {
			f.fired[t] = struct{}{}
			select {
			case t.c <- f.now:
			default:
			}
		}
	}
}

func (f *Fake) returned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
}

// discardLocked forgets a firing of t that was not received, and that its
// owner is done with.
func (f *Fake) discardLocked(t *fakeTimer) {
	delete(f.fired, t)
	select {
	case <-t.c:
	default:
	}
}

type fakeTimer struct {
	f    *Fake
	fn   func()
	c    chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.timers[t]
	delete(t.f.timers, t)
	t.f.discardLocked(t)
	return ok
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.timers[t]
	t.f.discardLocked(t)
	t.when = t.f.now.Add(d)
	t.f.timers[t] = struct{}{}
	t.f.fireLocked()
	return ok
}
