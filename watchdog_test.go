package redlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
	"github.com/redlease/redlease/internal/wire"
)

// renewalsDriver is the go-redis driver, which counts the renewal calls it
// is given, says it talks to Redis Cluster if sharded, and, as a proxy may,
// refuses every refresh_many.lua call while refuse is set, or runs it on
// its first key alone while firstKeyOnly is (a proxy that sends a script
// to the node of its first key, where the other keys are not).
type renewalsDriver struct {
	*goredis.Driver
	rdb                           *redis.Client // the Driver's
	sharded, refuse, firstKeyOnly bool

	mu       sync.Mutex
	many     int // refresh_many.lua calls
	manyKeys int // the leases they name
	single   int // refresh.lua and the shared leases' refresh calls
}

var errCrossSlot = errors.New("CROSSSLOT Keys in request don't hash to the same slot")

func (d *renewalsDriver) Sharded() bool { return d.sharded }

func (d *renewalsDriver) Classify(err error) driver.ErrorClass {
	if errors.Is(err, errCrossSlot) {
		return driver.Refused
	}
	return d.Driver.Classify(err)
}

func (d *renewalsDriver) Eval(ctx context.Context, c driver.Call) driver.Reply {
	r := make([]driver.Reply, 1)
	d.EvalMany(ctx, []driver.Call{c}, r)
	return r[0]
}

func (d *renewalsDriver) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	var pass []driver.Call
	var to []int
	d.mu.Lock()
	for i, c := range calls {
		many := c.Source == wire.Named("refresh_many.lua").Source()
		if c.Hash != "" { // not again, with its source, after NOSCRIPT: counted once
			switch {
			case many:
				d.many++
				d.manyKeys += len(c.Keys)
			case c.Source == wire.Named("refresh.lua").Source(), c.Source == wire.Named("semaphore_refresh.lua").Source():
				d.single++
			}
		}
		switch {
		case many && d.refuse:
			replies[i] = driver.Reply{Err: errCrossSlot}
			continue
		case many && d.firstKeyOnly:
			one := c
			one.Keys, one.Args = c.Keys[:1], c.Args[:2]
			r := make([]driver.Reply, 1)
			d.Driver.EvalMany(ctx, []driver.Call{one}, r)
			if vals, ok := r[0].Value.([]any); ok {
				all := make([]any, len(c.Keys))
				all[0] = vals[0]
				for k := 1; k < len(all); k++ {
					all[k] = int64(0) // not found on the first key's node
				}
				r[0].Value = all
			}
			replies[i] = r[0]
			continue
		}
		pass, to = append(pass, c), append(to, i)
	}
	d.mu.Unlock()
	got := make([]driver.Reply, len(pass))
	d.Driver.EvalMany(ctx, pass, got)
	for j, i := range to {
		replies[i] = got[j]
	}
}

func (d *renewalsDriver) counts() (many, manyKeys, single int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.many, d.manyKeys, d.single
}

// renewalsSetup starts a Redis server and a Client on d over it, on a fake
// clock, with auto-renewed leases of TTL 30 s.
func renewalsSetup(t *testing.T, d *renewalsDriver) (*Client, *clock.Fake, func(*Lease) time.Duration) {
	t.Helper()
	rdb := servertest.Redis(t).Client(t)
	gd, err := goredis.New(rdb)
	require.NoError(t, err)
	d.Driver, d.rdb = gd, rdb
	clk := clock.NewFake(time.Now())
	c := NewWithDriver(d, WithTTL(30*time.Second), clock.Option(clk).(Option))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	pttl := func(l *Lease) time.Duration { return rdb.PTTL(context.Background(), l.keys.Lease).Val() }
	return c, clk, pttl
}

// takeLeases takes the exclusive leases of r-0 ... r-(n-1).
func takeLeases(t *testing.T, c *Client, n int) []*Lease {
	t.Helper()
	leases := make([]*Lease, n)
	for i := range leases {
		l, err := c.TryAcquire(t.Context(), fmt.Sprint("r-", i))
		require.NoError(t, err)
		leases[i] = l
	}
	return leases
}

// renewNow runs one watchdog batch on leases, as the loop does with
// leases that fell due, after cutting each one's TTL in Redis to a second
// (when Redis has it) and moving the clock on by one, so that a renewal
// shows in both places.
func renewNow(t *testing.T, c *Client, clk *clock.Fake, leases []*Lease) {
	t.Helper()
	for _, l := range leases {
		require.NoError(t, c.conn.Driver().(*renewalsDriver).rdb.PExpire(t.Context(), l.keys.Lease, time.Second).Err())
	}
	clk.Advance(time.Second)
	batch := make([]dueLease, len(leases))
	c.wd.mu.Lock()
	for i, l := range leases {
		if l.index >= 0 {
			c.wd.queue.remove(l.index) // as the loop takes a batch off the queue
		}
		batch[i] = dueLease{l, clk.Now()}
	}
	c.wd.inflight++
	c.wd.mu.Unlock()
	c.wd.renewBatch(batch)
}

// Exclusive leases that fall due together are renewed by refresh_many.lua,
// up to wire.RefreshManyMax a call, each with its own verdict; a lease it
// did not renew is tried alone with refresh.lua, whose verdict counts: a
// lease that is no longer ours is lost, and the others are renewed. Other
// leases go in calls of their own in the same batch.
func TestWatchdogRenewsExclusiveLeasesInCallsOfMany(t *testing.T) {
	d := &renewalsDriver{}
	c, clk, pttl := renewalsSetup(t, d)
	ctx := t.Context()
	const n = 2*wire.RefreshManyMax + 30
	leases := takeLeases(t, c, n)
	permit, err := c.TryAcquireSemaphore(ctx, "s", 2)
	require.NoError(t, err)
	rdb := d.rdb
	taken, hash := leases[7], leases[wire.RefreshManyMax+3]
	require.NoError(t, rdb.Set(ctx, taken.keys.Lease, "someone:999", time.Minute).Err())
	require.NoError(t, rdb.Del(ctx, hash.keys.Lease).Err())
	require.NoError(t, rdb.HSet(ctx, hash.keys.Lease, "f", "v").Err())
	many0, _, single0 := d.counts()

	renewNow(t, c, clk, append(leases, permit))

	many, keys, single := d.counts()
	require.Equal(t, 3, many-many0, "refresh_many.lua calls")
	require.Equal(t, n, keys, "leases renewed by them")
	require.Equal(t, 3, single-single0, "calls of their own: the permit's, and refresh.lua's for the two leases not renewed")
	require.ErrorIs(t, context.Cause(taken.Context()), ErrLeaseLost, "a lease that is not ours")
	// refresh.lua fails on a key that holds no string, and its lease is
	// tried again while its local deadline allows; the others in its call
	// were renewed.
	require.NoError(t, hash.Context().Err())
	require.GreaterOrEqual(t, hash.index, 0, "queued to try again")
	for _, l := range append(leases, permit) {
		if l == taken || l == hash {
			continue
		}
		require.NoError(t, l.Context().Err(), "lease %s", l.Resource())
		require.Greater(t, pttl(l), 20*time.Second, "lease %s renewed in Redis", l.Resource())
		require.Equal(t, clk.Now().Add(c.cfg.lifetime()), l.Deadline(), "lease %s renewed here", l.Resource())
		require.GreaterOrEqual(t, l.index, 0, "lease %s queued again", l.Resource())
	}
	require.False(t, c.wd.apart.Load())
}

// Where a proxy refuses a refresh_many.lua call, or sends it to the node of
// its first key, where the other keys are not, refresh.lua renews at once
// the leases it did not, none is lost, and every later batch goes lease by
// lease.
func TestRenewalsOfManyThatAProxyMishandlesGoLeaseByLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     *renewalsDriver
		first int // refresh.lua calls in the first batch
	}{
		{"refused", &renewalsDriver{refuse: true}, 5},
		{"first key only", &renewalsDriver{firstKeyOnly: true}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk, pttl := renewalsSetup(t, tc.d)
			leases := takeLeases(t, c, 5)
			for round := 1; round <= 2; round++ {
				renewNow(t, c, clk, leases)
				many, _, single := tc.d.counts()
				require.Equal(t, 1, many, "refresh_many.lua calls after round %d", round)
				require.Equal(t, tc.first+5*(round-1), single, "refresh.lua calls after round %d", round)
				for _, l := range leases {
					require.NoError(t, l.Context().Err(), "lease %s", l.Resource())
					require.Greater(t, pttl(l), 20*time.Second, "lease %s renewed in Redis", l.Resource())
					require.Equal(t, clk.Now().Add(c.cfg.lifetime()), l.Deadline(), "lease %s renewed here", l.Resource())
				}
			}
			require.True(t, c.wd.apart.Load())
		})
	}
}

// On Redis Cluster a script names keys of one hash slot: every lease is
// renewed by a call of its own.
func TestWatchdogRenewsLeaseByLeaseOnCluster(t *testing.T) {
	d := &renewalsDriver{sharded: true}
	c, clk, pttl := renewalsSetup(t, d)
	leases := takeLeases(t, c, 5)
	renewNow(t, c, clk, leases)
	many, _, single := d.counts()
	require.Equal(t, 0, many, "refresh_many.lua calls")
	require.Equal(t, 5, single, "refresh.lua calls")
	for _, l := range leases {
		require.Greater(t, pttl(l), 20*time.Second, "lease %s renewed in Redis", l.Resource())
	}
}
