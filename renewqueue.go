package redlease

import "time"

// renewQueue orders the watchdog's leases by next renewal time: a min-heap
// with four children per node. With 100,000 leases on one Client, popping
// the leases that fall due off a binary heap (container/heap) took a fifth
// of the process's CPU while it held them: every level a sift passes
// writes the moved Lease's index, a likely cache miss. Four children per node halve the
// levels, and each entry is 16 bytes, so a node's children share one or two
// cache lines. Times are kept as durations since the queue's first entry,
// which keeps the ordering monotonic as time.Time's Sub does.
type renewQueue struct {
	epoch    time.Time
	hasEpoch bool // a fake clock may start at time.Time{}
	e        []renewEntry
}

type renewEntry struct {
	at int64 // when to renew, in nanoseconds after epoch
	l  *Lease
}

const renewArity = 4

func (q *renewQueue) len() int { return len(q.e) }

// key is t on the queue's scale.
func (q *renewQueue) key(t time.Time) int64 {
	if !q.hasEpoch {
		q.epoch, q.hasEpoch = t, true
	}
	return int64(t.Sub(q.epoch))
}

// first is the lease that falls due first and when (len() > 0).
func (q *renewQueue) first(now time.Time) (*Lease, time.Duration) {
	return q.e[0].l, time.Duration(q.e[0].at - q.key(now))
}

// push queues l, which is not queued, for renewal at at.
func (q *renewQueue) push(l *Lease, at time.Time) {
	q.e = append(q.e, renewEntry{at: q.key(at), l: l})
	q.up(len(q.e) - 1)
}

// pop removes the lease that falls due first (len() > 0) and returns it with
// the time it falls due.
func (q *renewQueue) pop() (*Lease, time.Time) {
	e := q.e[0]
	q.remove(0)
	return e.l, q.epoch.Add(time.Duration(e.at))
}

// move changes the renewal time of the queued lease l to at.
func (q *renewQueue) move(l *Lease, at time.Time) {
	q.e[l.index].at = q.key(at)
	if !q.down(l.index) {
		q.up(l.index)
	}
}

// remove takes the entry at index i off the queue.
func (q *renewQueue) remove(i int) {
	l, last := q.e[i].l, len(q.e)-1
	if i != last {
		q.place(i, q.e[last])
	}
	q.e[last] = renewEntry{}
	q.e = q.e[:last]
	l.index = -1
	if i < last && !q.down(i) {
		q.up(i)
	}
}

// up moves the entry at i toward the root until its parent is due no later.
func (q *renewQueue) up(i int) {
	x := q.e[i]
	for i > 0 {
		p := (i - 1) / renewArity
		if q.e[p].at <= x.at {
			break
		}
		q.place(i, q.e[p])
		i = p
	}
	q.place(i, x)
}

// down moves the entry at i toward the leaves until no child is due
// earlier, and reports whether it moved.
func (q *renewQueue) down(i int) bool {
	x, start, n := q.e[i], i, len(q.e)
	for {
		c := renewArity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+renewArity, n); j++ {
			if q.e[j].at < q.e[m].at {
				m = j
			}
		}
		if q.e[m].at >= x.at {
			break
		}
		q.place(i, q.e[m])
		i = m
	}
	q.place(i, x)
	return i > start
}

// place puts e at i.
func (q *renewQueue) place(i int, e renewEntry) {
	q.e[i] = e
	e.l.index = i
}
