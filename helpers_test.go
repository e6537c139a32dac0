package redlease

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// requireServersEnv, when set to a non-empty value (as .ci/run does), turns a
// missing redis-server into a test failure instead of a skip.
const requireServersEnv = "REDLEASE_REQUIRE_SERVERS"

func TestMain(m *testing.M) {
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

// runAfterAll runs afterAll's functions, last added first.
func runAfterAll() {
	afterAll.Lock()
	defer afterAll.Unlock()
	for i := len(afterAll.fns) - 1; i >= 0; i-- {
		afterAll.fns[i]()
	}
}

// checkLeaks reports goroutines that are still running limit after the tests
// ended. Background goroutines end by themselves, but not at once: an idle
// wake-up subscription lingers for 500ms.
func checkLeaks(limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		err := goleak.Find()
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// newMini starts a miniredis server and returns it with a client of it.
func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

// redisServer is a redis-server process started for one test on loopback.
type redisServer struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	bin  string
	argv []string
}

// startRedis starts redis-server from PATH on a free loopback port, with no
// persistence unless args say otherwise, and stops it when the test ends. A
// missing binary skips the test, or fails it when REDLEASE_REQUIRE_SERVERS is set.
func startRedis(t testing.TB, args ...string) *redisServer {
	t.Helper()
	return startRedisConf(t, "", args...)
}

// startRedisConf is startRedis with a config file (Sentinel needs one it can
// rewrite); conf may be empty.
func startRedisConf(t testing.TB, conf string, args ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(requireServersEnv) != "" {
			t.Fatalf("redis-server not found in PATH and %s is set", requireServersEnv)
		}
		t.Skip("redis-server not found in PATH; set " + requireServersEnv + "=1 to make this a failure")
	}
	dir := t.TempDir()
	var lastErr error
	for range 5 { // a port picked free may be taken before redis binds it
		port := freePort(t)
		s := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir}
		var argv []string
		if conf != "" {
			argv = append(argv, conf)
		}
		argv = append(argv,
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--dir", dir, "--save", "", "--appendonly", "no",
			"--repl-diskless-sync-delay", "0", // replicas sync at once, not after 5s
			"--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
		argv = append(argv, args...)
		s.bin, s.argv = bin, argv
		s.cmd = exec.Command(bin, argv...)
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
		s.stop()
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// startCluster starts a Redis Cluster of n masters (no replicas) on loopback
// and returns a cluster client of it.
func startCluster(t testing.TB, n int) ([]*redisServer, *redis.ClusterClient) {
	t.Helper()
	var nodes []*redisServer
	var addrs []string
	for range n {
		s := startRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf")
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range nodes { // every node must agree before clients route by slot
		waitFor(t, 20*time.Second, func() bool {
			info, err := newClient(t, s.Addr).ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	waitFor(t, 20*time.Second, func() bool {
		return cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}) == nil
	})
	return nodes, cc
}

// startSentinel starts a master, a replica and one Sentinel that monitors
// them as "mymaster", and returns a failover client.
func startSentinel(t testing.TB) (master, replica, sentinel *redisServer, rdb *redis.Client) {
	t.Helper()
	master = startRedis(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica = startRedis(t, "--replicaof", host, port)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"sentinel monitor mymaster %s %s 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
		host, port)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	sentinel = startRedisConf(t, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	t.Cleanup(func() { _ = sc.Close() })
	waitFor(t, 20*time.Second, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) == master.Addr
	})
	rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { _ = rdb.Close() })
	return master, replica, sentinel, rdb
}

// waitFor polls cond every 20ms until it holds, failing the test after limit.
func waitFor(t testing.TB, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) waitReady(limit time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restart kills the server (SIGKILL: no chance to save) and starts it again
// on the same port, directory and arguments.
func (s *redisServer) restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.cmd = exec.Command(s.bin, s.argv...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	if err := s.waitReady(10 * time.Second); err != nil {
		t.Fatalf("redis-server did not restart: %v", err)
	}
}

// signal sends sig (SIGSTOP, SIGCONT) to the server process.
func (s *redisServer) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (s *redisServer) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// Client returns a go-redis client of s, closed when the test ends.
func (s *redisServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, s.Addr)
}

func newClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// commandStats returns the calls per command from INFO commandstats.
func commandStats(t testing.TB, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.Atoi(v)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

// countingHook counts the commands a go-redis client sends, and, while
// loseReplies is positive, lets a command reach Redis and then reports it as
// failed with a timeout, as if its reply had been lost.
type countingHook struct {
	cmds        atomic.Int64
	loseReplies atomic.Int64
}

var errReplyLost = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		err := next(ctx, cmd)
		if err == nil && h.takeLoss() {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h *countingHook) takeLoss() bool {
	for {
		n := h.loseReplies.Load()
		if n <= 0 {
			return false
		}
		if h.loseReplies.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// waitDone waits up to limit for ctx to end and fails the test otherwise.
func waitDone(t testing.TB, ctx context.Context, limit time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("context not done after %v", limit)
	}
}

// recv receives from ch, failing the test if nothing arrives within limit.
func recv[T any](t testing.TB, ch <-chan T, limit time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("nothing received within %v", limit)
		var zero T
		return zero
	}
}

// waitReplicated waits until a replica of the master behind rdb acknowledges
// writes (WAIT). A replica reported online may not have acknowledged yet.
func waitReplicated(t testing.TB, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, func() bool {
		if err := rdb.Set(ctx, "replication-probe", time.Now().UnixNano(), 0).Err(); err != nil {
			return false
		}
		n, err := rdb.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n >= 1
	})
}
