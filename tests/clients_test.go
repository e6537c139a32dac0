package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/rueidislease"
	"github.com/redlease/redlease/valkeylease"
)

// A library is a Redis client library that redlease runs on, and how the
// suite makes a redlease Client on it. The clients it makes are closed when
// the test ends.
type library struct {
	name string
	// plain returns a Client on the server at addr; with noRetry, a client
	// that does not send a request again after its reply was lost (go-redis
	// resends after a reset unless MaxRetries is -1; rueidis and valkey-go
	// never resend a script), and that sends its requests one after another
	// on one connection, so that the next reply a proxy drops is that of
	// its next request (rueidis and valkey-go otherwise spread them over
	// connections, as many as GOMAXPROCS makes, each dialed when a request
	// first picks it).
	plain func(tb testing.TB, addr string, noRetry bool, opts ...redlease.Option) *redlease.Client
	// resends tells whether a client that plain returns without noRetry
	// sends a script again after its reply was lost (go-redis does).
	resends bool
	// cluster returns a Client on the Redis Cluster of addrs.
	cluster func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client
	// sentinel returns a Client on the master "mymaster" of the Sentinels
	// at addrs.
	sentinel func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client
	// driver returns the driver on the server at addr, for package fencing.
	driver func(tb testing.TB, addr string) driver.Driver
}

// libraries are the client libraries of the suite.
var libraries = []library{
	{
		name:    "go-redis",
		resends: true,
		plain: func(tb testing.TB, addr string, noRetry bool, opts ...redlease.Option) *redlease.Client {
			o := &redis.Options{Addr: addr}
			if noRetry {
				o.MaxRetries = -1
			}
			return closing(tb, redlease.New(goRedis(tb, redis.NewClient(o)), opts...))
		},
		cluster: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			return closing(tb, redlease.New(goRedis(tb, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})), opts...))
		},
		sentinel: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: addrs})
			return closing(tb, redlease.New(goRedis(tb, rdb), opts...))
		},
		driver: func(tb testing.TB, addr string) driver.Driver {
			// go-redis's driver is the core's own, reached through the
			// fencing package's go-redis constructors; the suite uses the
			// same driver as a Client would.
			return goRedisDriver(tb, addr)
		},
	},
	{
		name: "rueidis",
		plain: func(tb testing.TB, addr string, noRetry bool, opts ...redlease.Option) *redlease.Client {
			return closing(tb, rueidislease.New(rueidisClient(tb, rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: noRetry, PipelineMultiplex: oneConn(noRetry)}), opts...))
		},
		cluster: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			return closing(tb, rueidislease.New(rueidisClient(tb, rueidis.ClientOption{InitAddress: addrs}), opts...))
		},
		sentinel: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			o := rueidis.ClientOption{InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: "mymaster"}}
			return closing(tb, rueidislease.New(rueidisClient(tb, o), opts...))
		},
		driver: func(tb testing.TB, addr string) driver.Driver {
			return rueidislease.Driver(rueidisClient(tb, rueidis.ClientOption{InitAddress: []string{addr}}))
		},
	},
	{
		name: "valkey-go",
		plain: func(tb testing.TB, addr string, noRetry bool, opts ...redlease.Option) *redlease.Client {
			return closing(tb, valkeylease.New(valkeyClient(tb, valkey.ClientOption{InitAddress: []string{addr}, DisableRetry: noRetry, PipelineMultiplex: oneConn(noRetry)}), opts...))
		},
		cluster: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			return closing(tb, valkeylease.New(valkeyClient(tb, valkey.ClientOption{InitAddress: addrs}), opts...))
		},
		sentinel: func(tb testing.TB, addrs []string, opts ...redlease.Option) *redlease.Client {
			o := valkey.ClientOption{InitAddress: addrs, Sentinel: valkey.SentinelOption{MasterSet: "mymaster"}}
			return closing(tb, valkeylease.New(valkeyClient(tb, o), opts...))
		},
		driver: func(tb testing.TB, addr string) driver.Driver {
			return valkeylease.Driver(valkeyClient(tb, valkey.ClientOption{InitAddress: []string{addr}}))
		},
	},
}

// oneConn is the PipelineMultiplex of rueidis and valkey-go that makes them
// pipeline on one connection, when one is asked for (0: their default).
func oneConn(one bool) int {
	if one {
		return -1
	}
	return 0
}

// each runs f as a subtest per library and server kind, named
// "<library>/<kind>" ("rueidis/valkey").
func each(t *testing.T, f func(t *testing.T, lib library, kind servertest.Kind)) {
	for _, lib := range libraries {
		t.Run(lib.name, func(t *testing.T) {
			for _, k := range servertest.Kinds() {
				t.Run(string(k), func(t *testing.T) { f(t, lib, k) })
			}
		})
	}
}

// resource returns a resource name of the test's own.
func resource(t testing.TB, suffix string) string {
	return strings.ReplaceAll(t.Name(), "/", ":") + ":" + suffix
}

// closing returns c, closed when the test ends.
func closing(tb testing.TB, c *redlease.Client) *redlease.Client {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx) // leases a test left lapse as lost: not the test's error
	})
	return c
}

// goRedis returns rdb, closed when the test ends.
func goRedis[C interface{ Close() error }](tb testing.TB, rdb C) C {
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func rueidisClient(tb testing.TB, o rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatalf("rueidis: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

func valkeyClient(tb testing.TB, o valkey.ClientOption) valkey.Client {
	tb.Helper()
	c, err := valkey.NewClient(o)
	if err != nil {
		tb.Fatalf("valkey-go: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// goRedisDriver returns the core's go-redis driver on the server at addr.
func goRedisDriver(tb testing.TB, addr string) driver.Driver {
	tb.Helper()
	d, err := goredis.New(goRedis(tb, redis.NewClient(&redis.Options{Addr: addr})))
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
