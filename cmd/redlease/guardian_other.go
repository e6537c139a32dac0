//go:build !unix

package main

import (
	"fmt"
	"io"
)

// guardianCommand is the hidden subcommand of redlease run's guardian
// (guardian_unix.go). Without Unix process groups there is none.
const guardianCommand = "__guardian"

func guardianMain(_ []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "redlease: %s is a part of redlease run, not a command (see 'redlease -h')\n", guardianCommand)
	return exitUsage
}
