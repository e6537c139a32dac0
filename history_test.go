package redlease_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/stretchr/testify/require"
)

// A history of what the clients of a fault scenario did and saw, checked
// after the scenario: by porcupine against a model of the lock service and
// the fenced resource, and by direct checks of fences, the resource's
// accepted writes, the local-deadline bound (S3) and renewals after the end
// of a lease (S4).

type opKind uint8

const (
	opAcquire opKind = iota
	opRenew
	opRelease
	opWrite
)

func (k opKind) String() string { return [...]string{"acquire", "renew", "release", "write"}[k] }

type outcomeKind uint8

const (
	resOK      outcomeKind = iota // acquired, renewed, released, write accepted
	resFail                       // busy / lost / write rejected
	resUnknown                    // the outcome could not be learned
)

func (r outcomeKind) String() string { return [...]string{"ok", "fail", "unknown"}[r] }

type opInput struct {
	kind     opKind
	resource string
	owner    string
	fence    int64 // renew, release, write; acquire: 0
}

type opOutput struct {
	res   outcomeKind
	fence int64  // acquire ok: the fence handed out
	owner string // acquire ok: the lease's owner token
}

// leaseLog is what the history knows of one lease, from its observer events.
type leaseLog struct {
	resource   string
	owner      string
	fence      int64
	ttl        time.Duration
	confirmed  []time.Time      // send times of the acquire and of every confirmed renewal
	renewsSent []time.Time      // send times of every renewal, whatever its outcome
	ended      time.Time        // when its context ended; zero if it did not
	endedBy    redlease.Outcome // lost, expired, max hold; 0 for release
}

type history struct {
	mu     sync.Mutex
	start  time.Time
	ops    []porcupine.Operation
	leases map[string]*leaseLog // by owner token
}

func newHistory() *history {
	return &history{start: time.Now(), leases: map[string]*leaseLog{}}
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// record adds an operation that ran from call to now. An unknown outcome
// may take effect at any time after the call, so its return is "never".
func (h *history) record(client int, call int64, in opInput, out opOutput) {
	ret := h.now()
	if out.res == resUnknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
}

// observer returns the redlease.Observer that fills in the leases' logs; give it to
// every redlease.Client of the scenario, with the TTL they use.
func (h *history) observer(ttl time.Duration) redlease.Observer {
	return redlease.ObserverFunc(func(_ context.Context, e redlease.Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		l := h.leases[e.Owner]
		if l == nil && e.Owner != "" && e.Kind == redlease.EventAcquire && e.Outcome == redlease.OutcomeOK {
			l = &leaseLog{resource: e.Resource, owner: e.Owner, fence: e.Fence, ttl: ttl}
			h.leases[e.Owner] = l
		}
		if l == nil {
			return
		}
		switch e.Kind {
		case redlease.EventRenew:
			l.renewsSent = append(l.renewsSent, e.Start)
			if e.Outcome == redlease.OutcomeOK {
				l.confirmed = append(l.confirmed, e.Start)
			}
		case redlease.EventLost:
			if l.ended.IsZero() {
				l.ended, l.endedBy = e.End, e.Outcome
			}
		case redlease.EventRelease:
			if l.ended.IsZero() {
				l.ended = e.Start
			}
		}
	})
}

// acquired records the send time of a lease's acquire request: its first
// local deadline less the lease's local lifetime. (Should a renewal have
// moved the deadline by now, that is the send time of a renewal, which
// confirmed the lease too.)
func (h *history) acquired(l *redlease.Lease) {
	sent := l.Deadline().Add(-faultLifetime)
	h.mu.Lock()
	defer h.mu.Unlock()
	if ll := h.leases[l.Owner()]; ll != nil {
		ll.confirmed = append([]time.Time{sent}, ll.confirmed...)
	}
}

// Acquire runs c.Acquire (or TryAcquire when wait is false) and records it.
func (h *history) Acquire(ctx context.Context, client int, c *redlease.Client, resource string, wait bool, opts ...redlease.Option) (*redlease.Lease, error) {
	call := h.now()
	var (
		l   *redlease.Lease
		err error
	)
	if wait {
		l, err = c.Acquire(ctx, resource, opts...)
	} else {
		l, err = c.TryAcquire(ctx, resource, opts...)
	}
	out := opOutput{res: resFail}
	switch {
	case err == nil:
		out = opOutput{res: resOK, fence: l.Fence(), owner: l.Owner()}
		h.acquired(l)
	case errors.Is(err, redlease.ErrOutcomeUnknown):
		out.res = resUnknown
	}
	h.record(client, call, opInput{kind: opAcquire, resource: resource}, out)
	return l, err
}

// Refresh runs l.Refresh and records it.
func (h *history) Refresh(ctx context.Context, client int, l *redlease.Lease) error {
	call := h.now()
	err := l.Refresh(ctx)
	h.record(client, call, opInput{kind: opRenew, resource: l.Resource(), owner: l.Owner(), fence: l.Fence()}, outcome(err, redlease.ErrLeaseLost, redlease.ErrReleased))
	return err
}

// Release runs l.Release and records it.
func (h *history) Release(ctx context.Context, client int, l *redlease.Lease) error {
	call := h.now()
	err := l.Release(ctx)
	h.record(client, call, opInput{kind: opRelease, resource: l.Resource(), owner: l.Owner(), fence: l.Fence()}, outcome(err, redlease.ErrLeaseLost))
	return err
}

// Write runs a fenced write and records it: write must return nil when the
// resource accepted it and an error matching fencing.ErrStaleFence when it refused.
func (h *history) Write(client int, resource, owner string, fence int64, write func() error) error {
	call := h.now()
	err := write()
	h.record(client, call, opInput{kind: opWrite, resource: resource, owner: owner, fence: fence}, outcome(err, fencing.ErrStaleFence))
	return err
}

// outcome classifies an operation's error: nil is ok, the given errors are
// a definite failure, anything else (network trouble) is unknown.
func outcome(err error, fails ...error) opOutput {
	if err == nil {
		return opOutput{res: resOK}
	}
	for _, f := range fails {
		if errors.Is(err, f) {
			return opOutput{res: resFail}
		}
	}
	return opOutput{res: resUnknown}
}

// modelState is the sequential specification of one resource: its lock
// (the last fence issued and its holder) and the fenced resource (the newest
// fence accepted and its owner).
type modelState struct {
	counter     int64
	holder      string
	holderFence int64
	held        bool
	newest      int64
	newestOwner string
}

// checks says which guarantees a scenario's history must keep. Fence order
// (S1) and ownership (S2) are promised only without failover or loss of the
// counter; the resource rule (S5) always.
type checks struct {
	fenceOrder bool // S1: every acquisition gets a fence above every earlier one (fences may skip)
	ownership  bool // S2: renew and release succeed only for the current holder
}

// lockModel is the model of the history: per resource, two objects that
// share nothing — the lock (acquire, renew, release: counter, holder) and the
// fenced resource (write: newest, newestOwner). No step of one reads or
// changes the other's half of modelState, so by the locality of
// linearizability (Herlihy and Wing: a history is linearizable iff its
// restriction to each object is) each is checked as a partition of its own.
// That is exact, not an approximation, and it matters: porcupine keeps a
// bitset of the partition's length for every state it caches, so its memory
// grows with the square of a partition's length (the long Sentinel scenario,
// 230 000 operations on three resources, took 0.9 GB of heap and 7.5 GB of
// RSS under -race with one partition per resource). The writes of a
// resource are cut further, where none is in flight (segmentWrites). Where
// neither S1 nor S2 is checked, the lock's specification accepts every
// history (each of its steps has a successor whatever the outcome), so its
// operations are left out of porcupine's input.
func lockModel(c checks) porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			type object struct {
				resource string
				write    bool
			}
			by := map[object][]porcupine.Operation{}
			var keys []object
			for _, op := range ops {
				in := op.Input.(opInput)
				k := object{in.resource, in.kind == opWrite}
				if !k.write && !c.fenceOrder && !c.ownership {
					continue
				}
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			slices.SortFunc(keys, func(a, b object) int {
				if a.resource != b.resource {
					return strings.Compare(a.resource, b.resource)
				}
				if a.write == b.write {
					return 0
				}
				if a.write {
					return 1
				}
				return -1
			})
			var out [][]porcupine.Operation
			for _, k := range keys {
				if k.write {
					out = append(out, segmentWrites(by[k])...)
				} else {
					out = append(out, by[k])
				}
			}
			return out
		},
		Init: func() []any { return []any{modelState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(modelState), input.(opInput), output.(opOutput)
			switch in.kind {
			case opAcquire:
				took := func(fence int64, owner string) modelState {
					n := s
					n.counter, n.holder, n.holderFence, n.held = max(s.counter, fence), owner, fence, true
					return n
				}
				switch out.res {
				case resOK:
					if c.fenceOrder && out.fence <= s.counter {
						return nil
					}
					return []any{took(out.fence, out.owner)}
				case resFail:
					return []any{s}
				default: // it may have drawn the next fence, for an owner nobody learned
					return []any{s, took(s.counter+1, "?")}
				}
			case opRenew, opRelease:
				if !c.ownership {
					return []any{s}
				}
				ours := s.held && s.holder == in.owner && s.holderFence == in.fence
				released := s
				released.held = false
				switch {
				case out.res == resOK && !ours:
					return nil
				case out.res == resOK && in.kind == opRelease:
					return []any{released}
				case out.res == resUnknown && in.kind == opRelease && ours:
					return []any{s, released}
				}
				return []any{s}
			case opWrite:
				admit := in.fence > s.newest || (in.fence == s.newest && in.owner == s.newestOwner)
				accepted := s
				accepted.newest, accepted.newestOwner = in.fence, in.owner
				switch out.res {
				case resOK:
					if !admit {
						return nil
					}
					return []any{accepted}
				case resFail:
					if admit {
						return nil
					}
					return []any{s}
				default:
					if admit {
						return []any{s, accepted}
					}
					return []any{s}
				}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(opInput), output.(opOutput)
			owner := in.owner
			if len(owner) > 8 {
				owner = owner[:8]
			}
			switch in.kind {
			case opAcquire:
				if out.res == resOK {
					return fmt.Sprintf("acquire(%s) -> fence %d", in.resource, out.fence)
				}
				return fmt.Sprintf("acquire(%s) -> %v", in.resource, out.res)
			}
			return fmt.Sprintf("%v(%s, %s, %d) -> %v", in.kind, in.resource, owner, in.fence, out.res)
		},
		DescribeState: func(state any) string {
			s := state.(modelState)
			return fmt.Sprintf("counter=%d holder=%d held=%v newest=%d", s.counter, s.holderFence, s.held, s.newest)
		},
	}
	return nm.ToModel()
}

// segmentWrites cuts the writes of one resource into segments that porcupine
// checks apart, linear in memory where one partition would be quadratic. A
// cut goes where no write is in flight: every write before it returned
// before every write after it was called. Every linearization then puts all
// of the writes before the cut first, and they leave the resource in one
// state only, whichever linearization: accepted writes go up in fence, so
// the last accepted one has the largest fence, and one fence is accepted
// from one owner (or those writes are not linearizable, which their own
// segment shows). So the history is linearizable iff each segment is,
// starting from that state — which a seed write carries in: an accepted
// write of the largest fence so far, by its owner, just before the
// segment's first call, on a client of its own. A write whose outcome is
// unknown may take effect at any time after its call (history.record makes
// it never return), so after its call there is no cut.
func segmentWrites(ops []porcupine.Operation) [][]porcupine.Operation {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var (
		out      [][]porcupine.Operation
		start    int                     // of the current segment
		returned int64   = math.MinInt64 // the latest return of ops[:i]
		seed     opInput                 // the state before the current segment
		newest   opInput                 // the state after ops[:i], if linearizable
		client   int                     // the largest client id
	)
	cut := func(end int) {
		seg := ops[start:end]
		if seed.fence > 0 {
			seg = append([]porcupine.Operation{{ClientId: client + 1, Call: seg[0].Call - 1, Return: seg[0].Call - 1,
				Input: seed, Output: opOutput{res: resOK}, Metadata: "the state left by the writes before"}}, seg...)
		}
		out = append(out, seg)
	}
	for i, op := range ops {
		if i > start && returned < op.Call {
			cut(i)
			start, seed = i, newest
		}
		returned = max(returned, op.Return)
		client = max(client, op.ClientId)
		switch in, res := op.Input.(opInput), op.Output.(opOutput).res; {
		case res == resUnknown: // it may take effect at any time: the state is not one after it
			returned = math.MaxInt64
		case res == resOK && in.fence > newest.fence:
			newest = in
		}
	}
	if start < len(ops) {
		cut(len(ops))
	}
	return out
}

// check runs verify and fails the test on a violation.
func (h *history) check(t *testing.T, c checks) {
	t.Helper()
	if err := h.verify(c, t.Name()); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	counts := map[string]int{}
	for _, op := range h.ops {
		counts[fmt.Sprintf("%v:%v", op.Input.(opInput).kind, op.Output.(opOutput).res)]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, counts[k])
	}
	t.Logf("history: %d operations, %d leases, checked;%s", len(h.ops), len(h.leases), b.String())
}

// verify runs porcupine and the direct checks on the history and returns
// the first violation. On a failed linearizability check it writes
// porcupine's visualisation to a file and names it.
func (h *history) verify(c checks, name string) error {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	leases := make([]*leaseLog, 0, len(h.leases))
	for _, l := range h.leases {
		leases = append(leases, l)
	}
	h.mu.Unlock()

	model := lockModel(c)
	const timeout = time.Minute
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	if res != porcupine.Ok {
		// Again, for the visualisation: the verbose check records partial
		// linearizations, a slice of the partition's length at every
		// backtrack, which made most of the check's allocations on the long
		// Cluster scenario's histories. The check is deterministic: it
		// finds the same violation.
		_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		path := filepath.Join(os.TempDir(), fmt.Sprintf("redlease-%s-%d.html", strings.ReplaceAll(name, "/", "_"), time.Now().UnixNano()))
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			path = "not written: " + err.Error()
		}
		if res == porcupine.Unknown {
			return fmt.Errorf("history of %d operations: the linearizability check did not finish within %v; visualisation: %s", len(ops), timeout, path)
		}
		return fmt.Errorf("history of %d operations is not linearizable (%v); visualisation: %s", len(ops), res, path)
	}
	if c.fenceOrder {
		if err := checkFences(ops); err != nil {
			return err
		}
	}
	if err := checkAcceptedWrites(ops); err != nil {
		return err
	}
	for _, l := range leases {
		if err := checkDeadline(l); err != nil {
			return err
		}
		if err := checkNoRenewAfterEnd(l); err != nil {
			return err
		}
	}
	return nil
}

// checkFences: no two acquisitions of a resource got the same fence, and an
// acquisition that returned before another began has the smaller fence (S1).
func checkFences(ops []porcupine.Operation) error {
	byResource := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if in := op.Input.(opInput); in.kind == opAcquire && op.Output.(opOutput).res == resOK {
			byResource[in.resource] = append(byResource[in.resource], op)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(byResource)) {
		acq := byResource[r]
		seen := map[int64]bool{}
		for _, a := range acq {
			f := a.Output.(opOutput).fence
			if seen[f] {
				return fmt.Errorf("S1: fence %d of %q handed out twice", f, r)
			}
			seen[f] = true
		}
		fence := func(op porcupine.Operation) int64 { return op.Output.(opOutput).fence }
		if a, b, ok := precededBy(acq, fence, func(fa, fb int64) bool { return fa >= fb }); ok {
			return fmt.Errorf("S1: %q: fence %d returned before an acquisition that got %d began", r, fence(a), fence(b))
		}
	}
	return nil
}

// checkAcceptedWrites: writes the resource accepted, in real-time order,
// never go back in fence, and one fence has one owner (S5).
func checkAcceptedWrites(ops []porcupine.Operation) error {
	type resourceFence struct {
		resource string
		fence    int64
	}
	owners := map[resourceFence]string{}
	byResource := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if in := op.Input.(opInput); in.kind == opWrite && op.Output.(opOutput).res == resOK {
			key := resourceFence{in.resource, in.fence}
			if o, ok := owners[key]; ok && o != in.owner {
				return fmt.Errorf("S5: fence %s/%d accepted from two owners", in.resource, in.fence)
			}
			owners[key] = in.owner
			byResource[in.resource] = append(byResource[in.resource], op)
		}
	}
	fence := func(op porcupine.Operation) int64 { return op.Input.(opInput).fence }
	for _, r := range slices.Sorted(maps.Keys(byResource)) {
		if a, b, ok := precededBy(byResource[r], fence, func(fa, fb int64) bool { return fa > fb }); ok {
			return fmt.Errorf("S5: %q accepted fence %d after it had accepted %d", r, fence(b), fence(a))
		}
	}
	return nil
}

// precededBy finds operations a and b of ops with a.Return < b.Call (a
// returned before b began) and bad(fence(a), fence(b)), where bad is > or ≥
// on fences. It is the check of every such pair in O(n log n) instead of
// O(n²) (the long fault scenarios record 10⁵ operations): sweeping the
// operations by call time, it keeps the largest fence of those that returned
// before the current call — bad holds for some earlier a iff it holds for
// that largest one, since bad is monotone in fence(a).
func precededBy(ops []porcupine.Operation, fence func(porcupine.Operation) int64, bad func(fa, fb int64) bool) (a, b porcupine.Operation, found bool) {
	byReturn := slices.Clone(ops)
	slices.SortFunc(byReturn, func(x, y porcupine.Operation) int { return cmp.Compare(x.Return, y.Return) })
	byCall := slices.Clone(ops)
	slices.SortFunc(byCall, func(x, y porcupine.Operation) int { return cmp.Compare(x.Call, y.Call) })
	var top porcupine.Operation // the largest fence among byReturn[:i]
	i := 0
	for _, b := range byCall {
		for ; i < len(byReturn) && byReturn[i].Return < b.Call; i++ {
			if i == 0 || fence(byReturn[i]) > fence(top) {
				top = byReturn[i]
			}
		}
		if i > 0 && bad(fence(top), fence(b)) {
			return top, b, true
		}
	}
	return porcupine.Operation{}, porcupine.Operation{}, false
}

// checkDeadline: a lease context that ended for want of renewal ended before
// Redis could have expired the lease: before the send time of its last
// confirmed request plus TTL·(1−redlease.DriftFactor) (S3).
func checkDeadline(l *leaseLog) error {
	if l.endedBy != redlease.OutcomeExpired || len(l.confirmed) == 0 {
		return nil
	}
	last := slices.MaxFunc(l.confirmed, func(a, b time.Time) int { return a.Compare(b) })
	bound := last.Add(l.ttl - time.Duration(float64(l.ttl)*redlease.DriftFactor))
	if !l.ended.Before(bound) {
		return fmt.Errorf("S3: lease %q fence %d ended %v after its last confirmed send, at or past the TTL bound %v",
			l.resource, l.fence, l.ended.Sub(last), bound.Sub(last))
	}
	return nil
}

// checkNoRenewAfterEnd: no renewal was sent after the lease context ended (S4).
func checkNoRenewAfterEnd(l *leaseLog) error {
	if l.ended.IsZero() {
		return nil
	}
	for _, sent := range l.renewsSent {
		if sent.After(l.ended) {
			return fmt.Errorf("S4: lease %q fence %d renewed %v after its context ended", l.resource, l.fence, sent.Sub(l.ended))
		}
	}
	return nil
}

// The checker must catch what it is there to catch: each crafted history
// breaks one guarantee.
func TestHistoryCheckerCatchesViolations(t *testing.T) {
	acq := func(h *history, call, ret int64, owner string, fence int64) {
		h.ops = append(h.ops, porcupine.Operation{Call: call, Return: ret,
			Input: opInput{kind: opAcquire, resource: "r"}, Output: opOutput{res: resOK, fence: fence, owner: owner}})
	}
	op := func(h *history, call, ret int64, kind opKind, owner string, fence int64, res outcomeKind) {
		h.ops = append(h.ops, porcupine.Operation{Call: call, Return: ret,
			Input: opInput{kind: kind, resource: "r", owner: owner, fence: fence}, Output: opOutput{res: res}})
	}
	strict := checks{fenceOrder: true, ownership: true}
	base := time.Now()
	cases := []struct {
		name  string
		c     checks
		build func(h *history)
		want  string // "" for a valid history
	}{
		{"valid", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			op(h, 2, 3, opWrite, "a", 1, resOK)
			op(h, 4, 5, opRenew, "a", 1, resOK)
			op(h, 6, 7, opRelease, "a", 1, resOK)
			acq(h, 8, 9, "b", 2)
			op(h, 10, 11, opWrite, "b", 2, resOK)
			op(h, 12, 13, opWrite, "a", 1, resFail)
			op(h, 14, 15, opWrite, "b", 2, resOK)
		}, ""},
		{"duplicate fence", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			acq(h, 2, 3, "b", 1)
		}, "not linearizable"},
		{"fence out of real-time order", checks{}, func(h *history) {
			acq(h, 0, 1, "a", 2)
			acq(h, 2, 3, "b", 1)
		}, ""}, // allowed where S1 is not promised (failover)
		{"stale write accepted", checks{}, func(h *history) {
			op(h, 0, 1, opWrite, "b", 2, resOK)
			op(h, 2, 3, opWrite, "a", 1, resOK)
		}, "not linearizable"},
		{"equal fence, other owner accepted", checks{}, func(h *history) {
			op(h, 0, 1, opWrite, "b", 2, resOK)
			op(h, 2, 3, opWrite, "c", 2, resOK)
		}, "not linearizable"},
		{"fresh write refused", checks{}, func(h *history) {
			op(h, 0, 1, opWrite, "a", 1, resOK)
			op(h, 2, 3, opWrite, "b", 2, resFail)
		}, "not linearizable"},
		{"renew after a newer acquisition", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			acq(h, 2, 3, "b", 2)
			op(h, 4, 5, opRenew, "a", 1, resOK)
		}, "not linearizable"},
		{"renew after a newer acquisition, and a stale write refused", checks{}, func(h *history) {
			acq(h, 0, 1, "a", 1)
			acq(h, 2, 3, "b", 2)
			op(h, 4, 5, opWrite, "b", 2, resOK)
			op(h, 6, 7, opRenew, "a", 1, resOK)
			op(h, 8, 9, opWrite, "a", 1, resFail)
		}, ""}, // ownership is not promised across failover
		{"stale write accepted among lock operations", checks{}, func(h *history) {
			acq(h, 0, 1, "a", 1)
			acq(h, 2, 3, "b", 2)
			op(h, 4, 5, opWrite, "b", 2, resOK)
			op(h, 6, 7, opRenew, "a", 1, resOK)
			op(h, 8, 9, opWrite, "a", 1, resOK)
		}, "not linearizable"},
		{"release twice", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			op(h, 2, 3, opRelease, "a", 1, resOK)
			op(h, 4, 5, opRenew, "a", 1, resOK)
		}, "not linearizable"},
		{"unknown acquire may have drawn a fence", strict, func(h *history) {
			h.ops = append(h.ops, porcupine.Operation{Call: 0, Return: math.MaxInt64,
				Input: opInput{kind: opAcquire, resource: "r"}, Output: opOutput{res: resUnknown}})
			acq(h, 2, 3, "b", 2)
		}, ""},
		{"context ended past the bound", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				confirmed: []time.Time{base}, ended: base.Add(time.Second), endedBy: redlease.OutcomeExpired}
		}, "S3"},
		{"renew after the end", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				renewsSent: []time.Time{base.Add(2 * time.Second)}, ended: base.Add(time.Second), endedBy: redlease.OutcomeLost}
		}, "S4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory()
			tc.build(h)
			err := h.verify(tc.c, t.Name())
			if tc.want == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.want)
			}
		})
	}
	// And S1's direct check catches the real-time order on its own.
	h := newHistory()
	acq(h, 0, 1, "a", 2)
	acq(h, 2, 3, "b", 1)
	require.ErrorContains(t, checkFences(h.ops), "S1")
	// So does S5's on the accepted writes, per resource: the same writes on
	// two resources, or overlapping in time, are no violation.
	write := func(call, ret int64, resource, owner string, fence int64) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret,
			Input: opInput{kind: opWrite, resource: resource, owner: owner, fence: fence}, Output: opOutput{res: resOK}}
	}
	require.ErrorContains(t, checkAcceptedWrites([]porcupine.Operation{write(0, 1, "r", "b", 2), write(2, 3, "r", "a", 1)}), "S5")
	require.NoError(t, checkAcceptedWrites([]porcupine.Operation{write(0, 1, "r", "b", 2), write(2, 3, "s", "a", 1)}))
	require.NoError(t, checkAcceptedWrites([]porcupine.Operation{write(0, 2, "r", "b", 2), write(1, 3, "r", "a", 1)}))
	require.ErrorContains(t, checkAcceptedWrites([]porcupine.Operation{write(0, 1, "r", "b", 2), write(2, 3, "r", "a", 2)}), "two owners")
}

// The direct checks sweep by time instead of comparing every pair; on random
// histories they find a violation exactly when the pairwise comparison does.
func TestHistoryCheckerSweepMatchesPairs(t *testing.T) {
	pairwise := func(ops []porcupine.Operation, fence func(porcupine.Operation) int64, bad func(fa, fb int64) bool) bool {
		for _, a := range ops {
			for _, b := range ops {
				if a.Input.(opInput).resource == b.Input.(opInput).resource && a.Return < b.Call && bad(fence(a), fence(b)) {
					return true
				}
			}
		}
		return false
	}
	writeFence := func(op porcupine.Operation) int64 { return op.Input.(opInput).fence }
	acquireFence := func(op porcupine.Operation) int64 { return op.Output.(opOutput).fence }
	rng := rand.New(rand.NewPCG(1, 2))
	found := 0
	for range 2000 {
		var writes, acquires []porcupine.Operation
		fences := rng.Perm(20) // distinct, so that S1's duplicate check stays out of it
		for i := range 1 + rng.IntN(12) {
			call := rng.Int64N(40)
			ret := call + rng.Int64N(10)
			if rng.IntN(10) == 0 {
				ret = math.MaxInt64
			}
			resource := []string{"r", "s"}[rng.IntN(2)]
			f := int64(1 + rng.IntN(6))
			writes = append(writes, porcupine.Operation{Call: call, Return: ret,
				Input: opInput{kind: opWrite, resource: resource, owner: fmt.Sprint(resource, f), fence: f}, Output: opOutput{res: resOK}})
			acquires = append(acquires, porcupine.Operation{Call: call, Return: ret,
				Input: opInput{kind: opAcquire, resource: resource}, Output: opOutput{res: resOK, fence: int64(fences[i]), owner: fmt.Sprint(i)}})
		}
		want := pairwise(writes, writeFence, func(fa, fb int64) bool { return fa > fb })
		require.Equal(t, want, checkAcceptedWrites(writes) != nil, "writes %v", writes)
		want = pairwise(acquires, acquireFence, func(fa, fb int64) bool { return fa >= fb })
		require.Equal(t, want, checkFences(acquires) != nil, "acquisitions %v", acquires)
		if want {
			found++
		}
	}
	require.Greater(t, found, 100, "the random histories include violations")
}

// Checked in segments (see segmentWrites), random write histories of one
// resource are linearizable exactly when they are as one partition.
func TestHistoryCheckerSegmentsMatchWhole(t *testing.T) {
	segmented := lockModel(checks{})
	whole := lockModel(checks{})
	whole.Partition = nil
	rng := rand.New(rand.NewPCG(3, 4))
	var results [2]int
	cuts := 0
	for range 3000 {
		var ops []porcupine.Operation
		for range 1 + rng.IntN(8) {
			call := rng.Int64N(30)
			ret := call + rng.Int64N(6)
			res := []outcomeKind{resOK, resOK, resOK, resFail, resFail, resUnknown}[rng.IntN(6)]
			if res == resUnknown && rng.IntN(2) == 0 {
				ret = math.MaxInt64
			}
			fence := int64(1 + rng.IntN(4))
			owner := fmt.Sprint("o", fence)
			if rng.IntN(8) == 0 {
				owner = "other"
			}
			ops = append(ops, porcupine.Operation{ClientId: rng.IntN(3), Call: call, Return: ret,
				Input: opInput{kind: opWrite, resource: "r", owner: owner, fence: fence}, Output: opOutput{res: res}})
		}
		want := porcupine.CheckOperations(whole, ops)
		require.Equal(t, want, porcupine.CheckOperations(segmented, ops), "history %v", ops)
		if want {
			results[1]++
		} else {
			results[0]++
		}
		cuts += len(segmentWrites(ops)) - 1
	}
	require.Greater(t, results[0], 300, "violations")
	require.Greater(t, results[1], 300, "linearizable histories")
	require.Greater(t, cuts, 1000, "cut histories")
}
