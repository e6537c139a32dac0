//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// End-to-end tests of holder descriptions, of run's shared leases
// (-permits, -read, -write), and of status, list and break on them.

// holding is a redlease run whose command holds on until stopped.
type holding struct {
	cmd         *exec.Cmd
	out, errOut *bytes.Buffer
	dir         string
	permit      int   // REDLEASE_PERMIT, with -permits
	fence       int64 // REDLEASE_FENCE
	pgid        int   // the command's: its pid, as it leads its process group
}

// holdScript writes REDLEASE_PERMIT, REDLEASE_FENCE and its pid to
// $1/env, then waits for $1/stop.
const holdScript = `echo "${REDLEASE_PERMIT:--1} $REDLEASE_FENCE $$" > "$1/env.tmp" && mv "$1/env.tmp" "$1/env"
while [ ! -e "$1/stop" ]; do sleep 0.02; done`

// hold starts redlease run with flags on resource, and returns once its
// command runs (if wait) or has been started.
func (c cli) hold(t *testing.T, resource string, wait bool, flags ...string) *holding {
	t.Helper()
	h := &holding{dir: t.TempDir()}
	args := append(append([]string{"run"}, flags...), resource, "--", "sh", "-c", holdScript, "sh", h.dir)
	h.cmd, h.out, h.errOut = c.command(t.Context(), args...)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(func() { h.stop(t) })
	if wait {
		h.waitRunning(t)
	}
	return h
}

// waitRunning waits until h's command runs under its lease.
func (h *holding) waitRunning(t *testing.T) {
	t.Helper()
	var env []byte
	servertest.WaitFor(t, 15*time.Second, func() bool {
		env, _ = os.ReadFile(filepath.Join(h.dir, "env"))
		return len(env) > 0
	})
	_, err := fmt.Sscanf(string(env), "%d %d %d", &h.permit, &h.fence, &h.pgid)
	require.NoError(t, err, "%q", env)
}

// stop ends h's command and returns how redlease exited.
func (h *holding) stop(t *testing.T) result {
	t.Helper()
	_ = os.WriteFile(filepath.Join(h.dir, "stop"), nil, 0o644)
	return h.wait(t)
}

// wait waits for redlease to exit.
func (h *holding) wait(t *testing.T) result {
	t.Helper()
	if h.cmd.ProcessState == nil {
		err := h.cmd.Wait()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("redlease run: %v", err)
		}
	}
	return result{code: h.cmd.ProcessState.ExitCode(), stdout: h.out.String(), stderr: h.errOut.String()}
}

// statusOf runs status -json for one resource.
func (c cli) statusOf(t *testing.T, resource string) statusJSON {
	t.Helper()
	r := c.run(t, "status", "-json", resource)
	require.Zero(t, r.code, r.stderr)
	var sts []statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sts), r.stdout)
	require.Len(t, sts, 1)
	return sts[0]
}

// tableRows returns the rows of a status table whose first cell is
// resource, each split into its cells (HOLDER, the last, whole).
func tableRows(out, resource string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[0] == resource {
			// RESOURCE KIND(1 or 2 words) FENCE TTL OWNER LAST FENCE WAITERS HOLDER...
			n := 2
			if f[1] == "permit" {
				f = append([]string{f[0], f[1] + " " + f[2]}, f[3:]...)
			}
			rows = append(rows, append(f[:n+5:n+5], strings.Join(f[n+5:], " ")))
		}
	}
	return rows
}

func TestHolderDescriptions(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	h := c.hold(t, "described", true, "-ttl", "10s")
	host, err := os.Hostname()
	require.NoError(t, err)
	want := fmt.Sprintf("%s pid %d: sh -c %s sh %s", host, h.cmd.Process.Pid, shellWord(holdScript), h.dir)
	require.Contains(t, want, `$'echo`, "the script's newline is escaped: one line")

	st := c.statusOf(t, "described")
	require.Equal(t, want, st.Holder, "whole in -json")
	require.Equal(t, h.fence, st.Fence)

	r := c.run(t, "status", "described")
	rows := tableRows(r.stdout, "described")
	require.Len(t, rows, 1, r.stdout)
	require.Equal(t, []string{"described", "lease", strconv.FormatInt(h.fence, 10)}, rows[0][:3])
	require.Equal(t, cell(want, holderWidth), rows[0][7], "cut in the table")
	require.True(t, strings.HasSuffix(rows[0][7], "…"))
	require.Equal(t, holderWidth, len([]rune(rows[0][7])))

	r = c.run(t, "list", "-json", "describ*")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"holder": `+strconv.Quote(want))

	// The busy messages name the holder, and when its lease lapses.
	r = c.run(t, "run", "-nowait", "described", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf(`"described" is held by another owner (%s pid %d: sh -c $'echo`, host, h.cmd.Process.Pid))
	require.Regexp(t, `; its lease lapses in [0-9.]+m?s unless the holder renews it\n$`, r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	r = c.run(t, "run", "-wait", "300ms", "described", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Regexp(t, `not acquired within -wait 300ms(, Redis answering late or not at all meanwhile)?: `+
		regexp.QuoteMeta(`"described" is still held by another owner (`+cell(want, holderWidth)+fmt.Sprintf("), fence %d; its lease lapses in ", h.fence)),
		r.stderr)
	require.Zero(t, h.stop(t).code)

	// Another program's description, on one line in the table.
	locks := redlease.New(srv.Client(t), redlease.WithHolder("two\nlines\tand a tab"))
	t.Cleanup(func() { _ = locks.Close(context.Background()) })
	l, err := locks.TryAcquire(t.Context(), "odd")
	require.NoError(t, err)
	r = c.run(t, "status", "odd")
	require.Contains(t, r.stdout, `two\nlines\tand a tab`+"\n")
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	require.Equal(t, "two\nlines\tand a tab", c.statusOf(t, "odd").Holder)
	r = c.run(t, "run", "-nowait", "odd", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Contains(t, r.stderr, `is held by another owner (two\nlines\tand a tab); `)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	require.NoError(t, l.Release(t.Context()))
}

func TestSemaphoreRuns(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	a := c.hold(t, "pool", true, "-permits", "2")
	b := c.hold(t, "pool", true, "-permits", "2")
	require.ElementsMatch(t, []int{0, 1}, []int{a.permit, b.permit}, "REDLEASE_PERMIT")
	require.NotEqual(t, a.fence, b.fence)
	byPermit := map[int]*holding{a.permit: a, b.permit: b}

	r := c.run(t, "run", "-permits", "2", "-nowait", "pool", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Contains(t, r.stderr, `not acquired: all 2 permits of "pool" are held; the first lapses in `)
	r = c.run(t, "run", "-permits", "2", "-wait", "300ms", "pool", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Regexp(t, `not acquired within -wait 300ms(, Redis answering late or not at all meanwhile)?: `+regexp.QuoteMeta(fmt.Sprintf(
		`"pool" is still held by 2 owners (permit 0/2 fence %d, permit 1/2 fence %d); the first lease lapses in `,
		byPermit[0].fence, byPermit[1].fence)), r.stderr)
	for _, wait := range []string{"-nowait", "-wait=300ms"} {
		r = c.run(t, "run", "-permits", "3", wait, "pool", "--", "true")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, `"pool" is in use with 2 permits, not 3`)
	}

	st := c.statusOf(t, "pool")
	require.Equal(t, 2, st.Permits)
	require.True(t, st.Held, "held by its permits")
	require.Len(t, st.Holders, 2)
	for i, hj := range st.Holders {
		require.Equal(t, "permit", hj.Kind)
		require.NotNil(t, hj.Permit)
		require.Equal(t, i, *hj.Permit, "sorted by permit")
		require.Equal(t, byPermit[i].fence, hj.Fence)
		require.Contains(t, hj.Holder, fmt.Sprintf(" pid %d: sh -c ", byPermit[i].cmd.Process.Pid))
		require.Regexp(t, uuidV4, hj.Owner)
	}
	r = c.run(t, "list", "-held", "poo*") // held: by the holders of its permits
	rows := tableRows(r.stdout, "pool")
	require.Len(t, rows, 2, r.stdout)
	require.Equal(t, []string{"pool", "permit 0/2", strconv.FormatInt(byPermit[0].fence, 10)}, rows[0][:3])
	require.Equal(t, []string{"pool", "permit 1/2", strconv.FormatInt(byPermit[1].fence, 10)}, rows[1][:3])
	require.Equal(t, st.Holders[1].Owner[:8], rows[1][4])
}

// break -fence removes one permit, without -fence every holder; a run
// whose permit was removed is stopped.
func TestBreakSemaphorePermits(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	a := c.hold(t, "pool", true, "-permits", "2", "-ttl", "3s", "-grace", "200ms")
	b := c.hold(t, "pool", true, "-permits", "2", "-ttl", "3s", "-grace", "200ms")
	byPermit := map[int]*holding{a.permit: a, b.permit: b}
	st := c.statusOf(t, "pool")
	require.Len(t, st.Holders, 2)

	r := c.run(t, "break", "-fence", strconv.FormatInt(byPermit[1].fence, 10), "pool")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf(`removed permit 1/2 of "pool": fence %d, owner %s`, byPermit[1].fence, st.Holders[1].Owner))
	lost := byPermit[1].wait(t)
	require.Equal(t, exitLost, lost.code, lost.stderr)
	require.Contains(t, lost.stderr, `the lease of permit 1 of "pool" ended while the command ran`)
	next := c.hold(t, "pool", true, "-permits", "2", "-nowait", "-ttl", "3s", "-grace", "200ms")
	require.Equal(t, 1, next.permit, "the permit that was freed")
	require.Greater(t, next.fence, max(a.fence, b.fence))

	// Without -fence: every holder.
	r = c.run(t, "break", "-json", "pool")
	require.Zero(t, r.code, r.stderr)
	var bj breakJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &bj), r.stdout)
	require.True(t, bj.Removed)
	require.Len(t, bj.RemovedLeases, 2)
	require.Equal(t, []int64{byPermit[0].fence, next.fence}, []int64{bj.RemovedLeases[0].Fence, bj.RemovedLeases[1].Fence})
	require.Equal(t, exitLost, byPermit[0].wait(t).code)
	require.Equal(t, exitLost, next.wait(t).code)
	r = c.run(t, "break", "pool")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stdout, `"pool" is not held; nothing removed`)
}

func TestReadWriteRuns(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	r1 := c.hold(t, "catalog", true, "-read")
	r2 := c.hold(t, "catalog", true, "-read")
	r := c.run(t, "run", "-write", "-nowait", "catalog", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)

	w := c.hold(t, "catalog", false, "-write", "-wait", "20s")
	servertest.WaitFor(t, 10*time.Second, func() bool { return c.statusOf(t, "catalog").Waiters == 1 })
	r = c.run(t, "run", "-read", "-nowait", "catalog", "--", "true")
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Contains(t, r.stderr, `"catalog" is busy: a writer waits for it, and writers come first`)

	r = c.run(t, "status", "catalog")
	rows := tableRows(r.stdout, "catalog")
	require.Len(t, rows, 2, r.stdout)
	for i, h := range []*holding{r1, r2} {
		require.Equal(t, []string{"catalog", "read", strconv.FormatInt(h.fence, 10)}, rows[i][:3])
		require.Equal(t, "1", rows[i][6], "the writer waits")
	}

	require.Zero(t, r1.stop(t).code)
	require.Zero(t, r2.stop(t).code)
	w.waitRunning(t)
	require.Greater(t, w.fence, max(r1.fence, r2.fence))
	st := c.statusOf(t, "catalog")
	require.Len(t, st.Holders, 1)
	require.Equal(t, "write", st.Holders[0].Kind)
	require.Nil(t, st.Holders[0].Permit)
	require.Equal(t, w.fence, st.Holders[0].Fence)
	require.Zero(t, w.stop(t).code)

	// Supervision is the lease's: a broken write lease stops the command.
	w = c.hold(t, "catalog", true, "-write", "-ttl", "3s", "-grace", "200ms")
	r = c.run(t, "break", "-fence", strconv.FormatInt(w.fence, 10), "catalog")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `removed the write lease of "catalog": fence `+strconv.FormatInt(w.fence, 10))
	res := w.wait(t)
	require.Equal(t, exitLost, res.code, res.stderr)
	require.Contains(t, res.stderr, `the write lease of "catalog" ended while the command ran`)
	require.Contains(t, res.stderr, "sending it SIGTERM")
}

// The guardian stops a shared lease's command as it does the lease's, if
// redlease is killed.
func TestSharedLeaseCommandEndsWithRedlease(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	for _, kind := range [][]string{{"-permits", "2"}, {"-read"}, {"-write"}} {
		h := c.hold(t, "orphan"+kind[0], true, kind...) // its lease stays until its TTL runs out
		t.Cleanup(func() {                              // should the test fail: the command's group, and only it
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.pgid)); bytes.Contains(cmdline, []byte(h.dir)) {
				_ = syscall.Kill(-h.pgid, syscall.SIGKILL)
			}
		})
		require.NoError(t, h.cmd.Process.Kill())
		_ = h.cmd.Wait()
		servertest.WaitFor(t, 10*time.Second, func() bool { return processGone(h.pgid) })
	}
}

// A -wait that runs out is contention (75) if Redis answers when asked
// again, however slowly it answered meanwhile; a Redis that answers no
// more is an outage (69).
func TestWaitThatRunsOut(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	locks := redlease.New(srv.Client(t), redlease.WithHolder("the other owner"))
	t.Cleanup(func() { _ = locks.Close(context.Background()) })
	for _, r := range []string{"slow", "silent"} {
		_, err := locks.TryAcquire(t.Context(), r, redlease.WithTTL(time.Minute))
		require.NoError(t, err)
	}

	t.Run("Slow", func(t *testing.T) {
		t.Parallel()
		// Every reply late by more than the wait: its attempt is on its way when it runs out.
		p := servertest.StartProxy(t, srv.Addr)
		p.Delay(servertest.ToClient, 400*time.Millisecond)
		r := cli{url: "redis://" + p.Addr()}.run(t, "run", "-wait", "300ms", "slow", "--", "true")
		require.Equal(t, exitBusy, r.code, r.stderr)
		require.Contains(t, r.stderr, `not acquired within -wait 300ms, Redis answering late or not at all meanwhile: `+
			`"slow" is still held by another owner (the other owner), fence `)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	})

	t.Run("Silent", func(t *testing.T) {
		t.Parallel()
		p := servertest.StartProxy(t, srv.Addr)
		c := cli{url: "redis://" + p.Addr()}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd, _, errOut := c.command(ctx, "run", "-wait", "2s", "silent", "--", "true")
		require.NoError(t, cmd.Start())
		servertest.WaitFor(t, 10*time.Second, func() bool {
			st, err := locks.Inspect(t.Context(), "silent")
			return err == nil && st.Waiters == 1
		})
		p.Blackhole()
		start := time.Now()
		err := cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, exitUnavailable, exit.ExitCode(), errOut.String())
		t.Logf("exited %v after the blackhole", time.Since(start)) // the wait, the question, and Close bounded by the release timeout
		require.Contains(t, errOut.String(), `; asked again who holds it, Redis did not answer: `)
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), errOut.String())
	})
}
