//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// forwarded are the signals that redlease run passes on to its command.
var forwarded = []os.Signal{os.Interrupt}

// terminate stops a command when its lease is lost; without Unix signals
// there is no gentler way than killing it.
var terminate = os.Kill

const terminateName = "a kill"

// jobControl is empty: there is no SIGTSTP to handle, so nothing is ever
// stopped, and stopping and resuming do nothing.
var jobControl []os.Signal

func isStop(os.Signal) bool { return false }

func stopGroup(*os.Process) error { return nil }

func resumeGroup(*os.Process) error { return nil }

func stopSelf() error { return nil }

// groupAlive reports false: without process groups, nothing the command
// started can be found once it has exited.
func groupAlive(*os.Process) bool { return false }

// setGroup does nothing here: there are no Unix process groups.
func setGroup(*exec.Cmd) {}

// signalGroup sends sig to the command only.
func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

// exitStatus is the command's exit code.
func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

// signalStatus is the exit status of redlease stopped by sig.
func signalStatus(os.Signal) int { return 130 }
