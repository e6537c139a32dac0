//go:build unix

package main

import (
	"io"
	"os"
)

// commandStdin is the stdin that COMMAND gets for redlease's stdin f.
// COMMAND runs in a process group of its own, in the background of any
// terminal: reading one would stop it (SIGTTIN) while redlease renews the
// lease on, or block it on a terminal that is not its own. So a terminal,
// or any character device, gives way to the null device (what exec.Cmd
// gives for a nil Stdin): COMMAND reads end of file at once. Pipes and
// files stay.
func commandStdin(f *os.File) io.Reader {
	if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return nil
	}
	return f
}
