package main

import (
	"context"
	"os"
	"time"

	"github.com/redlease/redlease"
)

// The processes a command left in its process group are polled for, from
// every pollFirst, backing off to every pollMax: most exit at once on
// SIGTERM, and on Linux a poll may read all of /proc.
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// killWait bounds the wait for processes sent SIGKILL to leave the group. A
// process in an uninterruptible sleep (a hung NFS mount) dies only when the
// sleep ends; the lease is released without waiting for it.
const killWait = 2 * time.Second

// supervisor waits for the command to exit, and then for what it left
// behind in its process group, passing signals on; it stops them if the
// lease ends first, and stops them with redlease on Ctrl-Z. It tells the
// command's guardian of every change, so that the guardian can stop the
// group in time should redlease die. Each event has a method, which
// reports whether supervision is over.
type supervisor struct {
	r        *runner
	job      *job
	lease    *redlease.Lease
	sigs     <-chan os.Signal // to pass on
	jobSigs  <-chan os.Signal // Ctrl-Z and SIGCONT
	renewals <-chan struct{}  // a renewal was confirmed

	exited    <-chan struct{} // nil once the command's exit is handled
	leaseDone <-chan struct{} // nil once the lease's end is handled

	kill, poll, giveUp    *time.Timer // each made on first use
	killC, pollC, giveUpC <-chan time.Time
	pollDelay             time.Duration

	termAt, killAt time.Time // when the group had SIGTERM, and when SIGKILL is due
	leftovers      bool      // the command has exited; processes it started are still in its group
	stoppedByCtrlZ bool      // the group was stopped on Ctrl-Z, and not resumed since
	lost           error     // why the lease ended, once it has
}

// supervise runs a supervisor of j until the group is empty (SIGKILL makes
// sure it will be), and returns why the lease ended, if it did.
func (r *runner) supervise(j *job, lease *redlease.Lease, sigs, jobSigs <-chan os.Signal, renewals <-chan struct{}) (lost error) {
	s := &supervisor{r: r, job: j, lease: lease, sigs: sigs, jobSigs: jobSigs, renewals: renewals,
		exited: j.exitedC(), leaseDone: lease.Context().Done(), pollDelay: pollFirst}
	defer s.stopTimers()
	for !s.next() {
	}
	return s.lost
}

// next waits for one event and handles it.
func (s *supervisor) next() (done bool) {
	select {
	case <-s.exited:
		return s.commandExited()
	case <-s.pollC:
		return s.pollGroup()
	case <-s.giveUpC:
		return s.giveUpOnGroup()
	case sig := <-s.sigs:
		s.forward(sig)
	case <-s.renewals:
		s.tell()
	case sig := <-s.jobSigs:
		if isStop(sig) {
			s.ctrlZ()
			return false
		}
		return s.continued()
	case <-s.leaseDone:
		s.leaseDone = nil
		return s.leaseEnded(context.Cause(s.lease.Context()))
	case <-s.killC:
		s.killTimer()
	}
	return false
}

func (s *supervisor) stopTimers() {
	for _, t := range []*time.Timer{s.kill, s.poll, s.giveUp} {
		if t != nil {
			t.Stop()
		}
	}
}

// arm starts *t to fire after d, making it on first use.
func arm(t **time.Timer, d time.Duration) <-chan time.Time {
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	return (*t).C
}

// tell passes the state of the lease and of the group to the guardian.
func (s *supervisor) tell() {
	st := guardState{mode: modeRun, leaseLeft: max(time.Until(s.r.deadline(s.lease)), 0)}
	switch {
	case s.stoppedByCtrlZ:
		st.mode = modeHold
	case !s.killAt.IsZero():
		st.mode, st.killLeft = modeStop, max(time.Until(s.killAt), 0)
	}
	s.job.tell(st)
}

// commandExited: the command has exited and been waited for, or its
// guardian has gone before it could tell.
func (s *supervisor) commandExited() (done bool) {
	s.exited = nil
	if s.job.lostGuardian() {
		// The command got SIGTERM with it (Linux), but what it started did
		// not: the group is stopped as leftovers are, and the lease is
		// released once it is empty.
		s.r.say("the command's guardian process (see 'redlease run -h') was killed; stopping the command's process group")
	}
	if s.lost != nil {
		// What the command left behind in its group. No error: the group
		// may be gone (and, without groups, the command is).
		_ = s.job.signal(os.Kill)
		return true
	}
	if !s.job.alive() {
		return true
	}
	// What the command started in the background (a shell's '&') runs
	// under the lease too: the lease is released only once that has
	// exited, or the next holder would overlap it.
	s.leftovers = true
	s.r.s.debug("the command exited; processes it left in its process group still run: sending them "+terminateName,
		"pgid", s.job.pid(), "status", s.job.status(), "grace", s.r.grace)
	// Without a bound from the lease, which renewals keep moving: should
	// it end, leaseEnded sends them SIGKILL at once.
	s.terminateGroup(time.Now().Add(s.r.grace))
	s.pollC = arm(&s.poll, s.pollDelay)
	return false
}

// pollGroup: time to look whether the leftovers have gone.
func (s *supervisor) pollGroup() (done bool) {
	if !s.job.alive() {
		return true
	}
	s.pollDelay = min(2*s.pollDelay, pollMax)
	s.pollC = arm(&s.poll, s.pollDelay)
	return false
}

// giveUpOnGroup: leftovers survived SIGKILL for killWait.
func (s *supervisor) giveUpOnGroup() (done bool) {
	s.r.say("processes the command left behind survived SIGKILL for %v; releasing the %s anyway", killWait, s.r.what)
	return true
}

// forward passes a signal sent to redlease on to the group.
func (s *supervisor) forward(sig os.Signal) {
	s.r.s.debug("passing a signal on", "signal", sig.String())
	if err := s.job.signal(sig); err != nil {
		s.r.say("passing %v on: %v", sig, err)
	}
}

// ctrlZ stops the group, then redlease. The group first: once redlease is
// stopped, nobody renews the lease, and it may go to another owner.
func (s *supervisor) ctrlZ() {
	s.r.s.debug("Ctrl-Z (SIGTSTP): stopping the command's process group, then redlease")
	if err := s.job.stop(); err != nil {
		s.r.say("stopping the command: %v", err)
	}
	s.stoppedByCtrlZ = true
	s.tell()
	if err := stopSelf(); err != nil {
		s.r.say("stopping: %v", err)
	}
	// On SIGCONT, redlease goes on here.
}

// continued: SIGCONT. The group is resumed if Ctrl-Z stopped it and the
// lease is still alive; a lease that ended meanwhile ends the group.
func (s *supervisor) continued() (done bool) {
	if !s.stoppedByCtrlZ { // not ours to resume: the command may have stopped itself
		return false
	}
	s.stoppedByCtrlZ = false
	if s.lost == nil {
		if cause := leaseGone(s.lease); cause != nil {
			s.leaseDone = nil
			return s.leaseEnded(cause)
		}
	}
	s.r.s.debug("resuming the command's process group")
	if err := s.job.resume(); err != nil {
		s.r.say("resuming the command: %v", err)
	}
	s.tell()
	return false
}

// leaseEnded records that the lease is gone and stops what still runs
// under it: SIGTERM, and SIGKILL -grace later but no later than the
// lease's local deadline, after which Redis may let the next holder in
// (when the lease ended unrenewed, its context ended stopLead before that
// deadline). Its caller sets leaseDone to nil, so that it runs once.
func (s *supervisor) leaseEnded(cause error) (done bool) {
	s.lost = cause
	if s.leftovers { // they have had SIGTERM already: no more grace
		s.r.say("the %s ended while processes the command left behind ran: %v; sending them SIGKILL", s.r.what, s.lost)
		s.send(os.Kill, "SIGKILL")
		return true
	}
	now := time.Now()
	killAt := earliest(now.Add(s.r.grace), s.r.deadline(s.lease))
	if !killAt.After(now) { // -grace 0, or stopped past the deadline (Ctrl-Z)
		why := "-grace 0"
		if s.r.grace > 0 {
			why = "the lease's local deadline has passed"
		}
		s.r.say("the %s ended while the command ran: %v; sending it SIGKILL (%s)", s.r.what, s.lost, why)
		s.send(os.Kill, "SIGKILL")
		s.stoppedByCtrlZ = false
		s.termAt, s.killAt = now, now
		s.tell()
		return false
	}
	s.r.say("the %s ended while the command ran: %v; sending it %s, and SIGKILL in %v if it still runs",
		s.r.what, s.lost, terminateName, killAt.Sub(now).Round(time.Millisecond))
	s.terminateGroup(killAt)
	return false
}

// killTimer: SIGKILL is due, -grace after SIGTERM or at the lease's local
// deadline.
func (s *supervisor) killTimer() {
	s.killC = nil
	after := s.killAt.Sub(s.termAt).Round(time.Millisecond)
	if s.leftovers {
		s.r.s.debug("processes the command left behind still run after "+terminateName+": sending them SIGKILL",
			"pgid", s.job.pid(), "after", after)
		s.send(os.Kill, "SIGKILL")
		s.giveUpC = arm(&s.giveUp, killWait)
		return
	}
	at := ""
	if after < s.r.grace {
		at = " (the lease's local deadline)"
	}
	s.r.say("the command still runs %v after %s%s; sending it SIGKILL", after, terminateName, at)
	s.send(os.Kill, "SIGKILL")
}

// terminateGroup sends the group SIGTERM, and SIGCONT: a stopped process
// acts on SIGTERM only once continued. SIGKILL follows at killAt.
func (s *supervisor) terminateGroup(killAt time.Time) {
	s.send(terminate, terminateName)
	if err := s.job.resume(); err != nil {
		s.r.say("sending SIGCONT: %v", err)
	}
	s.stoppedByCtrlZ = false
	s.termAt, s.killAt = time.Now(), killAt
	s.killC = arm(&s.kill, max(time.Until(killAt), 0))
	s.tell()
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *supervisor) send(sig os.Signal, name string) {
	if err := s.job.signal(sig); err != nil {
		s.r.say("sending %s: %v", name, err)
	}
}
