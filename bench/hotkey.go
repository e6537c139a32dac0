package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// hold is how long each holder of the hot key keeps it.
const hold = 100 * time.Microsecond

// hotResult is one implementation with n contenders on one key.
type hotResult struct {
	name        string
	contenders  int
	handoffs    int
	elapsed     time.Duration
	p50, p99    time.Duration
	mean        time.Duration // the time the lock sat free, per handoff
	clientCmds  float64       // per handoff, go-redis hook, all contenders
	serverCmds  float64       // per handoff, INFO commandstats, script calls included
	serverCPU   time.Duration
	passTimeout int // releases after which no other contender took the lock within maxPass
	free        int // acquisitions by a contender that asked only after the release began
}

// perSec is the rate at which the lock changed hands, to waiting and to
// newly arriving contenders alike.
func (r hotResult) perSec() float64 { return float64(r.handoffs+r.free) / r.elapsed.Seconds() }

// maxPass bounds how long a releaser waits for another contender to take
// the lock before it competes again.
const maxPass = 2 * time.Second

// handoffLog records when the lock changed hands. Every contender that
// releases waits until another contender has taken the lock (or maxPass has
// passed) before it asks again: in a tight loop the releaser of a polling
// lock takes its own lock back one round trip later while the others sleep,
// and that would count as a handoff that no waiter ever got.
//
// Only handoffs to a contender that was already waiting count: one whose
// acquire call began before the previous holder began to release. With a
// hold of 100 µs a contender that has just been passed the turn often asks
// only after the release, finds the lock free and takes it at once, whatever
// the library; those acquisitions are counted apart (free) and say nothing
// about how a library wakes its waiters.
type handoffLog struct {
	start time.Time
	want  int
	done  chan struct{}

	mu            sync.Mutex
	gen           int           // acquisitions so far
	turn          chan struct{} // closed by the next acquisition
	relStartGen   int           // the generation whose release has begun
	relStartAt    time.Duration // when it began
	relGen        int           // the generation whose release has returned
	relAt         time.Duration // when it returned
	pending       bool          // an acquisition returned before the previous release did
	pendingWaited bool          // … and its caller had been waiting
	lat           []time.Duration
	free          int // acquisitions by a contender that asked after the release began
	stopped       bool
}

func newHandoffLog(want int) *handoffLog {
	return &handoffLog{start: time.Now(), want: want, done: make(chan struct{}), turn: make(chan struct{}),
		lat: make([]time.Duration, 0, want)}
}

func (h *handoffLog) now() time.Duration { return time.Since(h.start) }

// acquired records an acquisition whose call began at called and returned
// at at; it returns the acquisition's generation and a channel closed by the
// next one.
func (h *handoffLog) acquired(called, at time.Duration) (int, chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen > 0 {
		waited := h.relStartGen == h.gen && called < h.relStartAt
		switch {
		case h.relGen != h.gen: // the previous release has not returned yet
			h.pending, h.pendingWaited = true, waited
		case waited:
			h.record(at - h.relAt)
		default:
			h.free++
		}
	}
	h.gen++
	close(h.turn)
	h.turn = make(chan struct{})
	return h.gen, h.turn
}

// releasing records that the holder of generation gen begins to release.
func (h *handoffLog) releasing(gen int, at time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.relStartGen, h.relStartAt = gen, at
}

// released records that the release of generation gen returned at at.
func (h *handoffLog) released(gen int, at time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == gen {
		h.relGen, h.relAt = gen, at
		return
	}
	// The next holder's acquire returned before our release did.
	if h.pending && h.pendingWaited {
		h.record(0)
	} else if h.pending {
		h.free++
	}
	h.pending = false
}

func (h *handoffLog) record(d time.Duration) {
	if h.stopped {
		return
	}
	h.lat = append(h.lat, max(0, d))
	if len(h.lat) == h.want {
		h.stopped = true
		close(h.done)
	}
}

// hotKey runs n contenders, each with its own go-redis client and library
// client (as n processes would have), on one key: acquire, hold ~100µs,
// release, wait for someone else to take it, again. It stops after want
// handoffs or limit, whichever comes first.
func hotKey(ctx context.Context, srv *server, im impl, n, want int, limit time.Duration) (hotResult, error) {
	res := hotResult{name: im.name, contenders: n}
	hook := &countingHook{}
	lockers := make([]locker, n)
	for i := range lockers {
		rdb := srv.client(hook, 0)
		defer rdb.Close()
		lockers[i] = im.locker(rdb, im.shared(rdb))
		defer closeLocker(ctx, lockers[i])
		if err := pair(ctx, lockers[i], "hot"); err != nil { // warm up
			return res, err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHandoffLog(want)
	hook.cmds.Store(0)
	for _, lk := range lockers {
		if tc, ok := lk.(tripCounter); ok {
			tc.trips().Store(0)
		}
	}
	st0 := srv.stats(ctx)
	var (
		wg       sync.WaitGroup
		timeouts atomic.Int64
		errMu    sync.Mutex
		firstErr error
	)
	for _, lk := range lockers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				called := h.now()
				if err := lk.Lock(runCtx, "hot"); err != nil {
					if runCtx.Err() == nil {
						errMu.Lock()
						firstErr = errors.Join(firstErr, err)
						errMu.Unlock()
						cancel()
					}
					return
				}
				gen, turn := h.acquired(called, h.now())
				spin(hold)
				h.releasing(gen, h.now())
				err := lk.Unlock(context.WithoutCancel(runCtx))
				h.released(gen, h.now())
				if err != nil {
					errMu.Lock()
					firstErr = errors.Join(firstErr, err)
					errMu.Unlock()
					cancel()
					return
				}
				t := time.NewTimer(maxPass)
				select {
				case <-turn:
				case <-t.C:
					timeouts.Add(1)
				case <-runCtx.Done():
				}
				t.Stop()
			}
		})
	}
	t := time.NewTimer(limit)
	select {
	case <-h.done:
	case <-t.C:
	case <-runCtx.Done():
	}
	t.Stop()
	h.mu.Lock()
	h.stopped = true
	lat := slices.Clone(h.lat)
	res.free = h.free
	h.mu.Unlock()
	res.elapsed = time.Since(h.start)
	cmds := hook.cmds.Load()
	for _, lk := range lockers { // counted by their own client
		if tc, ok := lk.(tripCounter); ok {
			cmds += tc.trips().Load()
		}
	}
	st := srv.stats(ctx).sub(st0)
	cancel()
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	res.handoffs = len(lat)
	res.passTimeout = int(timeouts.Load())
	if len(lat) > 0 {
		slices.Sort(lat)
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		res.mean = sum / time.Duration(len(lat))
		res.p50 = lat[len(lat)/2]
		res.p99 = lat[len(lat)*99/100]
	}
	if changes := len(lat) + res.free; changes > 0 {
		res.clientCmds = float64(cmds) / float64(changes)
		res.serverCmds = float64(st.calls) / float64(changes)
		res.serverCPU = st.cpu / time.Duration(changes)
	}
	return res, srv.flush(ctx)
}

// spin holds the CPU for d: a sleep this short would measure the timer.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
