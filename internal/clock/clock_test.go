package clock

import (
	"testing"
	"time"
)

// Fake timers fire in the order of their times, each with its own moment,
// and only when the clock is advanced past them.
func TestFakeFiresInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	timers := map[time.Duration]Timer{}
	for _, d := range []time.Duration{3, 1, 2, 5} {
		timers[d*time.Second] = f.NewTimer(d * time.Second)
	}
	stopped := f.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	fired := make(chan struct{})
	f.AfterFunc(2*time.Second, func() { close(fired) })

	f.Advance(2500 * time.Millisecond)
	<-fired
	for d, tm := range timers {
		select {
		case at := <-tm.C():
			if d > 2500*time.Millisecond {
				t.Fatalf("the %v timer fired early", d)
			}
			if at.Sub(start) != d {
				t.Fatalf("the %v timer fired at %v", d, at.Sub(start))
			}
		default:
			if d <= 2500*time.Millisecond {
				t.Fatalf("the %v timer did not fire", d)
			}
		}
	}
	if n, _ := f.Next(); !n.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("next timer at %v", n.Sub(start))
	}
	timers[5*time.Second].Reset(time.Second) // from now: 3.5 s
	f.Advance(time.Second)
	if at := (<-timers[5*time.Second].C()).Sub(start); at != 3500*time.Millisecond {
		t.Fatalf("the reset timer fired at %v", at)
	}
	if at := (<-timers[3*time.Second].C()).Sub(start); at != 3*time.Second {
		t.Fatalf("the 3 s timer fired at %v", at)
	}
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if _, ok := f.Next(); ok {
		t.Fatal("a timer is left")
	}
}

// A fired timer counts as pending until its owner has acted on it: an
// AfterFunc until its function returns, a channel timer until it is stopped
// or reset, which also discards a value that was not received.
func TestFakePending(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	release := make(chan struct{})
	f.AfterFunc(time.Second, func() { <-release })
	tm := f.NewTimer(time.Second)
	if n := f.Pending(); n != 0 {
		t.Fatalf("pending before firing: %d", n)
	}
	f.Advance(time.Second)
	if n := f.Pending(); n != 2 {
		t.Fatalf("pending after firing: %d, want 2", n)
	}
	close(release)
	for f.Pending() != 1 { // the function returns on its goroutine
		time.Sleep(time.Millisecond)
	}
	<-tm.C()
	if n := f.Pending(); n != 1 {
		t.Fatalf("a received timer is pending until its owner stops or resets it: %d", n)
	}
	tm.Reset(time.Second)
	if n := f.Pending(); n != 0 {
		t.Fatalf("pending after Reset: %d", n)
	}

	f.Advance(time.Second) // fires, and nobody receives
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported true")
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("pending after Stop: %d", n)
	}
	select {
	case <-tm.C():
		t.Fatal("Stop left the unreceived value in the channel")
	default:
	}
	f.Advance(time.Second)
	tm.Reset(time.Second) // after a firing that nobody received
	f.Advance(500 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("Reset left the unreceived value in the channel")
	default:
	}
}
