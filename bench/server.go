package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the redis-server every scenario runs against: one process on
// loopback, without persistence.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	info *redis.Client // for INFO and FLUSHALL; not counted
}

func startServer(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "redlease-bench-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.info = redis.NewClient(&redis.Options{Addr: s.addr})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.info.Ping(ctx).Err()
		cancel()
		if err == nil && pinned.on {
			// After it answers, so that every thread it starts at startup is pinned.
			if err := pinServer(s.cmd.Process.Pid); err != nil {
				s.stop()
				return nil, err
			}
		}
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server did not start: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.info != nil {
		_ = s.info.Close()
	}
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_ = os.RemoveAll(s.dir)
}

// client returns a new go-redis client of the server whose commands are
// counted by hook (which may be nil).
func (s *server) client(hook *countingHook, poolSize int) *redis.Client {
	return s.clientWith(&redis.Options{PoolSize: poolSize}, hook)
}

// clientOf is client for the go-redis client im asks for.
func (s *server) clientOf(im impl, hook *countingHook, poolSize int) *redis.Client {
	return s.clientWith(&redis.Options{PoolSize: poolSize, ContextTimeoutEnabled: im.timeouts}, hook)
}

func (s *server) clientWith(opt *redis.Options, hook *countingHook) *redis.Client {
	opt.Addr = s.addr
	rdb := redis.NewClient(opt)
	if hook != nil {
		rdb.AddHook(hook)
	}
	return rdb
}

func (s *server) flush(ctx context.Context) error {
	return s.info.FlushAll(ctx).Err()
}

func (s *server) version(ctx context.Context) string {
	return s.infoField(ctx, "server", "redis_version")
}

func (s *server) infoField(ctx context.Context, section, field string) string {
	info, err := s.info.Info(ctx, section).Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return "?"
}

// serverStats is a snapshot of the server's command counts and CPU time.
type serverStats struct {
	calls   int64         // commands executed, including those called from scripts; without INFO
	pexpire int64         // of which PEXPIRE: in the scale part, one per renewal
	cpu     time.Duration // user + system
}

func (s *server) stats(ctx context.Context) serverStats {
	var st serverStats
	info, err := s.info.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return st
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			if name == "cmdstat_info" {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.calls += n
					if name == "cmdstat_pexpire" {
						st.pexpire += n
					}
				}
			}
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, _ := strconv.ParseFloat(rest, 64)
			st.cpu += time.Duration(f * float64(time.Second))
		}
	}
	return st
}

func (a serverStats) sub(b serverStats) serverStats {
	return serverStats{calls: a.calls - b.calls, pexpire: a.pexpire - b.pexpire, cpu: a.cpu - b.cpu}
}

// countingHook counts the commands go-redis clients send, pipelined ones
// included.
type countingHook struct{ cmds atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
