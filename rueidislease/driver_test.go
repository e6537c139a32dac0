package rueidislease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/servertest"
)

// The driver's contract, method by method, on both kinds of server, plain
// and as a cluster.
func TestDriver(t *testing.T) {
	each(t, []testCase{
		{"Replies", testReplies},
		{"ErrorReply", testErrorReply},
		{"EvalMany", testEvalMany},
		{"EndedContext", testEndedContext},
		{"Ping", testPing},
		{"Subscribe", testSubscribe},
		{"SubscribeAfterReconnect", testSubscribeAfterReconnect},
	})
}

// eval runs src by EVAL.
func eval(d driver.Driver, src string, keys ...string) driver.Reply {
	return d.Eval(context.Background(), driver.Call{Source: src, Keys: keys})
}

// Script replies as driver.Reply has them: Lua's false and nil as nil
// (RESP3 sends false as a boolean), true as 1, nested arrays, statuses.
func testReplies(t *testing.T, e *env) {
	d := Driver(e.client)
	k := resource(t, "k")
	for _, c := range []struct {
		src  string
		want any
	}{
		{"return 42", int64(42)},
		{"return 'text'", "text"},
		{"return redis.status_reply('OK')", "OK"},
		{"return nil", nil},
		{"return false", nil},
		{"return true", int64(1)},
		{"return {}", []any{}},
		{"return {1, 'a', {2, false, 'b'}, true}", []any{int64(1), "a", []any{int64(2), nil, "b"}, int64(1)}},
		{"return redis.call('HMGET', KEYS[1], 'x', 'y')", []any{nil, nil}},
		{"return redis.call('GET', KEYS[1])", nil},
	} {
		r := eval(d, c.src, k)
		must(t, r.Err)
		deepEq(t, r.Value, c.want, c.src)
	}
	// By EVALSHA, with the hash that the server computes, once it has the
	// script.
	const src = "return {KEYS[1], ARGV[1]}"
	r := d.Eval(context.Background(), driver.Call{Source: src, Keys: []string{k}, Args: []string{"v"}})
	must(t, r.Err)
	hash := d.Eval(context.Background(), driver.Call{Source: "return redis.sha1hex(ARGV[1])", Args: []string{src}})
	must(t, hash.Err)
	r = d.Eval(context.Background(), driver.Call{Hash: hash.Value.(string), Keys: []string{k}, Args: []string{"v"}})
	must(t, r.Err)
	deepEq(t, r.Value, []any{k, "v"}, "EVALSHA")
}

// An error reply keeps its text, "ERR " included, and is refused; so is
// NOSCRIPT, which redlease reads by its text.
func testErrorReply(t *testing.T, e *env) {
	d := Driver(e.client)
	k := resource(t, "k")
	r := eval(d, "return redis.error_reply('ERR max number of clients reached')", k)
	if r.Err == nil || r.Err.Error() != "ERR max number of clients reached" {
		t.Fatalf("error reply: %v", r.Err)
	}
	eq(t, d.Classify(r.Err), driver.Refused, "class of an error reply")
	var rerr *rueidis.RedisError
	if !errors.As(r.Err, &rerr) {
		t.Fatalf("%T is not a *rueidis.RedisError", r.Err)
	}

	r = eval(d, "return redis.call('NOSUCHCOMMAND')", k)
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), "ERR ") {
		t.Fatalf("error raised by a script: %v", r.Err)
	}
	eq(t, d.Classify(r.Err), driver.Refused, "class of a script's error")

	r = d.Eval(context.Background(), driver.Call{Hash: strings.Repeat("0", 40), Keys: []string{k}})
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), "NOSCRIPT") {
		t.Fatalf("unknown hash: %v", r.Err)
	}
	eq(t, d.Classify(r.Err), driver.Refused, "class of NOSCRIPT")

	// An error inside an array is that element.
	r = eval(d, "return {1, redis.error_reply('inner')}", k)
	must(t, r.Err)
	arr := r.Value.([]any)
	if err, ok := arr[1].(error); !ok || !strings.HasSuffix(err.Error(), "inner") {
		t.Fatalf("array with an error: %#v (%v)", r.Value, arr[1])
	}
}

// EvalMany: keys in many slots (several nodes on Cluster), a call without
// keys, one that fails, one whose keys are in two slots.
func testEvalMany(t *testing.T, e *env) {
	d := Driver(e.client)
	var calls []driver.Call
	var want []any
	for i := range 20 {
		k := resource(t, fmt.Sprint(i))
		calls = append(calls, driver.Call{Source: "return redis.call('INCRBY', KEYS[1], ARGV[1])", Keys: []string{k}, Args: []string{fmt.Sprint(i)}})
		want = append(want, int64(i))
	}
	calls = append(calls,
		driver.Call{Source: "return 'no keys'"},
		driver.Call{Source: "return redis.error_reply('ERR failed')", Keys: []string{resource(t, "x")}},
		driver.Call{Source: "return {KEYS[1], KEYS[2]}", Keys: []string{"{a}" + resource(t, "1"), "{a}" + resource(t, "2")}})
	want = append(want, "no keys", nil, []any{"{a}" + resource(t, "1"), "{a}" + resource(t, "2")})
	replies := make([]driver.Reply, len(calls))
	d.EvalMany(context.Background(), calls, replies)
	for i, r := range replies {
		if i == 21 {
			if r.Err == nil || r.Err.Error() != "ERR failed" {
				t.Fatalf("reply %d: %v", i, r.Err)
			}
			continue
		}
		must(t, r.Err)
		deepEq(t, r.Value, want[i], fmt.Sprint("reply ", i))
	}

	// Keys in two slots: Redis refuses them without Cluster; on Cluster
	// rueidis would panic, and the driver fails the call without sending it.
	cross := driver.Call{Source: "return 1", Keys: []string{"{a}x", "{b}x"}}
	r := d.Eval(context.Background(), cross)
	if !e.cluster {
		must(t, r.Err)
		return
	}
	if r.Err == nil {
		t.Fatal("a call on two slots succeeded")
	}
	eq(t, d.Classify(r.Err), driver.NotSent, "class of a call on two slots")
	replies = make([]driver.Reply, 2)
	d.EvalMany(context.Background(), []driver.Call{cross, calls[0]}, replies)
	eq(t, d.Classify(replies[0].Err), driver.NotSent, "class of a call on two slots, in a batch")
	must(t, replies[1].Err)
}

// A call whose context has ended is not sent, and says so.
func testEndedContext(t *testing.T, e *env) {
	d := Driver(e.client)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := driver.Call{Source: "return 1", Keys: []string{resource(t, "k")}}
	r := d.Eval(ctx, c)
	if !errors.Is(r.Err, context.Canceled) || d.Classify(r.Err) != driver.NotSent {
		t.Fatalf("Eval with an ended context: %v, %v", r.Err, d.Classify(r.Err))
	}
	replies := make([]driver.Reply, 1)
	d.EvalMany(ctx, []driver.Call{c}, replies)
	eq(t, d.Classify(replies[0].Err), driver.NotSent, "EvalMany")
	r, _ = d.EvalWait(ctx, c, 1, time.Second)
	eq(t, d.Classify(r.Err), driver.NotSent, "EvalWait")
	eq(t, d.Classify(d.Ping(ctx, "k")), driver.NotSent, "Ping")
}

func testPing(t *testing.T, e *env) {
	d := Driver(e.client)
	for i := range 10 {
		must(t, d.Ping(context.Background(), resource(t, fmt.Sprint(i))))
	}
	eq(t, d.Sharded(), e.cluster, "Sharded")
}

// publish publishes payload on channel (SPUBLISH on Cluster) and returns
// the number of receivers.
func (e *env) publish(t *testing.T, channel, payload string) int64 {
	t.Helper()
	n, err := e.tryPublish(channel, payload)
	must(t, err)
	return n
}

func (e *env) tryPublish(channel, payload string) (int64, error) {
	b := e.client.B()
	cmd := b.Publish().Channel(channel).Message(payload).Build()
	if e.cluster {
		cmd = b.Spublish().Channel(channel).Message(payload).Build()
	}
	return e.client.Do(context.Background(), cmd).AsInt64()
}

// subscribers returns the number of subscribers of channel on the server
// (PUBSUB NUMSUB, or SHARDNUMSUB on the master of its slot).
func (e *env) subscribers(t *testing.T, channel string) int64 {
	t.Helper()
	b := e.client.B()
	cmd := b.PubsubNumsub().Channel(channel).Build()
	if e.cluster {
		cmd = b.PubsubShardnumsub().Channel(channel).Build()
	}
	m, err := e.client.Do(context.Background(), cmd).AsIntMap()
	must(t, err)
	return m[channel]
}

// messages collects what a subscription's handle gets.
type messages struct {
	mu  sync.Mutex
	got []string
	n   atomic.Int64
}

func (m *messages) handle(p string) {
	m.mu.Lock()
	m.got = append(m.got, p)
	m.mu.Unlock()
	m.n.Add(1)
}

func (m *messages) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

// Subscribe returns once Redis has confirmed; messages arrive in order;
// Close unsubscribes on the server, and handle is not called after it.
func testSubscribe(t *testing.T, e *env) {
	d := Driver(e.client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := resource(t, "wake")
	var m messages
	s, err := d.Subscribe(ctx, ch, m.handle)
	must(t, err)
	if !isClosed(s.Ready()) {
		t.Fatal("Subscribe returned before Ready")
	}
	eq(t, e.subscribers(t, ch), int64(1), "subscribers")
	for i := range 5 {
		eq(t, e.publish(t, ch, fmt.Sprint(i)), int64(1), "receivers")
	}
	servertest.WaitFor(t, 10*time.Second, func() bool { return m.n.Load() == 5 })
	deepEq(t, m.list(), []string{"0", "1", "2", "3", "4"}, "messages")
	if isClosed(s.Done()) {
		t.Fatal("Done before Close")
	}

	// A second channel on the same connection is not disturbed by the
	// first one's Close.
	var m2 messages
	s2, err := d.Subscribe(ctx, resource(t, "other"), m2.handle)
	must(t, err)

	must(t, s.Close(ctx))
	eq(t, e.subscribers(t, ch), int64(0), "subscribers after Close")
	e.publish(t, ch, "late")
	e.publish(t, resource(t, "other"), "still")
	servertest.WaitFor(t, 10*time.Second, func() bool { return m2.n.Load() == 1 })
	eq(t, m.n.Load(), int64(5), "messages after Close")
	must(t, s.Close(ctx)) // again: nothing to do
	must(t, s2.Close(ctx))

	// Close while messages arrive: none is handled once Close returned.
	var m3 messages
	s3, err := d.Subscribe(ctx, ch, m3.handle)
	must(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				_, _ = e.tryPublish(ch, fmt.Sprint(i))
			}
		}
	})
	servertest.WaitFor(t, 10*time.Second, func() bool { return m3.n.Load() > 10 })
	must(t, s3.Close(ctx))
	n := m3.n.Load()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	eq(t, m3.n.Load(), n, "messages handled after Close returned")
}

// The server closes the subscription's connection: rueidis subscribes
// again on a new one, and the subscription goes on.
func testSubscribeAfterReconnect(t *testing.T, e *env) {
	d := Driver(e.client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := resource(t, "wake")
	var m messages
	s, err := d.Subscribe(ctx, ch, m.handle)
	must(t, err)
	defer s.Close(ctx)
	sub := "subscribe"
	if e.cluster {
		sub = "ssubscribe"
	}
	subscribes := e.calls(t, sub)
	killed := int64(0)
	for _, n := range e.nodes {
		k, err := n.Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		must(t, err)
		killed += k
	}
	if killed == 0 {
		t.Fatal("no connection killed")
	}
	servertest.WaitFor(t, 10*time.Second, func() bool {
		_, _ = e.tryPublish(ch, "after") // the first may meet the killed connection
		return m.n.Load() > 0
	})
	if e.calls(t, sub) <= subscribes {
		t.Fatalf("%d %s calls after the kill, before %d", e.calls(t, sub), sub, subscribes)
	}
	if isClosed(s.Done()) {
		t.Fatal("Done after a reconnect")
	}
}

// On Cluster, the channel's slot moves to another master: the old one
// sends sunsubscribe, and the subscription ends (Done).
func TestSubscriptionEndsWhenItsSlotMoves(t *testing.T) {
	for _, k := range servertest.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			e := clusterEnv(t, k)
			d := Driver(e.client)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ch := "{moving}" + t.Name()
			s, err := d.Subscribe(ctx, ch, func(string) {})
			must(t, err)
			defer s.Close(ctx)

			slot, err := e.cc.ClusterKeySlot(ctx, ch).Result()
			must(t, err)
			from, err := e.cc.MasterForKey(ctx, ch)
			must(t, err)
			var to string
			for _, n := range e.nodes {
				if n.Addr != from.Options().Addr {
					to = n.Addr
					break
				}
			}
			src, dst := servertest.NewClient(t, from.Options().Addr), servertest.NewClient(t, to)
			srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
			must(t, dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
			must(t, src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
			must(t, dst.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
			must(t, src.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
			servertest.Recv(t, s.Done(), 10*time.Second)
			must(t, s.Close(ctx))

			// A new subscription follows the slot to its new master.
			var m messages
			servertest.WaitFor(t, 10*time.Second, func() bool {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				s, err := d.Subscribe(sctx, ch, m.handle)
				if err != nil {
					return false
				}
				defer s.Close(ctx)
				n, err := dst.SPublish(ctx, ch, "here").Result()
				return err == nil && n == 1
			})
		})
	}
}

// Close of a subscription whose Receive has returned by itself sends no
// unsubscribe, also in the moment between Done closing and the goroutine's
// end: the server has unsubscribed the channel already (on Cluster when its
// slot moved), and Valkey answers an unsubscribe then with NOSUB, which
// TestSubscriptionEndsWhenItsSlotMoves met. The subscription here has no
// client: an unsubscribe would panic.
func TestCloseAfterDoneSendsNoUnsubscribe(t *testing.T) {
	exited := make(chan struct{})
	s := &subscription{done: make(chan struct{}), exited: exited, cancel: func() { close(exited) }}
	close(s.done) // receive has closed done; it has not returned yet
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Classify: a refused dial is not sent.
func TestClassifyRefusedDial(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		// rueidis returns a single-server client even when its first dial
		// fails if told so.
		addr := servertest.RefusedAddr(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
		if c == nil {
			t.Fatalf("no client: %v", err)
		}
		defer c.Close()
		d := Driver(c)
		r := eval(d, "return 1", "k")
		if !errors.Is(r.Err, syscall.ECONNREFUSED) {
			t.Fatalf("Eval on a port nobody listens on: %v", r.Err)
		}
		eq(t, d.Classify(r.Err), driver.NotSent, "class")
		eq(t, d.Classify(d.Ping(context.Background(), "k")), driver.NotSent, "class of Ping")
	})
	for _, k := range servertest.Kinds() {
		t.Run(string(k)+"/cluster", func(t *testing.T) {
			e := clusterEnv(t, k)
			d := Driver(e.client)
			key := "{refused}" + t.Name()
			must(t, eval(d, "return 1", key).Err)
			master, err := e.cc.MasterForKey(context.Background(), key)
			must(t, err)
			for _, n := range e.nodes {
				if n.Addr == master.Options().Addr {
					n.Stop()
				}
			}
			// The first call may meet the broken connection (unknown);
			// then the client dials, and is refused.
			servertest.WaitFor(t, 10*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				r := d.Eval(ctx, driver.Call{Source: "return 1", Keys: []string{key}})
				return errors.Is(r.Err, syscall.ECONNREFUSED) && d.Classify(r.Err) == driver.NotSent
			})
		})
	}
}

// Classify of what rueidis returns when closed.
func TestClassifyClosedClient(t *testing.T) {
	s := servertest.Start(t, servertest.RedisServer)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
	must(t, err)
	d := Driver(c)
	must(t, eval(d, "return 1", "k").Err)
	c.Close()
	r := eval(d, "return 1", "k")
	if !errors.Is(r.Err, rueidis.ErrClosing) {
		t.Fatalf("Eval on a closed client: %v", r.Err)
	}
	eq(t, d.Classify(r.Err), driver.NotSent, "class")
	eq(t, d.Classify(context.DeadlineExceeded), driver.Unknown, "class of a deadline")
	eq(t, d.Classify(errors.New("read tcp: connection reset by peer")), driver.Unknown, "class of an unknown error")
}

func TestNilClient(t *testing.T) {
	if Driver(nil) != nil {
		t.Fatal("Driver(nil) is not nil")
	}
	_, err := New(nil).TryAcquire(context.Background(), "r")
	if !errors.Is(err, redlease.ErrInvalidArgument) {
		t.Fatalf("TryAcquire on a nil client: %v", err)
	}
}

// singleServer starts a redis-server, and returns a go-redis client of it
// (for looking on), a rueidis client (closed at the test's end) and a
// context of 10 s.
func singleServer(t *testing.T) (*redis.Client, rueidis.Client, context.Context) {
	s := servertest.Start(t, servertest.RedisServer)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
	must(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return s.Client(t), c, ctx
}

// A subscription made before its rueidis client's Close lasts until its
// own Close: its connection is the driver's own (Dedicate), which the
// client's Close leaves open. A subscription asked for after the client's
// Close fails with ErrClosing.
func TestSubscriptionOutlivesItsClientsClose(t *testing.T) {
	rdb, c, ctx := singleServer(t)
	d := Driver(c)
	var m messages
	sub, err := d.Subscribe(ctx, "ch", m.handle)
	must(t, err)
	c.Close()
	eq(t, rdb.Publish(ctx, "ch", "after").Val(), int64(1), "receivers after the client's Close")
	servertest.WaitFor(t, 10*time.Second, func() bool { return m.n.Load() == 1 })
	if isClosed(sub.Done()) {
		t.Fatal("Done after the client's Close")
	}
	must(t, sub.Close(ctx))
	eq(t, rdb.PubSubNumSub(ctx, "ch").Val()["ch"], int64(0), "subscribers after Close")
	if _, err := d.Subscribe(ctx, "other", m.handle); !errors.Is(err, rueidis.ErrClosing) {
		t.Fatalf("Subscribe on a closed client: %v, want ErrClosing", err)
	}
}

// The subscriptions of a driver without Cluster share one connection of
// their own, which the client's other requests do not use, and which
// closes with the last of them.
func TestSubscriptionsShareOneDedicatedConnection(t *testing.T) {
	rdb, c, ctx := singleServer(t)
	d := Driver(c)
	pubsubClients := func() int {
		n := 0
		for _, line := range strings.Split(rdb.ClientList(ctx).Val(), "\n") {
			if strings.Contains(line, "sub=1") || strings.Contains(line, "sub=2") {
				n++
			}
		}
		return n
	}
	var m messages
	a, err := d.Subscribe(ctx, "a", m.handle)
	must(t, err)
	b, err := d.Subscribe(ctx, "b", m.handle)
	must(t, err)
	eq(t, pubsubClients(), 1, "connections subscribed to a and b")
	must(t, c.Do(ctx, c.B().Ping().Build()).Error())

	// The connection breaks: both subscribe again, on one new connection.
	killed, err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	must(t, err)
	eq(t, killed, int64(1), "connections killed")
	servertest.WaitFor(t, 10*time.Second, func() bool {
		n := rdb.PubSubNumSub(ctx, "a", "b").Val()
		return n["a"] == 1 && n["b"] == 1
	})
	eq(t, pubsubClients(), 1, "connections subscribed to a and b after the kill")
	if isClosed(a.Done()) || isClosed(b.Done()) {
		t.Fatal("Done after the connection broke")
	}
	before := m.n.Load()
	eq(t, rdb.Publish(ctx, "a", "x").Val()+rdb.Publish(ctx, "b", "y").Val(), int64(2), "receivers of a and b")
	servertest.WaitFor(t, 10*time.Second, func() bool { return m.n.Load() == before+2 })
	must(t, a.Close(ctx))
	eq(t, pubsubClients(), 1, "connections subscribed after a's Close")
	must(t, b.Close(ctx))
	servertest.WaitFor(t, 10*time.Second, func() bool { return pubsubClients() == 0 })
	// The next subscription dedicates a new connection.
	a, err = d.Subscribe(ctx, "a", m.handle)
	must(t, err)
	eq(t, rdb.Publish(ctx, "a", "x").Val(), int64(1), "receivers of a")
	must(t, a.Close(ctx))
}

// A subscription that Redis does not confirm before ctx ends is not made;
// its goroutine ends.
func TestSubscribeUnreachable(t *testing.T) {
	addr := servertest.RefusedAddr(t)
	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s, err := Driver(c).Subscribe(ctx, "ch", func(string) {})
	if s != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe to a server that is not there: %v, %v", s, err)
	}
}
