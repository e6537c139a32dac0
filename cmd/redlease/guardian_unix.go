//go:build unix

package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The guardian: redlease run does not start COMMAND itself. It starts
// itself again as this hidden subcommand, which starts COMMAND in a process
// group of its own, and stays its parent:
//
//	redlease run (its own process group)
//	 └─ redlease __guardian (a process group of its own)
//	     └─ COMMAND (a process group of its own) and all it starts
//
// redlease writes the guardian the lease's state on a pipe (a guardState
// per change, and after every confirmed renewal) and keeps signalling the
// group itself; the guardian reports COMMAND's exit on another pipe. When
// the control pipe reaches its end without a last "done" — redlease was
// killed, by SIGKILL or the OOM killer — nobody renews the lease: the
// guardian sends the group SIGTERM at once, and SIGKILL by the lease's
// local deadline at the latest (sooner if -grace runs out first), which is
// before Redis can let the next holder in. While redlease lives but stays
// silent (SIGSTOP, Ctrl-Z), the guardian keeps the same rule: the group is
// gone by the lease's local deadline, whatever -grace says. On Linux the
// guardian is a child subreaper, so that the orphans of COMMAND's processes
// are its children and are collected as they exit; it takes redlease's
// name (see nameGuardian), so that pgrep and pkill find it.
//
// A pipe, rather than a parent-death signal, tells the guardian of
// redlease's death: it works on every Unix, it cannot be lost, and it does
// not depend on which of redlease's threads started the guardian (the
// signal is sent when that thread ends, and Go ends threads of its own
// accord).

// guardianCommand is the guardian's hidden subcommand.
const guardianCommand = "__guardian"

// guardian is the state of the guardian process.
type guardian struct {
	grace  time.Duration
	lead   time.Duration // see stopLead
	slack  time.Duration // see guardSlack
	stderr io.Writer
	report *os.File
	parent int // redlease's pid
	pgid   int // COMMAND's pid and process group

	state    guardState // the latest from redlease
	leaseEnd time.Time  // the lease's local deadline, in this process's clock: the group is gone by then
	killAt   time.Time  // modeStop: when redlease sends SIGKILL
	orphaned bool       // redlease has gone: the guardian stops the group

	pending                 int    // what the action timer does: actTerm, actKill or actNone
	killWhy                 string // with actKill: why, for the message
	action, poll, giveUp    *time.Timer
	actionC, pollC, giveUpC <-chan time.Time
	pollDelay               time.Duration
}

// What the guardian's action timer does when it fires.
const (
	actNone = iota
	actTerm // SIGTERM and SIGCONT; SIGKILL -grace later
	actKill // SIGKILL
)

// guardianMain runs the guardian: args are -grace D -lead D -slack D --
// COMMAND [ARG...].
func guardianMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(guardianCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	grace := fs.Duration("grace", 10*time.Second, "")
	lead := fs.Duration("lead", 0, "")
	slack := fs.Duration("slack", 0, "")
	ctl, report, err := guardianPipes()
	if err != nil || fs.Parse(args) != nil || fs.NArg() == 0 {
		fmt.Fprintf(stderr, "redlease: %s is a part of redlease run, not a command (see 'redlease -h')\n", guardianCommand)
		return exitUsage
	}
	nameGuardian()
	// pkill redlease reaches the guardian too: the signals it leaves to
	// redlease are caught from here on (a caught signal is reset to its
	// default in the programs a process starts), and ignored once COMMAND
	// is started.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	states := make(chan guardState)
	go readStates(ctl, states)
	first, ok := <-states
	if !ok || first.mode != modeRun {
		return exitFailed // redlease went before the command was started
	}
	g := &guardian{grace: *grace, lead: *lead, slack: *slack, stderr: stderr, report: report, parent: os.Getppid(), pollDelay: pollFirst}
	if !g.start(fs.Args()) {
		return exitFailed
	}
	g.apply(first)
	reaped := make(chan syscall.WaitStatus)
	go g.reap(reaped)
	code := g.loop(states, reaped)
	g.collect()
	return code
}

// guardianPipes returns the control pipe (fd 3) and the report pipe (fd 4)
// that redlease run passed. Neither may reach COMMAND: redlease learns
// that the guardian is gone from the report pipe's end.
func guardianPipes() (ctl, report *os.File, err error) {
	for _, fd := range []int{3, 4} {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			return nil, nil, errors.New("not started by redlease run")
		}
		syscall.CloseOnExec(fd)
	}
	return os.NewFile(3, "control"), os.NewFile(4, "report"), nil
}

// readStates sends the states redlease writes to out, and closes out at the
// pipe's end: redlease has exited, or was killed.
func readStates(ctl *os.File, out chan<- guardState) {
	defer close(out)
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		if st, err := decodeGuardState(sc.Text()); err == nil {
			out <- st
		}
	}
}

// start starts COMMAND and reports its pid, or why it could not be started.
func (g *guardian) start(argv []string) bool {
	_ = setSubreaper() // without it, orphans go to PID 1, and the group is still watched
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return g.failed(err)
	}
	// The parent-death signal is tied to this thread: the guardian never
	// leaves it.
	runtime.LockOSThread()
	attr := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(attr)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: attr})
	if err != nil {
		return g.failed(&fs.PathError{Op: "fork/exec", Path: path, Err: err})
	}
	g.pgid = pid
	// Ignored only now: an ignored signal stays ignored in the programs a
	// process starts. The guardian leaves the group's signals to redlease
	// (pkill redlease must not take its guardian), writes to a terminal
	// that is not its own (SIGTTOU would stop it), and to a pipe whose
	// reader may be gone (SIGPIPE would kill it).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	fmt.Fprintf(g.report, "started %d\n", pid)
	return true
}

// failed reports a command that could not be started, with redlease's exit
// status for it.
func (g *guardian) failed(err error) bool {
	fmt.Fprintf(g.report, "failed %d %v\n", execStatus(err), err)
	return false
}

// reap collects the guardian's children: COMMAND, and as a subreaper its
// orphans; COMMAND's exit status goes to out. It ends when no child is
// left, and so no process that could become one.
func (g *guardian) reap(out chan<- syscall.WaitStatus) {
	defer close(out)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return
		case pid == g.pgid:
			out <- ws
		}
	}
}

// collect reaps, before the guardian exits, the processes of the group
// that have exited but not been collected yet. They are the guardian's
// children (COMMAND, and as a subreaper its orphans), and the guardian
// may find the group gone, with only such zombies left (see groupAlive),
// before reap has got to them. Left behind, they would pass to PID 1,
// which in some containers never collects them, and they would keep the
// group in existence: kill -0 would still find it, though nothing in it
// runs.
func (g *guardian) collect() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-g.pgid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil, pid <= 0: // none left, or only running ones
			return
		}
	}
}

// loop handles events until the guardian is done, and returns its exit
// status.
func (g *guardian) loop(states <-chan guardState, reaped <-chan syscall.WaitStatus) int {
	for {
		select {
		case st, ok := <-states:
			switch {
			case !ok:
				states = nil
				if g.redleaseGone() {
					return exitOK
				}
			case st.mode == modeDone:
				return exitOK
			case !g.orphaned:
				g.apply(st)
			}
		case ws, ok := <-reaped:
			if !ok {
				reaped = nil
				continue
			}
			fmt.Fprintf(g.report, "exited %d\n", exitStatus(ws)) // an error: redlease is gone, and does not need it
		case <-g.actionC:
			g.act()
		case <-g.pollC:
			if !groupAlive(g.pgid) {
				g.say("the command's process group is gone")
				return exitOK
			}
			g.pollDelay = min(2*g.pollDelay, pollMax)
			g.pollC = arm(&g.poll, g.pollDelay)
		case <-g.giveUpC:
			g.say("processes of the command's group survived SIGKILL for %v; giving up on them", killWait)
			return exitFailed
		}
	}
}

// apply takes a new state from redlease, and with it the moment the
// guardian acts should redlease stay silent. Whatever it waits for, the
// group gets SIGKILL at the lease's local deadline.
func (g *guardian) apply(st guardState) {
	now, transit := time.Now(), st.transit(monotonicNow())
	g.state, g.leaseEnd = st, now.Add(st.leaseLeft-transit)
	switch st.mode {
	case modeRun:
		// Unrenewed, the lease context ends lead before its deadline, and
		// redlease sends SIGTERM then; the guardian does, slack later, if
		// it has not heard of it.
		if g.slack < g.lead {
			g.schedule(actTerm, g.leaseEnd.Add(g.slack-g.lead))
		} else {
			g.scheduleKill(g.leaseEnd, "the lease's local deadline has come")
		}
	case modeHold:
		// Ctrl-Z: the group is stopped, and so is redlease, which decides
		// when the group resumes if the lease is still alive then.
		g.scheduleKill(g.leaseEnd, "the lease's local deadline passed while redlease (pid %d) and the command were stopped (Ctrl-Z)")
	case modeStop:
		g.killAt = now.Add(st.killLeft - transit)
		if at := g.killAt.Add(g.slack); at.Before(g.leaseEnd) {
			g.scheduleKill(at, "redlease (pid %d) has not sent the SIGKILL that was due (is it stopped?)")
		} else {
			g.scheduleKill(g.leaseEnd, "the lease's local deadline has come") // redlease's SIGKILL is due then too
		}
	}
}

// scheduleKill sets the action timer to send SIGKILL at at; why is the
// message, with redlease's pid for a %d in it.
func (g *guardian) scheduleKill(at time.Time, why string) {
	if strings.Contains(why, "%d") {
		why = fmt.Sprintf(why, g.parent)
	}
	g.killWhy = why
	g.schedule(actKill, at)
}

// redleaseGone: the control pipe ended without "done". It reports whether
// the guardian is done.
func (g *guardian) redleaseGone() bool {
	g.orphaned = true
	if !groupAlive(g.pgid) {
		return true
	}
	now := time.Now()
	killAt := earliest(now.Add(g.grace), g.leaseEnd)
	switch {
	case g.state.mode == modeStop: // it has had SIGTERM
		killAt = earliest(killAt, g.killAt)
		g.say("redlease (pid %d) is gone, and nobody renews the lease: SIGKILL to the command's process group in %v",
			g.parent, max(killAt.Sub(now), 0).Round(time.Millisecond))
	case killAt.After(now):
		g.terminate()
		g.say("redlease (pid %d) is gone, and nobody renews the lease: sent the command's process group SIGTERM; "+
			"SIGKILL in %v at the latest, at the lease's local deadline", g.parent, killAt.Sub(now).Round(time.Millisecond))
	}
	g.killWhy = fmt.Sprintf("redlease (pid %d) is gone", g.parent)
	g.schedule(actKill, killAt)
	g.pollC = arm(&g.poll, g.pollDelay)
	return false
}

// act runs the action whose time has come.
func (g *guardian) act() {
	switch g.pending {
	case actTerm:
		killAt := earliest(time.Now().Add(g.grace), g.leaseEnd)
		g.say("redlease (pid %d) has not acted %v after its lease ended unrenewed (is it stopped?): "+
			"sending the command's process group SIGTERM, and SIGKILL in %v at the lease's local deadline",
			g.parent, g.slack, max(time.Until(killAt), 0).Round(time.Millisecond))
		g.terminate()
		g.scheduleKill(killAt, "the lease's local deadline has come, and redlease (pid %d) has not stopped the group (is it stopped?)")
	case actKill:
		g.pending = actNone
		if !groupAlive(g.pgid) { // redlease's own SIGKILL, at the same moment
			return
		}
		_ = signalGroup(g.pgid, syscall.SIGKILL)
		g.say("%s: sent the command's process group SIGKILL", g.killWhy)
		if g.orphaned {
			g.giveUpC = arm(&g.giveUp, killWait)
		}
	}
}

// terminate sends the group SIGTERM, and SIGCONT: a stopped process acts on
// SIGTERM only once continued.
func (g *guardian) terminate() {
	_ = signalGroup(g.pgid, syscall.SIGTERM)
	_ = resumeGroup(g.pgid)
}

// schedule sets what the action timer does, and when; actNone stops it.
func (g *guardian) schedule(action int, at time.Time) {
	g.pending = action
	if action == actNone {
		if g.action != nil {
			g.action.Stop()
		}
		return
	}
	g.actionC = arm(&g.action, max(time.Until(at), 0))
}

func (g *guardian) say(format string, args ...any) {
	fmt.Fprintln(g.stderr, "redlease run:", oneRedlease(fmt.Sprintf(format, args...)))
}
