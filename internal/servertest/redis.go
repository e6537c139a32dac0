package servertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Mini starts a miniredis server and returns it with a client of it; both
// are closed when the test ends.
func Mini(tb testing.TB) (*miniredis.Miniredis, *redis.Client) {
	tb.Helper()
	mr := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

// Kind is a server implementation that the Redis starters run: its binaries
// are Kind+"-server" and Kind+"-cli", and they take the same flags.
type Kind string

const (
	RedisServer Kind = "redis"  // redis-server (Debian: 7.0.15)
	Valkey      Kind = "valkey" // valkey-server, built by ../shared/servers/build-valkey.sh
)

// Kinds returns every Kind, for a test to run on each:
//
//	for _, k := range servertest.Kinds() { t.Run(string(k), ...) }
func Kinds() []Kind { return []Kind{RedisServer, Valkey} }

// lookPath finds k's binary named k+"-"+role in PATH, or skips (fails)
// the test through missing.
func (k Kind) lookPath(tb testing.TB, role string) string {
	tb.Helper()
	name := string(k) + "-" + role
	bin, err := exec.LookPath(name)
	if err != nil {
		what := name + " not found in PATH"
		if k == Valkey { // Debian has no package: it is built from source
			what += ": build it with ../shared/servers/build-valkey.sh"
		}
		missing(tb, what)
	}
	return bin
}

// Server is a redis-server (or valkey-server) process started for one test
// on loopback.
type Server struct {
	Addr string
	Dir  string
	Kind Kind
	cmd  *exec.Cmd
	bin  string
	argv []string
}

// Redis starts redis-server from PATH on a free loopback port, with no
// persistence unless args say otherwise, and stops it when the test ends.
func Redis(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return StartConf(tb, RedisServer, "", args...)
}

// RedisConf is Redis with a config file (Sentinel needs one it can
// rewrite); conf may be empty.
func RedisConf(tb testing.TB, conf string, args ...string) *Server {
	tb.Helper()
	return StartConf(tb, RedisServer, conf, args...)
}

// Start is Redis for a server of kind k.
func Start(tb testing.TB, k Kind, args ...string) *Server {
	tb.Helper()
	return StartConf(tb, k, "", args...)
}

// StartConf is RedisConf for a server of kind k.
func StartConf(tb testing.TB, k Kind, conf string, args ...string) *Server {
	tb.Helper()
	bin := k.lookPath(tb, "server")
	dir := tb.TempDir()
	var lastErr error
	for range 5 { // a port picked free may be taken before the server binds it
		port := FreePort(tb)
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, Kind: k}
		var argv []string
		if conf != "" {
			argv = append(argv, conf)
		}
		argv = append(argv,
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--dir", dir, "--save", "", "--appendonly", "no",
			"--repl-diskless-sync-delay", "0", // replicas sync at once, not after 5s
			"--logfile", filepath.Join(dir, fmt.Sprintf("%s-%d.log", k, port)))
		argv = append(argv, args...)
		s.bin, s.argv = bin, argv
		s.cmd = s.command()
		if err := s.cmd.Start(); err != nil {
			tb.Fatalf("start %s: %v", bin, err)
		}
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		s.Stop()
	}
	tb.Fatalf("%s did not start: %v", bin, lastErr)
	return nil
}

// Cluster starts a Redis Cluster of n masters (no replicas) on loopback
// and returns its nodes and a cluster client of it.
func Cluster(tb testing.TB, n int) ([]*Server, *redis.ClusterClient) {
	tb.Helper()
	return ClusterOf(tb, RedisServer, n)
}

// ClusterOf is Cluster of servers of kind k.
func ClusterOf(tb testing.TB, k Kind, n int) ([]*Server, *redis.ClusterClient) {
	tb.Helper()
	var nodes []*Server
	var addrs []string
	for range n {
		s := Start(tb, k, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf")
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr)
	}
	cli := k.lookPath(tb, "cli")
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s --cluster create: %v\n%s", cli, err, out)
	}
	for _, s := range nodes { // every node must agree before clients route by slot
		WaitFor(tb, 20*time.Second, func() bool {
			info, err := s.Client(tb).ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	WaitFor(tb, 20*time.Second, func() bool {
		return cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}) == nil
	})
	return nodes, cc
}

// Sentinel starts a master, a replica and one Sentinel that monitors them
// as "mymaster", and returns them with a failover client.
func Sentinel(tb testing.TB) (master, replica, sentinel *Server, rdb *redis.Client) {
	tb.Helper()
	return SentinelOf(tb, RedisServer)
}

// SentinelOf is Sentinel with servers of kind k.
func SentinelOf(tb testing.TB, k Kind) (master, replica, sentinel *Server, rdb *redis.Client) {
	tb.Helper()
	master = Start(tb, k)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica = Start(tb, k, "--replicaof", host, port)
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"sentinel monitor mymaster %s %s 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
		host, port)), 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	sentinel = StartConf(tb, k, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	tb.Cleanup(func() { _ = sc.Close() })
	WaitFor(tb, 20*time.Second, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) == master.Addr
	})
	rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr}})
	tb.Cleanup(func() { _ = rdb.Close() })
	return master, replica, sentinel, rdb
}

// waitReady waits until s's process answers PING on s.Addr (not LOADING
// any more, after a restart). The server that answers must be that process
// (INFO's process_id): a port picked free may be bound by another test's
// server before s's process binds it, and that server would answer in its
// place while s's process exits.
func (s *Server) waitReady(limit time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		var info string
		if err == nil {
			info, err = rdb.Info(ctx, "server").Result()
		}
		cancel()
		if err == nil {
			if pid := infoField(info, "process_id"); pid != strconv.Itoa(s.cmd.Process.Pid) {
				return fmt.Errorf("%s is served by process %s, not by the server started, %d", s.Addr, pid, s.cmd.Process.Pid)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// infoField returns the value of field in the text of INFO.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Restart kills the server (SIGKILL: no chance to save) and starts it again
// on the same port, directory and arguments.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	s.cmd = s.command()
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("restart %s: %v", s.bin, err)
	}
	if err := s.waitReady(10 * time.Second); err != nil {
		tb.Fatalf("%s did not restart: %v", s.bin, err)
	}
}

// command is the server's command line, for a process that dies with the
// test binary: one killed (a timeout, ^C) leaves no server behind.
func (s *Server) command() *exec.Cmd {
	cmd := exec.Command(s.bin, s.argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Signal sends sig (SIGSTOP, SIGCONT) to the server process.
func (s *Server) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
}

// Stop kills the server.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// Client returns a go-redis client of s, closed when the test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	return NewClient(tb, s.Addr)
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// NewClient returns a go-redis client of addr, closed when the test ends.
func NewClient(tb testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// CommandStats returns the calls per command from INFO commandstats.
func CommandStats(tb testing.TB, rdb *redis.Client) map[string]int {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
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

// WaitReplicated waits until a replica of the master behind rdb acknowledges
// writes (WAIT). A replica reported online may not have acknowledged yet.
func WaitReplicated(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	WaitFor(tb, 30*time.Second, func() bool {
		if err := rdb.Set(ctx, "replication-probe", time.Now().UnixNano(), 0).Err(); err != nil {
			return false
		}
		n, err := rdb.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n >= 1
	})
}

// CountingHook is a go-redis hook that counts the commands a client sends,
// and, while LoseReplies is positive, lets a command reach Redis and then
// reports it as failed with a timeout, as if its reply had been lost.
type CountingHook struct {
	Cmds        atomic.Int64
	LoseReplies atomic.Int64
}

// ErrReplyLost is the error of a command whose reply CountingHook lost.
var ErrReplyLost = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// DialHook implements redis.Hook.
func (h *CountingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
//
// A new connection's handshake (HELLO, CLIENT SETINFO) is neither counted
// nor lost: go-redis opens connections when it likes, and a Client's
// subscriptions (its waiters', its break channel's) open theirs on a
// goroutine of their own, whose handshake would take a loss meant for a
// request of the test's.
func (h *CountingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		h.Cmds.Add(1)
		err := next(ctx, cmd)
		if err == nil && h.takeLoss() {
			cmd.SetErr(ErrReplyLost)
			return ErrReplyLost
		}
		return err
	}
}

func (h *CountingHook) takeLoss() bool {
	for {
		n := h.LoseReplies.Load()
		if n <= 0 {
			return false
		}
		if h.LoseReplies.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *CountingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !handshake(cmd) {
				h.Cmds.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is part of a new connection's handshake.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client":
		return true
	}
	return false
}
