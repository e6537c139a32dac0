package tests

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
	"github.com/redlease/redlease/internal/require"
)

// A history of what the clients of a fault scenario did and saw, checked
// after the scenario: by porcupine against a model of the lock service and
// the fenced resource, and by direct checks of fences, the resource's
// accepted writes, the local-deadline bound (S3), renewals after the end
// of a lease (S4), and the lock's exclusion as the resource saw it (S6: at
// most one holder of a lease, at most N of a semaphore; S7: a writer
// alone). The shared leases' part (semaphores, read/write leases) is in
// history_shared_test.go.

type opKind uint8

const (
	opAcquire opKind = iota
	opRenew
	opRelease
	opWrite
	opRead    // a reader's fenced read of a read/write resource
	opRestart // the lock's server restarted without persistence: it forgot every lease and fence counter
	opAdvance // AdvanceFence: in.fence is atLeast, out.fence the counter afterwards
)

func (k opKind) String() string {
	return [...]string{"acquire", "renew", "release", "write", "read", "restart", "advance"}[k]
}

// leaseKind is the kind of lease an operation is about.
type leaseKind uint8

const (
	leaseExclusive leaseKind = iota // Acquire
	leasePermit                     // AcquireSemaphore: one of N permits
	leaseRead                       // AcquireRead
	leaseWrite                      // AcquireWrite
)

func (k leaseKind) String() string { return [...]string{"lease", "permit", "read", "write"}[k] }

type outcomeKind uint8

const (
	resOK      outcomeKind = iota // acquired, renewed, released, write accepted, read admitted
	resFail                       // busy / lost / write or read refused
	resUnknown                    // the outcome could not be learned
)

func (r outcomeKind) String() string { return [...]string{"ok", "fail", "unknown"}[r] }

type opInput struct {
	kind     opKind
	lease    leaseKind
	resource string // the lease's resource; of a write by a permit's holder, its slot: fencing.Key
	owner    string
	fence    int64 // renew, release, write, read; acquire: 0
	permits  int   // of a permit: its semaphore's number of permits
	permit   int   // renew, release of a permit: which one
	last     bool  // set by lockModel's partition: the lease's last operation on its lock
}

type opOutput struct {
	res    outcomeKind
	fence  int64  // acquire ok: the fence handed out
	owner  string // acquire ok: the lease's owner token
	permit int    // acquire ok of a permit: which one
}

// leaseSpec is what a lease's operations record of its kind.
type leaseSpec struct {
	kind    leaseKind
	permits int // of a permit: its semaphore's number of permits
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
	mu      sync.Mutex
	start   time.Time
	ops     []porcupine.Operation
	leases  map[string]*leaseLog // by owner token
	kinds   map[string]leaseSpec // by owner token, for the leases' renewals and releases
	stalls  *stallWatch
	excused int // leases whose late end the stalls of the process excused (checkDeadline)
}

// newHistory returns the history of a scenario of t, which watches for
// stalls of the process until t ends.
func newHistory(t *testing.T) *history {
	h := craftedHistory()
	h.stalls = watchStalls(t)
	return h
}

// craftedHistory returns an empty history that watches for no stalls: for
// the checker's own tests, which build the histories they check.
func craftedHistory() *history {
	return &history{start: time.Now(), leases: map[string]*leaseLog{}, kinds: map[string]leaseSpec{}, stalls: &stallWatch{}}
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
// confirmed the lease too.) It records the lease's kind for its renewals
// and releases.
func (h *history) acquired(l *redlease.Lease, spec leaseSpec) {
	sent := l.Deadline().Add(-faultLifetime)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kinds[l.Owner()] = spec
	if ll := h.leases[l.Owner()]; ll != nil {
		ll.confirmed = append([]time.Time{sent}, ll.confirmed...)
	}
}

// Acquire runs c.Acquire (or TryAcquire when wait is false) and records it.
func (h *history) Acquire(ctx context.Context, client int, c *redlease.Client, resource string, wait bool, opts ...redlease.WaitOption) (*redlease.Lease, error) {
	return h.acquire(client, resource, leaseSpec{}, func() (*redlease.Lease, error) {
		if wait {
			return c.Acquire(ctx, resource, opts...)
		}
		return c.TryAcquire(ctx, resource, trying(opts)...)
	})
}

// acquire runs take, an acquire call of a lease of spec's kind, and records it.
func (h *history) acquire(client int, resource string, spec leaseSpec, take func() (*redlease.Lease, error)) (*redlease.Lease, error) {
	call := h.now()
	l, err := take()
	out := opOutput{res: resFail}
	switch {
	case err == nil:
		out = opOutput{res: resOK, fence: l.Fence(), owner: l.Owner(), permit: l.Permit()}
		h.acquired(l, spec)
	case errors.Is(err, redlease.ErrOutcomeUnknown):
		out.res = resUnknown
	}
	h.record(client, call, opInput{kind: opAcquire, lease: spec.kind, resource: resource, permits: spec.permits}, out)
	return l, err
}

// leaseInput is the input of an operation of kind on the lease l.
func (h *history) leaseInput(kind opKind, l *redlease.Lease) opInput {
	h.mu.Lock()
	spec := h.kinds[l.Owner()]
	h.mu.Unlock()
	return opInput{kind: kind, lease: spec.kind, resource: l.Resource(), owner: l.Owner(), fence: l.Fence(),
		permits: spec.permits, permit: l.Permit()}
}

// Refresh runs l.Refresh and records it.
func (h *history) Refresh(ctx context.Context, client int, l *redlease.Lease) error {
	call := h.now()
	err := l.Refresh(ctx)
	h.record(client, call, h.leaseInput(opRenew, l), outcome(err, redlease.ErrLeaseLost, redlease.ErrReleased))
	return err
}

// Release runs l.Release and records it.
func (h *history) Release(ctx context.Context, client int, l *redlease.Lease) error {
	call := h.now()
	err := l.Release(ctx)
	h.record(client, call, h.leaseInput(opRelease, l), outcome(err, redlease.ErrLeaseLost))
	return err
}

// Write runs a fenced write of an exclusive lease's holder and records it:
// write must return nil when the resource accepted it and an error matching
// fencing.ErrStaleFence when it refused.
func (h *history) Write(client int, resource, owner string, fence int64, write func() error) error {
	return h.Use(client, opInput{kind: opWrite, resource: resource, owner: owner, fence: fence}, write)
}

// Use runs do, a fenced operation on the resource (in: an opWrite or
// opRead), and records it: do must return nil when the resource accepted it
// and an error matching fencing.ErrStaleFence when it refused.
func (h *history) Use(client int, in opInput, do func() error) error {
	call := h.now()
	err := do()
	h.record(client, call, in, outcome(err, fencing.ErrStaleFence))
	return err
}

// Restart runs restart, which restarts the lock's server without
// persistence, and records it: from then on Redis has no lease and no fence
// counter (a new epoch of the lock, see stepRestart).
func (h *history) Restart(restart func()) {
	call := h.now()
	restart()
	h.record(restartClient, call, opInput{kind: opRestart}, opOutput{res: resOK})
}

// AdvanceFence runs c.AdvanceFence and records it. (The counter is the
// resource's hash slot's: the model assumes no other resource of the slot
// in the history.)
func (h *history) AdvanceFence(ctx context.Context, client int, c *redlease.Client, resource string, atLeast int64) (int64, error) {
	call := h.now()
	n, err := c.AdvanceFence(ctx, resource, atLeast)
	out := outcome(err)
	out.fence = n
	h.record(client, call, opInput{kind: opAdvance, resource: resource, fence: atLeast}, out)
	return n, err
}

// restartClient is the client id of restarts, for the visualisation.
const restartClient = 999

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

// modelState is the sequential specification of one object of a resource
// (see lockModel): its lock, or its fenced register. An object uses one half.
type modelState struct {
	lockState
	registerState
}

// lockState is a resource's lock: the last fence issued, and its holders.
// Expiry is not modelled (an acquisition may always succeed: the holdings
// it excludes may have expired), so what it checks is that nobody acts as
// a holder after an acquisition that excluded them.
type lockState struct {
	counter        int64
	holder         holding                  // the exclusive lease, or the write lease
	released       holding                  // the last of them released by its own release
	permits        [maxModelPermits]holding // a semaphore's, by permit
	permitReleased [maxModelPermits]holding // each permit's last holder released by its own release
	readers        string                   // the read leases with operations still to check (see readersPut)
}

// holding is one holder of a lock: a lease, by owner and fence.
type holding struct {
	owner string
	fence int64
	held  bool // false once released (a permit's or a reader's: by itself; kept so that a retried release is recognised)
}

func (h holding) is(in opInput) bool { return h.owner == in.owner && h.fence == in.fence }

// maxModelPermits is the most permits a semaphore of the model may have.
const maxModelPermits = 4

// registerState is the fenced resource: the newest write accepted and its
// owner (S5), and for a read/write resource the newest fence of a read it
// admitted.
type registerState struct {
	newest      int64
	newestOwner string
	read        int64
}

// seedInput is the input of the operation that starts a segment of a
// register's operations in the state the operations before left (see
// segmentWrites).
type seedInput struct{ state registerState }

// checks says which guarantees a scenario's history must keep. Fence order
// (S1), ownership (S2) and exclusion in time (S6, S7) are promised only
// without failover or a loss of the lock's state that the history does not
// record (a restart without persistence recorded by history.Restart starts
// a new epoch of the lock, in which they hold again); the resource rules
// (S5, and S6 and S7 at the resource) always.
type checks struct {
	fenceOrder bool // S1: every acquisition gets a fence above every earlier one (fences may skip)
	ownership  bool // S2: renew and release succeed only for a current holder
	exclusion  bool // S6, S7 in time (checkExclusion): needs the lock's state to survive the fault, or its loss recorded
}

// object is what an operation acts on, for lockModel's partition: the lock
// of a resource, one per family (exclusive leases, a semaphore, read/write
// leases: leaseExclusive, leasePermit, leaseWrite), or a fenced register of
// the resource side (plain, leaseExclusive: an exclusive lease's resource or
// a permit's slot; leaseWrite: a read/write resource).
type object struct {
	name   string
	lock   bool
	family leaseKind
}

func objectOf(in opInput) object {
	o := object{name: in.resource, lock: in.kind != opWrite && in.kind != opRead, family: in.lease}
	switch {
	case o.family == leaseRead:
		o.family = leaseWrite
	case o.family == leasePermit && !o.lock:
		o.family = leaseExclusive
	}
	return o
}

func (o object) compare(p object) int {
	return cmp.Or(strings.Compare(o.name, p.name), -cmp.Compare(b2i(o.lock), b2i(p.lock)), cmp.Compare(o.family, p.family))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lockModel is the model of the history: per resource, objects that share
// nothing — its lock (acquire, renew, release: counter, holders) and the
// fenced resource (write, read: the register) — so no step of one reads or
// changes another's state, and by the locality of linearizability (Herlihy
// and Wing: a history is linearizable iff its restriction to each object
// is) each is checked as a partition of its own. A semaphore's resource is
// one register per permit (fencing.Key), each an object. That is exact, not
// an approximation, and it matters: porcupine keeps a bitset of the
// partition's length for every state it caches, so its memory grows with
// the square of a partition's length (the long Sentinel scenario, 230 000
// operations on three resources, took 0.9 GB of heap and 7.5 GB of RSS
// under -race with one partition per resource). The operations of a
// register are cut further, where none is in flight (segmentWrites). Where
// neither S1 nor S2 is checked, the lock's specification accepts every
// history (each of its steps has a successor whatever the outcome; the
// permits' range is checked directly, by checkPermits), so its operations
// are left out of porcupine's input. A restart of the lock's server
// (opRestart) belongs to the lock of every resource, an AdvanceFence
// (opAdvance) to every lock of its resource.
func lockModel(c checks) porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			by := map[object][]porcupine.Operation{}
			var keys []object
			var restarts []porcupine.Operation
			advances := map[string][]porcupine.Operation{}
			for _, op := range ops {
				switch in := op.Input.(opInput); in.kind {
				case opRestart:
					restarts = append(restarts, op)
					continue
				case opAdvance:
					advances[in.resource] = append(advances[in.resource], op)
					continue
				}
				k := objectOf(op.Input.(opInput))
				if k.lock && !c.fenceOrder && !c.ownership {
					continue
				}
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			slices.SortFunc(keys, object.compare)
			var out [][]porcupine.Operation
			for _, k := range keys {
				if k.lock {
					out = append(out, markLast(slices.Concat(by[k], restarts, advances[k.name])))
				} else {
					out = append(out, segmentWrites(by[k])...)
				}
			}
			return out
		},
		Init: func() []any { return []any{modelState{}} },
		Step: func(state, input, output any) []any {
			s := state.(modelState)
			if seed, ok := input.(seedInput); ok {
				s.registerState = seed.state
				return []any{s}
			}
			in, out := input.(opInput), output.(opOutput)
			switch in.kind {
			case opRestart:
				return stepRestart(s)
			case opAdvance:
				return stepAdvance(c, s, in, out)
			case opAcquire:
				return stepAcquire(c, s, in, out)
			case opRenew, opRelease:
				return stepHolder(c, s, in, out)
			}
			return stepRegister(s, in, out)
		},
		DescribeOperation: func(input, output any) string {
			if seed, ok := input.(seedInput); ok {
				return fmt.Sprintf("state of the operations before: newest write %d, newest read %d", seed.state.newest, seed.state.read)
			}
			in, out := input.(opInput), output.(opOutput)
			owner := in.owner
			if len(owner) > 8 {
				owner = owner[:8]
			}
			switch {
			case in.kind == opRestart:
				return "restart of the lock's server, without persistence"
			case in.kind == opAdvance:
				return fmt.Sprintf("advance(%s, at least %d) -> %d, %v", in.resource, in.fence, out.fence, out.res)
			case in.kind == opAcquire && out.res == resOK && in.lease == leasePermit:
				return fmt.Sprintf("acquire(%s, permit of %d) -> permit %d, fence %d", in.resource, in.permits, out.permit, out.fence)
			case in.kind == opAcquire && out.res == resOK:
				return fmt.Sprintf("acquire(%s, %v) -> fence %d", in.resource, in.lease, out.fence)
			case in.kind == opAcquire:
				return fmt.Sprintf("acquire(%s, %v) -> %v", in.resource, in.lease, out.res)
			case in.lease == leasePermit && in.kind != opWrite:
				return fmt.Sprintf("%v(%s#%d, %s, %d) -> %v", in.kind, in.resource, in.permit, owner, in.fence, out.res)
			}
			return fmt.Sprintf("%v(%s, %v %s, %d) -> %v", in.kind, in.resource, in.lease, owner, in.fence, out.res)
		},
		DescribeState: func(state any) string {
			s := state.(modelState)
			return fmt.Sprintf("counter=%d holder=%d held=%v permits=%v readers=%q newest=%d read=%d",
				s.counter, s.holder.fence, s.holder.held, s.permits, s.readers, s.newest, s.read)
		},
	}
	return nm.ToModel()
}

// stepRestart: a restart without persistence begins a new epoch of the
// lock: no holder, no record of a release, and the fence counter at 0, so
// the next acquisition may get fence 1 again (S1 holds within an epoch).
func stepRestart(s modelState) []any {
	return []any{modelState{registerState: s.registerState}}
}

// stepAdvance: AdvanceFence moves the counter to at least in.fence, never
// back, and returns its value afterwards (checked where S1 is).
func stepAdvance(c checks, s modelState, in opInput, out opOutput) []any {
	moved := s
	moved.counter = max(s.counter, in.fence)
	switch out.res {
	case resOK:
		if c.fenceOrder && out.fence != moved.counter {
			return nil
		}
		moved.counter = max(moved.counter, out.fence)
		return []any{moved}
	case resFail:
		return []any{s}
	}
	return []any{s, moved}
}

// stepAcquire: an acquisition gets a fence above the counter (S1, where
// checked; fences may skip: a busy first attempt draws one too) and,
// for a permit, one of its semaphore's (S6); it ends the holdings it
// excludes, which must have expired or been released for it to be granted:
// the lease's previous holder, the permit's, for a writer every reader,
// for a reader the writer. An acquisition of unknown outcome may have done
// so, with the next fence, for an owner nobody learned, on any permit.
func stepAcquire(c checks, s modelState, in opInput, out opOutput) []any {
	switch out.res {
	case resOK:
		if in.lease == leasePermit && !validPermit(out.permit, in.permits) {
			return nil
		}
		if c.fenceOrder && out.fence <= s.counter {
			return nil
		}
		n := s.grant(in, out.owner, out.fence, out.permit)
		if in.last {
			n = n.forget(in.lease, out.owner)
		}
		return []any{n}
	case resFail:
		return []any{s}
	}
	next := []any{s}
	for p := range max(1, min(in.permits, maxModelPermits)) {
		next = append(next, s.grant(in, "?", s.counter+1, p))
	}
	return next
}

func validPermit(p, permits int) bool { return 0 <= p && p < permits && permits <= maxModelPermits }

// grant is s after the acquisition in took fence for owner (and permit).
func (s modelState) grant(in opInput, owner string, fence int64, permit int) modelState {
	s.counter = max(s.counter, fence)
	h := holding{owner: owner, fence: fence, held: true}
	switch in.lease {
	case leasePermit:
		s.permits[permit] = h
	case leaseRead:
		s.holder.held = false
		if owner != "?" { // it has no operations to check
			s.readers = readersPut(s.readers, h)
		}
	case leaseWrite:
		s.holder = h
		s.readers = readersEnd(s.readers)
	default:
		s.holder = h
	}
	return s
}

// stepHolder: a renewal succeeds only for a current holder (S2); a release
// only for a current holder, which it ends, or for one that released itself
// before (a retried release is recognised: a lease's by the released key
// until the next release, a permit's until the permit's next release, a
// reader's for the time its lease had left). Unknown outcomes branch.
func stepHolder(c checks, s modelState, in opInput, out opOutput) []any {
	ours, mine := s.holds(in)
	var next []any
	switch {
	case !c.ownership:
		next = []any{s}
	case out.res == resOK && !ours && (in.kind == opRenew || !mine):
		return nil
	case out.res == resOK && in.kind == opRelease && ours:
		next = []any{s.release(in)}
	case out.res == resUnknown && in.kind == opRelease && ours:
		next = []any{s, s.release(in)}
	default:
		next = []any{s}
	}
	if in.last {
		for i, n := range next {
			next[i] = n.(modelState).forget(in.lease, in.owner)
		}
	}
	return next
}

// holds says whether the lease of in is a current holder (ours), and
// whether it is or released itself (mine).
func (s modelState) holds(in opInput) (ours, mine bool) {
	switch in.lease {
	case leasePermit:
		if in.permit < 0 || in.permit >= maxModelPermits {
			return false, false
		}
		h := s.permits[in.permit]
		return h.held && h.is(in), h.is(in) || s.permitReleased[in.permit].is(in)
	case leaseRead:
		h, ok := readersGet(s.readers, in.owner)
		return ok && h.held && h.is(in), ok && h.is(in)
	}
	ours = s.holder.held && s.holder.is(in)
	return ours, ours || s.released.is(in)
}

// release is s after the lease of in, a current holder, released itself.
func (s modelState) release(in opInput) modelState {
	switch in.lease {
	case leasePermit:
		s.permits[in.permit].held = false
		s.permitReleased[in.permit] = s.permits[in.permit]
	case leaseRead:
		s.readers = readersPut(s.readers, holding{owner: in.owner, fence: in.fence})
	default:
		s.holder.held = false
		s.released = s.holder
	}
	return s
}

// forget drops a reader's holding after its last operation: nothing reads
// it any more, and the state stays as small as the readers in flight.
func (s modelState) forget(kind leaseKind, owner string) modelState {
	if kind == leaseRead {
		s.readers = readersDrop(s.readers, owner)
	}
	return s
}

// stepRegister: the fenced resource accepts a write iff the fencing rule
// admits it (S5: a newer fence, or the newest's from its owner), and for a
// read/write resource only if its fence is also newer than every read it
// admitted; it admits a read iff its fence is newer than every write it
// accepted (S7 at the resource). Unknown outcomes branch.
func stepRegister(s modelState, in opInput, out opOutput) []any {
	next := s
	var admit bool
	if in.kind == opRead {
		admit = in.fence > s.newest
		next.read = max(s.read, in.fence)
	} else {
		admit = in.fence > s.newest || (in.fence == s.newest && in.owner == s.newestOwner)
		if in.lease == leaseWrite {
			admit = admit && in.fence > s.read
		}
		next.newest, next.newestOwner = in.fence, in.owner
	}
	switch out.res {
	case resOK:
		if !admit {
			return nil
		}
		return []any{next}
	case resFail:
		if admit {
			return nil
		}
		return []any{s}
	}
	if admit {
		return []any{s, next}
	}
	return []any{s}
}

// markLast marks each lease's operation with the latest call among those
// of a lock's partition (in.last): the lease's holding can be forgotten
// after it. Operations of one lease are sequential in real time, so every
// other operation of the lease linearized after it is one of unknown
// outcome, whose step does not depend on the holding.
func markLast(ops []porcupine.Operation) []porcupine.Operation {
	ops = slices.Clone(ops)
	last := map[string]int{}
	for i, op := range ops {
		owner := op.Input.(opInput).owner
		if out := op.Output.(opOutput); owner == "" && out.res == resOK {
			owner = out.owner
		}
		if j, ok := last[owner]; owner != "" && (!ok || op.Call >= ops[j].Call) {
			last[owner] = i
		}
	}
	for _, i := range last {
		in := ops[i].Input.(opInput)
		in.last = true
		ops[i].Input = in
	}
	return ops
}

// segmentWrites cuts the operations of one register (writes, and a
// read/write resource's reads) into segments that porcupine checks apart,
// linear in memory where one partition would be quadratic. A cut goes where
// no operation is in flight: every one before it returned before every one
// after it was called. Every linearization then puts all of the operations
// before the cut first, and they leave the register in one state only,
// whichever linearization: accepted writes go up in fence, so the last
// accepted one has the largest fence, and one fence is accepted from one
// owner (or those writes are not linearizable, which their own segment
// shows); the newest read is the largest fence of an admitted read. So the
// history is linearizable iff each segment is, starting from that state —
// which a seed operation carries in (seedInput), just before the segment's
// first call, on a client of its own. An operation whose outcome is unknown
// may take effect at any time after its call (history.record makes it
// never return), so after its call there is no cut.
func segmentWrites(ops []porcupine.Operation) [][]porcupine.Operation {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var (
		out      [][]porcupine.Operation
		start    int                           // of the current segment
		returned int64         = math.MinInt64 // the latest return of ops[:i]
		seed     registerState                 // the state before the current segment
		newest   registerState                 // the state after ops[:i], if linearizable
		client   int                           // the largest client id
	)
	cut := func(end int) {
		seg := ops[start:end]
		if seed != (registerState{}) {
			seg = append([]porcupine.Operation{{ClientId: client + 1, Call: seg[0].Call - 1, Return: seg[0].Call - 1,
				Input: seedInput{seed}, Output: opOutput{res: resOK}, Metadata: "the state left by the operations before"}}, seg...)
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
		case res == resOK && in.kind == opRead:
			newest.read = max(newest.read, in.fence)
		case res == resOK && in.fence > newest.newest:
			newest.newest, newest.newestOwner = in.fence, in.owner
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
	if h.excused > 0 {
		t.Logf("S3: %d leases ended past the bound by no more than the process stood still meanwhile (longest stall %v)",
			h.excused, h.stalls.longest())
	}
	if c.exclusion {
		leases := slices.Collect(maps.Values(h.leases))
		peaks, _ := h.exclusion(h.ops, leases)
		for _, r := range slices.Sorted(maps.Keys(peaks)) {
			t.Logf("%q: %d holders admitted, at most %d at once", r, peaks[r][1], peaks[r][0])
		}
	}
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
	if err := checkPermits(ops); err != nil { // before the model, which holds maxModelPermits
		return err
	}

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
	if err := checkReadsAndWrites(ops); err != nil {
		return err
	}
	if c.exclusion {
		if err := h.checkExclusion(ops, leases); err != nil {
			return err
		}
	}
	excused := 0
	for _, l := range leases {
		late, err := checkDeadline(l, h.stalls)
		if err != nil {
			return err
		}
		if late {
			excused++
		}
		if err := checkNoRenewAfterEnd(l); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.excused = excused
	h.mu.Unlock()
	return nil
}

// checkFences: no two acquisitions of a resource in one epoch of the lock
// (between restarts) got the same fence, and an acquisition that returned
// before another of its epoch began has the smaller fence (S1). An
// acquisition in flight during a restart belongs to no epoch here (the
// model places it).
func checkFences(ops []porcupine.Operation) error {
	type resourceEpoch struct {
		resource string
		epoch    int
	}
	restarts := restartsOf(ops)
	byResource := map[resourceEpoch][]porcupine.Operation{}
	for _, op := range ops {
		if in := op.Input.(opInput); in.kind == opAcquire && op.Output.(opOutput).res == resOK {
			if e, ok := epochOf(op, restarts); ok {
				k := resourceEpoch{in.resource, e}
				byResource[k] = append(byResource[k], op)
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(byResource), func(a, b resourceEpoch) int {
		return cmp.Or(strings.Compare(a.resource, b.resource), cmp.Compare(a.epoch, b.epoch))
	})
	for _, k := range keys {
		acq, r := byResource[k], k.resource
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

// restartsOf returns the restarts of the history, by call time.
func restartsOf(ops []porcupine.Operation) []porcupine.Operation {
	var rs []porcupine.Operation
	for _, op := range ops {
		if op.Input.(opInput).kind == opRestart {
			rs = append(rs, op)
		}
	}
	slices.SortFunc(rs, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return rs
}

// epochOf returns the epoch of the lock in which op ran, the number of
// restarts that returned before it was called, and false if a restart was
// in flight while op was.
func epochOf(op porcupine.Operation, restarts []porcupine.Operation) (int, bool) {
	n := 0
	for _, r := range restarts {
		switch {
		case r.Return < op.Call:
			n++
		case r.Call <= op.Return:
			return 0, false
		}
	}
	return n, true
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
// O(n²) (the long fault scenarios record 10⁵ operations): see precededAcross.
func precededBy(ops []porcupine.Operation, fence func(porcupine.Operation) int64, bad func(fa, fb int64) bool) (a, b porcupine.Operation, found bool) {
	return precededAcross(ops, ops, fence, fence, bad)
}

// precededAcross finds a of as and b of bs with a.Return < b.Call and
// bad(fenceA(a), fenceB(b)), bad monotone in its first argument (> or ≥).
// Sweeping bs by call time, it keeps the largest fence of the as that
// returned before the current call — bad holds for some earlier a iff it
// holds for that largest one.
func precededAcross(as, bs []porcupine.Operation, fenceA, fenceB func(porcupine.Operation) int64, bad func(fa, fb int64) bool) (a, b porcupine.Operation, found bool) {
	byReturn := slices.Clone(as)
	slices.SortFunc(byReturn, func(x, y porcupine.Operation) int { return cmp.Compare(x.Return, y.Return) })
	byCall := slices.Clone(bs)
	slices.SortFunc(byCall, func(x, y porcupine.Operation) int { return cmp.Compare(x.Call, y.Call) })
	var top porcupine.Operation // the largest fence among byReturn[:i]
	i := 0
	for _, b := range byCall {
		for ; i < len(byReturn) && byReturn[i].Return < b.Call; i++ {
			if i == 0 || fenceA(byReturn[i]) > fenceA(top) {
				top = byReturn[i]
			}
		}
		if i > 0 && bad(fenceA(top), fenceB(b)) {
			return top, b, true
		}
	}
	return porcupine.Operation{}, porcupine.Operation{}, false
}

// checkDeadline: a lease context that ended for want of renewal ended before
// Redis could have expired the lease: before the send time of its last
// confirmed request plus TTL·(1−redlease.DriftFactor) (S3). An end later
// than that by no more than the process stood still in the meantime is on
// time, and reported as excused (see stallWatch).
func checkDeadline(l *leaseLog, stalls *stallWatch) (excused bool, err error) {
	if l.endedBy != redlease.OutcomeExpired || len(l.confirmed) == 0 {
		return false, nil
	}
	last := slices.MaxFunc(l.confirmed, func(a, b time.Time) int { return a.Compare(b) })
	bound := last.Add(l.ttl - time.Duration(float64(l.ttl)*redlease.DriftFactor))
	if l.ended.Before(bound) {
		return false, nil
	}
	stood := stalls.within(last, l.ended)
	if l.ended.Before(bound.Add(stood)) {
		return true, nil
	}
	first := slices.MinFunc(l.confirmed, func(a, b time.Time) int { return a.Compare(b) })
	since := func(ts []time.Time) []time.Duration {
		var ds []time.Duration
		for _, t := range ts {
			ds = append(ds, t.Sub(first).Round(time.Millisecond))
		}
		slices.Sort(ds)
		return ds
	}
	return false, fmt.Errorf("S3: lease %q fence %d ended %v after its last confirmed send, at or past the TTL bound %v (the process stood still for %v of that; after its first confirmed send: renewals sent at %v, sends confirmed at %v, ended at %v)",
		l.resource, l.fence, l.ended.Sub(last), bound.Sub(last), stood, since(l.renewsSent), since(l.confirmed), l.ended.Sub(first).Round(time.Millisecond))
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
		{"a retried release, after the next acquisition", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			op(h, 2, 3, opRelease, "a", 1, resOK)
			acq(h, 4, 5, "b", 2)
			op(h, 6, 7, opRelease, "a", 1, resOK) // recognised by the released key
		}, ""},
		{"a retried release, after the next holder's release", strict, func(h *history) {
			acq(h, 0, 1, "a", 1)
			op(h, 2, 3, opRelease, "a", 1, resOK)
			acq(h, 4, 5, "b", 2)
			op(h, 6, 7, opRelease, "b", 2, resOK) // replaced the released key
			op(h, 8, 9, opRelease, "a", 1, resOK)
		}, "not linearizable"},
		{"two live holders, both admitted", checks{exclusion: true}, func(h *history) {
			acq(h, 0, 1, "a", 1)
			op(h, 2, 3, opWrite, "a", 1, resOK)
			acq(h, 4, 5, "b", 2) // granted while a's lease was live
			op(h, 6, 7, opWrite, "b", 2, resOK)
			for _, o := range []string{"a", "b"} {
				h.leases[o] = &leaseLog{resource: "r", owner: o, ttl: time.Second, confirmed: []time.Time{h.start}}
			}
		}, "S6: \"r\" admitted two holders of its lease at once"},
		{"unknown acquire may have drawn a fence", strict, func(h *history) {
			h.ops = append(h.ops, porcupine.Operation{Call: 0, Return: math.MaxInt64,
				Input: opInput{kind: opAcquire, resource: "r"}, Output: opOutput{res: resUnknown}})
			acq(h, 2, 3, "b", 2)
		}, ""},
		{"context ended past the bound", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				confirmed: []time.Time{base}, ended: base.Add(time.Second), endedBy: redlease.OutcomeExpired}
		}, "S3"},
		{"context ended past the bound, by less than the process stood still", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				confirmed: []time.Time{base}, ended: base.Add(time.Second), endedBy: redlease.OutcomeExpired}
			h.stalls.add(stall{base.Add(900 * time.Millisecond), base.Add(950 * time.Millisecond)})
		}, ""},
		{"context ended past the bound, by more than the process stood still", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				confirmed: []time.Time{base}, ended: base.Add(time.Second), endedBy: redlease.OutcomeExpired}
			h.stalls.add(stall{base.Add(900 * time.Millisecond), base.Add(905 * time.Millisecond)})
			h.stalls.add(stall{base.Add(-time.Second), base}) // before its last confirmed send: no excuse
		}, "S3"},
		{"renew after the end", strict, func(h *history) {
			h.leases["a"] = &leaseLog{resource: "r", owner: "a", fence: 1, ttl: time.Second,
				renewsSent: []time.Time{base.Add(2 * time.Second)}, ended: base.Add(time.Second), endedBy: redlease.OutcomeLost}
		}, "S4"},
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
	// And S1's direct check catches the real-time order on its own.
	h := craftedHistory()
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

// trying returns opts as the options of an acquire call that does not wait:
// the tests give such a call none of the others.
func trying(opts []redlease.WaitOption) []redlease.LeaseOption {
	out := make([]redlease.LeaseOption, len(opts))
	for i, o := range opts {
		out[i] = o.(redlease.LeaseOption)
	}
	return out
}
