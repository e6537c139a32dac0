package main

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// setDeathSignal makes the kernel send the command SIGTERM if its guardian
// dies (killed with SIGKILL together with redlease): it is the one process
// of the group the kernel tells. The signal is tied to the thread that
// started the command, which the guardian keeps.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }

// setSubreaper makes the guardian the parent of the command's orphans (the
// processes of a pipeline once the shell that started it died): it collects
// them as they exit, so that a group whose members have all exited is seen
// empty at once, even where PID 1 never collects zombies.
func setSubreaper() error {
	const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER (Linux 3.4), on every architecture
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// monotonicNow reads CLOCK_MONOTONIC, which all processes of the machine
// share (Go's own monotonic readings count from each process's start).
// It returns 0 if the clock cannot be read.
func monotonicNow() time.Duration {
	const clockMonotonic = 1
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// selfExe names the running binary, to start it again as the guardian:
// /proc/self/exe works even once the file was replaced or removed (an
// upgrade while a run lasts).
func selfExe() (string, error) { return "/proc/self/exe", nil }

// nameGuardian gives the guardian redlease's name, which pgrep and pkill
// match (pkill -9 redlease kills both). Started through /proc/self/exe, it
// is named "exe" by the kernel; the name redlease was run by, its argv[0]
// (which startJob passes on), is what its own name was made from. Written
// to /proc/self/comm, it names the main thread, which the process's name
// is, from whichever thread writes it; the kernel keeps 15 bytes.
func nameGuardian() {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return
	}
	_ = os.WriteFile("/proc/self/comm", []byte(filepath.Base(os.Args[0])), 0)
}
