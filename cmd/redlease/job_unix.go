//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// job is COMMAND as redlease run supervises it: started by a guardian
// process (guardian_unix.go), in a process group of its own, so that
// signals reach everything it starts. redlease signals the group itself;
// the guardian reports COMMAND's exit, and stops the group by the lease's
// local deadline should redlease die.
type job struct {
	guardian *exec.Cmd
	ctl      *os.File // redlease's end of the control pipe
	pgid     int      // COMMAND's pid, and its process group's id

	done   chan struct{} // closed once COMMAND has exited, or the guardian has gone
	code   int           // COMMAND's exit status; set before done is closed
	orphan bool          // the guardian went before COMMAND's exit was reported; set before done
	read   chan struct{} // closed once the reports have been read to their end
}

// startJob starts the guardian, which starts COMMAND. On failure it returns
// a *startFailure.
func startJob(spec jobSpec) (*job, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, &startFailure{exitFailed, fmt.Sprintf("starting the guardian: %v", err)}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, &startFailure{exitFailed, fmt.Sprintf("starting the guardian: %v", err)}
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		_, _ = ctlR.Close(), ctlW.Close()
		return nil, &startFailure{exitFailed, fmt.Sprintf("starting the guardian: %v", err)}
	}
	cmd := exec.Command(exe, append([]string{guardianCommand, "-grace", spec.grace.String(), "-lead", spec.lead.String(),
		"-slack", spec.slack.String(), "--"}, spec.argv...)...)
	cmd.Args[0] = os.Args[0] // as ps shows it, and the guardian's name (nameGuardian)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = spec.stdin, spec.stdout, spec.stderr, spec.env
	cmd.ExtraFiles = []*os.File{ctlR, repW} // its fds 3 and 4
	// A group of its own: a kill -9 of redlease's job, and Ctrl-C, do not
	// reach it. No parent-death signal: it must outlive redlease.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// What the command left behind may hold output pipes open (when stdout
	// is not a file): Wait gives up on them.
	cmd.WaitDelay = killWait
	j := &job{guardian: cmd, ctl: ctlW, done: make(chan struct{}), read: make(chan struct{})}
	j.tell(spec.first) // read before the guardian starts the command
	err = cmd.Start()
	_, _ = ctlR.Close(), repW.Close()
	if err != nil {
		_, _ = ctlW.Close(), repR.Close()
		return nil, &startFailure{exitFailed, fmt.Sprintf("starting the guardian: %v", err)}
	}
	started := make(chan string, 1)
	go j.readReports(repR, started)
	if err := j.started(<-started); err != nil {
		j.finish()
		return nil, err
	}
	return j, nil
}

// started reads the guardian's first report: the command's pid, or why it
// could not be started.
func (j *job) started(line string) error {
	kind, arg, _ := strings.Cut(line, " ")
	switch kind {
	case "started":
		if pid, err := strconv.Atoi(arg); err == nil && pid > 0 {
			j.pgid = pid
			return nil
		}
	case "failed":
		code, msg, _ := strings.Cut(arg, " ")
		if n, err := strconv.Atoi(code); err == nil {
			return &startFailure{n, msg}
		}
	case "":
		return &startFailure{exitFailed, "the guardian process exited before it started the command"}
	}
	return &startFailure{exitFailed, fmt.Sprintf("the guardian process reported %q", line)}
}

// readReports reads the guardian's reports: the first goes to started (""
// if there is none), the command's exit ends done.
func (j *job) readReports(r *os.File, started chan<- string) {
	defer close(j.read)
	defer r.Close()
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first {
			first = false
			started <- sc.Text()
			continue
		}
		if code, ok := strings.CutPrefix(sc.Text(), "exited "); ok && !j.exited() {
			j.code, _ = strconv.Atoi(code)
			close(j.done)
		}
	}
	if first {
		started <- ""
	}
	if !j.exited() {
		j.orphan = true
		close(j.done)
	}
}

// exited reports, for readReports, whether done is closed.
func (j *job) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// tell passes a new state to the guardian. A guardian that is gone is
// noticed on the report pipe; one that does not read, within a second,
// misses the state rather than holding up redlease.
func (j *job) tell(st guardState) {
	st.sent = monotonicNow()
	_ = j.ctl.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = j.ctl.Write(st.encode())
}

// finish tells the guardian that it is done, and waits for it to exit
// (killing it after killWait).
func (j *job) finish() {
	j.tell(guardState{mode: modeDone})
	_ = j.ctl.Close()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-j.read:
	case <-t.C:
		_ = j.guardian.Process.Kill()
		<-j.read
	}
	_ = j.guardian.Wait()
}

// pid is COMMAND's process id, and its process group's.
func (j *job) pid() int { return j.pgid }

// exitedC is closed once COMMAND has exited, or its guardian has gone.
func (j *job) exitedC() <-chan struct{} { return j.done }

// status is COMMAND's exit status, once it has exited; -1 if the guardian
// went first.
func (j *job) status() int {
	if j.orphan {
		return -1
	}
	return j.code
}

// lostGuardian reports, once exitedC is closed, whether it was closed
// because the guardian went (killed) before it reported COMMAND's exit.
func (j *job) lostGuardian() bool { return j.orphan }

// signal sends sig to COMMAND's process group.
func (j *job) signal(sig os.Signal) error { return signalGroup(j.pgid, sig) }

// stop stops COMMAND's process group (Ctrl-Z).
func (j *job) stop() error { return stopGroup(j.pgid) }

// resume continues COMMAND's process group.
func (j *job) resume() error { return resumeGroup(j.pgid) }

// alive reports whether COMMAND's process group, whose leader has exited,
// still has a member that runs.
func (j *job) alive() bool { return groupAlive(j.pgid) }
