//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// jobControl are the signals that redlease run handles itself while its
// command runs: Ctrl-Z (SIGTSTP) reaches only redlease's process group, not
// the command's, so redlease stops the command's group before it stops
// itself, and decides on SIGCONT whether the command may go on.
var jobControl = []os.Signal{syscall.SIGTSTP, syscall.SIGCONT}

// isStop reports whether sig asks redlease to stop (Ctrl-Z).
func isStop(sig os.Signal) bool { return sig == syscall.SIGTSTP }

// stopGroup stops every process in the process group led by p.
func stopGroup(p *os.Process) error { return signalGroup(p, syscall.SIGSTOP) }

// resumeGroup continues the process group led by p after stopGroup; it also
// lets a stopped process act on a SIGTERM that waits for it.
func resumeGroup(p *os.Process) error { return signalGroup(p, syscall.SIGCONT) }

// stopSelf stops redlease until it gets SIGCONT. It raises SIGSTOP rather
// than SIGTSTP: the kernel discards a SIGTSTP left to its default action in
// an orphaned process group, and redlease would then run on, renewing the
// lease of a command it has just stopped. SIGSTOP cannot be discarded.
func stopSelf() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }

// groupAlive reports whether the process group led by p, whose leader has
// exited and been waited for, still has a member that is not a zombie.
func groupAlive(p *os.Process) bool {
	if errors.Is(syscall.Kill(-p.Pid, 0), syscall.ESRCH) {
		return false
	}
	// EPERM means a member that changed its user: it still runs. Zombies
	// would also answer: they stay in the group until their parent (for an
	// orphan, PID 1 or a subreaper) collects them, and some containers'
	// PID 1 never does.
	return !onlyZombies(p.Pid)
}

// forwarded are the signals that redlease run passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// terminate asks a command to stop when its lease is lost.
var terminate os.Signal = syscall.SIGTERM

const terminateName = "SIGTERM"

// setGroup makes the command the leader of a process group of its own, so
// that a signal sent to the group reaches everything it started (the
// children of a shell script too), and tells the kernel to send it SIGTERM
// should redlease die first (Linux).
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends sig to the process group led by p. A group that is gone
// is no error.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if err := syscall.Kill(-p.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// exitStatus is the status a shell would report for ps: the exit code, or
// 128+N for a process killed by signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalStatus is the exit status of redlease stopped by sig: 128+N.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailed
}
