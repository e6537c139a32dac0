package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// The fault-injection suite: go test -race -run Fault .
// Each scenario starts its own servers on loopback, injects a fault that
// lasts at least 2×TTL, records a history of what its clients did and saw,
// and checks it (see history_test.go). Each runs on every client library
// and every server kind (eachFault). REDLEASE_FAULT_LONG=1 runs the long
// variant: more workers, more rounds.

const faultTTL = time.Second

// faultLifetime is the local lifetime of the suite's leases (faultOpts):
// TTL less the drift allowance and the margin.
const faultLifetime = faultTTL - time.Duration(float64(faultTTL)*redlease.DriftFactor) - faultTTL/4

// faultOpts are the lease options of the suite: a quarter of the TTL as the
// safety margin, so that scheduler noise on a busy machine cannot flip the
// deadline checks.
func faultOpts(h *history, extra ...redlease.Option) []redlease.Option {
	return append([]redlease.Option{redlease.WithTTL(faultTTL), redlease.WithSafetyMargin(faultTTL / 4), redlease.WithObserver(h.observer(faultTTL))}, extra...)
}

func longFaults() bool { return os.Getenv("REDLEASE_FAULT_LONG") != "" }

// scale returns short in the CI variant and long in the long one.
func scale(short, long int) int {
	if longFaults() {
		return long
	}
	return short
}

// eachFault runs scenario as a subtest per client library and server
// kind, "<library>/<kind>" ("rueidis/valkey"), as each does, but in
// parallel with each other and with the other fault tests (t too is made
// parallel), as many at once as go test's -parallel allows (GOMAXPROCS by
// default): a scenario spends most of its time waiting out TTLs, on servers
// of its own.
func eachFault(t *testing.T, scenario func(t *testing.T, lib library, kind servertest.Kind)) {
	t.Parallel()
	for _, lib := range libraries {
		t.Run(lib.name, func(t *testing.T) {
			t.Parallel()
			for _, k := range servertest.Kinds() {
				t.Run(string(k), func(t *testing.T) {
					t.Parallel()
					scenario(t, lib, k)
				})
			}
		})
	}
}

// resourceStore is the protected resource: keys on a server of their own,
// written through the Redis fencing guard on a go-redis client (the
// resource's side, the same whatever client library holds the leases).
type resourceStore struct {
	guard *fencing.RedisGuard
	rdb   *redis.Client
	h     *history
	addr  string
}

func newResourceStore(t *testing.T, h *history, kind servertest.Kind) *resourceStore {
	srv := servertest.Start(t, kind)
	rdb := srv.Client(t)
	return &resourceStore{guard: fencing.NewRedisGuard(rdb), rdb: rdb, h: h, addr: srv.Addr}
}

// write makes a fenced write of resource's data and records it.
func (s *resourceStore) write(ctx context.Context, client int, resource, owner string, fence int64) error {
	return s.h.Write(client, resource, owner, fence, func() error {
		return s.guard.Set(ctx, "data:"+resource, fmt.Sprintf("%d by %s", fence, owner), 0, fence, owner)
	})
}

// worker loops: acquire, write, refresh, release, recording everything,
// until stop is closed, rounds are done or ctx ends. Errors are outcomes,
// not failures.
func worker(ctx context.Context, stop <-chan struct{}, id int, c *redlease.Client, store *resourceStore, resources []string, rounds int) {
	h := store.h
	for i := 0; i < rounds && ctx.Err() == nil && !closed(stop); i++ {
		resource := resources[(id+i)%len(resources)]
		actx, cancel := context.WithTimeout(ctx, 3*faultTTL)
		l, err := h.Acquire(actx, id, c, resource, true)
		cancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, faultTTL)
		_ = store.write(wctx, id, resource, l.Owner(), l.Fence())
		if i%3 == 0 {
			_ = h.Refresh(wctx, id, l)
		}
		cancel()
		_ = h.Release(context.Background(), id, l)
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// startWorkers starts n workers, each with its own redlease.Client made by newClient,
// that run until stop is closed (or 10000 rounds, or ctx ends). The returned
// channel is closed when all have ended and closed their Clients.
func startWorkers(ctx context.Context, stop <-chan struct{}, n int, newClient func() *redlease.Client, store *resourceStore, resources []string) <-chan struct{} {
	return runWorkers(n, newClient, func(i int, c *redlease.Client) { worker(ctx, stop, i, c, store, resources, 10000) })
}

// runWorkers runs run(i, c) for i in 0..n-1 on goroutines, each with its own
// redlease.Client c made by newClient. The returned channel is closed when
// all have returned and closed their Clients.
func runWorkers(n int, newClient func() *redlease.Client, run func(i int, c *redlease.Client)) <-chan struct{} {
	var wg sync.WaitGroup
	for i := range n {
		c := newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close(context.Background())
			run(i, c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// acquiredSince counts the successful acquisitions that began after t.
func (h *history) acquiredSince(t time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, op := range h.ops {
		if op.Input.(opInput).kind == opAcquire && op.Output.(opOutput).res == resOK && op.Call > int64(t.Sub(h.start)) {
			n++
		}
	}
	return n
}

// ---- 2. a real client process pause ----

// TestFaultHelperProcess is not a test: it is the paused client of
// TestFaultClientProcessPause and the other paused-holder scenarios, run in
// a process of its own (see pausedChild).
func TestFaultHelperProcess(t *testing.T) {
	spec := os.Getenv("REDLEASE_FAULT_HELPER")
	if spec == "" {
		t.Skip("the helper process of TestFaultClientProcessPause")
	}
	f := strings.Fields(spec) // lock address, resource address, resource, mode (see startPausedChild)
	ctx := context.Background()
	lib := libraryNamed(t, os.Getenv(faultLibraryEnv))
	resRdb := servertest.NewClient(t, f[1]) // the resource's: the test's hand, not the client under test
	c := lib.plain(t, f[0], false, redlease.WithTTL(faultTTL), redlease.WithSafetyMargin(faultTTL/4))
	var (
		l    *redlease.Lease
		err  error
		kind = leaseExclusive
	)
	mode, arg, _ := strings.Cut(f[3], ":")
	switch mode {
	case "election":
		l, err = redlease.NewElection(c, f[2]).Campaign(ctx, "paused-leader")
	case "semaphore":
		kind = leasePermit
		n, _ := strconv.Atoi(arg)
		l, err = c.TryAcquireSemaphore(ctx, f[2], n)
	case "read":
		kind = leaseRead
		l, err = c.TryAcquireRead(ctx, f[2])
	case "write":
		kind = leaseWrite
		l, err = c.TryAcquireWrite(ctx, f[2])
	default:
		l, err = c.TryAcquire(ctx, f[2])
	}
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("acquired", l.Fence(), l.Owner(), l.Permit())
	guard := fencing.NewRedisGuard(resRdb)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() == "use" {
		// The holder (woken up, perhaps) believes it holds the lease, and
		// writes (or reads).
		err = useResource(ctx, resRdb, guard, l, kind)
		fmt.Println("use", errors.Is(err, fencing.ErrStaleFence), err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
	}
	fmt.Println("context", errors.Is(context.Cause(l.Context()), redlease.ErrLeaseLost))
	err = l.Refresh(ctx)
	fmt.Println("renew", errors.Is(err, redlease.ErrLeaseLost))
}

// pausedChild is a client process that holds a lease, to be stopped past
// its TTL with SIGSTOP (the whole process, watchdog included) and resumed:
// the test binary, re-executed as TestFaultHelperProcess.
type pausedChild struct {
	t     *testing.T
	h     *history
	cmd   *exec.Cmd
	stdin io.Writer
	out   *bufio.Reader
	in    opInput // of its operations on the resource
}

// faultLibraryEnv names, to the helper process, the client library whose
// Client it holds its lease with: the parent's (library.name).
const faultLibraryEnv = "REDLEASE_FAULT_LIBRARY"

// libraryNamed returns the library called name.
func libraryNamed(t *testing.T, name string) library {
	t.Helper()
	for _, lib := range libraries {
		if lib.name == name {
			return lib
		}
	}
	t.Fatalf("no client library %q", name)
	return library{}
}

// startPausedChild starts a child that takes a lease of resource from the
// lock server at lockAddr with a Client on lib, without waiting, and uses
// the resource at storeAddr as useResource does. mode says which lease: "lease",
// "election" (a term), "semaphore:<N>" (a permit of N), "read" or "write".
// Its acquisition is recorded as client 100's, with a log that gives Redis
// the lease until the child's start plus TTL·(1−DriftFactor): its acquire
// was sent after that start (checkExclusion).
func startPausedChild(t *testing.T, h *history, lib library, lockAddr, storeAddr, resource, mode string) *pausedChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultHelperProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), "REDLEASE_FAULT_HELPER="+lockAddr+" "+storeAddr+" "+resource+" "+mode,
		faultLibraryEnv+"="+lib.name)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	started, call := time.Now(), h.now()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &pausedChild{t: t, h: h, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line := readLine(t, c.out)
	var (
		fence  int64
		owner  string
		permit int
	)
	_, err = fmt.Sscanf(line, "acquired %d %s %d", &fence, &owner, &permit)
	require.NoError(t, err, line)
	spec := leaseSpec{}
	switch kind, arg, _ := strings.Cut(mode, ":"); kind {
	case "semaphore":
		spec.kind = leasePermit
		spec.permits, _ = strconv.Atoi(arg)
	case "read":
		spec.kind = leaseRead
	case "write":
		spec.kind = leaseWrite
	}
	h.record(100, call, opInput{kind: opAcquire, lease: spec.kind, resource: resource, permits: spec.permits},
		opOutput{res: resOK, fence: fence, owner: owner, permit: permit})
	h.mu.Lock()
	h.kinds[owner] = spec
	h.leases[owner] = &leaseLog{resource: resource, owner: owner, fence: fence, ttl: faultTTL, confirmed: []time.Time{started}}
	h.mu.Unlock()
	c.in = useInput(spec.kind, resource, owner, fence, permit)
	return c
}

// stop stops the child process and returns when.
func (c *pausedChild) stop() time.Time {
	require.NoError(c.t, c.cmd.Process.Signal(syscall.SIGSTOP))
	return time.Now()
}

// resume lets the stopped child run again.
func (c *pausedChild) resume() { require.NoError(c.t, c.cmd.Process.Signal(syscall.SIGCONT)) }

// use makes the child use the resource, records it, and reports whether
// the resource refused it as stale, and what the child said.
func (c *pausedChild) use() (refused bool, line string) {
	call := c.h.now()
	_, err := io.WriteString(c.stdin, "use\n")
	require.NoError(c.t, err)
	line = readLine(c.t, c.out)
	refused = strings.HasPrefix(line, "use true")
	out := opOutput{res: resOK}
	switch {
	case refused:
		out.res = resFail
	case line != "use false <nil>":
		out.res = resUnknown
	}
	c.h.record(100, call, c.in, out)
	return refused, line
}

// expectEnded makes the child wait for its lease context to end and renew
// then: its context must have ended with ErrLeaseLost, and its renewal
// must fail so.
func (c *pausedChild) expectEnded() {
	_, err := io.WriteString(c.stdin, "end\n")
	require.NoError(c.t, err)
	require.Equal(c.t, "context true", readLine(c.t, c.out), "its lease context has ended")
	require.Equal(c.t, "renew true", readLine(c.t, c.out), "its renew fails")
}

func TestFaultClientProcessPause(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		testPausedHolder(t, lib, kind, "lease", func(ctx context.Context, c *redlease.Client, resource string) (*redlease.Lease, error) {
			return c.Acquire(ctx, resource, redlease.WithMaxWait(5*faultTTL))
		})
	})
}

// The leader of an election pauses past its TTL: its term ends, the next
// leader's term has a higher fence, and the paused leader's late write is
// rejected.
func TestFaultElectionLeaderPause(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		testPausedHolder(t, lib, kind, "election", func(ctx context.Context, c *redlease.Client, resource string) (*redlease.Lease, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*faultTTL)
			defer cancel()
			term, err := redlease.NewElection(c, resource).Campaign(ctx, "next-leader")
			if err == nil {
				leader, lerr := redlease.NewElection(c, resource).Leader(ctx)
				if lerr != nil || leader.Value != "next-leader" || leader.Fence != term.Fence() {
					return nil, fmt.Errorf("leader after the hand-over: %+v, %v", leader, lerr)
				}
			}
			return term, err
		})
	})
}

// testPausedHolder runs a client process that takes the lease of "pay" (as a
// plain lease, or as an election's term), SIGSTOPs it for 3×TTL while take
// (in this process) takes over and writes, resumes it, and makes it write;
// both hold their leases with Clients on lib, from a server of kind.
func testPausedHolder(t *testing.T, lib library, kind servertest.Kind, mode string, take func(context.Context, *redlease.Client, string) (*redlease.Lease, error)) {
	h := newHistory(t)
	lock := servertest.Start(t, kind)
	store := newResourceStore(t, h, kind)
	ctx := t.Context()
	child := startPausedChild(t, h, lib, lock.Addr, store.addr, "pay", mode)

	stopped := child.stop()
	c := lib.plain(t, lock.Addr, false, faultOpts(h)...)
	call := h.now()
	b, err := take(ctx, c, "pay")
	require.NoError(t, err, "B takes over once A's lease expires in Redis")
	h.record(1, call, opInput{kind: opAcquire, resource: "pay"}, opOutput{res: resOK, fence: b.Fence(), owner: b.Owner()})
	h.acquired(b, leaseSpec{})
	require.Greater(t, b.Fence(), child.in.fence)
	require.NoError(t, store.write(ctx, 1, "pay", b.Owner(), b.Fence()))
	time.Sleep(time.Until(stopped.Add(3 * faultTTL)))
	child.resume()

	refused, line := child.use()
	require.True(t, refused, "the paused holder's write is rejected: %s", line)
	child.expectEnded()
	require.NoError(t, h.Release(ctx, 1, b))
	h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	type got struct {
		s   string
		err error
	}
	ch := make(chan got, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- got{strings.TrimSpace(s), err}
	}()
	select {
	case g := <-ch:
		require.NoError(t, g.err)
		return g.s
	case <-time.After(30 * time.Second):
		t.Fatal("helper process said nothing for 30s")
		return ""
	}
}

// ---- 3. server pause ----

func TestFaultServerPause(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind)
		store := newResourceStore(t, h, kind)
		ctx := t.Context()
		c := lib.plain(t, lock.Addr, false, faultOpts(h)...)

		// Shorter than the margin: the lease survives.
		a, err := h.Acquire(ctx, 1, c, "short", false)
		require.NoError(t, err)
		for range 3 {
			lock.Signal(t, syscall.SIGSTOP)
			time.Sleep(faultTTL / 10)
			lock.Signal(t, syscall.SIGCONT)
			time.Sleep(faultTTL / 2)
		}
		require.NoError(t, a.Context().Err(), "pauses shorter than the margin do not end the lease")
		require.NoError(t, store.write(ctx, 1, "short", a.Owner(), a.Fence()))
		require.NoError(t, h.Release(ctx, 1, a))

		// Longer than the TTL: the holder's context ends during the pause.
		for _, pause := range []struct {
			name  string
			start func()
			end   func()
		}{
			{"SIGSTOP", func() { lock.Signal(t, syscall.SIGSTOP) }, func() { lock.Signal(t, syscall.SIGCONT) }},
			{"CLIENT PAUSE", func() {
				require.NoError(t, lock.Client(t).Do(ctx, "CLIENT", "PAUSE", (3*faultTTL).Milliseconds(), "ALL").Err())
			}, func() {}},
		} {
			t.Run(pause.name, func(t *testing.T) {
				res := "long-" + strings.ReplaceAll(pause.name, " ", "")
				a, err := h.Acquire(ctx, 1, c, res, false)
				require.NoError(t, err)
				paused := time.Now()
				pause.start()
				servertest.WaitDone(t, a.Context(), 3*faultTTL)
				require.Less(t, time.Since(paused), faultTTL+h.stalls.within(paused, time.Now()), "the context ended during the pause, before the TTL (in the process's own running time)")
				time.Sleep(time.Until(paused.Add(3 * faultTTL)))
				pause.end()
				b, err := h.Acquire(ctx, 2, lib.plain(t, lock.Addr, false, faultOpts(h)...), res, true, redlease.WithMaxWait(5*faultTTL))
				require.NoError(t, err)
				require.Greater(t, b.Fence(), a.Fence())
				require.NoError(t, store.write(ctx, 2, res, b.Owner(), b.Fence()))
				require.ErrorIs(t, store.write(ctx, 1, res, a.Owner(), a.Fence()), fencing.ErrStaleFence)
				_ = h.Release(ctx, 1, a)
				require.NoError(t, h.Release(ctx, 2, b))
			})
		}
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
	})
}

// ---- 4. blackhole between holder and Redis ----

func TestFaultBlackhole(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind)
		proxy := servertest.StartProxy(t, lock.Addr)
		store := newResourceStore(t, h, kind)
		ctx := t.Context()
		direct := lock.Client(t)
		a := lib.plain(t, proxy.Addr(), false, faultOpts(h)...)
		b := lib.plain(t, lock.Addr, false, faultOpts(h)...)

		la, err := h.Acquire(ctx, 1, a, "r", false)
		require.NoError(t, err)
		require.NoError(t, store.write(ctx, 1, "r", la.Owner(), la.Fence()))
		time.Sleep(faultTTL / 2)
		proxy.Blackhole()
		cut := time.Now()
		servertest.WaitDone(t, la.Context(), 3*faultTTL)
		require.Less(t, time.Since(cut), faultTTL+h.stalls.within(cut, time.Now()), "the context ended before the server could expire the lease (in the process's own running time)")

		lb, err := h.Acquire(ctx, 2, b, "r", true, redlease.WithMaxWait(5*faultTTL))
		require.NoError(t, err, "another client takes over after server expiry")
		require.NoError(t, store.write(ctx, 2, "r", lb.Owner(), lb.Fence()))
		time.Sleep(time.Until(cut.Add(3 * faultTTL)))

		proxy.Heal() // A's renewals held in the network arrive now
		time.Sleep(faultTTL / 2)
		v, err := direct.Get(ctx, "redlease:{r}:lease").Result()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s:%d:%s", lb.Owner(), lb.Fence(), redlease.DefaultHolder()), v)
		require.ErrorIs(t, h.Release(ctx, 1, la), redlease.ErrLeaseLost, "the old holder neither renews nor releases the new lease")
		require.NoError(t, direct.Get(ctx, "redlease:{r}:lease").Err(), "B's lease is intact")
		require.ErrorIs(t, store.write(ctx, 1, "r", la.Owner(), la.Fence()), fencing.ErrStaleFence)
		require.NoError(t, h.Release(ctx, 2, lb))
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
	})
}

// ---- 5. lost replies ----

func TestFaultLostReplies(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind)
		proxy := servertest.StartProxy(t, lock.Addr)
		store := newResourceStore(t, h, kind)
		ctx := t.Context()
		c := lib.plain(t, proxy.Addr(), true, faultOpts(h, redlease.WithAutoRenew(false))...)
		lose := func() {
			warm(t, c, "r")
			proxy.DropReplies(1)
		}
		acquisitions := 0
		for i := range scale(5, 40) {
			lose()
			l, err := h.Acquire(ctx, 1, c, "r", false)
			acquisitions++
			if err != nil {
				continue
			}
			_ = store.write(ctx, 1, "r", l.Owner(), l.Fence())
			if i%2 == 0 {
				lose()
				_ = h.Refresh(ctx, 1, l)
			}
			lose()
			if err := h.Release(ctx, 1, l); errors.Is(err, redlease.ErrOutcomeUnknown) {
				require.NoError(t, h.Release(ctx, 1, l), "asked again, the release is recognised")
			}
		}
		n, err := lib.plain(t, lock.Addr, false).LastFence(ctx, "r")
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(acquisitions), "at most one fence per logical acquire")
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
	})
}

// warm makes a round trip through c, on a call about resource, so that a
// fault armed next on a proxy hits the next call, not the handshake of a
// connection that c had to dial after the last fault. (go-redis takes the
// connection that the round trip gave back; rueidis and valkey-go pick one
// of theirs at random for each call, so there the fault may still hit a
// handshake, which the client reports as another unknown outcome, or as
// not sent.)
func warm(t *testing.T, c *redlease.Client, resource string) {
	t.Helper()
	_, err := c.Inspect(t.Context(), resource)
	require.NoError(t, err)
}

// ---- 6. a late release ----

func TestFaultLateRelease(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind)
		proxy := servertest.StartProxy(t, lock.Addr)
		ctx := t.Context()
		direct := lock.Client(t)
		// A's release waits for its late reply: a request on the delayed
		// link takes 2×TTL per round trip, and the release may take three
		// (the script cache is cold: NOSCRIPT, then EVAL; and rueidis and
		// valkey-go send it on a connection of theirs picked at random, which
		// they may have to dial first), more than the default release
		// timeout.
		a := lib.plain(t, proxy.Addr(), false, faultOpts(h, redlease.WithAutoRenew(false), redlease.WithReleaseTimeout(10*faultTTL))...)
		b := lib.plain(t, lock.Addr, false, faultOpts(h)...)

		la, err := h.Acquire(ctx, 1, a, "r", false)
		require.NoError(t, err)
		proxy.Delay(servertest.ToServer, 2*faultTTL) // A's release will arrive late
		released := make(chan error, 1)
		go func() { released <- h.Release(ctx, 1, la) }()
		lb, err := h.Acquire(ctx, 2, b, "r", true, redlease.WithMaxWait(5*faultTTL))
		require.NoError(t, err)
		require.ErrorIs(t, servertest.Recv(t, released, 30*time.Second), redlease.ErrLeaseLost, "the late release found another owner's lease")
		proxy.Heal()
		v, err := direct.Get(ctx, "redlease:{r}:lease").Result()
		require.NoError(t, err, "it deleted nothing")
		require.Equal(t, fmt.Sprintf("%s:%d:%s", lb.Owner(), lb.Fence(), redlease.DefaultHolder()), v)
		require.NoError(t, h.Release(ctx, 2, lb))
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
	})
}

// ---- 7. restarts ----

func TestFaultRestartWithoutPersistence(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind)
		store := newResourceStore(t, h, kind)
		ctx := t.Context()
		c := lib.plain(t, lock.Addr, false, faultOpts(h)...)
		var last int64
		for range 5 {
			l, err := h.Acquire(ctx, 1, c, "r", false)
			require.NoError(t, err)
			require.NoError(t, store.write(ctx, 1, "r", l.Owner(), l.Fence()))
			last = l.Fence()
			require.NoError(t, h.Release(ctx, 1, l))
		}

		h.Restart(func() { lock.Restart(t) }) // the counter is gone
		l, err := h.Acquire(ctx, 2, c, "r", true, redlease.WithMaxWait(5*faultTTL))
		require.NoError(t, err)
		require.Less(t, l.Fence(), last, "the fence went back")
		err = store.write(ctx, 2, "r", l.Owner(), l.Fence())
		var stale *fencing.StaleFenceError
		require.ErrorAs(t, err, &stale, "the resource rejects the regressed fence")
		require.Equal(t, last, stale.Newest)
		require.NoError(t, afterRestart(t, lib, func() error { return h.Release(ctx, 2, l) }))

		require.NoError(t, afterRestart(t, lib, func() error { // repair
			_, err := h.AdvanceFence(ctx, 2, c, "r", stale.Newest)
			return err
		}))
		require.NoError(t, afterRestart(t, lib, func() (err error) { l, err = h.Acquire(ctx, 3, c, "r", false); return err }))
		require.Equal(t, last+1, l.Fence())
		require.NoError(t, store.write(ctx, 3, "r", l.Owner(), l.Fence()), "repair restores liveness")
		require.NoError(t, afterRestart(t, lib, func() error { return h.Release(ctx, 3, l) }))
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true}) // within each epoch of the lock, before the restart and after
	})
}

// writesOnDeadConns reports whether lib sends a call on a connection that
// the server closed while it was idle, and finds out only when the write or
// the reply fails: rueidis and valkey-go (v1.0.79, v1.0.80) check an idle
// connection only by a keep-alive PING after a second of quiet (go-redis
// checks a pooled connection before it uses it). Such a call ends in
// ErrOutcomeUnknown — its driver cannot tell it from a request whose reply
// was lost, nor can anyone on the client's side — and the client then
// replaces the connection. Right after a server restart, that is one call
// per connection the client had: 2^PipelineMultiplex, 2 on 2 cores, 4 from
// 4 on.
func writesOnDeadConns(lib library) bool { return lib.name == "rueidis" || lib.name == "valkey-go" }

// afterRestart runs call, a call through a Client on lib made before its
// server restarted, and asks again while it ends in ErrOutcomeUnknown on a
// library that writesOnDeadConns, once per connection the client may have
// had (the call was never run: its server was gone when it was written).
// It returns the last call's error.
func afterRestart(t *testing.T, lib library, call func() error) error {
	t.Helper()
	err := call()
	for try := 0; writesOnDeadConns(lib) && errors.Is(err, redlease.ErrOutcomeUnknown) && try < 4; try++ {
		t.Logf("after the restart: %v; asked again", err)
		err = call()
	}
	return err
}

func TestFaultRestartWithAOF(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		lock := servertest.Start(t, kind, "--appendonly", "yes", "--appendfsync", "always")
		ctx := t.Context()
		c := lib.plain(t, lock.Addr, false, faultOpts(h)...)
		var fences []int64
		for i := range 6 {
			if i == 3 {
				lock.Restart(t)
			}
			l, err := h.Acquire(ctx, 1, c, "r", true, redlease.WithMaxWait(5*faultTTL))
			require.NoError(t, err)
			fences = append(fences, l.Fence())
			require.NoError(t, afterRestart(t, lib, func() error { return h.Release(ctx, 1, l) }))
		}
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, fences, "fences continue across the restart")
		h.check(t, checks{fenceOrder: true, ownership: true, exclusion: true})
	})
}

// ---- 8. master and replica, replication cut ----

func TestFaultReplicationCut(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		master := servertest.Start(t, kind)
		link := servertest.StartProxy(t, master.Addr)
		host, port, _ := net.SplitHostPort(link.Addr())
		replica := servertest.Start(t, kind, "--replicaof", host, port)
		store := newResourceStore(t, h, kind)
		ctx := t.Context()
		servertest.WaitReplicated(t, master.Client(t))
		onMaster := lib.plain(t, master.Addr, false, faultOpts(h)...)

		a, err := h.Acquire(ctx, 1, onMaster, "r", false, redlease.WithReplicaAck(1, 300*time.Millisecond))
		require.NoError(t, err, "replicated while the link is up")
		require.NoError(t, store.write(ctx, 1, "r", a.Owner(), a.Fence()))
		require.NoError(t, h.Release(ctx, 1, a))

		link.Blackhole() // the replica hears nothing more
		_, err = h.Acquire(ctx, 1, onMaster, "r", false, redlease.WithReplicaAck(1, 300*time.Millisecond))
		require.ErrorIs(t, err, redlease.ErrNotReplicated, "with replica acknowledgement the acquire fails during the cut")
		b, err := h.Acquire(ctx, 2, onMaster, "r", false)
		require.NoError(t, err, "without it the master grants the lease")
		require.NoError(t, store.write(ctx, 2, "r", b.Owner(), b.Fence()))

		// Failover: the replica is promoted without the master's last writes.
		require.NoError(t, replica.Client(t).Do(ctx, "REPLICAOF", "NO", "ONE").Err())
		onReplica := lib.plain(t, replica.Addr, false, faultOpts(h)...)
		c, err := h.Acquire(ctx, 3, onReplica, "r", true, redlease.WithMaxWait(5*faultTTL))
		require.NoError(t, err)
		require.LessOrEqual(t, c.Fence(), b.Fence(), "observed: the promoted replica handed out a duplicate or regressed fence")
		require.ErrorIs(t, store.write(ctx, 3, "r", c.Owner(), c.Fence()), fencing.ErrStaleFence, "and the resource refused it")
		link.Heal()
		_ = h.Release(ctx, 2, b)
		_ = h.Release(ctx, 3, c)
		h.check(t, checks{}) // fences and ownership are not promised across failover; S5 is
	})
}

// ---- 9. Redis Cluster ----

func TestFaultCluster(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		nodes, cc := servertest.ClusterOf(t, kind, 3)
		store := newResourceStore(t, h, kind)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.Addr)
		}
		resources := make([]string, 12) // spread over the slots of all three masters
		for i := range resources {
			resources[i] = fmt.Sprint("shard-", i)
		}
		stop := make(chan struct{})
		done := startWorkers(ctx, stop, scale(4, 8), func() *redlease.Client {
			return lib.cluster(t, addrs, faultOpts(h)...)
		}, store, resources)
		time.Sleep(2 * faultTTL)

		restarted := time.Now()
		nodes[1].Restart(t) // a master loses its data mid-run and rejoins
		servertest.WaitFor(t, 30*time.Second, func() bool {
			info, err := cc.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		time.Sleep(time.Duration(scale(3, 30)) * faultTTL)
		close(stop)
		servertest.Recv(t, done, 2*time.Minute)
		require.Positive(t, h.acquiredSince(restarted), "the clients kept working after the restart")
		h.check(t, checks{fenceOrder: false, ownership: true}) // the restarted master lost its counters
	})
}

// ---- 10. Sentinel failover ----

func TestFaultSentinelFailover(t *testing.T) {
	eachFault(t, func(t *testing.T, lib library, kind servertest.Kind) {
		h := newHistory(t)
		master := servertest.Start(t, kind)
		mhost, mport, _ := net.SplitHostPort(master.Addr)
		replica := servertest.Start(t, kind, "--replicaof", mhost, mport)
		var sentinels []string
		for range 3 {
			conf := filepath.Join(t.TempDir(), "sentinel.conf")
			require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(
				"sentinel monitor mymaster %s %s 2\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
				mhost, mport)), 0o644))
			sentinels = append(sentinels, servertest.StartConf(t, kind, conf, "--sentinel").Addr)
		}
		store := newResourceStore(t, h, kind)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
		t.Cleanup(func() { _ = sc.Close() })
		servertest.WaitReplicated(t, master.Client(t))
		servertest.WaitFor(t, 30*time.Second, func() bool {
			replicas, err := sc.Replicas(ctx, "mymaster").Result()
			return err == nil && len(replicas) == 1
		})

		stop := make(chan struct{})
		done := startWorkers(ctx, stop, scale(4, 8), func() *redlease.Client {
			return lib.sentinel(t, sentinels, faultOpts(h)...)
		}, store, []string{"a", "b", "c"})
		time.Sleep(2 * faultTTL)
		require.NoError(t, sc.Failover(ctx, "mymaster").Err())
		servertest.WaitFor(t, 30*time.Second, func() bool {
			addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
			return err == nil && net.JoinHostPort(addr[0], addr[1]) == replica.Addr
		})
		failedOver := time.Now()
		time.Sleep(time.Duration(scale(3, 30)) * faultTTL)
		close(stop)
		servertest.Recv(t, done, 2*time.Minute)
		require.Positive(t, h.acquiredSince(failedOver), "the failover clients continued on the new master")

		// Fences may have gone back across the failover; the guard refused them.
		// Repair: advance each counter to the newest fence the resource accepted,
		// and the next holder writes again.
		c := lib.sentinel(t, sentinels, faultOpts(h)...)
		for _, r := range []string{"a", "b", "c"} {
			l, err := h.Acquire(ctx, 99, c, r, true, redlease.WithMaxWait(5*faultTTL))
			require.NoError(t, err)
			err = store.write(ctx, 99, r, l.Owner(), l.Fence())
			require.NoError(t, h.Release(ctx, 99, l))
			var stale *fencing.StaleFenceError
			if errors.As(err, &stale) {
				_, err = h.AdvanceFence(ctx, 99, c, r, stale.Newest)
				require.NoError(t, err)
				l, err = h.Acquire(ctx, 99, c, r, true, redlease.WithMaxWait(5*faultTTL))
				require.NoError(t, err)
				require.NoError(t, store.write(ctx, 99, r, l.Owner(), l.Fence()), "repaired: the next holder is accepted")
				require.NoError(t, h.Release(ctx, 99, l))
			} else {
				require.NoError(t, err)
			}
		}
		h.check(t, checks{}) // S5 holds on the resource history
	})
}
