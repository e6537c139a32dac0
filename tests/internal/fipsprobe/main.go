// Command fipsprobe takes, renews and releases a lease, and makes a fenced
// write, through each client library redlease supports, on the Redis at
// its first argument. TestFIPSOnly runs it with GODEBUG=fips140=only, in
// which crypto/sha1 panics: a program that imports redlease, fencing and
// the adapters must start, and work, there.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/rueidislease"
	"github.com/redlease/redlease/valkeylease"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fipsprobe HOST:PORT")
		os.Exit(2)
	}
	addr := os.Args[1]
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	check("rueidis", err)
	defer rc.Close()
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	check("valkey-go", err)
	defer vc.Close()

	probe("go-redis", redlease.New(rdb, redlease.WithTTL(time.Second)), fencing.NewRedisGuard(rdb))
	probe("rueidis", rueidislease.New(rc, redlease.WithTTL(time.Second)), guard(rueidislease.Driver(rc)))
	probe("valkey-go", valkeylease.New(vc, redlease.WithTTL(time.Second)), guard(valkeylease.Driver(vc)))
}

func guard(d driver.Driver) *fencing.RedisGuard { return fencing.NewRedisGuardWithDriver(d) }

// probe takes, renews and releases a lease of its own through c, writing
// through g with its fence, and prints what it got.
func probe(name string, c *redlease.Client, g *fencing.RedisGuard) {
	ctx := context.Background()
	l, err := c.Acquire(ctx, "fips:"+name)
	check(name+": acquire", err)
	check(name+": refresh", l.Refresh(ctx))
	check(name+": fenced write", g.Set(ctx, "fips:{"+name+"}:data", "v", 0, l.Fence(), l.Owner()))
	check(name+": release", l.Release(ctx))
	check(name+": close", c.Close(ctx))
	fmt.Printf("%s: fence %d taken, renewed, written with, released\n", name, l.Fence())
}

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}
