// Package goredis is redlease's driver on go-redis: a plain client, a
// Sentinel failover client or a cluster client. It is not part of the API:
// redlease.New and the constructors of package fencing that take a go-redis
// client use it.
package goredis

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
)

// Driver is the driver on a go-redis client.
type Driver struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, if it is one
	ctxTime bool                 // ContextTimeoutEnabled
	// longest is the longest a request may take by the client's own
	// timeouts, retries included; 0 if they do not bound it.
	longest time.Duration
	subs    subs // see pubsub.go
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.DeadlineKeeper = (*Driver)(nil)
	_ driver.Addresser      = (*Driver)(nil)
)

// ErrRing is the error of New for a *redis.Ring.
var ErrRing = errors.New("a *redis.Ring is not supported: it spreads a resource's keys (its lease and its " +
	"slot's fence counter) and wake-up channels over shards that no one script can reach; use a client " +
	"per Redis deployment (redis.NewClient, NewFailoverClient or NewClusterClient)")

// New returns the driver on rdb. A *redis.Ring is refused with ErrRing.
func New(rdb redis.UniversalClient) (*Driver, error) {
	d := &Driver{rdb: rdb}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		d.cluster, d.ctxTime = c, c.Options().ContextTimeoutEnabled
	case *redis.Client:
		d.ctxTime, d.longest = c.Options().ContextTimeoutEnabled, longestRequest(c.Options())
	case *redis.Ring:
		return nil, ErrRing
	}
	d.subs.nodes = map[string]*nodeSub{}
	return d, nil
}

// command builds the go-redis command of c: EVALSHA and its hash, or EVAL
// and its source. The keys and arguments are passed by pointer, which a
// slice of any holds without allocating.
func command(ctx context.Context, c *driver.Call) *redis.Cmd {
	words := make([]any, 0, 3+len(c.Keys)+len(c.Args))
	if c.Hash != "" {
		words = append(words, "evalsha", &c.Hash)
	} else {
		words = append(words, "eval", &c.Source)
	}
	words = append(words, len(c.Keys))
	for i := range c.Keys {
		words = append(words, &c.Keys[i])
	}
	for i := range c.Args {
		words = append(words, &c.Args[i])
	}
	cmd := redis.NewCmd(ctx, words...)
	cmd.SetFirstKeyPos(3) // for Cluster routing
	return cmd
}

// replyOf reads a script command's reply.
func replyOf(cmd *redis.Cmd) driver.Reply {
	switch err := cmd.Err(); {
	case errors.Is(err, redis.Nil):
		return driver.Reply{}
	case err != nil:
		return driver.Reply{Err: err}
	}
	return driver.Reply{Value: cmd.Val()}
}

// Eval implements driver.Driver.
func (d *Driver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	cmd := command(ctx, &c)
	_ = d.rdb.Process(ctx, cmd)
	return replyOf(cmd)
}

// EvalMany implements driver.Driver: one pipeline, which go-redis splits by
// node on Cluster; for one call too, as a combined batch of one was sent
// when a plain command did worse (docs/PERFORMANCE.md).
func (d *Driver) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := d.rdb.Pipeline()
	for i := range calls {
		cmds[i] = command(ctx, &calls[i])
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		replies[i] = replyOf(cmd)
	}
}

// EvalWait implements driver.Driver.
func (d *Driver) EvalWait(ctx context.Context, c driver.Call, replicas int, timeout time.Duration) (driver.Reply, int64) {
	conn := redis.Cmdable(d.rdb)
	if d.cluster != nil {
		master, err := d.cluster.MasterForKey(ctx, c.Keys[0])
		if err != nil {
			return driver.Reply{Err: err}, 0
		}
		conn = master
	}
	pipe := conn.Pipeline()
	cmd := command(ctx, &c)
	_ = pipe.Process(ctx, cmd)
	wait := waitCmd(ctx, pipe, replicas, timeout)
	_, _ = pipe.Exec(ctx)
	r := replyOf(cmd)
	if r.Err == nil && wait.Err() != nil {
		r.Err = wait.Err()
	}
	return r, wait.Val()
}

// waitCmd queues WAIT on pipe. go-redis's own Wait, which extends the read
// timeout by the WAIT timeout, is on the concrete pipeline type only.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, n int, timeout time.Duration) *redis.IntCmd {
	if p, ok := pipe.(interface {
		Wait(context.Context, int, time.Duration) *redis.IntCmd
	}); ok {
		return p.Wait(ctx, n, timeout)
	}
	cmd := redis.NewIntCmd(ctx, "wait", n, timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// Ping implements driver.Driver with EXISTS key, routed as the script
// calls on key are.
func (d *Driver) Ping(ctx context.Context, key string) error {
	return d.rdb.Exists(ctx, key).Err()
}

// Scan implements driver.Driver.
func (d *Driver) Scan(ctx context.Context, match string, count int, fn func(keys []string) error) error {
	nodes, err := d.masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		// Bounded: SCAN returns cursor 0 after one pass over the keyspace.
		for cursor := uint64(0); ; {
			keys, next, err := n.Scan(ctx, cursor, match, int64(count)).Result()
			if err != nil {
				return err
			}
			if err := fn(keys); err != nil {
				return err
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return nil
}

// masters returns the servers to scan: the client itself, or every master
// of a cluster, in address order.
func (d *Driver) masters(ctx context.Context) ([]redis.Cmdable, error) {
	if d.cluster == nil {
		return []redis.Cmdable{d.rdb}, nil
	}
	var mu sync.Mutex
	var masters []*redis.Client
	err := d.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(masters, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	nodes := make([]redis.Cmdable, len(masters))
	for i, m := range masters {
		nodes[i] = m
	}
	return nodes, nil
}

// Sharded implements driver.Driver: true on Cluster.
func (d *Driver) Sharded() bool { return d.cluster != nil }

// Classify implements driver.Driver. Besides an error reply (refused),
// the failures that happen before anything is written to the connection —
// a refused or failed dial, a pool that gave no connection, a closed client
// — are not sent; the rest may have reached Redis.
func (d *Driver) Classify(err error) driver.ErrorClass {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr):
		return driver.Refused
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.As(err, &op) && op.Op == "dial":
		return driver.NotSent
	}
	return driver.Unknown
}

// KeepsDeadline implements driver.DeadlineKeeper: go-redis ends a request at
// its context's deadline with ContextTimeoutEnabled; otherwise only its own
// timeouts end it.
func (d *Driver) KeepsDeadline(t time.Time) bool {
	return d.ctxTime || d.longest > 0 && time.Until(t) > d.longest
}

// longestRequest bounds how long a go-redis client takes over one request
// by its own timeouts: a wait for a connection (or up to five dials), a
// write, a read and a backoff, per try. 0 if some timeout is off.
func longestRequest(o *redis.Options) time.Duration {
	if o.PoolTimeout <= 0 || o.DialTimeout <= 0 || o.WriteTimeout <= 0 || o.ReadTimeout <= 0 || o.MaxRetries < 0 {
		return 0
	}
	try := max(o.PoolTimeout, 5*o.DialTimeout) + o.WriteTimeout + o.ReadTimeout + o.MaxRetryBackoff
	return try * time.Duration(o.MaxRetries+1)
}

// Addr implements driver.Addresser: the client's address or the cluster's
// seeds; "" for a Sentinel failover client, whose options do not say.
func (d *Driver) Addr() string {
	switch c := d.rdb.(type) {
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Client:
		if a := c.Options().Addr; a != "FailoverClient" { // what go-redis names a Sentinel client's
			return a
		}
	}
	return ""
}

// Client returns the go-redis client the driver runs on.
func (d *Driver) Client() redis.UniversalClient { return d.rdb }
