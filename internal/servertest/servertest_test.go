package servertest

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// field returns name's value in the "name:value" lines of an INFO or
// CLUSTER INFO reply, "" when absent.
func field(t *testing.T, reply string, err error, name string) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return infoField(reply, name)
}

// infoServer returns name's value in s's INFO server.
func infoServer(t *testing.T, s *Server, name string) string {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "server").Result()
	return field(t, info, err, name)
}

// A port picked free can be bound by another server before the one
// started binds it: that one then answers, and must not pass for the
// server started.
func TestWaitReadyRefusesAnotherServersAnswer(t *testing.T) {
	other := Redis(t)
	s := &Server{Addr: other.Addr, bin: "sleep", argv: []string{"30"}} // a process that serves nothing
	s.cmd = s.command()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.waitReady(5 * time.Second); err == nil || !strings.Contains(err.Error(), "not by the server started") {
		t.Fatalf("waitReady = %v, want the other server's answer refused", err)
	}
}

func TestStartEachKind(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(string(k), func(t *testing.T) {
			s := Start(t, k)
			if s.Kind != k {
				t.Errorf("Kind = %q, want %q", s.Kind, k)
			}
			redisVersion := infoServer(t, s, "redis_version")
			valkeyVersion := infoServer(t, s, "valkey_version")
			t.Logf("redis_version %q, valkey_version %q", redisVersion, valkeyVersion)
			switch k {
			case RedisServer:
				if !strings.HasPrefix(redisVersion, "7.0.") || valkeyVersion != "" {
					t.Errorf("redis-server reports redis_version %q, valkey_version %q; want 7.0.x and none",
						redisVersion, valkeyVersion)
				}
			case Valkey:
				if valkeyVersion == "" || redisVersion == "" {
					t.Errorf("valkey-server reports redis_version %q, valkey_version %q; want both",
						redisVersion, valkeyVersion)
				}
			}
		})
	}
}

func TestClusterOfValkey(t *testing.T) {
	nodes, cc := ClusterOf(t, Valkey, 3)
	for _, s := range nodes {
		info, err := s.Client(t).ClusterInfo(context.Background()).Result()
		if state := field(t, info, err, "cluster_state"); state != "ok" {
			t.Errorf("%s: cluster_state %q", s.Addr, state)
		}
	}
	ctx := context.Background()
	if err := cc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := cc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
}

func TestSentinelOfValkey(t *testing.T) {
	master, _, _, rdb := SentinelOf(t, Valkey)
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := infoServer(t, master, "valkey_version"); v == "" {
		t.Errorf("master %s is not valkey-server", master.Addr)
	}
}

// A connection to RefusedAddr is refused, and no server can bind its port
// while the test runs.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close()
		t.Fatalf("listen on %s: the port was free", addr)
	}
}
