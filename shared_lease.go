package redlease

import (
	"context"
	_ "embed"
	"strconv"
)

// Shared leases: a semaphore (N holders, each with a numbered permit) and
// read/write leases (many readers or one writer). A shared lease is a
// *Lease like any other: its context, fence, renewals, release, max hold,
// unknown outcomes and observers work as for an exclusive lease; only the
// scripts differ, chosen here by the lease's kind.

// leaseKind says what a Lease holds.
type leaseKind uint8

const (
	kindExclusive leaseKind = iota // Acquire: the lease key
	kindPermit                     // AcquireSemaphore: one permit
	kindRead                       // AcquireRead: a share of the read side
	kindWrite                      // AcquireWrite: the write side
)

// sharedKeys are the keys of a resource's shared leases (see keys.go).
type sharedKeys struct {
	permits, holders                                string // a semaphore
	writer, readers, readinfo, readq, wrel, readrel string // read/write leases
}

// sharedLease is what a shared lease has beyond an exclusive one: kept
// apart so that the many exclusive leases a process may hold stay small.
type sharedLease struct {
	kind      leaseKind
	keys      *sharedKeys
	permit    int // kindPermit: which permit
	permits   int // kindPermit: of how many
	permitArg any // permit, boxed once for the scripts
}

// kind returns the lease's kind.
func (l *Lease) kind() leaseKind {
	if l.shared == nil {
		return kindExclusive
	}
	return l.shared.kind
}

func newSharedKeys(prefix, resource string) *sharedKeys {
	k := func(kind string) string { return key(prefix, resource, kind) }
	return &sharedKeys{permits: k(kindPermits), holders: k(kindHolders),
		writer: k(kindWriter), readers: k(kindReaders), readinfo: k(kindReadInfo), readq: k(kindReadQueue),
		wrel: k(kindWriteReleased), readrel: k(kindReadReleased)}
}

// AcquireSemaphore takes one of the permits permits of resource, waiting as
// Acquire does while all are held: at most permits holders at once, each
// with a numbered permit (Lease.Permit, 0..permits-1). Every new holder of a
// permit gets a larger fence than every earlier holder of it, so a resource
// fences permit holders by resource and permit (see fencing.Key): a holder
// that paused past its TTL, while its permit went to someone else, is
// turned away. A release of one permit wakes one waiter.
//
// As for read/write leases (see AcquireWrite), do not use resource for
// another kind of lease: the kinds share the waiters' queue.
//
// permits must be in 1..MaxPermits. All holders of resource must agree on
// it: while any permit of resource is held, a call with another number
// fails with an error matching ErrNotAcquired and ErrInvalidArgument; once
// none is, the number may change. WithFenceSource does not apply to shared
// leases (semaphores, read and write leases); refused as invalid.
func (c *Client) AcquireSemaphore(ctx context.Context, resource string, permits int, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindPermit, permits, opts, true)
}

// TryAcquireSemaphore is AcquireSemaphore without waiting: if every permit
// is held, it returns a *BusyError.
func (c *Client) TryAcquireSemaphore(ctx context.Context, resource string, permits int, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindPermit, permits, opts, false)
}

// MaxPermits is the most permits a semaphore may have.
const MaxPermits = 1 << 20

// AcquireRead takes a read lease of resource, shared with every other
// reader and never with a writer, waiting as Acquire does while a writer
// holds the resource or waits for it: writers come first, so that a stream
// of readers cannot starve a writer (readers wait while writers follow one
// another). A writer's release wakes the next waiting writer if there is
// one, else every waiting reader.
//
// A read lease's fence is drawn from the same counter as the write leases':
// it is larger than the fence of every write lease granted before it and
// smaller than that of every write lease granted after. A resource can use
// it to turn away a reader whose view is stale: one whose fence is below
// the newest write fence the resource accepted began before that write.
// Readers must not write through a fencing guard (their fences interleave
// with the writers').
func (c *Client) AcquireRead(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindRead, 0, opts, true)
}

// TryAcquireRead is AcquireRead without waiting.
func (c *Client) TryAcquireRead(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindRead, 0, opts, false)
}

// AcquireWrite takes the write lease of resource, exclusive of readers and
// of other writers, waiting as Acquire does. A waiting writer stops new
// readers from entering; it gets the lease once the readers inside have
// released theirs (or their leases have lapsed). Its fence is larger than
// every earlier write lease's (and read lease's) of resource.
//
// Use one kind of lease per resource name: read/write leases, a semaphore
// or the exclusive lease (Acquire). Their holders are kept in keys of their
// own, but the waiters of every kind share the resource's queue and wake
// channel, so a waiter of one kind holds up the others (while an Acquire
// waits on "config", TryAcquireRead("config") fails as if a writer waited)
// and a release of one kind may spend its wake-up on a waiter of another.
func (c *Client) AcquireWrite(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindWrite, 0, opts, true)
}

// TryAcquireWrite is AcquireWrite without waiting.
func (c *Client) TryAcquireWrite(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindWrite, 0, opts, false)
}

// Semaphore reports the number of permits of the semaphore whose permit
// the lease holds, and false for every other lease.
func (l *Lease) Semaphore() (permits int, ok bool) {
	if l == nil || l.kind() != kindPermit {
		return 0, false
	}
	return l.shared.permits, true
}

// Permit returns which of its semaphore's permits the lease holds,
// 0..permits-1; 0 for every other lease.
func (l *Lease) Permit() int {
	if l == nil || l.kind() != kindPermit {
		return 0
	}
	return l.shared.permit
}

func (c *Client) acquireShared(ctx context.Context, resource string, kind leaseKind, permits int, opts []Option, wait bool) (*Lease, error) {
	if kind == kindPermit && (permits < 1 || permits > MaxPermits) {
		return nil, invalidf("%d permits is not in 1..MaxPermits (%d)", permits, MaxPermits)
	}
	ls, err := c.acquire(ctx, []string{resource}, opts, wait, kind, permits)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// sharedCall is the acquire call of a shared lease.
func (a *acquisition) sharedCall(timeout any) call {
	k, sk := &a.names[0], a.sk
	switch a.kind {
	case kindPermit:
		return call{s: semaphoreScript, words: []any{nil, nil, 5, &sk.permits, &sk.holders, &k.fence, &k.queue, &k.alive,
			&a.owner, a.cfg.ttlArg, timeout, flag(a.cfg.fair), flag(a.queued), &a.member, &a.cfg.holder, a.permits,
			&k.wake, flag(a.c.b.sharded())}, kind: arrayReply}
	case kindRead:
		return call{s: readScript, words: []any{nil, nil, 7, &sk.writer, &sk.readers, &sk.readinfo, &k.fence, &k.queue,
			&k.alive, &sk.readq, &a.owner, a.cfg.ttlArg, timeout, &a.member, &a.cfg.holder}, kind: arrayReply}
	}
	return call{s: writeScript, words: []any{nil, nil, 5, &sk.writer, &sk.readers, &k.fence, &k.queue, &k.alive,
		&a.owner, a.cfg.ttlArg, timeout, flag(a.cfg.fair), flag(a.queued), &a.member, &a.cfg.holder}, kind: mixedReply}
}

// decodeShared reads the reply of semaphore.lua or rw_read.lua: the lease's
// fence (and a.permit), or a *BusyError.
func (a *acquisition) decodeShared(r reply) ([]int64, error) {
	v := r.vals
	x, ok := int64s(v[:min(len(v), 3)])
	switch {
	case !ok:
	case len(v) == 2 && x[0] == -1:
		return nil, errorf("%w: %w: %s is in use with %d permits, not %d", ErrNotAcquired, ErrInvalidArgument,
			quote(a.resources[0]), x[1], a.permits)
	case a.kind == kindPermit && len(v) == 3 && x[0] == 1:
		a.permit, a.fence[0] = int(x[1]), x[2]
		return a.fence[:], nil
	case a.kind == kindRead && len(v) == 2 && x[0] == 1:
		a.fence[0] = x[1]
		return a.fence[:], nil
	case len(v) == 4 && x[0] == 0:
		holder, _ := v[3].(string)
		busy := a.busy(0, x[1], x[2] == 1, holder)
		switch {
		case a.kind == kindPermit:
			busy.why = busyPermits
		case x[1] == 0: // a reader behind a waiting writer
			busy.why = busyWriter
		}
		return nil, busy
	}
	return nil, errorf("acquire script replied %v", v)
}

// refreshCall is the lease's compare-and-renew call.
func (l *Lease) refreshCall() call {
	if l.shared == nil {
		return refreshCall(&l.keys.lease, &l.owner, l.cfg.ttlArg)
	}
	sk := l.shared.keys
	switch l.shared.kind {
	case kindPermit:
		return call{s: semaphoreRefreshScript, words: []any{nil, nil, 2, &sk.permits, &sk.holders,
			&l.owner, l.shared.permitArg, l.cfg.ttlArg}, kind: intReply}
	case kindRead:
		return call{s: readRefreshScript, words: []any{nil, nil, 2, &sk.readers, &sk.readinfo,
			&l.owner, l.cfg.ttlArg}, kind: intReply}
	}
	return refreshCall(&sk.writer, &l.owner, l.cfg.ttlArg) // kindWrite: refresh.lua on the writer key
}

// releaseCall is the compare-and-release call of a lease of kind, on keys
// k and sk, for owner: member is its queue member if it may be waiting
// (&noMember if not), permit its permit ("" if unknown).
func releaseCallOf(kind leaseKind, k *resourceKeys, sk *sharedKeys, owner, member *string, permit any, sharded bool) call {
	switch kind {
	case kindPermit:
		return call{s: semaphoreReleaseScript, words: []any{nil, nil, 4, &sk.permits, &sk.holders, &k.queue, &k.alive,
			owner, permit, &k.wake, flag(sharded), member}, kind: intReply}
	case kindRead:
		return call{s: readReleaseScript, words: []any{nil, nil, 6, &sk.readers, &k.queue, &k.alive, &sk.readq, &sk.readrel,
			&sk.readinfo, owner, &k.wake, flag(sharded), member}, kind: intReply}
	case kindWrite:
		return call{s: writeReleaseScript, words: []any{nil, nil, 5, &sk.writer, &k.queue, &k.alive, &sk.wrel, &sk.readq,
			owner, &k.wake, flag(sharded), member}, kind: intReply}
	}
	return releaseCall(k, owner, member, sharded)
}

// releaseCall is the lease's release call.
func (l *Lease) releaseCall(member *string) call {
	if l.shared == nil {
		return releaseCall(&l.keys, &l.owner, member, l.c.b.sharded())
	}
	return releaseCallOf(l.shared.kind, &l.keys, l.shared.keys, &l.owner, member, l.shared.permitArg, l.c.b.sharded())
}

// permitText is a permit's script argument.
func permitText(p int) any { return strconv.Itoa(p) }

var (
	//go:embed lua/semaphore.lua
	semaphoreSrc    string
	semaphoreScript = newScript(withQueue(semaphoreSrc))
	//go:embed lua/semaphore_refresh.lua
	semaphoreRefreshSrc    string
	semaphoreRefreshScript = newScript(withQueue(semaphoreRefreshSrc))
	//go:embed lua/semaphore_release.lua
	semaphoreReleaseSrc    string
	semaphoreReleaseScript = newScript(withQueue(semaphoreReleaseSrc))

	//go:embed lua/rw_read.lua
	readSrc    string
	readScript = newScript(withQueue(readSrc))
	//go:embed lua/rw_read_refresh.lua
	readRefreshSrc    string
	readRefreshScript = newScript(withQueue(readRefreshSrc))
	//go:embed lua/rw_read_release.lua
	readReleaseSrc    string
	readReleaseScript = newScript(withQueue(readReleaseSrc))
	//go:embed lua/rw_write.lua
	writeSrc    string
	writeScript = newScript(withQueue(writeSrc))
	//go:embed lua/rw_write_release.lua
	writeReleaseSrc    string
	writeReleaseScript = newScript(withQueue(writeReleaseSrc))
)
