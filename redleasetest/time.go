package redleasetest

import (
	"time"

	"github.com/redlease/redlease/internal/clock"
)

// FastForward moves the Kit's clock and the embedded Redis's on by d, as if
// d passed in a real deployment: the watchdog renews the leases that are
// renewed automatically (with the default options a lease survives
// FastForward(time.Hour)), a lease whose renewals fail or that is not
// renewed lapses at its local deadline (its context ends with
// redlease.ErrLeaseLost), Redis expires keys, and waiting acquire calls
// retry. It goes from one timer of the Kit's Clients to the next, in order,
// and after each step waits until the Clients have done what fell due (see
// the package documentation); it returns once the clock reads d later and
// the Clients have settled. It works while Redis is down (Outage), when
// every request fails.
//
// Each step costs about a millisecond of real time, mostly a round trip to
// the embedded Redis: an hour with the default options (a renewal every
// 10 s) takes well under a second; a minute of a 20 ms renew interval,
// a few seconds. The Clients' observers are called during the steps, on
// the Clients' goroutines: one that waits for the test's goroutine blocks
// FastForward, which then fails the test after a few seconds.
//
// FastForward(0) only waits for the Clients to settle. A negative d fails
// the test.
func (k *Kit) FastForward(d time.Duration) {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fastForward(d)
}

func (k *Kit) fastForward(d time.Duration) {
	k.tb.Helper()
	if d < 0 {
		k.tb.Fatalf("redleasetest: FastForward(%v): negative", d)
	}
	k.settle("FastForward")
	target := k.clk.Now().Add(d)
	for {
		now := k.clk.Now()
		next, ok := k.clk.Next() // always after now: a timer due at once fires when set
		if !ok || next.After(target) {
			next = target
		}
		k.advance(next.Sub(now))
		k.settle("FastForward")
		if !next.Before(target) {
			return
		}
	}
}

// advance moves both clocks by step: Redis's first, so that at one instant
// keys expire before the Clients' timers fire.
func (k *Kit) advance(step time.Duration) {
	k.mr.SetTime(k.clk.Now().Add(step))
	k.clk.Advance(step)
}

// settle waits, up to patience, until the Kit's Clients have nothing due
// and nothing under way that the clock set off (see clock.Fake.Pending and
// clock.Quiet).
func (k *Kit) settle(op string) {
	k.tb.Helper()
	deadline := time.Now().Add(patience)
	for pause := 10 * time.Microsecond; !k.quiet(); pause = min(2*pause, 100*time.Microsecond) {
		if time.Now().After(deadline) {
			k.tb.Fatalf("redleasetest: %s: the Clients did not settle within %v of real time, at %v on the Kit's clock "+
				"(a request that Redis does not answer, or an observer that waits for the test's goroutine?)",
				op, patience, k.clk.Now().Format(time.StampMilli))
		}
		time.Sleep(pause)
	}
}

// quiet reports whether the Clients have settled. Pending is asked first:
// a timer's owner acts on a firing before it stops or resets the timer,
// so once Pending is 0 the Clients' own state tells the rest.
func (k *Kit) quiet() bool {
	if k.clk.Pending() > 0 {
		return false
	}
	k.cmu.Lock()
	defer k.cmu.Unlock()
	for _, c := range k.clients {
		if !clock.Quiet(c) {
			return false
		}
	}
	return true
}
