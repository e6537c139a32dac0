//go:build !linux

package main

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal. If
// redlease dies while the command runs, the command goes on unrenewed.
func setDeathSignal(*syscall.SysProcAttr) {}
