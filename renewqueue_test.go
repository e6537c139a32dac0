package redlease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/require"
)

// The queue against a plain record of what it holds, under random pushes,
// moves, removals and pops: pops come in renewal-time order and every
// queued lease's index points at its own entry.
func TestRenewQueueOrdersLeasesByRenewalTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var q renewQueue
	queued := map[*Lease]time.Time{}
	check := func() {
		t.Helper()
		require.Equal(t, len(queued), q.len())
		for i, e := range q.e {
			require.Equal(t, i, e.l.index, "index of entry %d", i)
			require.True(t, queued[e.l].Equal(q.timeOf(e.l)), "entry %d holds the time it was given", i)
			if i > 0 {
				require.LessOrEqual(t, q.e[(i-1)/renewArity].at, e.at, "entry %d is due before its parent", i)
			}
		}
	}
	some := func() *Lease {
		for l := range queued {
			return l
		}
		return nil
	}
	for range 20_000 {
		at := start.Add(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
		switch op := rng.IntN(10); {
		case op < 4 || len(queued) == 0:
			l := &Lease{index: -1}
			q.push(l, at)
			queued[l] = at
		case op < 6:
			l := some()
			q.move(l, at)
			queued[l] = at
		case op < 8:
			l := some()
			q.remove(l.index)
			require.Equal(t, -1, l.index)
			delete(queued, l)
		default:
			want := queued[q.e[0].l]
			for _, at := range queued {
				if at.Before(want) {
					t.Fatalf("the first entry is due at %v, another at %v", want, at)
				}
			}
			_, in := q.first(start)
			require.Equal(t, want.Sub(start), in)
			l, at := q.pop()
			require.True(t, want.Equal(at), "pop returns the time the lease was due")
			require.Equal(t, -1, l.index)
			delete(queued, l)
		}
		check()
	}
	for prev := time.Duration(-1); q.len() > 0; {
		_, in := q.first(start)
		require.LessOrEqual(t, prev, in, "pops in order")
		prev = in
		q.pop()
	}
}

func BenchmarkRenewQueue(b *testing.B) {
	// 100,000 leases renewed every 3.33 s, in batches of 1,000: pop the
	// batch, push it back one interval later.
	const n, batch, interval = 100_000, 1_000, 3333 * time.Millisecond
	start := time.Now()
	var q renewQueue
	leases := make([]Lease, n)
	for i := range leases {
		leases[i].index = -1
		q.push(&leases[i], start.Add(time.Duration(i)*interval/n))
	}
	due := make([]dueLease, 0, batch)
	b.ResetTimer()
	for b.Loop() {
		due = due[:0]
		for range batch {
			l, at := q.pop()
			due = append(due, dueLease{l, at})
		}
		for _, p := range due {
			q.push(p.l, p.due.Add(interval))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/lease")
}

// timeOf is the renewal time of the queued lease l.
func (q *renewQueue) timeOf(l *Lease) time.Time {
	return q.epoch.Add(time.Duration(q.e[l.index].at))
}
