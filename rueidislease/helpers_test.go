package rueidislease

import (
	"context"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// env is a deployment that the tests run on: one server, or a 3-master
// cluster, of one kind, and a rueidis client of it.
type env struct {
	kind    servertest.Kind
	cluster bool
	nodes   []*servertest.Server
	client  rueidis.Client
	cc      *redis.ClusterClient // the cluster's, for the tests' own look-ups
}

func plainEnv(t *testing.T, k servertest.Kind) *env {
	s := servertest.Start(t, k)
	return &env{kind: k, nodes: []*servertest.Server{s}, client: newClient(t, s.Addr)}
}

func clusterEnv(t *testing.T, k servertest.Kind) *env {
	nodes, cc := servertest.ClusterOf(t, k, 3)
	e := &env{kind: k, cluster: true, nodes: nodes, cc: cc, client: newClient(t, addrs(nodes)...)}
	if e.client.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %s, want cluster", e.client.Mode())
	}
	return e
}

func addrs(nodes []*servertest.Server) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr
	}
	return out
}

// newClient returns a rueidis client with the default options, closed when
// the test ends.
func newClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// locks returns a redlease Client on e, closed when the test ends.
func (e *env) locks(t *testing.T, opts ...redlease.Option) *redlease.Client {
	t.Helper()
	return closed(t, New(e.client, opts...))
}

// closed returns c, closed when the test ends.
func closed(t *testing.T, c *redlease.Client) *redlease.Client {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// topologies are the deployments of a kind that the tests run on.
var topologies = []struct {
	name string
	env  func(*testing.T, servertest.Kind) *env
}{{"plain", plainEnv}, {"cluster", clusterEnv}}

// each runs cases on both kinds of server, plain and as a cluster: one
// deployment per kind and topology, which the cases (subtests) share.
func each(t *testing.T, cases []testCase) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { c.f(t, e) })
		}
	})
}

// eachEnv runs f on a deployment of its own of each kind and topology.
func eachEnv(t *testing.T, f func(*testing.T, *env)) {
	for _, k := range servertest.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			for _, top := range topologies {
				t.Run(top.name, func(t *testing.T) { f(t, top.env(t, k)) })
			}
		})
	}
}

type testCase struct {
	name string
	f    func(t *testing.T, e *env)
}

// resource returns a resource name of the test's own.
func resource(t *testing.T, suffix string) string {
	return strings.ReplaceAll(t.Name(), "/", ":") + ":" + suffix
}

// do runs cmd on every node that e's client knows.
func (e *env) do(t *testing.T, cmd ...string) {
	t.Helper()
	ctx := context.Background()
	for addr, c := range e.client.Nodes() {
		if err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatalf("%s on %s: %v", cmd, addr, err)
		}
	}
}

// calls returns the calls of cmd that e's nodes have served (INFO
// commandstats).
func (e *env) calls(t *testing.T, cmd string) int {
	t.Helper()
	n := 0
	for _, node := range e.nodes {
		n += servertest.CommandStats(t, node.Client(t))[cmd]
	}
	return n
}

// recorder is a driver that records what its subscriptions deliver.
type recorder struct {
	driver.Driver
	mu       sync.Mutex
	subs     []driver.Subscription
	payloads []string
}

func (r *recorder) Subscribe(ctx context.Context, channel string, handle func(string)) (driver.Subscription, error) {
	s, err := r.Driver.Subscribe(ctx, channel, func(p string) {
		r.mu.Lock()
		r.payloads = append(r.payloads, p)
		r.mu.Unlock()
		handle(p)
	})
	if err == nil {
		r.mu.Lock()
		r.subs = append(r.subs, s)
		r.mu.Unlock()
	}
	return s, err
}

// batches is a driver that counts the batches of calls (EvalMany) and the
// calls in them, and the renewals it is given, alone or in batches: the
// calls of refresh.lua, and of refresh_many.lua with the leases they name
// (each call counted once, not again when it is sent with its source after
// NOSCRIPT).
type batches struct {
	driver.Driver
	mu                      sync.Mutex
	n, calls                int
	refresh, many, manyKeys int
}

func (b *batches) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	b.mu.Lock()
	b.n++
	b.calls += len(calls)
	for _, c := range calls {
		b.renewal(c)
	}
	b.mu.Unlock()
	b.Driver.EvalMany(ctx, calls, replies)
}

func (b *batches) Eval(ctx context.Context, c driver.Call) driver.Reply {
	b.mu.Lock()
	b.renewal(c)
	b.mu.Unlock()
	return b.Driver.Eval(ctx, c)
}

// renewal counts c if it is a renewal (b.mu held).
func (b *batches) renewal(c driver.Call) {
	switch {
	case c.Hash == "":
	case c.Source == wire.Named("refresh.lua").Source():
		b.refresh++
	case c.Source == wire.Named("refresh_many.lua").Source():
		b.many++
		b.manyKeys += len(c.Keys)
	}
}

// subscribed reports whether a subscription is confirmed.
func (r *recorder) subscribed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.subs {
		if isClosed(s.Ready()) {
			return true
		}
	}
	return false
}

func (r *recorder) delivered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.payloads...)
}

// withReplica starts a replica of the master that serves resource's slot
// (on Cluster) or of the one server, and waits until it acknowledges
// writes. It returns the replica.
func (e *env) withReplica(t *testing.T, resource string) *servertest.Server {
	t.Helper()
	ctx := context.Background()
	if !e.cluster {
		m := e.nodes[0]
		host, port, _ := strings.Cut(m.Addr, ":")
		r := servertest.Start(t, e.kind, "--replicaof", host, port)
		waitReplicated(t, m.Client(t), resource)
		return r
	}
	master, err := e.cc.MasterForKey(ctx, "{"+resource+"}")
	if err != nil {
		t.Fatal(err)
	}
	id, err := master.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	r := servertest.Start(t, e.kind, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
		"--cluster-config-file", "nodes.conf")
	cli := string(e.kind) + "-cli"
	out, err := exec.Command(cli, "--cluster", "add-node", r.Addr, master.Options().Addr,
		"--cluster-slave", "--cluster-master-id", id).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --cluster add-node: %v\n%s", cli, err, out)
	}
	waitReplicated(t, servertest.NewClient(t, master.Options().Addr), resource)
	return r
}

// waitReplicated waits until a replica of master acknowledges a write of a
// key in resource's slot (servertest.WaitReplicated writes a key of its
// own, which a cluster's master may not serve).
func waitReplicated(t *testing.T, master *redis.Client, resource string) {
	t.Helper()
	ctx := context.Background()
	servertest.WaitFor(t, 30*time.Second, func() bool {
		if err := master.Set(ctx, "{"+resource+"}:probe", time.Now().UnixNano(), 0).Err(); err != nil {
			return false
		}
		n, err := master.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n >= 1
	})
}

// startWaiter runs acquire on a goroutine; its lease (or error) arrives on
// the channel.
func startWaiter(acquire func() (*redlease.Lease, error)) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		l, err := acquire()
		out <- acquired{l, err}
	}()
	return out
}

type acquired struct {
	l   *redlease.Lease
	err error
}

// waiters waits until resource has n waiters queued.
func waiters(t *testing.T, locks *redlease.Client, resource string, n int64) {
	t.Helper()
	servertest.WaitFor(t, 10*time.Second, func() bool {
		st, err := locks.Inspect(context.Background(), resource)
		return err == nil && st.Waiters == n
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eq[T comparable](t *testing.T, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func deepEq(t *testing.T, got, want any, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %#v, want %#v", what, got, want)
	}
}
