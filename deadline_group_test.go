package redlease

import (
	"testing"
	"time"

	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// A batch's renewals put its leases in one deadline group, whose timer is
// armed for their deadline and stopped once the last of them has left it,
// by a later renewal or by its end; a lease whose deadline is another
// keeps its own timer.
func TestDeadlineGroupTimerStopsWhenItsLeasesLeave(t *testing.T) {
	_, rdb := servertest.Mini(t)
	clk := clock.NewFake(time.Now())
	c := New(rdb, WithTTL(30*time.Second), clock.Option(clk).(Option))
	ctx := t.Context()
	defer c.Close(ctx)
	renew := func(leases ...*Lease) {
		t.Helper()
		batch := make([]dueLease, len(leases))
		c.wd.mu.Lock()
		for i, l := range leases {
			if l.index < 0 { // the watchdog's own loop took it: fail, and let Close have the lock
				c.wd.mu.Unlock()
				t.Fatalf("%s is off the watchdog's queue before the test renews it", l.Resource())
			}
			c.wd.queue.remove(l.index) // as the loop takes a batch off the queue
			batch[i] = dueLease{l, clk.Now()}
		}
		c.wd.inflight++
		c.wd.mu.Unlock()
		c.wd.renewBatch(batch)
	}
	group := func(l *Lease) *deadlineGroup {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.group
	}
	var leases []*Lease
	for _, r := range []string{"a", "b", "c"} {
		l, err := c.TryAcquire(ctx, r)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	// Another TTL, another deadline. Its first renewal falls due after 6 s
	// (an interval of TTL/3, less a tenth), past the 2 s the clock moves
	// before its last step: the watchdog's own loop, which runs on the same
	// clock, must not take off the queue a lease that renew takes off by
	// hand (with a TTL of 3 s it did, now and then, after the first second).
	short, err := c.TryAcquire(ctx, "short", WithTTL(20*time.Second))
	require.NoError(t, err)
	clk.Advance(time.Second)

	renew(append(leases, short)...)
	g := group(leases[0])
	require.NotNil(t, g)
	for _, l := range leases {
		require.True(t, g == group(l), "%s in g", l.Resource())
		require.Equal(t, g.at, l.Deadline())
	}
	require.Nil(t, group(short), "another deadline: its own timer")
	g.mu.Lock()
	require.Equal(t, 3, g.members)
	require.NotNil(t, g.timer, "armed")
	g.mu.Unlock()
	require.True(t, short.Deadline().Before(g.at))

	clk.Advance(time.Second)
	renew(leases[0], leases[1]) // they leave g for the next group
	require.True(t, g != group(leases[0]), "a left g")
	require.NoError(t, leases[2].Release(ctx)) // and the last leaves by its end
	require.Nil(t, group(leases[2]))
	g.mu.Lock()
	require.Equal(t, 0, g.members)
	require.False(t, g.timer.Stop(), "stopped by the last lease to leave")
	g.mu.Unlock()
	clk.Advance(g.at.Sub(clk.Now()))
	for _, l := range leases[:2] {
		require.NoError(t, l.Context().Err(), "%s: its deadline is a second after g's", l.Resource())
	}
}
