//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/servertest"
)

// keys returns every key in rdb's database (SCAN).
func keys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	var all []string
	iter := rdb.Scan(context.Background(), 0, "*", 100).Iterator()
	for iter.Next(context.Background()) {
		all = append(all, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

// The demo on a real Redis keeps to its own prefix, and removes every key
// it touched when it exits: at its end, and on Ctrl-C.
func TestDemoOnRealRedisLeavesNoKeyBehind(t *testing.T) {
	t.Parallel()
	for _, interrupt := range []bool{false, true} {
		srv := servertest.Redis(t)
		rdb := srv.Client(t)
		if before := keys(t, rdb); len(before) != 0 {
			t.Fatalf("a new server holds %q", before)
		}
		cmd, out, errOut := redleaseProcess(t, "demo", "-redis", srv.URL(), "-ttl", "1s")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		touched := watchKeys(rdb)
		eventually(t, 10*time.Second, "the demo's lease", func() bool { return len(keys(t, rdb)) >= 2 })
		want := 0
		if interrupt {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			want = 128 + int(syscall.SIGINT)
		}
		err := cmd.Wait()
		during := touched()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if code := cmd.ProcessState.ExitCode(); code != want {
			t.Errorf("interrupted %v: exit %d, want %d; stderr:\n%s", interrupt, code, want, errOut)
		}
		for _, k := range during {
			if !strings.HasPrefix(k, "redlease-demo:") {
				t.Errorf("interrupted %v: the demo wrote %q, outside its prefix", interrupt, k)
			}
		}
		if left := keys(t, rdb); len(left) != 0 {
			t.Errorf("interrupted %v: the demo left %q (it touched %q)", interrupt, left, during)
		}
		if !interrupt && !strings.Contains(out.String(), `the invoice says "paid by B"`) {
			t.Errorf("the story:\n%s", out)
		}
	}
}

// watchKeys notes every key in rdb's database, every 10 ms, until the
// function it returns is called, which returns them.
func watchKeys(rdb *redis.Client) func() []string {
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		seen := map[string]bool{}
		for {
			iter := rdb.Scan(context.Background(), 0, "*", 100).Iterator()
			for iter.Next(context.Background()) {
				seen[iter.Val()] = true
			}
			select {
			case <-stop:
				done <- slices.Sorted(maps.Keys(seen))
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() []string { close(stop); return <-done }
}

func TestDemoExits69WhenRedisIsUnreachable(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "-redis", "redis://127.0.0.1:1"}, &out, &errOut)
	if code != exitUnavailable || strings.Count(errOut.String(), "\n") != 1 || !strings.HasPrefix(errOut.String(), "redlease demo: ") {
		t.Errorf("exit %d, stderr %q; want 69 and one line", code, errOut.String())
	}
}

// A bad -ttl is named as such, before any connection (the embedded Redis
// is not asked either).
func TestDemoNamesABadTTL(t *testing.T) {
	for _, ttl := range []string{"0", "1.5ms", "-1s"} {
		var out, errOut bytes.Buffer
		code := run([]string{"demo", "-ttl", ttl}, &out, &errOut)
		if code != exitUsage || !strings.HasPrefix(errOut.String(), "redlease demo: -ttl ") || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("-ttl %s: exit %d, stderr %q; want 2 and one line naming -ttl", ttl, code, errOut.String())
		}
	}
}
