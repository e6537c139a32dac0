package main

import "syscall"

// setDeathSignal makes the kernel send the command SIGTERM if redlease dies
// (killed with SIGKILL, by the OOM killer) while the command runs: nobody
// renews the lease any more, so the command must not go on. The signal is
// tied to the thread that started the command, which redlease run locks.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
