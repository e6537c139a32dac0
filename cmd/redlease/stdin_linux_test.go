package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPty opens a new pseudo-terminal and returns its terminal side (the
// one a program reads), closed at the end of the test. It keeps the
// controller side open too, so that reads of the terminal block rather
// than fail.
func openPty(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlocking the pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("naming the pseudo-terminal: %v", e)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return tty
}

// A terminal (any character device) is not COMMAND's stdin: the null
// device is (nil, for exec.Cmd). Pipes and files are.
func TestCommandStdinIsNoTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if got := commandStdin(null); got != nil {
		t.Errorf("%s: %v, want nil", os.DevNull, got)
	}
	if got := commandStdin(openPty(t)); got != nil {
		t.Errorf("a terminal: %v, want nil", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := commandStdin(r); got != r {
		t.Errorf("a pipe: %v, want itself", got)
	}
	file, err := os.Open("stdin_linux_test.go")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if got := commandStdin(file); got != file {
		t.Errorf("a file: %v, want itself", got)
	}
}

// run from a terminal: a COMMAND that reads stdin reads end of file at once.
// It hung, reading a terminal in the background (stopped by SIGTTIN when it
// is the controlling terminal, blocked otherwise), while redlease renewed
// the lease.
func TestRunFromATerminalGivesTheCommandNoTerminal(t *testing.T) {
	t.Parallel()
	_, url, _ := testRedis(t)
	cmd, out, errOut := redleaseProcess(t, "run", "-redis", url, "tty", "--", "sh", "-c", "read line; echo read $?")
	cmd.Stdin = openPty(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "read 1") {
			t.Errorf("redlease: %v, stdout %q, stderr %q; want exit 0 and a read at end of file", err, out, errOut)
		}
	case <-time.After(30 * time.Second): // it takes well under a second
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("the command still reads the terminal after 30 s; stderr %q", errOut)
	}
}
