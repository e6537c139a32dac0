package tests

// The helpers of the integration tests (integ_*_test.go): the core's tests
// against real servers, written once and run on every library and server
// kind. Their package-level names start with "integ", so that they do not
// clash with the helpers of the other tests of this package.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// integ is one test's deployment: a library, a server of a kind started
// for the test, and a go-redis client of that server, rdb, with which the
// test looks at and pokes the keys. The leases are taken through the
// library's Clients only.
type integ struct {
	t    *testing.T
	lib  library
	kind servertest.Kind
	srv  *servertest.Server
	rdb  *redis.Client
}

// An integCell is a library on a server kind: one run of a test.
type integCell struct {
	lib  library
	kind servertest.Kind
}

// integAll is every library on every server kind.
func integAll() []integCell {
	var cells []integCell
	for _, lib := range libraries {
		for _, k := range servertest.Kinds() {
			cells = append(cells, integCell{lib, k})
		}
	}
	return cells
}

// integProtocol is every library on redis-server and valkey-go on Valkey:
// for a test of the protocol rather than of the client that takes long, the
// second server kind on one library.
func integProtocol() []integCell {
	var cells []integCell
	for _, c := range integAll() {
		if c.kind == servertest.RedisServer || c.lib.name == "valkey-go" {
			cells = append(cells, c)
		}
	}
	return cells
}

// integOnePerKind is go-redis on redis-server and valkey-go on Valkey: for
// a test of what the scripts do, not of the client, that takes very long.
func integOnePerKind() []integCell {
	var cells []integCell
	for _, c := range integProtocol() {
		if c.kind == servertest.Valkey || c.lib.name == "go-redis" {
			cells = append(cells, c)
		}
	}
	return cells
}

// integServerless is every library on redis-server: for a test in which the
// server plays no part (a proxy or a fake driver makes the faults).
func integServerless() []integCell {
	var cells []integCell
	for _, c := range integAll() {
		if c.kind == servertest.RedisServer {
			cells = append(cells, c)
		}
	}
	return cells
}

// integRun runs f on each cell, as the subtest "<library>/<kind>", on a
// server of its own; in parallel when parallel is set, for a test that
// mostly waits (go test runs -parallel of them at once, GOMAXPROCS by
// default).
func integRun(t *testing.T, cells []integCell, parallel bool, f func(t *testing.T, e *integ)) {
	for _, lib := range libraries {
		var kinds []servertest.Kind
		for _, c := range cells {
			if c.lib.name == lib.name {
				kinds = append(kinds, c.kind)
			}
		}
		if len(kinds) == 0 {
			continue
		}
		t.Run(lib.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			for _, k := range kinds {
				t.Run(string(k), func(t *testing.T) {
					if parallel {
						t.Parallel()
					}
					f(t, newInteg(t, lib, k))
				})
			}
		})
	}
}

// eachInteg runs f on every library and server kind ("<library>/<kind>"),
// each on a server of its own, one after another.
func eachInteg(t *testing.T, f func(t *testing.T, e *integ)) {
	integRun(t, integAll(), false, f)
}

// eachIntegParallel is eachInteg for a test that mostly waits: its runs go
// in parallel.
func eachIntegParallel(t *testing.T, f func(t *testing.T, e *integ)) {
	integRun(t, integAll(), true, f)
}

// newInteg starts a server of kind, with args, for the test t.
func newInteg(t *testing.T, lib library, kind servertest.Kind, args ...string) *integ {
	t.Helper()
	srv := servertest.Start(t, kind, args...)
	return &integ{t: t, lib: lib, kind: kind, srv: srv, rdb: srv.Client(t)}
}

// in returns e for the subtest t of e's test.
func (e *integ) in(t *testing.T) *integ {
	c := *e
	c.t = t
	return &c
}

// client returns a Client of e's library on e's server, closed when the
// test ends.
func (e *integ) client(opts ...redlease.Option) *redlease.Client {
	e.t.Helper()
	return e.lib.plain(e.t, e.srv.Addr, false, opts...)
}

// clientAt returns a Client of e's library on the server at addr (a proxy
// of e's server); with noRetry, one whose client library never sends a
// request again after its reply was lost.
func (e *integ) clientAt(addr string, noRetry bool, opts ...redlease.Option) *redlease.Client {
	e.t.Helper()
	return e.lib.plain(e.t, addr, noRetry, opts...)
}

// queued returns the members (<owner>/<client id>) waiting on resource
// under the default prefix, in queue order.
func (e *integ) queued(resource string) []string {
	e.t.Helper()
	return integQueued(e.t, e.rdb, redlease.DefaultPrefix, resource)
}

// waiting reports whether one owner waits on resource under the default
// prefix and its Client listens on the wake channel: the waiter has heard
// that the lease is busy.
func (e *integ) waiting(resource string) bool {
	e.t.Helper()
	q := e.queued(resource)
	if len(q) != 1 {
		return false
	}
	k := wire.KeysOf(redlease.DefaultPrefix, resource)
	subs, err := e.rdb.PubSubNumSub(context.Background(), k.WakeChannel(integClientID(e.t, q[0]))).Result()
	require.NoError(e.t, err)
	for _, n := range subs {
		if n > 0 {
			return true
		}
	}
	return false
}

// integQueued returns the members waiting on resource under prefix, in
// queue order.
func integQueued(t *testing.T, rdb redis.UniversalClient, prefix, resource string) []string {
	t.Helper()
	members, err := rdb.ZRange(context.Background(), wire.Key(prefix, resource, wire.KindQueue), 0, -1).Result()
	require.NoError(t, err)
	return members
}

// integClientID returns the id of the Client of a queue member: its wake
// channel is the resource's wire.KindWake key with the id appended.
func integClientID(t *testing.T, member string) string {
	t.Helper()
	_, id, ok := strings.Cut(member, "/")
	require.True(t, ok, "queue member %q has no client id", member)
	return id
}

// integCounterKey is the key of the fence counter that resource draws
// from, under prefix.
func integCounterKey(prefix, resource string) string {
	return wire.SlotCounter(prefix, wire.SlotOf(resource))
}

// integLeaseKey is resource's lease key under prefix.
func integLeaseKey(prefix, resource string) string {
	return wire.Key(prefix, resource, wire.KindLease)
}

// integWarm makes c take and release a lease, so that it knows Redis
// answers and sends its next acquire without first asking whether Redis can
// be reached.
func integWarm(t testing.TB, c *redlease.Client) {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), "warm-up")
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
}

// integResult is what an acquire call run on a goroutine returned.
type integResult struct {
	l   *redlease.Lease
	err error
}

// integGo runs acquire on a goroutine; its lease (or error) arrives on the
// channel.
func integGo(acquire func() (*redlease.Lease, error)) <-chan integResult {
	out := make(chan integResult, 1)
	go func() {
		l, err := acquire()
		out <- integResult{l, err}
	}()
	return out
}

// integWaiter runs c.Acquire of resource on a goroutine.
func integWaiter(ctx context.Context, c *redlease.Client, resource string, opts ...redlease.WaitOption) <-chan integResult {
	return integGo(func() (*redlease.Lease, error) { return c.Acquire(ctx, resource, opts...) })
}

// integServed returns the calls per command that the servers at nodes
// served since their stats were reset (CONFIG RESETSTAT), less the test's
// own, CONFIG RESETSTAT and INFO, and PING, which rueidis and valkey-go
// send on an idle connection by themselves. The commands that scripts run
// count too (integMonitor tells them apart).
func integServed(t *testing.T, nodes ...*redis.Client) map[string]int {
	t.Helper()
	served := map[string]int{}
	for _, n := range nodes {
		for cmd, calls := range servertest.CommandStats(t, n) {
			switch cmd {
			case "config|resetstat", "info", "ping":
			default:
				served[cmd] += calls
			}
		}
	}
	return served
}

// integResetStats resets the command stats of the servers at nodes.
func integResetStats(t *testing.T, nodes ...*redis.Client) {
	t.Helper()
	for _, n := range nodes {
		require.NoError(t, n.ConfigResetStat(context.Background()).Err())
	}
}

// integRecorder is an Observer that records the events it hears.
type integRecorder struct {
	mu     sync.Mutex
	events []redlease.Event
}

func (r *integRecorder) Observe(_ context.Context, e redlease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// all returns the events recorded so far.
func (r *integRecorder) all() []redlease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]redlease.Event(nil), r.events...)
}

// take returns the events recorded so far, as "kind:outcome", and forgets
// them.
func (r *integRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Kind.String()+":"+e.Outcome.String())
	}
	r.events = nil
	return out
}

// integFences is a FenceSource for tests: a counter.
type integFences struct {
	mu   sync.Mutex
	next int64
}

func (s *integFences) NextFence(context.Context, string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.next, nil
}

// integCluster is a 3-master Redis Cluster of one kind that the cases of
// onCluster share: each case keeps its keys under a prefix of its own.
type integCluster struct {
	kind  servertest.Kind
	nodes []*servertest.Server
	addrs []string
	cc    *redis.ClusterClient // the test's own look-ups and pokes
}

// integClusterCase is a test on a cluster: lib's Clients on cl, keys under
// prefix (which the case passes to its Clients with WithPrefix).
type integClusterCase struct {
	name string
	f    func(t *testing.T, lib library, cl *integCluster, prefix string)
}

// integOnCluster runs each case with each library on one cluster of each
// server kind ("<kind>/<library>/<case>"): a cluster takes seconds to form,
// so the libraries and cases share it. The kinds run in parallel.
func integOnCluster(t *testing.T, cases []integClusterCase) {
	for _, k := range servertest.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			nodes, cc := servertest.ClusterOf(t, k, 3)
			cl := &integCluster{kind: k, nodes: nodes, cc: cc}
			for _, n := range nodes {
				cl.addrs = append(cl.addrs, n.Addr)
			}
			for _, lib := range libraries {
				t.Run(lib.name, func(t *testing.T) {
					for _, c := range cases {
						t.Run(c.name, func(t *testing.T) { c.f(t, lib, cl, resource(t, "")) })
					}
				})
			}
		})
	}
}

// client returns a Client of lib on cl, closed when the test ends.
func (cl *integCluster) client(t *testing.T, lib library, opts ...redlease.Option) *redlease.Client {
	t.Helper()
	return lib.cluster(t, cl.addrs, opts...)
}

// masters returns a go-redis client of each master of cl.
func (cl *integCluster) masters(t *testing.T) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(cl.nodes))
	for i, n := range cl.nodes {
		out[i] = n.Client(t)
	}
	return out
}

// integUsedMemory returns the server's used_memory (INFO memory).
func integUsedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no used_memory")
	return 0
}

// integMonitor reads what a server runs (MONITOR), to tell which requests
// clients sent it: INFO commandstats counts the commands that scripts run
// too, and cannot tell them from the requests.
type integMonitor struct {
	t     *testing.T
	conn  net.Conn
	r     *bufio.Reader
	rdb   *redis.Client // sends the marks
	marks int
}

// integMonitorOf starts monitoring the server at addr; rdb is a client of
// it that the test uses for its own look-ups.
func integMonitorOf(t *testing.T, addr string, rdb *redis.Client) *integMonitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	m := &integMonitor{t: t, conn: conn, r: bufio.NewReader(conn), rdb: rdb}
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := m.r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", line)
	m.sent() // rdb's handshake, if it had no connection yet
	return m
}

// sent returns the names (lower case) of the requests that clients sent
// since the last call, in the order the server ran them, less PING, which
// rueidis and valkey-go send on an idle connection by themselves. It sends
// a mark (ECHO) and reads up to it: the server has run every request sent
// before it by then.
func (m *integMonitor) sent() []string {
	m.t.Helper()
	m.marks++
	mark := fmt.Sprintf("integ-mark-%d", m.marks)
	require.NoError(m.t, m.rdb.Echo(context.Background(), mark).Err())
	require.NoError(m.t, m.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	var names []string
	for {
		line, err := m.r.ReadString('\n')
		require.NoError(m.t, err)
		if strings.Contains(line, `"`+mark+`"`) {
			return names
		}
		// +1700000000.123456 [0 127.0.0.1:50000] "evalsha" "…" …
		_, rest, _ := strings.Cut(line, "[")
		who, args, _ := strings.Cut(rest, "] ")
		if strings.HasSuffix(who, " lua") {
			continue // run by a script
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(args, `"`), `"`)
		if name = strings.ToLower(name); name != "ping" {
			names = append(names, name)
		}
	}
}

// integCheckLeaks fails the test if goroutines started since before (see
// servertest.Goroutines) still run after limit, other than those that the
// rueidis and valkey-go clients start for their connections, which end
// when the client is closed, after the test. One of those that runs a
// function of redlease's is a leak too.
func integCheckLeaks(t *testing.T, before map[int]bool, limit time.Duration) {
	t.Helper()
	var leaked []string
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		leaked = integLeaked(before)
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(leaked) > 0 {
		t.Errorf("goroutines leaked:\n%s", strings.Join(leaked, "\n\n"))
	}
}

// integLeaked returns the stacks of the goroutines that integCheckLeaks
// counts as leaked now.
func integLeaked(before map[int]bool) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocks := strings.Split(string(buf), "\n\n")
	self := blocks[0] // runtime.Stack lists the caller's goroutine first
	var leaked []string
	for _, b := range blocks[1:] {
		header, frames, _ := strings.Cut(b, "\n")
		idText, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		id, err := strconv.Atoi(idText)
		if err != nil || before[id] || b == self {
			continue
		}
		redleases, clients := false, false
		for line := range strings.SplitSeq(frames, "\n") {
			switch {
			case strings.HasPrefix(line, "github.com/redlease/redlease") && !strings.HasPrefix(line, "github.com/redlease/redlease/tests."):
				redleases = true
			case strings.HasPrefix(line, "created by github.com/redis/rueidis."),
				strings.HasPrefix(line, "created by github.com/valkey-io/valkey-go."):
				clients = true
			}
		}
		if redleases || !clients {
			leaked = append(leaked, b)
		}
	}
	return leaked
}
