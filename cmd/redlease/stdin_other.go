//go:build !unix

package main

import (
	"io"
	"os"
)

// commandStdin is the stdin that COMMAND gets for redlease's stdin f: f
// itself, as COMMAND runs in redlease's console (there is no process group
// of its own to put it in the background).
func commandStdin(f *os.File) io.Reader { return f }
