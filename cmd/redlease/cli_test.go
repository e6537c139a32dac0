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

// End-to-end tests: every subtest runs redlease (the test binary, see
// asRedleaseEnv) against one redis-server, on resources of its own.

// cli runs redlease against the Redis at url.
type cli struct {
	url string
}

// uuidV4 is the form of an owner token.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// result is how a run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
}

// command returns the binary's command for args, talking to the test's Redis.
func (c cli) command(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd, out, errOut := redleaseCommand(ctx, args...)
	cmd.Env = append(cmd.Env, "REDIS_URL="+c.url)
	return cmd, out, errOut
}

func (c cli) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd, out, errOut := c.command(ctx, args...)
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("redlease %q: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

func TestCLI(t *testing.T) {
	srv := servertest.Redis(t)
	c := cli{url: srv.URL()}
	locks := redlease.New(srv.Client(t))
	t.Cleanup(func() { _ = locks.Close(context.Background()) })

	t.Run("DemoOnRealRedis", func(t *testing.T) {
		t.Parallel()
		r := c.run(t, "demo", "-redis", c.url, "-ttl", "500ms", "-resource", "demo-invoice")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "REJECTED by the resource: stale fence")
		require.Contains(t, r.stdout, `the invoice says "paid by B"`)
	})

	t.Run("RunsSerialise", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "log")
		script := `echo "start $REDLEASE_FENCE" >> "$1"; sleep 0.2; echo "end $REDLEASE_FENCE" >> "$1"`
		const runs = 3
		done := make(chan result, runs)
		for range runs {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd, out, errOut := c.command(ctx, "run", "-wait", "20s", "serial", "--", "sh", "-c", script, "sh", log)
				_ = cmd.Run()
				done <- result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
			}()
		}
		for range runs {
			r := <-done
			require.Zero(t, r.code, r.stderr)
		}
		data, err := os.ReadFile(log)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		require.Len(t, lines, 2*runs, "%s", data)
		last := int64(0)
		for i := 0; i < len(lines); i += 2 { // start F, end F, start G, end G, ...: no overlap
			var f int64
			_, err := fmt.Sscanf(lines[i], "start %d", &f)
			require.NoError(t, err, "%s", data)
			require.Equal(t, fmt.Sprintf("end %d", f), lines[i+1], "%s", data)
			require.Greater(t, f, last, "fences rise")
			last = f
		}
		st, err := locks.Inspect(t.Context(), "serial")
		require.NoError(t, err)
		require.False(t, st.Held, "the last run released the lease")
	})

	t.Run("Environment", func(t *testing.T) {
		t.Parallel()
		r := c.run(t, "run", "envres", "--", "sh", "-c", `echo "$REDLEASE_RESOURCE $REDLEASE_FENCE $REDLEASE_OWNER"`)
		require.Zero(t, r.code, r.stderr)
		f := strings.Fields(r.stdout)
		require.Len(t, f, 3)
		require.Equal(t, "envres", f[0])
		n, err := locks.LastFence(t.Context(), "envres")
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(n, 10), f[1])
		require.Regexp(t, uuidV4, f[2])
	})

	// REDLEASE_TOKEN is the lease's token: COMMAND reads back the lease it
	// runs under, of every kind, and a Go program could resume it.
	t.Run("Token", func(t *testing.T) {
		t.Parallel()
		const script = `echo "$REDLEASE_TOKEN $REDLEASE_FENCE $REDLEASE_OWNER ${REDLEASE_PERMIT:--1}"`
		for _, tc := range []struct {
			flags []string
			kind  redlease.LeaseKind
		}{
			{nil, redlease.ExclusiveLease},
			{[]string{"-permits", "3"}, redlease.SemaphorePermit},
			{[]string{"-read"}, redlease.ReadLease},
			{[]string{"-write"}, redlease.WriteLease},
		} {
			resource := "token-" + tc.kind.String()
			args := append(append([]string{"run", "-ttl", "7s"}, tc.flags...), resource, "--", "sh", "-c", script)
			r := c.run(t, args...)
			require.Zero(t, r.code, r.stderr)
			f := strings.Fields(r.stdout)
			require.Len(t, f, 4, r.stdout)
			tok, err := redlease.ParseToken(f[0])
			require.NoError(t, err, "%q", f[0])
			require.Equal(t, resource, tok.Resource)
			require.Equal(t, f[1], strconv.FormatInt(tok.Fence, 10), "REDLEASE_FENCE")
			require.Equal(t, f[2], tok.Owner, "REDLEASE_OWNER")
			require.Equal(t, tc.kind, tok.Kind)
			require.Equal(t, 7*time.Second, tok.TTL)
			if tc.kind == redlease.SemaphorePermit {
				require.Equal(t, f[3], strconv.Itoa(tok.Permit), "REDLEASE_PERMIT")
				require.Equal(t, 3, tok.Permits)
			}
		}
	})

	// A program that COMMAND runs can take the lease up by its token while
	// redlease holds it; redlease's release at COMMAND's exit ends it.
	t.Run("TokenResumesWhileCommandRuns", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		const script = `echo "$REDLEASE_TOKEN" > "$1/token.tmp" && mv "$1/token.tmp" "$1/token"
while [ ! -e "$1/stop" ]; do sleep 0.02; done`
		cmd, _, errOut := c.command(t.Context(), "run", "resumed", "--", "sh", "-c", script, "sh", dir)
		require.NoError(t, cmd.Start())
		var text []byte
		servertest.WaitFor(t, 15*time.Second, func() bool {
			text, _ = os.ReadFile(filepath.Join(dir, "token"))
			return len(text) > 0
		})
		tok, err := redlease.ParseToken(strings.TrimSpace(string(text)))
		require.NoError(t, err)
		l, err := locks.Resume(t.Context(), tok, redlease.WithAutoRenew(false))
		require.NoError(t, err)
		n, err := locks.LastFence(t.Context(), "resumed")
		require.NoError(t, err)
		require.Equal(t, n, l.Fence())
		require.NoError(t, l.Refresh(t.Context()))

		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.NoError(t, cmd.Wait(), errOut.String())
		require.ErrorIs(t, l.Refresh(t.Context()), redlease.ErrLeaseLost, "redlease released it")
	})

	t.Run("VerboseLogs", func(t *testing.T) {
		t.Parallel()
		r := c.run(t, "run", "-v", "verbose", "--", "true")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stderr, `level=DEBUG msg="redlease acquire" resource=verbose result=ok fence=1`)
		require.Contains(t, r.stderr, `level=DEBUG msg="redlease release" resource=verbose result=ok`)
		require.Empty(t, c.run(t, "run", "verbose", "--", "true").stderr, "quiet without -v")
	})

	t.Run("ExitCodes", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 7, c.run(t, "run", "codes", "--", "sh", "-c", "exit 7").code, "the command's status")
		require.Equal(t, 128+int(syscall.SIGTERM), c.run(t, "run", "codes", "--", "sh", "-c", "kill -TERM $$").code,
			"killed by a signal: 128+N, as a shell says")
		require.Equal(t, 127, c.run(t, "run", "codes", "--", "no-such-command-here").code)
		require.Equal(t, 2, c.run(t, "run", "-nowait", "-wait", "1s", "codes", "--", "true").code)

		held, err := locks.TryAcquire(t.Context(), "codes")
		require.NoError(t, err)
		defer held.Release(t.Context())
		r := c.run(t, "run", "-nowait", "codes", "--", "touch", filepath.Join(t.TempDir(), "ran"))
		require.Equal(t, 75, r.code, r.stderr)
		require.Contains(t, r.stderr, "held by another owner")
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		r = c.run(t, "run", "-wait", "200ms", "codes", "--", "true")
		require.Equal(t, 75, r.code, r.stderr)

		r = c.run(t, "status", "-redis", "redis://127.0.0.1:1", "codes")
		require.Equal(t, 69, r.code)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.NotContains(t, r.stderr, "goroutine")
	})

	// Redis going away while run waits is an outage (69), not contention
	// (75): the wait runs out on unreachable Redis, not on a held lease.
	t.Run("RedisGoneWhileWaiting", func(t *testing.T) {
		t.Parallel()
		for _, query := range []string{
			"", // go-redis's defaults: the wait tends to run out inside a failing attempt
			// Few connections, no retries: a dial fails at once, so the wait
			// runs out between failed attempts (once taken for busy).
			"?max_retries=-1&pool_size=2",
		} {
			srv := servertest.Redis(t)
			c := cli{url: "redis://" + srv.Addr + query}
			other := redlease.New(srv.Client(t), redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
			_, err := other.TryAcquire(t.Context(), "gone")
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd, _, errOut := c.command(ctx, "run", "-wait", "3s", "gone", "--", "true")
			require.NoError(t, cmd.Start())
			servertest.WaitFor(t, 10*time.Second, func() bool {
				st, err := other.Inspect(t.Context(), "gone")
				return err == nil && st.Waiters == 1
			})
			srv.Stop()
			_ = other.Close(context.Background())
			err = cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, 69, exit.ExitCode(), "%q: %s", query, errOut.String())
			require.Equal(t, 1, strings.Count(errOut.String(), "\n"), errOut.String())
		}
	})

	// A command whose lease is broken is sent SIGTERM; one that ignores it,
	// and everything it started, SIGKILL after the grace period.
	t.Run("BrokenLeaseStopsCommand", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for _, tc := range []struct {
			name, script string
		}{
			{"obeys", `trap 'echo TERM >> "$1/log"; exit 3' TERM; echo started >> "$1/log"; while :; do sleep 0.05; done`},
			{"ignores", `trap '' TERM; sleep 60 & echo $! > "$1/pid"; echo started >> "$1/log"; wait`},
		} {
			sub := filepath.Join(dir, tc.name)
			require.NoError(t, os.Mkdir(sub, 0o755))
			res := "broken:" + tc.name
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd, _, errOut := c.command(ctx, "run", "-ttl", "3s", "-grace", "300ms", res, "--",
				"sh", "-c", tc.script, "sh", sub)
			require.NoError(t, cmd.Start())
			servertest.WaitFor(t, 10*time.Second, func() bool {
				data, _ := os.ReadFile(filepath.Join(sub, "log"))
				return strings.Contains(string(data), "started")
			})
			b := c.run(t, "break", res)
			require.Zero(t, b.code, b.stderr)
			require.Contains(t, b.stdout, "removed the lease of")

			err := cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, 76, exit.ExitCode(), errOut.String())
			require.Contains(t, errOut.String(), "sending it SIGTERM")
			data, _ := os.ReadFile(filepath.Join(sub, "log"))
			if tc.name == "obeys" {
				require.Contains(t, string(data), "TERM")
				require.NotContains(t, errOut.String(), "sending it SIGKILL")
				continue
			}
			require.Contains(t, errOut.String(), "sending it SIGKILL")
			pid, err := os.ReadFile(filepath.Join(sub, "pid"))
			require.NoError(t, err)
			servertest.WaitFor(t, 10*time.Second, func() bool { n, _ := strconv.Atoi(strings.TrimSpace(string(pid))); return processGone(n) })
		}
	})

	t.Run("SignalsArePassedOn", func(t *testing.T) {
		t.Parallel()
		sub := t.TempDir()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd, out, errOut := c.command(ctx, "run", "sig", "--", "sh", "-c",
			`trap 'echo got-TERM; exit 0' TERM; echo started > "$1/log"; while :; do sleep 0.05; done`, "sh", sub)
		require.NoError(t, cmd.Start())
		servertest.WaitFor(t, 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(sub, "log"))
			return err == nil
		})
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait(), errOut.String())
		require.Contains(t, out.String(), "got-TERM")
		st, err := locks.Inspect(t.Context(), "sig")
		require.NoError(t, err)
		require.False(t, st.Held, "released after the command exited")
	})

	// If redlease itself is killed, nobody renews the lease: its guardian
	// sends the command SIGTERM (guardian_test.go has the whole group).
	t.Run("CommandEndsWithRedlease", func(t *testing.T) {
		t.Parallel()
		sub := t.TempDir()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd, _, _ := c.command(ctx, "run", "orphan", "--", "sh", "-c",
			`echo $$ > "$1/pid"; while :; do sleep 0.05; done`, "sh", sub)
		require.NoError(t, cmd.Start())
		var pid []byte
		servertest.WaitFor(t, 10*time.Second, func() bool {
			pid, _ = os.ReadFile(filepath.Join(sub, "pid"))
			return strings.HasSuffix(string(pid), "\n")
		})
		n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
		require.NoError(t, err)
		t.Cleanup(func() { // should the test fail: the command, and only it
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n)); bytes.Contains(cmdline, []byte(sub)) {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		})
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		servertest.WaitFor(t, 10*time.Second, func() bool { return processGone(n) })
	})

	t.Run("StatusListBreak", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		held, err := locks.TryAcquire(ctx, "ops:held")
		require.NoError(t, err)
		defer held.Release(ctx)
		free, err := locks.TryAcquire(ctx, "ops:free")
		require.NoError(t, err)
		require.NoError(t, free.Release(ctx))

		r := c.run(t, "status", "ops:held", "ops:free")
		require.Zero(t, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 3)
		require.Equal(t, []string{"RESOURCE", "KIND", "FENCE", "TTL", "OWNER", "LAST", "FENCE", "WAITERS", "HOLDER"}, strings.Fields(lines[0]))
		f := strings.Fields(lines[1])
		require.Equal(t, []string{"ops:held", "lease", fmt.Sprint(held.Fence())}, f[:3])
		require.Equal(t, held.Owner()[:8], f[4], "the owner token's first eight characters")
		require.Equal(t, redlease.DefaultHolder(), strings.Join(f[7:], " "), "the library's default holder")
		require.Equal(t, []string{"ops:free", "-", "-", "-", "-", "1", "0", "-"}, strings.Fields(lines[2]))

		r = c.run(t, "list", "-json", "ops:*")
		require.Zero(t, r.code, r.stderr)
		var sts []struct {
			Resource  string `json:"resource"`
			Held      bool   `json:"held"`
			Owner     string `json:"owner"`
			Fence     int64  `json:"fence"`
			TTLMS     int64  `json:"ttl_ms"`
			LastFence int64  `json:"last_fence"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &sts), r.stdout)
		require.Len(t, sts, 1, "a free resource leaves nothing to list")
		require.Equal(t, "ops:held", sts[0].Resource)
		require.Equal(t, held.Owner(), sts[0].Owner)
		require.Positive(t, sts[0].TTLMS)
		r = c.run(t, "list", "-held", "ops:*")
		require.Zero(t, r.code, r.stderr)
		require.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)

		r = c.run(t, "break", "-fence", fmt.Sprint(held.Fence()+1), "ops:held")
		require.Equal(t, 1, r.code, "another fence: nothing removed")
		require.NoError(t, held.Context().Err())
		r = c.run(t, "break", "-fence", fmt.Sprint(held.Fence()), "ops:held")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, held.Owner())
		require.Contains(t, r.stdout, "fence counter stays at")
		r = c.run(t, "break", "ops:held")
		require.Equal(t, 1, r.code, "nothing left to remove")

		next, err := locks.TryAcquire(ctx, "ops:held")
		require.NoError(t, err)
		defer next.Release(ctx)
		require.Greater(t, next.Fence(), held.Fence())
	})
	// A Redis Cluster, through a redis+cluster:// URL.
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		nodes, cc := servertest.Cluster(t, 3)
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.Addr)
		}
		c := cli{url: "redis+cluster://" + strings.Join(addrs, ",")}
		for i := range 6 {
			r := c.run(t, "run", fmt.Sprintf("node:%d", i), "--", "true")
			require.Zero(t, r.code, r.stderr)
		}
		r := c.run(t, "list", "node:*")
		require.Zero(t, r.code, r.stderr)
		require.Equal(t, 1, strings.Count(r.stdout, "\n"), "a header; released, the resources left nothing to list:\n%s", r.stdout)
		r = c.run(t, "list", "-fences", "-json")
		require.Zero(t, r.code, r.stderr)
		var fcs []fenceJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &fcs), r.stdout)
		slots := map[int]bool{}
		for i := range 6 {
			slot, err := cc.ClusterKeySlot(t.Context(), fmt.Sprintf("redlease:{node:%d}:lease", i)).Result()
			require.NoError(t, err)
			slots[int(slot)] = true
		}
		require.Len(t, fcs, len(slots), "a counter per slot used, found on every master: %s", r.stdout)
		for _, fc := range fcs {
			require.True(t, slots[fc.Slot], "%+v", fc)
		}
		r = c.run(t, "migrate-fences")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "nothing to fold in")

		locks := redlease.New(cc)
		defer locks.Close(context.Background())
		held, err := locks.TryAcquire(t.Context(), "node:3")
		require.NoError(t, err)
		r = c.run(t, "break", "node:3")
		require.Zero(t, r.code, r.stderr)
		require.ErrorIs(t, held.Release(t.Context()), redlease.ErrLeaseLost)
	})
}
