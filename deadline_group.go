package redlease

import (
	"context"
	"sync"
	"time"

	"github.com/redlease/redlease/internal/clock"
)

// deadlineGroup keeps the local deadline of the leases that one watchdog
// batch renewed to the same time: one timer for them all, where each lease's
// own timer would be reset at each renewal. With 100,000 leases on one
// Client, those resets and the runtime's upkeep of 100,000 timers that move
// every few seconds (time.Timer.Reset, and the scheduler's timers.check,
// adjust and siftDown) took about a fifth of the samples in a CPU profile
// of the process (docs/PERFORMANCE.md).
//
// A lease in a group has its own timer stopped; Lease.group names the group
// and the lease's deadline is the group's. A lease leaves its group when its
// deadline moves again (to the next batch's group, or to its own timer) and
// when it ends. The group's timer is stopped once its last lease has left;
// if it fires first, it ends each lease still in it, as the lease's own
// timer would have (Lease.onDeadline).
type deadlineGroup struct {
	at time.Time // the deadline; set by the first lease that joins, before arm

	mu      sync.Mutex
	leases  []*Lease // those that joined; appended to only before arm
	members int      // those that have not left
	timer   clock.Timer
	done    bool // the last member has left: the timer is stopped, or never armed
}

// join adds l, whose mu is held and whose deadline is g.at.
func (g *deadlineGroup) join(l *Lease) {
	g.mu.Lock()
	g.leases = append(g.leases, l)
	g.members++
	g.done = false // all that joined before left, and the timer is not armed yet
	g.mu.Unlock()
}

// leave records that a lease has left; the last one stops the timer.
func (g *deadlineGroup) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members--; g.members == 0 {
		g.done = true
		if g.timer != nil {
			g.timer.Stop()
		}
	}
}

// arm starts the timer, once the batch has added its leases, unless they
// have all left already.
func (g *deadlineGroup) arm(clk clock.Clock) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members > 0 && !g.done {
		g.timer = clk.AfterFunc(g.at.Sub(clk.Now()), g.fire) // fires at once if at has passed
	}
}

// fire ends the leases still in the group: their deadline has passed.
//
// Model: model/redlease.pml, proctype Timer, action deadline.
func (g *deadlineGroup) fire() {
	g.mu.Lock()
	leases := g.leases
	g.mu.Unlock()
	for _, l := range leases {
		l.onGroupDeadline(g)
	}
}

// onGroupDeadline is onDeadline for a lease in group g.
func (l *Lease) onGroupDeadline(g *deadlineGroup) {
	l.mu.Lock()
	var lost pending
	if l.group == g && l.state == stateActive {
		if left := l.deadline.Sub(l.c.clk.Now()); left > 0 { // a clock that stepped back: its own timer takes over
			l.leaveGroupLocked()
			l.timer.Reset(left)
		} else {
			lost = l.endLocked(stateLapsed, l.lapseCause())
		}
	}
	l.mu.Unlock()
	lost.emit(context.Background()) // lease events carry the lease's own context
}

// leaveGroupLocked takes the lease out of its group, if it is in one; its
// own timer is stopped, and the caller arms it if the lease needs it.
func (l *Lease) leaveGroupLocked() {
	if l.group != nil {
		l.group.leave()
		l.group = nil
	}
}

// setDeadlineLocked makes d the lease's local deadline: kept by g if g is
// not nil and d is g's deadline (or g has none yet), by the lease's own
// timer otherwise.
func (l *Lease) setDeadlineLocked(d time.Time, g *deadlineGroup) {
	l.deadline = d
	if g != nil && (g.at.IsZero() || g.at.Equal(d)) {
		g.at = d
		if l.group == g {
			return
		}
		if l.group == nil {
			l.timer.Stop()
		} else {
			l.group.leave()
		}
		l.group = g
		g.join(l)
		return
	}
	l.leaveGroupLocked()
	l.timer.Reset(d.Sub(l.c.clk.Now())) // fires at once if d already passed
}
