//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
)

// No overlap from redlease run, whatever its flags: the first run's COMMAND
// ignores SIGTERM (it notes each one and goes on), its renewals stop (Redis
// frozen with SIGSTOP past the lease's TTL, or redlease itself stopped, which
// leaves its guardian to act), and a second run waits on the same resource.
// The second COMMAND, once it starts, asks the kernel whether any process
// of the first one's group is left: none may be. The processes are the
// evidence, not redlease's logs: the test also watches the first group
// until it is gone, and the second COMMAND writes when it started.
func TestRunNeverOverlapsTheNextHolder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		flags       []string // the first run's, after -ttl 3s
		freezeRedis bool     // else the first redlease is stopped
	}{
		{"Redis frozen, default grace", nil, true},
		{"Redis frozen, grace 1h", []string{"-grace", "1h"}, true},
		{"redlease stopped, default grace", nil, false},
		{"redlease stopped, grace 1h", []string{"-grace", "1h"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := servertest.Redis(t) // of its own: it is frozen
			locks := redlease.New(srv.Client(t))
			t.Cleanup(func() { _ = locks.Close(context.Background()) })
			dir := t.TempDir()
			const resource = "overlap"

			// The first run: its COMMAND writes its pid, then notes every
			// SIGTERM (with the time) and runs on.
			first := &stampedLines{}
			args := append(append([]string{"run", "-redis", srv.URL(), "-ttl", "3s"}, tc.flags...), resource, "--",
				"sh", "-c", `trap 'date +%s%N >> "$1/term"' TERM; echo $$ > "$1/pgid"; while :; do sleep 0.05; done`, "sh", dir)
			cmd1, _, _ := redleaseProcess(t, args...)
			cmd1.Stderr = first
			if err := cmd1.Start(); err != nil {
				t.Fatal(err)
			}
			exited1 := make(chan error, 1)
			go func() { exited1 <- cmd1.Wait() }()
			pgid := readPid(t, filepath.Join(dir, "pgid"))
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // should the test fail

			// The second run waits for the lease; its COMMAND writes when it
			// started, and whether the first group still had a process.
			second := &stampedLines{}
			check := `date +%s%N > "$1/started"; ` + groupCheck(pgid) + ` > "$1/check"`
			cmd2, _, _ := redleaseProcess(t, "run", "-redis", srv.URL(), "-ttl", "3s", resource, "--", "sh", "-c", check, "sh", dir)
			cmd2.Stderr = second
			if err := cmd2.Start(); err != nil {
				t.Fatal(err)
			}
			exited2 := make(chan error, 1)
			go func() { exited2 <- cmd2.Wait() }()
			eventually(t, 10*time.Second, "the second run waiting", func() bool {
				st, err := locks.Inspect(t.Context(), resource)
				return err == nil && st.Held && st.Waiters >= 1
			})

			gone := watchGroup(pgid, 90*time.Second)
			t0 := time.Now()
			var resumed time.Time
			if tc.freezeRedis {
				srv.Signal(t, syscall.SIGSTOP)
				t.Cleanup(func() { srv.Signal(t, syscall.SIGCONT) }) // should the test fail
				// Past the TTL (3 s) and its margin.
				time.Sleep(4500 * time.Millisecond)
				srv.Signal(t, syscall.SIGCONT)
				resumed = time.Now()
			} else {
				if err := cmd1.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cmd1.Process.Signal(syscall.SIGCONT) })
			}

			var verdict []byte
			eventually(t, 60*time.Second, "the second COMMAND", func() bool {
				verdict, _ = os.ReadFile(filepath.Join(dir, "check"))
				return strings.HasSuffix(string(verdict), "\n")
			})
			started := readStamps(filepath.Join(dir, "started"))
			if !tc.freezeRedis {
				if err := cmd1.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
			// Killed should the test fail, so that the run can end (after
			// long enough to see the SIGKILL of -grace's default, 10 s).
			var goneAt time.Time
			select {
			case goneAt = <-gone:
			case <-time.After(15 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				goneAt = <-gone
			}
			code1, code2 := exitCode(t, exited1), exitCode(t, exited2)
			terms := readStamps(filepath.Join(dir, "term"))
			kill, ok := first.first("sending it SIGKILL")
			if guardian, ok2 := first.first("sent the command's process group SIGKILL"); ok2 && (!ok || guardian.Before(kill)) {
				kill = guardian
			}
			var firstTerm time.Time
			if len(terms) > 0 {
				firstTerm = terms[0]
			}
			var startedAt time.Time
			if len(started) > 0 {
				startedAt = started[0]
			}
			t.Logf("timeline from the freeze: first COMMAND's SIGTERM %v (%d of them), SIGKILL logged %v, "+
				"its group gone %v; Redis resumed %v; second COMMAND started %v",
				since(t0, firstTerm), len(terms), since(t0, kill), since(t0, goneAt), since(t0, resumed), since(t0, startedAt))
			t.Logf("first run (exit %d):\n%s", code1, first)
			t.Logf("second run (exit %d):\n%s", code2, second)

			if string(verdict) != "alone\n" {
				t.Errorf("the second COMMAND found the first one's process group still there (%q)", verdict)
			}
			if startedAt.IsZero() || goneAt.IsZero() || !goneAt.Before(startedAt) {
				t.Errorf("the first group was gone at %v, the second COMMAND started at %v", since(t0, goneAt), since(t0, startedAt))
			}
			if code1 != exitLost || code2 != 0 {
				t.Errorf("exit statuses %d and %d, want %d (lease lost) and 0", code1, code2, exitLost)
			}
		})
	}
}

// groupCheck is a shell command that prints whether process group pgid
// has a member: "overlap" if it has, "alone" if not. (dash's kill takes no
// "--": "kill -0 -- -PGID" fails on it whether or not the group exists.)
func groupCheck(pgid int) string {
	return `kill -0 -` + strconv.Itoa(pgid) + ` 2>/dev/null; case $? in 0) echo overlap;; 1) echo alone;; *) echo "kill failed: $?";; esac`
}

// watchGroup polls process group pgid every 5 ms, for at most limit, and
// sends when it had no member left that is not a zombie (zero if it did not
// happen within limit).
func watchGroup(pgid int, limit time.Duration) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if groupGone(pgid) || len(groupMembers(pgid)) == 0 {
				out <- time.Now()
				return
			}
		}
		out <- time.Time{}
	}()
	return out
}

// readStamps reads the times, in ns since the epoch (date +%s%N), that a
// command wrote into file, one a line.
func readStamps(file string) []time.Time {
	data, _ := os.ReadFile(file)
	var ts []time.Time
	for _, line := range strings.Fields(string(data)) {
		if ns, err := strconv.ParseInt(line, 10, 64); err == nil {
			ts = append(ts, time.Unix(0, ns))
		}
	}
	return ts
}

// exitCode waits (a bounded while) for a redlease process and returns its
// exit status.
func exitCode(t *testing.T, exited <-chan error) int {
	t.Helper()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit):
			return exit.ExitCode()
		default:
			t.Errorf("redlease: %v", err)
			return -1
		}
	case <-time.After(30 * time.Second):
		t.Errorf("redlease still runs 30 s later")
		return -1
	}
}
