//go:build unix

package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
)

// linePrefix is how every line redlease writes to stderr begins.
var linePrefix = regexp.MustCompile(`^redlease( [a-z-]+)?: `)

// checkLines fails t for a line of out that does not begin with
// "redlease <cmd>: ", or names redlease again after that.
func checkLines(t *testing.T, what, out string, wantLines bool) {
	t.Helper()
	if out == "" {
		if wantLines {
			t.Errorf("%s: nothing on stderr", what)
		}
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		p := linePrefix.FindString(line)
		if p == "" || strings.Contains(line[len(p):], "redlease:") {
			t.Errorf("%s: %q: want one \"redlease <cmd>: \" and no other \"redlease:\"", what, line)
		}
	}
}

// Every message says redlease once, in its prefix: the library's errors,
// which begin with "redlease: " (and wrap others that do), lose theirs.
func TestEveryMessageSaysRedleaseOnce(t *testing.T) {
	srv := servertest.Redis(t)
	url := srv.URL()
	rdb := srv.Client(t)
	locks := redlease.New(rdb)
	t.Cleanup(func() { _ = locks.Close(context.Background()) })
	held, err := locks.TryAcquire(t.Context(), "held", redlease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) }) // after the parallel subtests
	// A lease key of the wrong type: every script that reads it fails; a
	// legacy fence counter too.
	for _, k := range []string{"redlease:{wrongtype}:lease", "redlease:{wrongtype}:fence"} {
		if err := rdb.HSet(t.Context(), k, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	sem, err := locks.TryAcquireSemaphore(t.Context(), "sem", 1, redlease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sem.Release(context.Background()) })
	w, err := locks.TryAcquireWrite(t.Context(), "rw", redlease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Release(context.Background()) })
	gone := servertest.Redis(t)
	other := redlease.New(gone.Client(t), redlease.WithAutoRenew(false))
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	if _, err := other.TryAcquire(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		during func() // while redlease runs, once its command has started
	}{
		{"busy", []string{"run", "-redis", url, "-nowait", "held", "--", "true"}, nil},
		{"wait ran out", []string{"run", "-redis", url, "-wait", "200ms", "held", "--", "true"}, nil},
		{"broken while running", []string{"run", "-redis", url, "-ttl", "1s", "-grace", "100ms", "broken", "--", "sleep", "30"},
			func() { breakWhenHeld(t, locks, "broken") }},
		{"lost before release", []string{"run", "-redis", url, "-ttl", "30s", "lost", "--", "sleep", "0.5"},
			func() { breakWhenHeld(t, locks, "lost") }},
		{"max hold", []string{"run", "-redis", url, "-max-hold", "300ms", "-grace", "100ms", "maxhold", "--", "sleep", "30"}, nil},
		{"semaphore busy", []string{"run", "-redis", url, "-permits", "1", "-nowait", "sem", "--", "true"}, nil},
		{"semaphore wait ran out", []string{"run", "-redis", url, "-permits", "1", "-wait", "200ms", "sem", "--", "true"}, nil},
		{"other permits", []string{"run", "-redis", url, "-permits", "2", "-wait", "300ms", "sem", "--", "true"}, nil},
		{"read busy", []string{"run", "-redis", url, "-read", "-nowait", "rw", "--", "true"}, nil},
		{"write wait ran out", []string{"run", "-redis", url, "-write", "-wait", "200ms", "rw", "--", "true"}, nil},
		{"status refused", []string{"status", "-redis", url, "wrongtype"}, nil},
		{"list -fences refused", []string{"list", "-redis", url, "-fences"}, nil},
		{"migrate-fences refused", []string{"migrate-fences", "-redis", url}, nil},
		{"exclusive flags", []string{"run", "-read", "-permits", "2", "r", "--", "true"}, nil},
		{"list refused", []string{"list", "-redis", url, "wrongtype"}, nil},
		{"break refused", []string{"break", "-redis", url, "wrongtype"}, nil},
		{"invalid TTL", []string{"run", "-redis", url, "-ttl", "1.5ms", "r", "--", "true"}, nil},
		{"bad URL", []string{"status", "-redis", "redis+sentinel://s:1", "r"}, nil},
		{"unreachable", []string{"status", "-redis", "redis://127.0.0.1:1", "r"}, nil},
		{"demo unreachable", []string{"demo", "-redis", "redis://127.0.0.1:1"}, nil},
		{"Redis gone while waiting", []string{"run", "-redis", gone.URL() + "?max_retries=-1", "-wait", "3s", "gone", "--", "true"},
			func() { time.Sleep(500 * time.Millisecond); gone.Stop() }},
		{"unknown command", []string{"nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each in a process of its own
			cmd, _, errOut := redleaseProcess(t, tc.args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.during != nil {
				tc.during()
			}
			_ = cmd.Wait()
			checkLines(t, tc.name, errOut.String(), true)
		})
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"demo", "-ttl", "300ms"}, &out, &errOut); code != 0 {
		t.Fatalf("demo: exit %d, stderr %q", code, errOut.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "redlease:") {
			t.Errorf("demo: %q says redlease: again", line)
		}
	}
}

// breakWhenHeld breaks resource's lease as soon as someone holds it.
func breakWhenHeld(t *testing.T, locks *redlease.Client, resource string) {
	t.Helper()
	eventually(t, 10*time.Second, resource+" held", func() bool {
		_, removed, err := locks.Break(t.Context(), resource, 0)
		return err == nil && removed
	})
}
