//go:build unix && !linux

package main

import (
	"os"
	"syscall"
	"time"
)

// setDeathSignal does nothing: only Linux has a parent-death signal. If the
// guardian is killed, the command is not told.
func setDeathSignal(*syscall.SysProcAttr) {}

// setSubreaper does nothing: the command's orphans go to PID 1 (launchd,
// init), which collects them promptly.
func setSubreaper() error { return nil }

// monotonicNow reports that no clock is known to be shared between
// processes: the guardian counts a state from when it read it.
func monotonicNow() time.Duration { return 0 }

// selfExe names the running binary, to start it again as the guardian.
func selfExe() (string, error) { return os.Executable() }

// nameGuardian does nothing: the guardian is started from os.Executable(),
// whose name the kernel gives it, as it gave it to redlease.
func nameGuardian() {}
