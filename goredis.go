package redlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/shared"
)

// goRedis is the backend on a go-redis client: plain, Sentinel (failover)
// or Cluster.
type goRedis struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, if it is one
	ctxTime bool                 // ContextTimeoutEnabled
	// longest is the longest a request may take by the client's own
	// timeouts, retries included; 0 if they do not bound it.
	longest time.Duration
	// health is what the last request learnt of Redis: see connect.
	health atomic.Int32
	comb   combiner // see combine.go
}

// The health of a goRedis.
const (
	healthNew       = iota // no request yet
	healthAnswering        // the last request got an answer (a reply, or an error reply)
	healthSilent           // the last request got none
)

var _ backend = (*goRedis)(nil)

func newGoRedis(rdb redis.UniversalClient) *goRedis {
	g := &goRedis{rdb: rdb}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		g.cluster, g.ctxTime = c, c.Options().ContextTimeoutEnabled
	case *redis.Client:
		g.ctxTime, g.longest = c.Options().ContextTimeoutEnabled, longestRequest(c.Options())
	case *redis.Ring:
		g.ctxTime = c.Options().ContextTimeoutEnabled
	}
	return g
}

// command builds the go-redis command of one run of s: EVALSHA and the
// hash, or with source, EVAL and the script.
func (c call) command(ctx context.Context, source bool) redis.Cmder {
	s := c.s
	if source {
		c.words[0], c.words[1] = "eval", s.src
	} else {
		c.words[0], c.words[1] = "evalsha", s.hash
	}
	var cmd interface {
		redis.Cmder
		SetFirstKeyPos(int8)
	}
	if c.kind == intReply {
		cmd = redis.NewIntCmd(ctx, c.words...)
	} else {
		cmd = redis.NewCmd(ctx, c.words...)
	}
	cmd.SetFirstKeyPos(3) // for Cluster routing
	return cmd
}

// note records whether a request got an answer.
func (g *goRedis) note(err error) {
	h := int32(healthAnswering)
	if err != nil && g.classify(err) != refused {
		h = healthSilent
	}
	if g.health.Load() != h {
		g.health.Store(h)
	}
}

// replyOf reads a script command's reply.
func replyOf(cmd redis.Cmder) reply {
	switch cmd := cmd.(type) {
	case *redis.IntCmd:
		n, err := cmd.Result()
		return reply{n: n, err: err}
	case *redis.Cmd:
		if err := cmd.Err(); err != nil {
			return reply{err: err}
		}
		switch v := cmd.Val().(type) {
		case int64:
			return reply{n: v}
		case []any:
			return reply{vals: v}
		}
		return reply{err: fmt.Errorf("redlease: unexpected reply %v", cmd.Val())}
	}
	return reply{err: errors.New("redlease: unexpected command type")}
}

// noScript reports whether the server answered that it lacks the script.
// (HasErrorPrefix allocates even for nil: ask it only about errors.)
func noScript(cmd redis.Cmder) bool {
	err := cmd.Err()
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// evalOne sends c on its own: EVALSHA, and EVAL after NOSCRIPT.
func (g *goRedis) evalOne(ctx context.Context, c call) reply {
	cmd := c.command(ctx, false)
	_ = g.rdb.Process(ctx, cmd)
	if noScript(cmd) {
		// A copy: the first command keeps its own words.
		cmd = call{s: c.s, words: slices.Clone(c.words), kind: c.kind}.command(ctx, true)
		_ = g.rdb.Process(ctx, cmd)
	}
	g.note(cmd.Err())
	return replyOf(cmd)
}

func (g *goRedis) evalAll(ctx context.Context, n int, calls func(i int) call) []reply {
	out := make([]reply, n)
	if n == 1 {
		out[0] = g.eval(ctx, calls(0))
		return out
	}
	batch := make([]call, min(n, maxBatch))
	for from := 0; from < n; from += maxBatch {
		b := batch[:min(maxBatch, n-from)]
		for i := range b {
			b[i] = calls(from + i)
		}
		g.pipeline(ctx, b, out[from:])
	}
	return out
}

// pipeline runs calls in one pipeline (and those that met NOSCRIPT in a
// second, with their source), their replies in out.
func (g *goRedis) pipeline(ctx context.Context, calls []call, out []reply) {
	cmds := make([]redis.Cmder, len(calls))
	pipe := g.rdb.Pipeline()
	for i := range calls {
		cmds[i] = calls[i].command(ctx, false)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx)
	var again redis.Pipeliner
	for i, cmd := range cmds {
		if noScript(cmd) { // the server lost its script cache: send the source
			if again == nil {
				again = g.rdb.Pipeline()
			}
			c := calls[i]
			cmds[i] = call{s: c.s, words: slices.Clone(c.words), kind: c.kind}.command(ctx, true)
			_ = again.Process(ctx, cmds[i])
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	for i, cmd := range cmds {
		out[i] = replyOf(cmd)
	}
	g.note(cmds[len(cmds)-1].Err())
}

func (g *goRedis) evalAcked(ctx context.Context, c call, replicas int, timeout time.Duration) (reply, int64) {
	conn := redis.Cmdable(g.rdb)
	if g.cluster != nil {
		key, _ := c.words[3].(*string) // the first key
		master, err := g.cluster.MasterForKey(ctx, *key)
		if err != nil {
			return reply{err: err}, 0
		}
		conn = master
	}
	for source := false; ; source = true {
		pipe := conn.Pipeline()
		words := c.words
		if source {
			words = slices.Clone(words)
		}
		cmd := call{s: c.s, words: words, kind: c.kind}.command(ctx, source)
		_ = pipe.Process(ctx, cmd)
		wait := waitCmd(ctx, pipe, replicas, timeout)
		_, _ = pipe.Exec(ctx)
		if !source && noScript(cmd) {
			continue // WAIT waited for nothing of ours: send both again
		}
		r := replyOf(cmd)
		if r.err == nil && wait.Err() != nil {
			r.err = wait.Err()
		}
		g.note(r.err)
		return r, wait.Val()
	}
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

// scanCount is the COUNT hint of each SCAN call: about how many keys one
// call looks at, and so the size of one batch given to scan's fn.
const scanCount = 200

func (g *goRedis) scan(ctx context.Context, match string, fn func(keys []string) error) error {
	nodes, err := g.masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		// Bounded: SCAN returns cursor 0 after one pass over the keyspace.
		for cursor := uint64(0); ; {
			keys, next, err := n.Scan(ctx, cursor, match, scanCount).Result()
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
func (g *goRedis) masters(ctx context.Context) ([]redis.Cmdable, error) {
	if g.cluster == nil {
		return []redis.Cmdable{g.rdb}, nil
	}
	var mu sync.Mutex
	var masters []*redis.Client
	err := g.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
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

// connect asks Redis (EXISTS key, harmless and routed as the acquire would
// be) only when no answer shows that it can be reached: after a request
// that got none, or before the first request, on a pool with no
// connection.
func (g *goRedis) connect(ctx context.Context, key string) error {
	switch g.health.Load() {
	case healthAnswering:
		return nil
	case healthNew:
		if st := g.rdb.PoolStats(); st != nil && st.TotalConns > 0 {
			return nil // the application's own requests connected it
		}
	}
	err := g.rdb.Exists(ctx, key).Err()
	g.note(err)
	return err
}

func (g *goRedis) classify(err error) errorClass {
	switch {
	case unavailable(err):
		return notSent
	case shared.IsServerError(err):
		return refused
	case !shared.MayHaveReached(err):
		return notSent
	}
	return unknown
}

// unavailable reports whether err is an error reply by which Redis says it
// runs nothing now, the request included: it is loading its data, is a
// replica, has no master or cluster quorum, too few replicas or too many
// clients, or is running a script that overran its time limit. Such an
// outage is ridden out as one where Redis cannot be reached (go-redis
// retries the same errors, but only a few times).
func unavailable(err error) bool {
	if redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) {
		return true
	}
	return shared.IsServerError(err) && strings.HasPrefix(err.Error(), "BUSY ")
}

func (g *goRedis) bounded(d time.Time) bool {
	return g.ctxTime || g.longest > 0 && time.Until(d) > g.longest
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

func (g *goRedis) sharded() bool { return g.cluster != nil }

func (g *goRedis) nodeOf(ctx context.Context, channel string) (node, error) {
	if g.cluster == nil {
		return node{}, nil
	}
	// The slot map is the one acquire attempts keep up to date (they follow
	// MOVED); reading it does no I/O once loaded.
	master, err := g.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return node{}, err
	}
	return node{addr: master.Options().Addr, conn: master}, nil
}

func (g *goRedis) subscribe(ctx context.Context, n node) subscription {
	if master, ok := n.conn.(*redis.Client); ok {
		return &goRedisSub{ps: master.SSubscribe(ctx), sharded: true}
	}
	return &goRedisSub{ps: g.rdb.Subscribe(ctx)}
}

// goRedisSub is a go-redis PubSub. go-redis remembers its channels and
// subscribes them again after a reconnect.
type goRedisSub struct {
	ps      *redis.PubSub
	sharded bool
}

func (s *goRedisSub) add(ctx context.Context, channel string) error {
	if s.sharded {
		return s.ps.SSubscribe(ctx, channel)
	}
	return s.ps.Subscribe(ctx, channel)
}

func (s *goRedisSub) remove(ctx context.Context, channel string) error {
	if s.sharded {
		return s.ps.SUnsubscribe(ctx, channel)
	}
	return s.ps.Unsubscribe(ctx, channel)
}

func (s *goRedisSub) receive(fn func(subMessage)) {
	for m := range s.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Message:
			fn(subMessage{kind: subMessageKind, channel: m.Channel, payload: m.Payload})
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				fn(subMessage{kind: subConfirmed, channel: m.Channel})
			case "sunsubscribe":
				// Unasked, it means the slot moved (see hub.confirm); a plain
				// unsubscribe is only ever the answer to our own.
				fn(subMessage{kind: subDropped, channel: m.Channel})
			}
		}
	}
}

func (s *goRedisSub) close() error { return s.ps.Close() }
