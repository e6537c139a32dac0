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

// setGroup does nothing here: there are no Unix process groups.
func setGroup(*exec.Cmd) {}

// signalGroup sends sig to the command only.
func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

// exitStatus is the command's exit code.
func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

// signalStatus is the exit status of redlease stopped by sig.
func signalStatus(os.Signal) int { return 130 }
