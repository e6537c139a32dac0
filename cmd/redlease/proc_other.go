//go:build !unix

package main

import "os"

// forwarded are the signals that redlease run passes on to its command.
var forwarded = []os.Signal{os.Interrupt}

// terminate stops a command when its lease is lost; without Unix signals
// there is no gentler way than killing it.
var terminate = os.Kill

const terminateName = "a kill"

// jobControl is empty: there is no SIGTSTP to handle, so nothing is ever
// stopped.
var jobControl []os.Signal

func isStop(os.Signal) bool { return false }

func stopSelf() error { return nil }

// signalStatus is the exit status of redlease stopped by sig.
func signalStatus(os.Signal) int { return 130 }
