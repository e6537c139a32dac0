package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// Leases on Redis Cluster, on every library and both server kinds: one
// cluster per kind, which the libraries and cases share, each case under a
// prefix of its own. (From the core's lease_test.go, admin_test.go,
// fence_test.go, shared_lease_test.go, waiter_test.go, acquire_test.go and
// election_test.go.)
func TestIntegrationCluster(t *testing.T) {
	integOnCluster(t, []integClusterCase{
		{"ClusterClient", testClusterClient},
		{"AdminOnCluster", testAdminOnCluster},
		{"FencesRiseAcrossSlotMigration", testFencesRiseAcrossSlotMigration},
		{"SharedLeasesOnCluster", testSharedLeasesOnCluster},
		{"AcquireOnClusterWakesWaiters", testAcquireOnClusterWakesWaiters},
		{"AcquireAllAcrossClusterSlots", testAcquireAllAcrossClusterSlots},
		{"CampaignOnCluster", testCampaignOnCluster},
		{"ObserveOnCluster", testObserve},
		{"BreakOnCluster", testBreakOnCluster},
		{"HandoverOnCluster", testHandover},
	})
}

func testClusterClient(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	c := cl.client(t, lib, redlease.WithPrefix(prefix), redlease.WithTTL(500*time.Millisecond))
	rival := cl.client(t, lib, redlease.WithPrefix(prefix))
	var leases []*redlease.Lease
	for i := range 30 { // resources spread over the slots of all three masters
		l, err := c.TryAcquire(ctx, fmt.Sprint("shard-", i))
		require.NoError(t, err)
		require.Equal(t, int64(1), l.Fence())
		leases = append(leases, l)
	}
	time.Sleep(1500 * time.Millisecond) // renewals in pipelines that span nodes
	for _, l := range leases {
		require.NoError(t, l.Context().Err(), l.Resource())
		_, err := rival.TryAcquire(ctx, l.Resource())
		require.ErrorIs(t, err, redlease.ErrNotAcquired)
		require.NoError(t, l.Release(ctx))
	}
	l, err := rival.TryAcquire(ctx, "shard-7")
	require.NoError(t, err)
	require.Greater(t, l.Fence(), int64(1))
	require.NoError(t, l.Release(ctx))
}

func testAdminOnCluster(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	c := cl.client(t, lib, redlease.WithPrefix(prefix), redlease.WithAutoRenew(false))
	var names []string
	for i := range 30 { // spread over the slots of all three masters
		r := fmt.Sprintf("shard:%d", i)
		l, err := c.TryAcquire(ctx, r)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, l.Release(ctx)) // not found: nothing of it is left but its slot's counter
		} else {
			names = append(names, r)
		}
	}
	var found []string
	require.NoError(t, c.Scan(ctx, "shard:*", func(st redlease.Status) error {
		found = append(found, st.Resource)
		return nil
	}))
	slices.Sort(found)
	slices.Sort(names)
	require.Equal(t, names, found)

	st, removed, err := c.Break(ctx, "shard:1", 0)
	require.NoError(t, err)
	require.True(t, removed)
	require.Positive(t, st.Fence)
	fence := st.Fence
	st, err = c.Inspect(ctx, "shard:1")
	require.NoError(t, err)
	require.False(t, st.Held)
	require.GreaterOrEqual(t, st.LastFence, fence)
	require.NoError(t, cl.cc.Get(ctx, integCounterKey(prefix, "shard:1")).Err())
	require.ErrorIs(t, cl.cc.Get(ctx, integLeaseKey(prefix, "shard:1")).Err(), redis.Nil)
}

// Fences of a resource keep rising when its slot, counter included, moves to
// another master (a reshard).
func testFencesRiseAcrossSlotMigration(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	c := cl.client(t, lib, redlease.WithPrefix(prefix), redlease.WithAutoRenew(false))
	take := func() int64 {
		t.Helper()
		l, err := c.TryAcquire(ctx, "moving")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return l.Fence()
	}
	for range 3 {
		take()
	}
	last := take()
	slot := wire.SlotOf("moving")
	// The slot's master: the one node that serves it (the others answer
	// MOVED). Another library's case may have moved it already.
	var src, dst *redis.Client
	for _, n := range cl.masters(t) {
		if err := n.Get(ctx, "{moving}").Err(); src == nil && (err == nil || errors.Is(err, redis.Nil)) {
			src = n
		} else if dst == nil {
			dst = n
		}
	}
	require.NotNil(t, src, "no master serves the slot")
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	require.NoError(t, dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	require.NoError(t, src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	ks, err := src.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	require.NoError(t, err)
	require.Contains(t, ks, integCounterKey(prefix, "moving"), "the counter lives in the resource's slot")
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for _, k := range ks {
		require.NoError(t, src.Migrate(ctx, host, port, k, 0, 5*time.Second).Err())
	}
	for _, n := range []*redis.Client{dst, src} {
		require.NoError(t, n.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	}
	require.Greater(t, take(), last, "the counter moved with its slot")
}

// Shared leases on Redis Cluster: each script's keys share the resource's
// slot (the fence counter included), so they run on any master.
func testSharedLeasesOnCluster(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	c := cl.client(t, lib, redlease.WithPrefix(prefix), redlease.WithTTL(time.Second))
	for i := range 6 { // over the slots of all masters
		r := fmt.Sprintf("cluster:%d", i)
		p, err := c.AcquireSemaphore(ctx, r, 2)
		require.NoError(t, err)
		rd, err := c.AcquireRead(ctx, r+":rw")
		require.NoError(t, err)
		done := integGo(func() (*redlease.Lease, error) { return c.AcquireWrite(ctx, r+":rw") })
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(integQueued(t, cl.cc, prefix, r+":rw")) == 1 })
		require.NoError(t, rd.Release(ctx))
		w := servertest.Recv(t, done, 5*time.Second) // woken through the slot's shard channel
		require.NoError(t, w.err)
		require.Greater(t, w.l.Fence(), rd.Fence())
		st, err := c.Inspect(ctx, r)
		require.NoError(t, err)
		require.Len(t, st.Shared, 1)
		require.NoError(t, errors.Join(p.Release(ctx), w.l.Release(ctx)))
	}
}

func testAcquireOnClusterWakesWaiters(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	holder := cl.client(t, lib, redlease.WithPrefix(prefix))
	var leases []*redlease.Lease
	var waits []<-chan integResult
	for i := range 6 {
		res := fmt.Sprint("cl-", i)
		l, err := holder.TryAcquire(ctx, res)
		require.NoError(t, err)
		leases = append(leases, l)
		waits = append(waits, integWaiter(ctx, cl.client(t, lib, redlease.WithPrefix(prefix)), res, redlease.WithMaxWait(30*time.Second)))
		servertest.WaitFor(t, 10*time.Second, func() bool { return len(integQueued(t, cl.cc, prefix, res)) == 1 })
	}
	for i, l := range leases {
		require.NoError(t, l.Release(ctx))
		got := servertest.Recv(t, waits[i], 60*time.Second)
		require.NoError(t, got.err)
		require.Greater(t, got.l.Fence(), l.Fence())
		require.NoError(t, got.l.Release(ctx))
	}
}

// AcquireAll of resources in many slots takes them one by one, in order, one
// request each. (The core counted the requests with a go-redis hook; the
// masters count them here, for every library.)
func testAcquireAllAcrossClusterSlots(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	c := cl.client(t, lib, redlease.WithPrefix(prefix))
	resources := []string{"orders", "payments", "users", "{tenant}:a", "{tenant}:b"}
	ls, err := c.AcquireAll(ctx, resources)
	require.NoError(t, err, "spread over slots: taken one by one in order")
	for i, l := range ls {
		require.Equal(t, resources[i], l.Resource())
		require.Positive(t, l.Fence())
	}
	require.Greater(t, ls[4].Fence(), ls[3].Fence(), "one slot, one counter, taken in sorted order")
	// One busy resource: the others are given back.
	_, err = cl.client(t, lib, redlease.WithPrefix(prefix)).TryAcquireAll(ctx, []string{"zebra", "users"})
	require.ErrorIs(t, err, redlease.ErrNotAcquired)
	require.Zero(t, cl.cc.Exists(ctx, integLeaseKey(prefix, "zebra")).Val(), "the lease taken first was released")
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	// Once the scripts are loaded, one request per resource: no script for
	// all of them first, which Cluster refuses (CROSSSLOT), and no give-back
	// of what it did not take.
	masters := cl.masters(t)
	var monitors []*integMonitor
	for i, n := range cl.nodes {
		monitors = append(monitors, integMonitorOf(t, n.Addr, masters[i]))
	}
	integResetStats(t, masters...)
	ls, err = c.AcquireAll(ctx, resources)
	require.NoError(t, err)
	var sent []string
	for _, m := range monitors {
		sent = append(sent, m.sent()...)
	}
	require.Equal(t, slices.Repeat([]string{"evalsha"}, len(resources)), sent, "requests for %d resources", len(resources))
	require.Zero(t, integRejected(t, masters...), "no request refused (MONITOR does not show them)")
	for _, l := range ls {
		require.NoError(t, l.Release(ctx))
	}
	// Same hash slot: one script.
	same, err := c.TryAcquireAll(ctx, []string{"{tenant}:a", "{tenant}:b"})
	require.NoError(t, err)
	require.Greater(t, same[1].Fence(), same[0].Fence(), "one slot, one counter")
	require.Equal(t, same[0].Owner(), same[1].Owner(), "taken by one script, under one owner token")
	require.NoError(t, errors.Join(same[0].Release(ctx), same[1].Release(ctx)))
}

// The record's script names both of its keys, which share the election's
// hash slot, so a campaign works on Redis Cluster.
func testCampaignOnCluster(t *testing.T, lib library, cl *integCluster, prefix string) {
	ctx := t.Context()
	e := redlease.NewElection(cl.client(t, lib, redlease.WithPrefix(prefix)), "cron")
	term, err := e.Campaign(ctx, "host-a")
	require.NoError(t, err)
	ld, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, redlease.Leader{Value: "host-a", Owner: term.Owner(), Fence: term.Fence(), Remaining: ld.Remaining}, ld)
	require.NoError(t, term.Release(ctx))
}

// integRejected returns the commands that the servers at nodes refused
// before running them (rejected_calls of INFO commandstats) since their
// stats were reset.
func integRejected(t *testing.T, nodes ...*redis.Client) int {
	t.Helper()
	n := 0
	for _, node := range nodes {
		info, err := node.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		for _, f := range strings.FieldsFunc(info, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
			if v, ok := strings.CutPrefix(f, "rejected_calls="); ok {
				calls, err := strconv.Atoi(v)
				require.NoError(t, err)
				n += calls
			}
		}
	}
	return n
}
