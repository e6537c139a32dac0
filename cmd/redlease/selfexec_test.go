package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
)

// asRedleaseEnv makes the test binary run as redlease: tests that need a
// process of its own (signals sent to redlease itself, what it does after
// its command exited) run the test binary again rather than build the
// command, so the race detector watches that process too.
const asRedleaseEnv = "REDLEASE_TEST_RUN_AS_REDLEASE"

func TestMain(m *testing.M) {
	// The guardian too: redlease run starts its own binary as the guardian,
	// and a run inside the tests starts the test binary.
	if os.Getenv(asRedleaseEnv) == "1" || len(os.Args) > 1 && os.Args[1] == guardianCommand {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the test binary cannot run itself as redlease:", err)
		os.Exit(1)
	}
	testBinary = exe
	servertest.Main(m) // silences go-redis's logger once: tests that run in parallel read it
}

// testBinary is the path of the test binary, which runs as redlease.
var testBinary string

// redleaseProcess returns a command that runs redlease with args, in a
// process of its own, and buffers for its stdout and stderr.
func redleaseProcess(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return redleaseCommand(ctx, args...)
}

// redleaseCommand is redleaseProcess bounded by ctx.
func redleaseCommand(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, testBinary, args...)
	cmd.Env = append(os.Environ(), asRedleaseEnv+"=1")
	if _, set := os.LookupEnv("GORACE"); !set {
		// Under -race, a process waits a second before it exits, for
		// reports; the race detector still reports at exit without it.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// A process the command left behind may hold the output pipes open:
	// Wait gives up on them this long after redlease exited.
	cmd.WaitDelay = 5 * time.Second
	return cmd, &out, &errOut
}

// testRedis starts a miniredis server on loopback and returns it, its URL
// and a redlease client of it (another owner, as far as redlease run is
// concerned).
func testRedis(t *testing.T) (*miniredis.Miniredis, string, *redlease.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	locks := redlease.New(rdb)
	t.Cleanup(func() { _ = locks.Close(context.Background()) })
	return mr, "redis://" + mr.Addr(), locks
}

// eventually polls cond every 20 ms until it holds, failing the test after
// limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
