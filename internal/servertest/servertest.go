// Package servertest starts the servers that redlease's tests run against —
// redis-server (plain, Cluster, Sentinel), PostgreSQL, miniredis — on
// loopback, and injects network faults between a client and a server. It is
// shared by the tests of every package in the module; it is not part of the
// API.
//
// A missing server binary skips the test, or fails it when the environment
// variable REDLEASE_REQUIRE_SERVERS is set (CI sets it).
package servertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv, when set to a non-empty value, turns a missing server binary
// into a test failure instead of a skip.
const RequireEnv = "REDLEASE_REQUIRE_SERVERS"

// Main runs the tests of a package: it silences go-redis's logger, runs m,
// stops the servers that the tests shared, and fails the run if goroutines
// are still running 5 s after the tests ended (background goroutines end by
// themselves, but not at once: an idle wake-up subscription lingers).
func Main(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis logs Sentinel and reconnect chatter
	code := m.Run()
	runAfterAll()
	if code == 0 {
		code = checkLeaks(5 * time.Second)
	}
	os.Exit(code)
}

// afterAll holds functions that run once after the last test, before the
// leak check: they stop servers that the tests of one binary share.
var afterAll struct {
	sync.Mutex
	fns []func()
}

func addAfterAll(f func()) {
	afterAll.Lock()
	defer afterAll.Unlock()
	afterAll.fns = append(afterAll.fns, f)
}

// runAfterAll runs afterAll's functions, last added first.
func runAfterAll() {
	afterAll.Lock()
	defer afterAll.Unlock()
	for i := len(afterAll.fns) - 1; i >= 0; i-- {
		afterAll.fns[i]()
	}
	afterAll.fns = nil
}

// checkLeaks returns 1, having listed the goroutines, if goroutines other
// than the ignored ones (see CheckLeaks) still run after limit, else 0.
func checkLeaks(limit time.Duration) int {
	if gs := leaked(nil, limit); len(gs) > 0 {
		fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", formatGoroutines(gs))
		return 1
	}
	return 0
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// missing skips tb, or fails it when RequireEnv is set, because what is
// missing.
func missing(tb testing.TB, what string) {
	tb.Helper()
	if os.Getenv(RequireEnv) != "" {
		tb.Fatalf("%s, and %s is set", what, RequireEnv)
	}
	tb.Skip(what + "; set " + RequireEnv + "=1 to make this a failure")
}

// WaitFor polls cond every 20ms until it holds, failing the test after limit.
func WaitFor(tb testing.TB, limit time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met after %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	p, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// RefusedAddr returns an address on 127.0.0.1 where a connection is
// refused until the test ends: its port is bound, by a socket that does not
// listen, so no server that another test starts can take it (as one could
// take a port that FreePort found free).
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// WaitDone waits up to limit for ctx to end and fails the test otherwise.
func WaitDone(tb testing.TB, ctx context.Context, limit time.Duration) {
	tb.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		tb.Fatalf("context not done after %v", limit)
	}
}

// Recv receives from ch, failing the test if nothing arrives within limit.
func Recv[T any](tb testing.TB, ch <-chan T, limit time.Duration) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		tb.Fatalf("nothing received within %v", limit)
		var zero T
		return zero
	}
}
