package tests

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
)

// The shared leases in the history (see history_test.go): semaphores and
// read/write leases, recorded with their kind, permit and fence; the model's
// set of read leases; and the direct checks of what they promise.
//
// S6, at most N: a semaphore's permit is one of its N (checkPermits); no
// holder acts as a permit's holder after the permit was granted to another
// (the model's lock, S2 per permit); each permit's slot at the resource,
// named by fencing.Key, keeps the fencing rule (the model's registers, S5
// per slot), so the resource admits at most one holder per slot and N in
// all; and in time, the resource never admitted more than N holders at
// once, nor two of one permit, while Redis held them (checkExclusion).
//
// S7, a writer alone: a write lease's grant ends every reader's and
// writer's holding, a read lease's the writer's (the model's lock); the
// resource accepts a writer's write only if its fence is newer than every
// read and write it admitted, and a reader's read only if no newer write
// was accepted (the model's read/write register, and checkReadsAndWrites);
// and in time, the resource never admitted a writer beside another holder
// while Redis held them (checkExclusion).

// AcquireSemaphore runs c.AcquireSemaphore (TryAcquireSemaphore when wait is
// false) and records it.
func (h *history) AcquireSemaphore(ctx context.Context, client int, c *redlease.Client, resource string, permits int, wait bool, opts ...redlease.WaitOption) (*redlease.Lease, error) {
	return h.acquire(client, resource, leaseSpec{kind: leasePermit, permits: permits}, func() (*redlease.Lease, error) {
		if wait {
			return c.AcquireSemaphore(ctx, resource, permits, opts...)
		}
		return c.TryAcquireSemaphore(ctx, resource, permits, trying(opts)...)
	})
}

// AcquireRW runs c.AcquireRead or c.AcquireWrite (kind leaseRead or
// leaseWrite; TryAcquireRead, TryAcquireWrite when wait is false) and
// records it.
func (h *history) AcquireRW(ctx context.Context, client int, c *redlease.Client, kind leaseKind, resource string, wait bool, opts ...redlease.WaitOption) (*redlease.Lease, error) {
	return h.acquire(client, resource, leaseSpec{kind: kind}, func() (*redlease.Lease, error) {
		switch {
		case kind == leaseRead && wait:
			return c.AcquireRead(ctx, resource, opts...)
		case kind == leaseRead:
			return c.TryAcquireRead(ctx, resource, trying(opts)...)
		case wait:
			return c.AcquireWrite(ctx, resource, opts...)
		}
		return c.TryAcquireWrite(ctx, resource, trying(opts)...)
	})
}

// The model's read leases (lockState.readers) are a set kept as a string,
// so that states compare with ==, as porcupine compares them: one line
// "<owner> <fence> <h|r>" per lease (h: held, r: released by itself),
// sorted. markLast keeps it to the leases with operations still to check.

func readersOf(set string) []holding {
	var hs []holding
	for _, line := range strings.Split(set, "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			fence, _ := strconv.ParseInt(f[1], 10, 64)
			hs = append(hs, holding{owner: f[0], fence: fence, held: f[2] == "h"})
		}
	}
	return hs
}

func readersSet(hs []holding) string {
	slices.SortFunc(hs, func(a, b holding) int { return strings.Compare(a.owner, b.owner) })
	var b strings.Builder
	for _, h := range hs {
		state := "r"
		if h.held {
			state = "h"
		}
		fmt.Fprintf(&b, "%s %d %s\n", h.owner, h.fence, state)
	}
	return b.String()
}

func readersGet(set, owner string) (holding, bool) {
	for _, h := range readersOf(set) {
		if h.owner == owner {
			return h, true
		}
	}
	return holding{}, false
}

// readersPut adds h to the set, or replaces the lease of its owner.
func readersPut(set string, h holding) string {
	hs := slices.DeleteFunc(readersOf(set), func(x holding) bool { return x.owner == h.owner })
	return readersSet(append(hs, h))
}

func readersDrop(set, owner string) string {
	return readersSet(slices.DeleteFunc(readersOf(set), func(x holding) bool { return x.owner == owner }))
}

// readersEnd drops the held read leases, as a writer's grant ends them;
// those released by themselves stay, for their retried releases.
func readersEnd(set string) string {
	return readersSet(slices.DeleteFunc(readersOf(set), func(x holding) bool { return x.held }))
}

// checkPermits: every permit handed out is one of its semaphore's,
// 0..N-1, with N at most the model's maxModelPermits (S6).
func checkPermits(ops []porcupine.Operation) error {
	for _, op := range ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		if in.kind != opAcquire || in.lease != leasePermit || out.res != resOK {
			continue
		}
		if in.permits > maxModelPermits {
			return fmt.Errorf("%q has %d permits: the model holds at most %d", in.resource, in.permits, maxModelPermits)
		}
		if out.permit < 0 || out.permit >= in.permits {
			return fmt.Errorf("S6: %q handed out permit %d (fence %d), not one of its %d", in.resource, out.permit, out.fence, in.permits)
		}
	}
	return nil
}

// checkReadsAndWrites: a read/write resource, in real-time order, never
// admitted a read after it had accepted a write of a newer or equal fence,
// nor accepted a write after it had admitted a read of a newer or equal one
// (S7 at the resource; the model checks the same rule on every
// linearization, this on the real-time order alone, in O(n log n)).
func checkReadsAndWrites(ops []porcupine.Operation) error {
	writes, reads := map[string][]porcupine.Operation{}, map[string][]porcupine.Operation{}
	for _, op := range ops {
		in := op.Input.(opInput)
		switch {
		case op.Output.(opOutput).res != resOK:
		case in.kind == opRead:
			reads[in.resource] = append(reads[in.resource], op)
		case in.kind == opWrite && in.lease == leaseWrite:
			writes[in.resource] = append(writes[in.resource], op)
		}
	}
	fence := func(op porcupine.Operation) int64 { return op.Input.(opInput).fence }
	notOlder := func(fa, fb int64) bool { return fa >= fb }
	for _, r := range slices.Sorted(maps.Keys(reads)) {
		if w, rd, ok := precededAcross(writes[r], reads[r], fence, fence, notOlder); ok {
			return fmt.Errorf("S7: %q admitted a read of fence %d after it had accepted the write of fence %d", r, fence(rd), fence(w))
		}
		if rd, w, ok := precededAcross(reads[r], writes[r], fence, fence, notOlder); ok {
			return fmt.Errorf("S7: %q accepted the write of fence %d after it had admitted a read of fence %d", r, fence(w), fence(rd))
		}
	}
	return nil
}

// admission is the time during which the resource admitted a lease's
// holder while Redis held the lease (see checkExclusion), in the history's
// clock.
type admission struct {
	resource string
	lease    leaseKind
	permits  int
	permit   int
	fence    int64
	from, to int64
}

func (a admission) String() string {
	if a.lease == leasePermit {
		return fmt.Sprintf("permit %d (fence %d)", a.permit, a.fence)
	}
	return fmt.Sprintf("%v lease (fence %d)", a.lease, a.fence)
}

// checkExclusion: the lock's exclusion, seen at the resource (S6, S7). A
// lease's holder is admitted from the return of the first of its writes or
// reads that the resource accepted until the earlier of its first
// release's call and the TTL bound of its last confirmed request (send time
// + TTL·(1−DriftFactor), as in checkDeadline). Throughout that time Redis
// held the lease: it granted it before the acquire returned, expires it no
// earlier than that bound, and releases it no earlier than the release's
// call. So the lock's promise applies to the admitted holders: at no moment
// more than one of a resource's exclusive lease, more than N of its
// semaphore, two of one permit, or a writer beside any other holder. A
// holder whose first accepted operation came after that time (a paused
// holder's late write that nobody newer had overtaken yet: the fencing rule
// lets it through) is not admitted in this sense. A restart without
// persistence (history.Restart) ends Redis's holding of every lease granted
// before it: an admission ends at the first restart that may have come
// after its grant (one that returned after the acquire was called). It
// holds only while Redis keeps the lock's state otherwise (no failover, no
// unrecorded loss): checks.exclusion.
func (h *history) checkExclusion(ops []porcupine.Operation, leases []*leaseLog) error {
	_, err := h.exclusion(ops, leases)
	return err
}

// exclusion is checkExclusion, which also returns, by resource, the most
// holders the resource admitted at once, and how many it admitted in all.
func (h *history) exclusion(ops []porcupine.Operation, leases []*leaseLog) (peaks map[string][2]int, err error) {
	type acquired struct {
		in   opInput
		out  opOutput
		call int64
	}
	restarts := restartsOf(ops)
	granted := map[string]acquired{}
	firstUse, firstRelease := map[string]int64{}, map[string]int64{}
	for _, op := range ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		switch {
		case in.kind == opAcquire && out.res == resOK:
			granted[out.owner] = acquired{in, out, op.Call}
		case (in.kind == opWrite || in.kind == opRead) && out.res == resOK:
			if t, ok := firstUse[in.owner]; !ok || op.Return < t {
				firstUse[in.owner] = op.Return
			}
		case in.kind == opRelease:
			if t, ok := firstRelease[in.owner]; !ok || op.Call < t {
				firstRelease[in.owner] = op.Call
			}
		}
	}
	byResource := map[string][]admission{}
	for _, l := range leases {
		g, ok := granted[l.owner]
		from, used := firstUse[l.owner]
		if !ok || !used || len(l.confirmed) == 0 {
			continue
		}
		last := slices.MaxFunc(l.confirmed, func(a, b time.Time) int { return a.Compare(b) })
		to := int64(last.Add(l.ttl - time.Duration(float64(l.ttl)*redlease.DriftFactor)).Sub(h.start))
		if r, ok := firstRelease[l.owner]; ok {
			to = min(to, r)
		}
		for _, r := range restarts {
			if r.Return > g.call {
				to = min(to, r.Call)
				break
			}
		}
		if from < to {
			a := admission{resource: g.in.resource, lease: g.in.lease, permits: g.in.permits, permit: g.out.permit,
				fence: g.out.fence, from: from, to: to}
			byResource[a.resource] = append(byResource[a.resource], a)
		}
	}
	peaks = map[string][2]int{}
	for _, r := range slices.Sorted(maps.Keys(byResource)) {
		adm := byResource[r]
		slices.SortFunc(adm, func(a, b admission) int { return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.fence, b.fence)) })
		var active []admission
		peak := 0
		for _, a := range adm {
			active = slices.DeleteFunc(active, func(b admission) bool { return b.to <= a.from })
			if err := excludes(active, a); err != nil {
				return nil, err
			}
			active = append(active, a)
			peak = max(peak, len(active))
		}
		peaks[r] = [2]int{peak, len(adm)}
	}
	return peaks, nil
}

// excludes returns the violation if a's admission beside the admissions
// active breaks the exclusion of its lock.
func excludes(active []admission, a admission) error {
	at := time.Duration(a.from)
	for _, b := range active {
		switch {
		case a.lease == leasePermit && a.permit == b.permit:
			return fmt.Errorf("S6: %q admitted two holders of permit %d at once, at %v: fences %d and %d", a.resource, a.permit, at, b.fence, a.fence)
		case a.lease == leaseExclusive:
			return fmt.Errorf("S6: %q admitted two holders of its lease at once, at %v: fences %d and %d", a.resource, at, b.fence, a.fence)
		case a.lease == leaseWrite || b.lease == leaseWrite:
			return fmt.Errorf("S7: %q admitted a writer beside another holder, at %v: the %v and the %v", a.resource, at, b, a)
		}
	}
	permits := a.permits // the fewest any of them was granted under: each was promised at most that many
	for _, b := range active {
		permits = min(permits, b.permits)
	}
	if a.lease == leasePermit && len(active)+1 > permits {
		return fmt.Errorf("S6: %q admitted %d holders at once, at %v, more than its %d permits: %v and %v", a.resource, len(active)+1, at, permits, active, a)
	}
	return nil
}

// The checker catches what it is there to catch for the shared leases: each
// crafted history breaks one property of a semaphore (on "s", 2 permits) or
// of read/write leases (on "c"), or is legal and passes. Times are in ms.
func TestHistoryCheckerCatchesSharedViolations(t *testing.T) {
	const ms = int64(time.Millisecond)
	type hist = *history
	add := func(h hist, call, ret int64, in opInput, out opOutput) {
		h.ops = append(h.ops, porcupine.Operation{Call: call * ms, Return: ret * ms, Input: in, Output: out})
	}
	// A lease's log: its acquire confirmed at call, so that Redis holds it
	// until call + TTL·(1−DriftFactor) = call + 990 ms, unless released.
	logged := func(h hist, owner string, call int64) {
		h.leases[owner] = &leaseLog{owner: owner, ttl: time.Second, confirmed: []time.Time{h.start.Add(time.Duration(call * ms))}}
	}
	permit := func(h hist, call, ret int64, owner string, fence int64, p int) {
		add(h, call, ret, opInput{kind: opAcquire, lease: leasePermit, resource: "s", permits: 2},
			opOutput{res: resOK, fence: fence, owner: owner, permit: p})
		logged(h, owner, call)
	}
	onPermit := func(h hist, call, ret int64, kind opKind, owner string, fence int64, p int, res outcomeKind) {
		in := opInput{kind: kind, lease: leasePermit, resource: "s", owner: owner, fence: fence, permits: 2, permit: p}
		if kind == opWrite {
			in.resource = fmt.Sprintf("s#%d", p) // fencing.Key
		}
		add(h, call, ret, in, opOutput{res: res})
	}
	rw := func(h hist, call, ret int64, kind leaseKind, owner string, fence int64) {
		add(h, call, ret, opInput{kind: opAcquire, lease: kind, resource: "c"}, opOutput{res: resOK, fence: fence, owner: owner})
		logged(h, owner, call)
	}
	onRW := func(h hist, call, ret int64, op opKind, kind leaseKind, owner string, fence int64, res outcomeKind) {
		add(h, call, ret, opInput{kind: op, lease: kind, resource: "c", owner: owner, fence: fence}, opOutput{res: res})
	}
	restart := func(h hist, call, ret int64) {
		add(h, call, ret, opInput{kind: opRestart}, opOutput{res: resOK})
	}
	advance := func(h hist, call, ret, atLeast, counter int64, res outcomeKind) {
		add(h, call, ret, opInput{kind: opAdvance, resource: "s", fence: atLeast}, opOutput{res: res, fence: counter})
	}
	all := checks{fenceOrder: true, ownership: true, exclusion: true}
	cases := []struct {
		name  string
		c     checks
		build func(h hist)
		want  string // "" for a legal history
	}{
		// A semaphore of 2 permits.
		{"semaphore: legal", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 2, 1)
			onPermit(h, 4, 5, opWrite, "a", 1, 0, resOK)
			onPermit(h, 4, 5, opWrite, "b", 2, 1, resOK)
			onPermit(h, 6, 7, opRelease, "a", 1, 0, resOK)
			permit(h, 8, 9, "c", 3, 0) // a's permit, free again
			onPermit(h, 10, 11, opWrite, "c", 3, 0, resOK)
			onPermit(h, 12, 13, opWrite, "a", 1, 0, resFail) // a's slot moved on
			onPermit(h, 12, 13, opWrite, "b", 2, 1, resOK)   // b's did not
			onPermit(h, 14, 15, opRenew, "b", 2, 1, resOK)
			onPermit(h, 16, 17, opRelease, "b", 2, 1, resOK)
			onPermit(h, 16, 17, opRelease, "c", 3, 0, resOK)
		}, ""},
		{"semaphore: a permit out of range", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 2)
		}, "S6: \"s\" handed out permit 2"},
		{"semaphore: one fence for two permits", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 1, 1)
		}, "not linearizable"},
		{"semaphore: a renewal after the permit went to another", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 2, 0)
			onPermit(h, 4, 5, opRenew, "a", 1, 0, resOK)
		}, "not linearizable"},
		{"semaphore: a renewal of another permit's holder", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 2, 1)
			onPermit(h, 4, 5, opRenew, "a", 1, 0, resOK)
		}, ""},
		{"semaphore: a retried release is recognised", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opRelease, "a", 1, 0, resOK)
			onPermit(h, 4, 5, opRelease, "a", 1, 0, resOK)
		}, ""},
		{"semaphore: a retried release after the permit went to another", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opRelease, "a", 1, 0, resOK)
			permit(h, 4, 5, "b", 2, 0)
			onPermit(h, 6, 7, opRelease, "a", 1, 0, resOK) // its record lasts until the permit's next release
		}, ""},
		{"semaphore: a retried release after the permit's next release", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opRelease, "a", 1, 0, resOK)
			permit(h, 4, 5, "b", 2, 0)
			onPermit(h, 6, 7, opRelease, "b", 2, 0, resOK)
			onPermit(h, 8, 9, opRelease, "a", 1, 0, resOK)
		}, "not linearizable"},
		{"semaphore: a renewal after its release", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opRelease, "a", 1, 0, resOK)
			onPermit(h, 4, 5, opRenew, "a", 1, 0, resOK)
		}, "not linearizable"},
		{"semaphore: a stale write accepted on a permit's slot", checks{}, func(h hist) {
			onPermit(h, 0, 1, opWrite, "b", 2, 0, resOK)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
		}, "not linearizable"},
		{"semaphore: an equal fence from another owner on a slot", checks{}, func(h hist) {
			onPermit(h, 0, 1, opWrite, "b", 2, 0, resOK)
			onPermit(h, 2, 3, opWrite, "c", 2, 0, resOK)
		}, "not linearizable"},
		{"semaphore: an older fence accepted on another slot", checks{}, func(h hist) {
			onPermit(h, 0, 1, opWrite, "b", 2, 1, resOK)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
		}, ""}, // fenced per permit
		{"semaphore: two live holders of one permit, both admitted", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			permit(h, 4, 5, "b", 2, 0) // granted while a's permit was live
			onPermit(h, 6, 7, opWrite, "b", 2, 0, resOK)
		}, "S6: \"s\" admitted two holders of permit 0 at once"},
		{"semaphore: the same, where exclusion is not promised", checks{ownership: true}, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			permit(h, 4, 5, "b", 2, 0)
			onPermit(h, 6, 7, opWrite, "b", 2, 0, resOK)
		}, ""},
		{"semaphore: a permit taken after its holder's TTL bound", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			permit(h, 1000, 1001, "b", 2, 0) // a's lease expired in Redis at 990 at the earliest
			onPermit(h, 1002, 1003, opWrite, "b", 2, 0, resOK)
			onPermit(h, 1004, 1005, opWrite, "a", 1, 0, resFail)
		}, ""},
		{"semaphore: a paused holder's late write, before the next holder's", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 1000, 1001, "b", 2, 0)
			onPermit(h, 1002, 1003, opWrite, "a", 1, 0, resOK) // past a's bound: allowed by the fencing rule
			onPermit(h, 1004, 1005, opWrite, "b", 2, 0, resOK)
			onPermit(h, 1006, 1007, opWrite, "a", 1, 0, resFail)
		}, ""},
		{"semaphore: a permit taken after its holder's release", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			onPermit(h, 4, 5, opRelease, "a", 1, 0, resOK)
			permit(h, 6, 7, "b", 2, 0)
			onPermit(h, 8, 9, opWrite, "b", 2, 0, resOK)
		}, ""},
		{"semaphore: three admitted holders of two permits", all, func(h hist) {
			h.ops = append(h.ops, porcupine.Operation{Call: 0, Return: 1 * ms,
				Input: opInput{kind: opAcquire, lease: leasePermit, resource: "s", permits: 3}, Output: opOutput{res: resOK, fence: 1, owner: "a", permit: 2}})
			logged(h, "a", 0) // with 3 permits: a bug let the number change while held
			permit(h, 2, 3, "b", 2, 0)
			permit(h, 4, 5, "c", 3, 1)
			onPermit(h, 6, 7, opWrite, "a", 1, 2, resOK)
			onPermit(h, 6, 7, opWrite, "b", 2, 0, resOK)
			onPermit(h, 6, 7, opWrite, "c", 3, 1, resOK)
		}, "S6: \"s\" admitted 3 holders at once"},
		{"semaphore: an unknown acquisition may have taken any permit", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			h.ops = append(h.ops, porcupine.Operation{Call: 2 * ms, Return: math.MaxInt64,
				Input: opInput{kind: opAcquire, lease: leasePermit, resource: "s", permits: 2}, Output: opOutput{res: resUnknown}})
			permit(h, 4, 5, "b", 3, 1)
			onPermit(h, 6, 7, opRenew, "a", 1, 0, resFail) // the unknown one took a's, expired, permit
		}, ""},

		// A restart without persistence, recorded: a new epoch of the lock.
		{"restart: fences begin again at 1", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 2, 1)
			restart(h, 4, 5)
			permit(h, 6, 7, "c", 1, 0)
			permit(h, 8, 9, "d", 2, 1)
		}, ""},
		{"restart: a fence that skips after it (fences may skip)", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			restart(h, 4, 5)
			permit(h, 6, 7, "c", 2, 0)
		}, ""},
		{"restart: a fence at or below the counter within its epoch", all, func(h hist) {
			restart(h, 0, 1)
			permit(h, 2, 3, "c", 2, 0)
			permit(h, 4, 5, "d", 2, 1)
		}, "not linearizable"},
		{"restart: one fence twice within its epoch", all, func(h hist) {
			restart(h, 0, 1)
			permit(h, 2, 3, "c", 1, 0)
			permit(h, 4, 5, "d", 1, 1)
		}, "not linearizable"},
		{"restart: a renewal after it", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			restart(h, 2, 3)
			onPermit(h, 4, 5, opRenew, "a", 1, 0, resOK)
		}, "not linearizable"},
		{"restart: a retried release after it", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w", 1)
			onRW(h, 2, 3, opRelease, leaseWrite, "w", 1, resOK)
			restart(h, 4, 5)
			onRW(h, 6, 7, opRelease, leaseWrite, "w", 1, resOK)
		}, "not linearizable"},
		{"restart: an acquisition in flight during it, from either epoch", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 20, "b", 2, 1) // granted before the restart
			restart(h, 4, 5)
			permit(h, 6, 21, "c", 1, 0) // granted after
		}, ""},
		{"restart: the holders of one permit in two epochs, both admitted", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			restart(h, 4, 5) // Redis forgets a's permit: its admission ends here
			permit(h, 6, 7, "b", 1, 0)
			onPermit(h, 8, 9, opWrite, "b", 1, 0, resFail) // the regressed fence, refused
			onPermit(h, 10, 11, opRelease, "b", 1, 0, resOK)
			permit(h, 12, 13, "c", 2, 0)
			onPermit(h, 14, 15, opWrite, "c", 2, 0, resOK)
		}, ""},
		{"restart: the same, unrecorded", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			onPermit(h, 2, 3, opWrite, "a", 1, 0, resOK)
			permit(h, 12, 13, "c", 2, 0) // granted while a's permit was live
			onPermit(h, 14, 15, opWrite, "c", 2, 0, resOK)
		}, "S6: \"s\" admitted two holders of permit 0 at once"},

		{"advance: the next fence is above the counter it returned", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			advance(h, 2, 3, 10, 10, resOK)
			permit(h, 4, 5, "b", 11, 1)
			advance(h, 6, 7, 5, 11, resOK) // never back
			permit(h, 8, 9, "c", 12, 0)
		}, ""},
		{"advance: a fence below the advanced counter", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			advance(h, 2, 3, 10, 10, resOK)
			permit(h, 4, 5, "b", 2, 1)
		}, "not linearizable"},
		{"advance: the counter moved back", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			permit(h, 2, 3, "b", 2, 1)
			advance(h, 4, 5, 1, 1, resOK)
		}, "not linearizable"},
		{"advance: of unknown outcome, it may or may not have moved the counter", all, func(h hist) {
			permit(h, 0, 1, "a", 1, 0)
			h.ops = append(h.ops, porcupine.Operation{Call: 2 * ms, Return: math.MaxInt64,
				Input: opInput{kind: opAdvance, resource: "s", fence: 10}, Output: opOutput{res: resUnknown}})
			permit(h, 4, 5, "b", 2, 1)
			onPermit(h, 6, 7, opRelease, "a", 1, 0, resOK)
			permit(h, 8, 9, "c", 11, 0)
		}, ""},

		// Read/write leases.
		{"read/write: legal", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r1", 1)
			rw(h, 2, 3, leaseRead, "r2", 2)
			onRW(h, 4, 5, opRead, leaseRead, "r1", 1, resOK)
			onRW(h, 4, 5, opRead, leaseRead, "r2", 2, resOK)
			onRW(h, 6, 7, opRenew, leaseRead, "r1", 1, resOK)
			onRW(h, 8, 9, opRelease, leaseRead, "r1", 1, resOK)
			onRW(h, 8, 9, opRelease, leaseRead, "r2", 2, resOK)
			rw(h, 10, 11, leaseWrite, "w", 3)
			onRW(h, 12, 13, opWrite, leaseWrite, "w", 3, resOK)
			onRW(h, 14, 15, opRead, leaseRead, "r1", 1, resFail) // older than the write
			onRW(h, 16, 17, opRenew, leaseWrite, "w", 3, resOK)
			onRW(h, 18, 19, opRelease, leaseWrite, "w", 3, resOK)
			rw(h, 20, 21, leaseRead, "r3", 4)
			onRW(h, 22, 23, opRead, leaseRead, "r3", 4, resOK)
			onRW(h, 24, 25, opWrite, leaseWrite, "w", 3, resFail) // older than the read
			onRW(h, 26, 27, opRelease, leaseRead, "r3", 4, resOK)
		}, ""},
		{"read/write: a reader renews after a writer's grant", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			rw(h, 2, 3, leaseWrite, "w", 2)
			onRW(h, 4, 5, opRenew, leaseRead, "r", 1, resOK)
		}, "not linearizable"},
		{"read/write: a writer renews after a reader's grant", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w", 1)
			rw(h, 2, 3, leaseRead, "r", 2)
			onRW(h, 4, 5, opRenew, leaseWrite, "w", 1, resOK)
		}, "not linearizable"},
		{"read/write: a writer renews after another writer's grant", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w1", 1)
			rw(h, 2, 3, leaseWrite, "w2", 2)
			onRW(h, 4, 5, opRenew, leaseWrite, "w1", 1, resOK)
		}, "not linearizable"},
		{"read/write: a reader renews after its release", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			onRW(h, 2, 3, opRelease, leaseRead, "r", 1, resOK)
			onRW(h, 4, 5, opRenew, leaseRead, "r", 1, resOK)
		}, "not linearizable"},
		{"read/write: readers renew beside each other", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r1", 1)
			rw(h, 2, 3, leaseRead, "r2", 2)
			onRW(h, 4, 5, opRenew, leaseRead, "r1", 1, resOK)
			onRW(h, 4, 5, opRenew, leaseRead, "r2", 2, resOK)
		}, ""},
		{"read/write: retried releases recognised after the next grant", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			onRW(h, 2, 3, opRelease, leaseRead, "r", 1, resOK)
			rw(h, 4, 5, leaseWrite, "w", 2)
			onRW(h, 6, 7, opRelease, leaseRead, "r", 1, resOK)
			onRW(h, 8, 9, opRelease, leaseWrite, "w", 2, resOK)
			rw(h, 10, 11, leaseRead, "r2", 3)
			onRW(h, 12, 13, opRelease, leaseWrite, "w", 2, resOK)
		}, ""},
		{"read/write: a writer's retried release after another writer's release", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w1", 1)
			onRW(h, 2, 3, opRelease, leaseWrite, "w1", 1, resOK)
			rw(h, 4, 5, leaseWrite, "w2", 2)
			onRW(h, 6, 7, opRelease, leaseWrite, "w2", 2, resOK)
			onRW(h, 8, 9, opRelease, leaseWrite, "w1", 1, resOK)
		}, "not linearizable"},
		{"read/write: a reader's release after a writer's grant, never released before", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			rw(h, 2, 3, leaseWrite, "w", 2)
			onRW(h, 4, 5, opRelease, leaseRead, "r", 1, resOK)
		}, "not linearizable"},
		{"read/write: a reader's fence below the writer's", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w", 1)
			rw(h, 2, 3, leaseRead, "r", 1)
		}, "not linearizable"},
		{"read/write: a writer's write accepted after a newer read", checks{}, func(h hist) {
			onRW(h, 0, 1, opRead, leaseRead, "r", 2, resOK)
			onRW(h, 2, 3, opWrite, leaseWrite, "w", 1, resOK)
		}, "not linearizable"},
		{"read/write: a stale read admitted", checks{}, func(h hist) {
			onRW(h, 0, 1, opWrite, leaseWrite, "w", 2, resOK)
			onRW(h, 2, 3, opRead, leaseRead, "r", 1, resOK)
		}, "not linearizable"},
		{"read/write: a fresh read refused", checks{}, func(h hist) {
			onRW(h, 0, 1, opWrite, leaseWrite, "w", 1, resOK)
			onRW(h, 2, 3, opRead, leaseRead, "r", 2, resFail)
		}, "not linearizable"},
		{"read/write: a fresh write refused", checks{}, func(h hist) {
			onRW(h, 0, 1, opRead, leaseRead, "r", 1, resOK)
			onRW(h, 2, 3, opWrite, leaseWrite, "w", 2, resFail)
		}, "not linearizable"},
		{"read/write: an equal fence from two writers", checks{}, func(h hist) {
			onRW(h, 0, 1, opWrite, leaseWrite, "w1", 2, resOK)
			onRW(h, 2, 3, opWrite, leaseWrite, "w2", 2, resOK)
		}, "not linearizable"},
		{"read/write: a writer admitted beside a live reader", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			onRW(h, 2, 3, opRead, leaseRead, "r", 1, resOK)
			rw(h, 4, 5, leaseWrite, "w", 2) // granted while r's lease was live
			onRW(h, 6, 7, opWrite, leaseWrite, "w", 2, resOK)
		}, "S7: \"c\" admitted a writer beside another holder"},
		{"read/write: a reader admitted beside a live writer", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w", 1)
			onRW(h, 2, 3, opWrite, leaseWrite, "w", 1, resOK)
			rw(h, 4, 5, leaseRead, "r", 2)
			onRW(h, 6, 7, opRead, leaseRead, "r", 2, resOK)
		}, "S7: \"c\" admitted a writer beside another holder"},
		{"read/write: two live writers admitted", all, func(h hist) {
			rw(h, 0, 1, leaseWrite, "w1", 1)
			onRW(h, 2, 3, opWrite, leaseWrite, "w1", 1, resOK)
			rw(h, 4, 5, leaseWrite, "w2", 2)
			onRW(h, 6, 7, opWrite, leaseWrite, "w2", 2, resOK)
		}, "S7"},
		{"read/write: readers admitted together", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r1", 1)
			rw(h, 2, 3, leaseRead, "r2", 2)
			onRW(h, 4, 5, opRead, leaseRead, "r1", 1, resOK)
			onRW(h, 4, 5, opRead, leaseRead, "r2", 2, resOK)
		}, ""},
		{"read/write: a writer after the reader's TTL bound", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			onRW(h, 2, 3, opRead, leaseRead, "r", 1, resOK)
			rw(h, 1000, 1001, leaseWrite, "w", 2)
			onRW(h, 1002, 1003, opWrite, leaseWrite, "w", 2, resOK)
			onRW(h, 1004, 1005, opRead, leaseRead, "r", 1, resFail)
		}, ""},
		{"read/write: an unknown write acquisition may have ended the readers", all, func(h hist) {
			rw(h, 0, 1, leaseRead, "r", 1)
			h.ops = append(h.ops, porcupine.Operation{Call: 2 * ms, Return: math.MaxInt64,
				Input: opInput{kind: opAcquire, lease: leaseWrite, resource: "c"}, Output: opOutput{res: resUnknown}})
			onRW(h, 4, 5, opRenew, leaseRead, "r", 1, resFail)
			rw(h, 6, 7, leaseRead, "r2", 3)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := craftedHistory()
			tc.build(h)
			err := h.verify(tc.c, t.Name())
			if tc.want == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.want)
			}
		})
	}
	// S1's direct check holds within an epoch, and leaves out what was in
	// flight during a restart.
	acquireAt := func(call, ret int64, fence int64) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: opInput{kind: opAcquire, resource: "r"},
			Output: opOutput{res: resOK, fence: fence, owner: fmt.Sprint(call)}}
	}
	restartAt := porcupine.Operation{Call: 10, Return: 11, Input: opInput{kind: opRestart}, Output: opOutput{res: resOK}}
	require.NoError(t, checkFences([]porcupine.Operation{acquireAt(0, 1, 1), acquireAt(2, 3, 2), restartAt, acquireAt(12, 13, 1)}))
	require.NoError(t, checkFences([]porcupine.Operation{acquireAt(0, 1, 1), acquireAt(2, 10, 2), restartAt, acquireAt(11, 13, 2)}))
	require.ErrorContains(t, checkFences([]porcupine.Operation{restartAt, acquireAt(12, 13, 1), acquireAt(14, 15, 1)}), "S1")
	require.ErrorContains(t, checkFences([]porcupine.Operation{acquireAt(0, 1, 2), acquireAt(2, 3, 1), restartAt}), "S1")

	// The direct check of S7 at the resource catches on its own what the
	// model catches in the crafted histories above, per resource.
	op := func(call, ret int64, kind opKind, resource string, fence int64) porcupine.Operation {
		lease := leaseWrite
		if kind == opRead {
			lease = leaseRead
		}
		return porcupine.Operation{Call: call, Return: ret,
			Input: opInput{kind: kind, lease: lease, resource: resource, owner: fmt.Sprint(fence), fence: fence}, Output: opOutput{res: resOK}}
	}
	require.ErrorContains(t, checkReadsAndWrites([]porcupine.Operation{op(0, 1, opRead, "c", 2), op(2, 3, opWrite, "c", 1)}), "S7")
	require.ErrorContains(t, checkReadsAndWrites([]porcupine.Operation{op(0, 1, opRead, "c", 2), op(2, 3, opWrite, "c", 2)}), "S7")
	require.ErrorContains(t, checkReadsAndWrites([]porcupine.Operation{op(0, 1, opWrite, "c", 2), op(2, 3, opRead, "c", 1)}), "S7")
	require.NoError(t, checkReadsAndWrites([]porcupine.Operation{op(0, 1, opRead, "c", 2), op(2, 3, opWrite, "d", 1)}))
	require.NoError(t, checkReadsAndWrites([]porcupine.Operation{op(0, 2, opRead, "c", 2), op(1, 3, opWrite, "c", 1)}))
	require.NoError(t, checkReadsAndWrites([]porcupine.Operation{op(0, 1, opRead, "c", 1), op(2, 3, opRead, "c", 1)}))
}

// Checked in segments (see segmentWrites), random histories of a
// read/write resource's reads and writes are linearizable exactly when they
// are as one partition; and the direct check of S7 finds a violation of the
// real-time order exactly when the pairwise comparison does.
func TestHistoryCheckerReadWriteSegmentsMatchWhole(t *testing.T) {
	segmented := lockModel(checks{})
	whole := lockModel(checks{})
	whole.Partition = nil
	rng := rand.New(rand.NewPCG(5, 6))
	var results [2]int
	cuts, direct := 0, 0
	for range 3000 {
		var ops []porcupine.Operation
		for range 1 + rng.IntN(8) {
			call := rng.Int64N(30)
			ret := call + rng.Int64N(6)
			res := []outcomeKind{resOK, resOK, resOK, resFail, resFail, resUnknown}[rng.IntN(6)]
			if res == resUnknown && rng.IntN(2) == 0 {
				ret = math.MaxInt64
			}
			fence := int64(1 + rng.IntN(5))
			kind, lease := opWrite, leaseWrite
			if rng.IntN(2) == 0 {
				kind, lease = opRead, leaseRead
			}
			owner := fmt.Sprint("o", fence)
			if rng.IntN(8) == 0 {
				owner = "other"
			}
			ops = append(ops, porcupine.Operation{ClientId: rng.IntN(3), Call: call, Return: ret,
				Input: opInput{kind: kind, lease: lease, resource: "c", owner: owner, fence: fence}, Output: opOutput{res: res}})
		}
		want := porcupine.CheckOperations(whole, ops)
		require.Equal(t, want, porcupine.CheckOperations(segmented, ops), "history %v", ops)
		results[b2i(want)]++
		cuts += len(segmentWrites(ops)) - 1

		pairs := false
		for _, a := range ops {
			for _, b := range ops {
				ia, ib := a.Input.(opInput), b.Input.(opInput)
				if a.Output.(opOutput).res == resOK && b.Output.(opOutput).res == resOK && ia.kind != ib.kind &&
					a.Return < b.Call && ia.fence >= ib.fence {
					pairs = true
				}
			}
		}
		require.Equal(t, pairs, checkReadsAndWrites(ops) != nil, "history %v", ops)
		if pairs {
			direct++
			require.False(t, want, "a violation of the real-time order is not linearizable: %v", ops)
		}
	}
	require.Greater(t, results[0], 300, "violations")
	require.Greater(t, results[1], 300, "linearizable histories")
	require.Greater(t, cuts, 1000, "cut histories")
	require.Greater(t, direct, 100, "real-time violations")
}
