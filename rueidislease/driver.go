package rueidislease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
)

// New returns a redlease Client that takes leases through client:
// redlease.NewWithDriver(Driver(client), opts...). The Client does not
// close client. A nil client makes every call return an error matching
// redlease.ErrInvalidArgument.
func New(client rueidis.Client, opts ...redlease.Option) *redlease.Client {
	return redlease.NewWithDriver(Driver(client), opts...)
}

// Driver returns the driver on client, for redlease.NewWithDriver and for
// package fencing's NewRedisGuardWithDriver, NewRedisStoreWithDriver and
// Script.RunWithDriver. It does no I/O. It is nil for a nil client (the
// constructors that take it then fail every call).
func Driver(client rueidis.Client) driver.Driver {
	if client == nil {
		return nil
	}
	d := &rdriver{client: client, cluster: client.Mode() == rueidis.ClientModeCluster}
	if !d.cluster {
		d.pubsub = &pubsub{client: client}
	}
	return d
}

// rdriver is the driver on a rueidis client. It holds no lock of its own:
// the client is safe for concurrent use, and so is the driver.
//
// Every request goes through the client's Do and DoMulti, never DoCache or
// DoMultiCache: client-side caching would answer from a copy of a key that
// changes on the server, under scripts, and only a round trip tells a
// lease's state.
type rdriver struct {
	client  rueidis.Client
	cluster bool    // Redis Cluster: shard channels, and Scan over the masters
	pubsub  *pubsub // the subscriptions' connection; nil on Cluster (subscribe.go)
}

var (
	_ driver.Driver     = (*rdriver)(nil)
	_ driver.Addresser  = (*rdriver)(nil)
	_ driver.LateSender = (*rdriver)(nil)
)

// SendsLate implements driver.LateSender: a request that rueidis has queued
// is written even after its caller stopped waiting, and a later one may go
// out first on another of the client's connections.
func (d *rdriver) SendsLate() bool { return true }

// command builds the command of c: EVALSHA and its hash, or EVAL and its
// source (never rueidis.NewLuaScript, which computes the SHA-1 of a script
// when it is made and so panics in FIPS 140-only mode; redlease knows the
// hash, from itself or from the server). The builder copies the keys and
// arguments. On Cluster it panics when the keys are in different slots
// (Redis would answer CROSSSLOT): that is an error of the call, nothing is
// sent.
func (d *rdriver) command(c *driver.Call) (cmd rueidis.Completed, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &notSent{fmt.Errorf("rueidislease: cannot build the script call on keys %q: %v", c.Keys, v)}
		}
	}()
	b := d.client.B()
	n := int64(len(c.Keys))
	if c.Hash != "" {
		return b.Evalsha().Sha1(c.Hash).Numkeys(n).Key(c.Keys...).Arg(c.Args...).Build(), nil
	}
	return b.Eval().Script(c.Source).Numkeys(n).Key(c.Keys...).Arg(c.Args...).Build(), nil
}

// Eval implements driver.Driver with Do. Concurrent calls share round trips
// through the client's auto-pipelining, and rueidis does not retry EVAL or
// EVALSHA (see the package documentation).
func (d *rdriver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	if err := ctx.Err(); err != nil {
		return driver.Reply{Err: &notSent{err}}
	}
	cmd, err := d.command(&c)
	if err != nil {
		return driver.Reply{Err: err}
	}
	return replyOf(d.client.Do(ctx, cmd))
}

// EvalMany implements driver.Driver with DoMulti: one pipeline, which
// rueidis splits by node on Cluster (sending to the nodes at once, and
// following MOVED and ASK call by call). A call without keys goes on its
// own, with Do: rueidis refuses to mix one with calls of several slots.
func (d *rdriver) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	if err := ctx.Err(); err != nil {
		for i := range replies {
			replies[i] = driver.Reply{Err: &notSent{err}}
		}
		return
	}
	cmds := make(rueidis.Commands, 0, len(calls))
	index := make([]int, 0, len(calls)) // of the call of cmds[j]
	for i := range calls {
		if d.cluster && len(calls[i].Keys) == 0 {
			replies[i] = d.Eval(ctx, calls[i])
			continue
		}
		cmd, err := d.command(&calls[i])
		if err != nil {
			replies[i] = driver.Reply{Err: err}
			continue
		}
		cmds = append(cmds, cmd)
		index = append(index, i)
	}
	if len(cmds) == 0 {
		return
	}
	for j, r := range d.client.DoMulti(ctx, cmds...) {
		replies[index[j]] = replyOf(r)
	}
}

// EvalWait implements driver.Driver: the script and WAIT in one DoMulti on
// one connection. WAIT is a blocking command to rueidis, so the pair goes
// on a connection of the client's blocking pool, taken with ctx, and the
// client's ConnWriteTimeout does not cut WAIT's timeout short.
//
// On Cluster the pair goes through a dedicated client (Dedicate), which
// takes its connection from the master that serves the slot of its first
// keyed command (the script's: WAIT has no key), by the client's slot map,
// with ctx; unlike DoMulti it does not follow MOVED, which would send the
// script to another node than WAIT. A MOVED reply is then the script's
// error: it did not run. Elsewhere a plain DoMulti does it: a dedicated
// client of a single-server client takes its connection without a context.
// (When ctx has no deadline, rueidis reads the pair's replies on a
// goroutine of the connection's, and cleans the dedicated connection up
// with one more round trip when it is given back.)
func (d *rdriver) EvalWait(ctx context.Context, c driver.Call, replicas int, timeout time.Duration) (driver.Reply, int64) {
	if err := ctx.Err(); err != nil {
		return driver.Reply{Err: &notSent{err}}, 0
	}
	cmd, err := d.command(&c)
	if err != nil {
		return driver.Reply{Err: err}, 0
	}
	wait := d.client.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
	var rs []rueidis.RedisResult
	if d.cluster {
		dc, release := d.client.Dedicate()
		rs = dc.DoMulti(ctx, cmd, wait)
		release()
	} else {
		rs = d.client.DoMulti(ctx, cmd, wait)
	}
	r := replyOf(rs[0])
	w := replyOf(rs[1])
	acked, _ := w.Value.(int64)
	if r.Err == nil && w.Err != nil {
		r.Err = w.Err
	}
	return r, acked
}

// Ping implements driver.Driver with EXISTS key, built as a command of no
// particular kind rather than as EXISTS, which rueidis marks read-only: a
// read-only command may go to a replica (ClientOption.SendToReplicas) and
// be retried, and Ping must reach the node that a script call on key
// reaches, as the script call would.
func (d *rdriver) Ping(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return &notSent{err}
	}
	return errorOf(d.client.Do(ctx, d.client.B().Arbitrary("EXISTS").Keys(key).Build()))
}

// Scan implements driver.Driver. On Cluster it fails if a node that the
// client knows does not answer ROLE, a replica too: it cannot tell then
// whether the node is a master whose keys it would miss.
func (d *rdriver) Scan(ctx context.Context, match string, count int, fn func(keys []string) error) error {
	nodes, err := d.masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		// Bounded: SCAN returns cursor 0 after one pass over the keyspace.
		for cursor := uint64(0); ; {
			r := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(int64(count)).Build())
			if err := errorOf(r); err != nil {
				return err
			}
			e, err := r.AsScanEntry()
			if err != nil {
				return err
			}
			if err := fn(e.Elements); err != nil {
				return err
			}
			if e.Cursor == 0 {
				break
			}
			cursor = e.Cursor
		}
	}
	return nil
}

// masters returns the servers to scan: the client itself, or the masters
// of a cluster in address order: the nodes that the client knows (Nodes)
// whose ROLE is master.
func (d *rdriver) masters(ctx context.Context) ([]rueidis.Client, error) {
	if !d.cluster {
		return []rueidis.Client{d.client}, nil
	}
	type node struct {
		addr string
		c    rueidis.Client
	}
	var masters []node
	for addr, c := range d.client.Nodes() {
		r := c.Do(ctx, c.B().Role().Build())
		if err := errorOf(r); err != nil {
			return nil, fmt.Errorf("rueidislease: ROLE of %s: %w", addr, err)
		}
		role, err := r.ToArray()
		if err != nil || len(role) == 0 {
			return nil, fmt.Errorf("rueidislease: ROLE of %s: unexpected reply %v", addr, r.String())
		}
		if s, _ := role[0].ToString(); s == "master" {
			masters = append(masters, node{addr, c})
		}
	}
	slices.SortFunc(masters, func(a, b node) int { return cmp.Compare(a.addr, b.addr) })
	out := make([]rueidis.Client, len(masters))
	for i, m := range masters {
		out[i] = m.c
	}
	return out, nil
}

// Sharded implements driver.Driver: true on Redis Cluster.
func (d *rdriver) Sharded() bool { return d.cluster }

// Addr implements driver.Addresser: the addresses of the nodes the client
// knows, sorted.
func (d *rdriver) Addr() string {
	addrs := slices.Sorted(maps.Keys(d.client.Nodes()))
	return strings.Join(addrs, ",")
}

// Classify implements driver.Driver. An error reply is refused. Not sent
// are the failures that come before anything is written: a call that the
// driver did not pass on (its context had ended; keys in several slots), a
// dial that failed (a refused connection, a dial timeout: rueidis reports
// the dial's error when no connection could be made), a slot that no node
// serves (ErrNoSlot), a closed client (ErrClosing). Everything else —
// timeouts, a connection reset, a context that ended while the request was
// queued or on the network — may have reached Redis.
//
// One case of ErrClosing is not exact: rueidis's Close waits up to a second
// for the replies of requests in flight, then fails those left, written or
// not, with ErrClosing. Closing the rueidis client under redlease while a
// server does not answer can thus report a request that reached Redis as
// not sent; close the redlease Client first.
func (d *rdriver) Classify(err error) driver.ErrorClass {
	var rerr *rueidis.RedisError
	var ns *notSent
	var op *net.OpError
	switch {
	case errors.As(err, &rerr) && !rerr.IsNil():
		return driver.Refused
	case errors.As(err, &ns), errors.Is(err, rueidis.ErrClosing), errors.Is(err, rueidis.ErrNoSlot),
		errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &op) && op.Op == "dial":
		return driver.NotSent
	}
	return driver.Unknown
}

// notSent is the error of a call that the driver did not pass to the
// client: its context had ended, or it could not be built.
type notSent struct{ err error }

func (e *notSent) Error() string { return e.err.Error() }
func (e *notSent) Unwrap() error { return e.err }

// replyError is an error reply of Redis. Its message is the reply's text
// as Redis sent it, without the leading '-' (rueidis's own error drops an
// "ERR " prefix, which redlease reads: "ERR max number of clients
// reached"); it unwraps to rueidis's *RedisError.
type replyError struct {
	msg string
	err *rueidis.RedisError
}

func (e *replyError) Error() string { return e.msg }
func (e *replyError) Unwrap() error { return e.err }

// replyOf converts a script's reply (see driver.Reply).
func replyOf(r rueidis.RedisResult) driver.Reply {
	if err := r.NonRedisError(); err != nil {
		return driver.Reply{Err: err}
	}
	m, _ := r.ToMessage()
	v, err := valueOf(&m)
	return driver.Reply{Value: v, Err: err}
}

// errorOf returns the error of r, an error reply as replyOf does.
func errorOf(r rueidis.RedisResult) error {
	if err := r.NonRedisError(); err != nil {
		return err
	}
	m, _ := r.ToMessage()
	if m.IsNil() {
		return nil
	}
	_, err := valueOf(&m)
	return err
}

// valueOf converts one value of a reply as Redis converts a script's value
// for a RESP2 client: an integer, a string, an array of such values, nil
// for a null. rueidis speaks RESP3, in which Redis sends Lua's booleans as
// booleans: false is nil, as a RESP2 client gets it, and true is 1. An
// error reply is the error; an error inside an array is that element's
// value. (A double or a map, which no redlease script returns, is as
// rueidis's ToAny makes it.)
func valueOf(m *rueidis.RedisMessage) (any, error) {
	switch {
	case m.IsNil():
		return nil, nil
	case m.IsInt64():
		return m.ToInt64()
	case m.IsString():
		return m.ToString()
	case m.IsBool():
		if b, _ := m.ToBool(); b {
			return int64(1), nil
		}
		return nil, nil
	case m.IsArray():
		elems, _ := m.ToArray()
		out := make([]any, len(elems))
		for i := range elems {
			v, err := valueOf(&elems[i])
			if err != nil {
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	if err := m.Error(); err != nil {
		var rerr *rueidis.RedisError
		if !errors.As(err, &rerr) {
			return nil, err
		}
		// ToString of an error reply returns its text as Redis sent it.
		text, _ := m.ToString()
		return nil, &replyError{msg: text, err: rerr}
	}
	return m.ToAny()
}
