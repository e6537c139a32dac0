//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// jobControl are the signals that redlease run handles itself while its
// command runs: Ctrl-Z (SIGTSTP) reaches only redlease's process group, not
// the command's, so redlease stops the command's group before it stops
// itself, and decides on SIGCONT whether the command may go on.
var jobControl = []os.Signal{syscall.SIGTSTP, syscall.SIGCONT}

// isStop reports whether sig asks redlease to stop (Ctrl-Z).
func isStop(sig os.Signal) bool { return sig == syscall.SIGTSTP }

// stopGroup stops every process in process group pgid.
func stopGroup(pgid int) error { return signalGroup(pgid, syscall.SIGSTOP) }

// resumeGroup continues process group pgid after stopGroup; it also lets a
// stopped process act on a SIGTERM that waits for it.
func resumeGroup(pgid int) error { return signalGroup(pgid, syscall.SIGCONT) }

// stopSelf stops redlease until it gets SIGCONT. It raises SIGSTOP rather
// than SIGTSTP: the kernel discards a SIGTSTP left to its default action in
// an orphaned process group, and redlease would then run on, renewing the
// lease of a command it has just stopped. SIGSTOP cannot be discarded.
func stopSelf() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }

// groupAlive reports whether process group pgid still has a member that is
// not a zombie.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	// EPERM means a member that changed its user: it still runs. Zombies
	// would also answer: they stay in the group until their parent (for an
	// orphan, the guardian or PID 1) collects them, and some containers'
	// PID 1 never does.
	return !onlyZombies(pgid)
}

// forwarded are the signals that redlease run passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// terminate asks a command to stop when its lease is lost.
var terminate os.Signal = syscall.SIGTERM

const terminateName = "SIGTERM"

// signalGroup sends sig to process group pgid. A group that is gone is no
// error.
func signalGroup(pgid int, sig os.Signal) error {
	if err := syscall.Kill(-pgid, sig.(syscall.Signal)); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// exitStatus is the status a shell would report for ws: the exit code, or
// 128+N for a process killed by signal N.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// signalStatus is the exit status of redlease stopped by sig: 128+N.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailed
}
