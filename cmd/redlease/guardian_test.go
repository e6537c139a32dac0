//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/servertest"
)

// stampedLines is an io.Writer that records when each line arrived.
type stampedLines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func (w *stampedLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil { // no newline yet: keep the start of the line
			w.buf.Reset()
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines = append(w.lines, stampedLine{now, strings.TrimSuffix(line, "\n")})
	}
}

// first returns when the first line holding s arrived.
func (w *stampedLines) first(s string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l.text, s) {
			return l.at, true
		}
	}
	return time.Time{}, false
}

func (w *stampedLines) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, l := range w.lines {
		fmt.Fprintf(&b, "%s %s\n", l.at.Format("15:04:05.000"), l.text)
	}
	return b.String()
}

// groupGone reports whether process group pgid has no member left. A
// zombie is not one: it runs nothing, and whoever reaps it may do so late
// on a loaded machine (kill(2) still finds it).
func groupGone(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return true
	}
	_, err := os.Stat("/proc/self/stat")
	return err == nil && len(groupMembers(pgid)) == 0
}

// Once redlease run is SIGKILLed, nobody renews the lease, and Redis lets
// the next holder in when it expires. Every process of COMMAND's group —
// grandchildren in a pipeline, background jobs, processes that ignore
// SIGTERM, a group stopped by Ctrl-Z — must be gone before that: a second
// run -nowait gets the lease only after they are gone.
func TestRunKilledWithSIGKILLLeavesNothingOfItsGroupRunning(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	for _, tc := range []struct {
		name    string
		script  string
		members int  // processes in the group once it runs
		ctrlZ   bool // stop redlease and the group with Ctrl-Z before the kill
	}{
		{"pipeline", `sleep 30 | cat`, 3, false},
		{"background job", `sleep 30 & wait`, 2, false},
		// The shell logs SIGTERM and waits on; its pipeline ignores SIGTERM.
		{"ignores SIGTERM", `trap 'echo term >> "$1/log"' TERM
(trap '' TERM; sleep 30 | cat) &
while :; do wait; done`, 4, false},
		{"stopped by Ctrl-Z", `sleep 30 | cat`, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource := "kill9:" + tc.name
			dir := t.TempDir()
			stderr := &stampedLines{}
			cmd, _, _ := redleaseProcess(t, "run", "-redis", srv.URL(), "-ttl", "3s", resource, "--",
				"sh", "-c", `echo $$ > "$1/pgid"; `+tc.script, "sh", dir)
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pgid := readPid(t, filepath.Join(dir, "pgid"))
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // should the test fail
			eventually(t, 10*time.Second, "the command's processes", func() bool { return groupSize(pgid) >= tc.members })
			if tc.ctrlZ {
				if err := cmd.Process.Signal(syscall.SIGTSTP); err != nil {
					t.Fatal(err)
				}
				eventually(t, 10*time.Second, "the group stopped", func() bool { s, _ := procState(pgid); return s == 'T' })
			}

			t0 := time.Now()
			watched := watchExpiry(rdb, "redlease:{"+resource+"}:lease", pgid, 10*time.Second)
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			// Waited for apart: what the command left behind may hold its
			// stderr open until the guardian has stopped it.
			waited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(waited) }()
			t.Cleanup(func() { <-waited })
			early := runSecond(t, srv.URL(), resource, pgid)
			w := <-watched
			if w.expired.IsZero() {
				t.Fatalf("the lease did not expire in Redis within 10 s of the kill: %v", w.err)
			}
			if w.empty.IsZero() || w.alive.After(w.gone) {
				t.Fatalf("the lease expired in Redis %v after the kill while the command's group still ran (seen running %v after the kill): %v; stderr:\n%s",
					w.expired.Sub(t0), w.alive.Sub(t0), groupMembers(pgid), stderr)
			}
			late := runSecond(t, srv.URL(), resource, pgid)
			if early.code != exitBusy || late.code != 0 || late.stdout != "alone\n" {
				t.Errorf("a second run -nowait: right after the kill exit %d (want %d), after the expiry exit %d, %q (want 0, alone); stderr:\n%s%s",
					early.code, exitBusy, late.code, late.stdout, early.stderr, late.stderr)
			}
			trapped, _ := os.ReadFile(filepath.Join(dir, "log"))
			term, _ := stderr.first("sent the command's process group SIGTERM")
			kill, _ := stderr.first("sent the command's process group SIGKILL")
			t.Logf("timeline: kill -9 at 0; SIGTERM at %v (trapped: %v); SIGKILL at %v; group empty at %v; "+
				"Redis expiry at %v; second holder's command started at %v",
				since(t0, term), len(trapped) > 0, since(t0, kill), since(t0, w.empty), since(t0, w.expired), since(t0, late.started))
			t.Logf("stderr:\n%s", stderr)
		})
	}
}

// expiry is when a watched process group was first seen empty and a
// watched lease key first seen gone.
type expiry struct {
	// empty is when the group was seen empty (it was gone by then), expired
	// when the key was seen gone. alive is a moment at which the group
	// still ran: the latest start of a look that found a member. gone is a
	// moment by which Redis had let the key go: the reply time of the last
	// PTTL that found it plus the time it had left (no renewal follows the
	// kill).
	empty, expired, alive, gone time.Time
	err                         error
}

// watchExpiry polls every 2 ms, for at most limit, until key has gone from
// Redis, noting when process group pgid was last seen running and first
// empty. The order of the group's end and the key's is judged by bounds
// that hold whenever the goroutine runs (alive and gone), not by which
// poll saw what first: on a loaded machine a poll may be descheduled
// between its two looks, or a PTTL answered late.
func watchExpiry(rdb redis.Cmdable, key string, pgid int, limit time.Duration) <-chan expiry {
	out := make(chan expiry, 1)
	go func() {
		var e expiry
		defer func() { out <- e }()
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if e.empty.IsZero() {
				look := time.Now()
				if groupGone(pgid) {
					e.empty = time.Now()
				} else {
					e.alive = look
				}
			}
			left, err := rdb.PTTL(context.Background(), key).Result()
			switch e.err = err; {
			case err != nil:
			case left == -2*time.Nanosecond || left == -2*time.Millisecond || left == -2: // go-redis: no such key
				e.expired = time.Now()
				if e.gone.IsZero() {
					e.gone = e.expired
				}
				return
			case left > 0:
				e.gone = time.Now().Add(left)
			}
		}
	}()
	return out
}

func since(t0, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).Round(time.Millisecond).String()
}

// second is how a second redlease run -nowait ended.
type second struct {
	code           int
	stdout, stderr string
	started        time.Time // when its command ran
}

// runSecond runs redlease run -nowait on resource with a command that
// reports whether process group pgid still has members.
func runSecond(t *testing.T, url, resource string, pgid int) second {
	t.Helper()
	script := `date +%s%N > "$1"; ` + groupCheck(pgid)
	stamp := filepath.Join(t.TempDir(), "started")
	cmd, out, errOut := redleaseProcess(t, "run", "-redis", url, "-nowait", resource, "--", "sh", "-c", script, "sh", stamp)
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	s := second{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
	if data, err := os.ReadFile(stamp); err == nil {
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil {
			s.started = time.Unix(0, ns)
		}
	}
	return s
}

// groupMembers lists the pids in process group pgid that are not zombies
// (Linux; empty elsewhere).
func groupMembers(pgid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// groupSize counts groupMembers; without /proc it reports 3, so that
// waiting for a pipeline to start passes.
func groupSize(pgid int) int {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return 3
	}
	return len(groupMembers(pgid))
}

// parentOf returns the parent pid of pid (Linux /proc).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skip("needs /proc")
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// startPipeline runs redlease run -ttl ttl with a pipeline as COMMAND and
// returns redlease, its stderr, COMMAND's process group and the guardian's
// pid (COMMAND's parent).
func startPipeline(t *testing.T, url string, args ...string) (*exec.Cmd, *stampedLines, int, int) {
	t.Helper()
	dir := t.TempDir()
	stderr := &stampedLines{}
	args = append(append([]string{"run", "-redis", url}, args...), "--",
		"sh", "-c", `echo $$ > "$1/pgid"; trap 'echo term >> "$1/log"; exit 1' TERM; sleep 30 | cat & wait`, "sh", dir)
	cmd, _, _ := redleaseProcess(t, args...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // Wait again after a test's own: an error, at once
	pgid := readPid(t, filepath.Join(dir, "pgid"))
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // should the test fail
	eventually(t, 10*time.Second, "the pipeline", func() bool { return groupSize(pgid) >= 3 })
	return cmd, stderr, pgid, parentOf(t, pgid)
}

// A guardian killed on its own takes COMMAND's exit status with it:
// redlease stops the group as it stops leftovers, releases the lease once
// the group is gone, and exits 1.
func TestRunStopsTheCommandWhenItsGuardianIsKilled(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	cmd, stderr, pgid, guardian := startPipeline(t, srv.URL(), "-grace", "300ms", "guardian-killed")
	if guardian == cmd.Process.Pid {
		t.Fatalf("the command's parent is redlease (%d), not a guardian", guardian)
	}
	if err := syscall.Kill(guardian, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailed {
		t.Fatalf("redlease: %v, want exit %d; stderr:\n%s", err, exitFailed, stderr)
	}
	// Without its guardian the group's orphans go to PID 1: zombies may
	// stay in the group where PID 1 does not collect them.
	if members := groupMembers(pgid); len(members) > 0 {
		t.Errorf("the command's group still runs after redlease exited: %v", members)
	}
	if _, ok := stderr.first("guardian process (see 'redlease run -h') was killed"); !ok {
		t.Errorf("stderr does not say what happened:\n%s", stderr)
	}
	if n, err := srv.Client(t).Exists(t.Context(), "redlease:{guardian-killed}:lease").Result(); err != nil || n != 0 {
		t.Errorf("the lease is still there (%d, %v): not released", n, err)
	}
}

// redlease stopped by SIGSTOP (not Ctrl-Z, which it handles) renews
// nothing and signals nothing: its guardian sends the group SIGTERM
// guardSlack (150 ms with -grace 300ms) after the lease's context would have
// ended, and SIGKILL at the lease's local deadline. Resumed, redlease finds
// its lease gone: exit 76.
func TestRunGuardianStopsTheCommandOfAStoppedRedlease(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	cmd, stderr, pgid, _ := startPipeline(t, srv.URL(), "-ttl", "2s", "-grace", "300ms", "sigstop")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	eventually(t, 10*time.Second, "the command's group gone", func() bool { return groupGone(pgid) })
	// The local deadline is at most 1.78 s away (TTL less 1 % and TTL/10).
	if took := time.Since(stopped); took > 2*time.Second+maxGuardSlack+5*time.Second {
		t.Errorf("the group went %v after redlease stopped", took)
	}
	if _, ok := stderr.first("has not acted"); !ok {
		t.Errorf("the guardian does not say what it did:\n%s", stderr)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitLost {
		t.Fatalf("redlease: %v, want exit %d; stderr:\n%s", err, exitLost, stderr)
	}
}

// The limit: SIGKILL of both redlease and its guardian (pkill -9 redlease)
// leaves nobody to stop the group. The kernel sends COMMAND itself SIGTERM
// (Linux's parent-death signal); what COMMAND started runs on.
func TestRunKilledWithItsGuardianLeavesOnlyTheParentDeathSignal(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("the parent-death signal is Linux's")
	}
	srv := servertest.Redis(t)
	cmd, _, pgid, guardian := startPipeline(t, srv.URL(), "both-killed")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(guardian, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "COMMAND (the shell) gone", func() bool { return processGone(pgid) })
	t.Logf("left running in the group: %v", groupMembers(pgid))
}

// pgrep and pkill match a process's name (/proc/PID/comm, from the file it
// was started from): the guardian's is redlease's, not "exe" (it is
// started from /proc/self/exe), so that pkill redlease reaches it too. Its
// SIGTERM, sent to both, stops COMMAND as it would without a guardian:
// redlease passes it on, and the guardian ignores it and stays to the end.
func TestGuardianHasRedleasesName(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/comm"); err != nil {
		t.Skip("needs /proc/PID/comm (Linux)")
	}
	_, url, _ := testRedis(t)
	cmd, stderr, pgid, guardian := startPipeline(t, url, "named")
	comm := func(pid int) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	name, gname := comm(cmd.Process.Pid), comm(guardian)
	if gname != name || gname == "exe" {
		t.Errorf("the guardian (pid %d) is named %q, redlease (pid %d) %q", guardian, gname, cmd.Process.Pid, name)
	}
	// pkill NAME: SIGTERM to each process of that name.
	for _, pid := range []int{guardian, cmd.Process.Pid} {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	// The command's trap exits 1: a killed guardian would make it 1 as well,
	// and say so.
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Contains(stderr.String(), "guardian") {
		t.Errorf("redlease: %v, want the command's exit 1 and no word of its guardian; stderr:\n%s", err, stderr)
	}
	if !groupGone(pgid) && len(groupMembers(pgid)) > 0 {
		t.Errorf("the command's group still runs: %v", groupMembers(pgid))
	}
	if !processGone(guardian) {
		t.Errorf("the guardian (pid %d) still runs after redlease exited", guardian)
	}
}

func TestGuardStateWireFormat(t *testing.T) {
	for _, st := range []guardState{
		{mode: modeRun, leaseLeft: 2670 * time.Millisecond, sent: 123456789},
		{mode: modeHold},
		{mode: modeStop, leaseLeft: 0, killLeft: 10 * time.Second, sent: 1},
		{mode: modeDone},
	} {
		got, err := decodeGuardState(strings.TrimSuffix(string(st.encode()), "\n"))
		if err != nil || got != st {
			t.Errorf("%+v: decoded as %+v, %v", st, got, err)
		}
	}
	for _, bad := range []string{"", "x 1 2 3", "r 1 2", "r 1 2 3 4", "r a 2 3", "rr 1 2 3"} {
		if _, err := decodeGuardState(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	st := guardState{sent: 10 * time.Second}
	if st.transit(10*time.Second+5*time.Millisecond) != 5*time.Millisecond || st.transit(time.Second) != 0 ||
		(guardState{}).transit(time.Hour) != 0 {
		t.Error("transit")
	}
}

// The guardian's subcommand is no command of its own.
func TestGuardianIsNoCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{guardianCommand, "--", "true"}, &out, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "part of redlease run") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// A command that passes the check before the lease is taken but that the
// kernel will not execute (a script whose interpreter is missing) is
// reported by the guardian: 127, one line, and the lease is released.
func TestRunReportsACommandTheGuardianCannotExecute(t *testing.T) {
	_, url, other := testRedis(t)
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"run", "-redis", url, "exec", "--", script}, &out, &errOut); code != exitNotFound {
		t.Errorf("exit %d, want %d; stderr %q", code, exitNotFound, errOut.String())
	}
	if n := strings.Count(errOut.String(), "\n"); n != 1 || !strings.Contains(errOut.String(), script) {
		t.Errorf("stderr %q: want one line naming the script", errOut.String())
	}
	if st, err := other.Inspect(t.Context(), "exec"); err != nil || st.Held {
		t.Errorf("after the run: %+v, %v", st, err)
	}
}

// COMMAND gets SIGTERM when no renewal was confirmed stopLead before the
// lease's local deadline, and SIGKILL at that deadline: -grace, cut so that
// a renewal confirmed on time, or one of its retries, comes first. The
// guardian's slack, after which it sends SIGTERM in a silent redlease's
// place, is half of that, at most a second. (It was half the margin, and
// the guardian's SIGKILL came -grace after its SIGTERM, past the deadline.)
func TestRunStopsTheCommandByTheLocalDeadline(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		lead, slack time.Duration
	}{
		{nil, 8350 * time.Millisecond, time.Second}, // TTL 30 s: lifetime 26.7 s, renewed every 10 s
		{[]string{"-grace", "3s"}, 3 * time.Second, time.Second},
		{[]string{"-grace", "0"}, 0, 0},
		{[]string{"-ttl", "3s"}, 835 * time.Millisecond, 417500 * time.Microsecond},
		{[]string{"-ttl", "3s", "-grace", "300ms"}, 300 * time.Millisecond, 150 * time.Millisecond},
		{[]string{"-ttl", "3s", "-grace", "1h"}, 835 * time.Millisecond, 417500 * time.Microsecond},
		{[]string{"-ttl", "1m", "-grace", "30s"}, 16700 * time.Millisecond, time.Second},
		{[]string{"-ttl", "5s", "-margin", "2s"}, 641666667, 320833333}, // lifetime 2.95 s
		{[]string{"-ttl", "3s", "-margin", "2s"}, 0, 0},                 // lifetime 0.97 s: refused by the library
		{[]string{"-ttl", "3ms"}, 835 * time.Microsecond, 417500 * time.Nanosecond},
	} {
		var out, errOut bytes.Buffer
		rf, _, done := parseRun(append(tc.args, "r", "--", "true"), &out, &errOut)
		if done || rf.lead != tc.lead || rf.slack != tc.slack {
			t.Errorf("%q: SIGTERM %v before the deadline, slack %v (done %v, %s); want %v and %v",
				tc.args, rf.lead, rf.slack, done, errOut.String(), tc.lead, tc.slack)
		}
		if rf.lead > rf.grace || rf.slack > rf.lead/2 {
			t.Errorf("%q: SIGTERM %v before the deadline with -grace %v, slack %v", tc.args, rf.lead, rf.grace, rf.slack)
		}
	}
	if got := guardSlack(-time.Second); got != 0 {
		t.Errorf("guardSlack of a negative lead: %v", got)
	}
}
