package redlease

import (
	"context"
	"strconv"

	"github.com/redlease/redlease/internal/wire"
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

// sharedLease is what a shared lease has beyond an exclusive one: kept
// apart so that the many exclusive leases a process may hold stay small.
type sharedLease struct {
	kind      leaseKind
	keys      *wire.SharedKeys
	permit    int    // kindPermit: which permit
	permits   int    // kindPermit: of how many
	permitArg string // permit, as the scripts take it
}

func (k leaseKind) String() string {
	return [...]string{"an exclusive lease", "a semaphore", "read/write leases", "read/write leases"}[k]
}

// kindOf is the kind that a script's WRONGKIND reply names.
func kindOf(name string) leaseKind {
	switch name {
	case "semaphore":
		return kindPermit
	case "read/write":
		return kindWrite
	}
	return kindExclusive
}

// kind returns the lease's kind.
func (l *Lease) kind() leaseKind {
	if l.shared == nil {
		return kindExclusive
	}
	return l.shared.kind
}

// AcquireSemaphore takes one of the permits permits of resource, waiting as
// Acquire does while all are held: at most permits holders at once, each
// with a numbered permit (Lease.Permit, 0..permits-1). Every new holder of a
// permit gets a larger fence than every earlier holder of it, so a resource
// fences permit holders by resource and permit (see fencing.Key): a holder
// that paused past its TTL, while its permit went to someone else, is
// turned away. A release of one permit wakes one waiter.
//
// While permits of resource are held or waited for, an acquire of another
// kind of lease on it fails with ErrWrongKind (see AcquireWrite).
//
// permits must be in 1..MaxPermits. All holders of resource must agree on
// it: while any permit of resource is held, a call with another number
// fails with an error matching ErrNotAcquired and ErrInvalidArgument; once
// none is, the number may change. WithFenceSource does not apply to shared
// leases (semaphores, read and write leases); refused as invalid.
func (c *Client) AcquireSemaphore(ctx context.Context, resource string, permits int, opts ...WaitOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindPermit, permits, options(opts), true)
}

// TryAcquireSemaphore is AcquireSemaphore without waiting: if every permit
// is held, it returns a *BusyError.
func (c *Client) TryAcquireSemaphore(ctx context.Context, resource string, permits int, opts ...LeaseOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindPermit, permits, options(opts), false)
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
func (c *Client) AcquireRead(ctx context.Context, resource string, opts ...WaitOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindRead, 0, options(opts), true)
}

// TryAcquireRead is AcquireRead without waiting.
func (c *Client) TryAcquireRead(ctx context.Context, resource string, opts ...LeaseOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindRead, 0, options(opts), false)
}

// AcquireWrite takes the write lease of resource, exclusive of readers and
// of other writers, waiting as Acquire does. A waiting writer stops new
// readers from entering; it gets the lease once the readers inside have
// released theirs (or their leases have lapsed). Its fence is larger than
// every earlier write lease's (and read lease's) of resource.
//
// One name is one kind's at a time: read/write leases, a semaphore or the
// exclusive lease (Acquire). While leases of one kind hold a name or wait for
// it, an acquire of another kind fails at once with ErrWrongKind, which names
// both (Redis checks it in the acquire's script); once the last of them is
// gone, another kind may take the name.
func (c *Client) AcquireWrite(ctx context.Context, resource string, opts ...WaitOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindWrite, 0, options(opts), true)
}

// TryAcquireWrite is AcquireWrite without waiting.
func (c *Client) TryAcquireWrite(ctx context.Context, resource string, opts ...LeaseOption) (*Lease, error) {
	return c.acquireShared(ctx, resource, kindWrite, 0, options(opts), false)
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
// 0..permits-1; -1 for every other lease (a semaphore's permit 0 and an
// exclusive lease are told apart).
func (l *Lease) Permit() int {
	if l == nil || l.kind() != kindPermit {
		return -1
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
func (a *acquisition) sharedCall() wire.Call {
	k, sk := &a.names[0], a.sk
	switch a.kind {
	case kindPermit:
		return wire.Semaphore(k, sk, a.owner, a.member, a.cfg.ttlArg, a.wait, a.cfg.fair, a.queued, a.cfg.leaseTail(),
			a.permits, a.c.conn.Sharded())
	case kindRead:
		return wire.Read(k, sk, a.owner, a.member, a.cfg.ttlArg, a.wait, a.cfg.leaseTail())
	}
	return wire.Write(k, sk, a.owner, a.member, a.cfg.ttlArg, a.wait, a.cfg.fair, a.queued, a.cfg.leaseTail())
}

// plainRenewal reports whether the lease is renewed by refresh.lua on its
// lease key alone (an exclusive lease, no election's term), which
// refresh_many.lua does for many leases at once.
func (l *Lease) plainRenewal() bool { return l.shared == nil && !l.cfg.term }

// refreshCall is the lease's compare-and-renew call.
func (l *Lease) refreshCall() wire.Call {
	if l.shared == nil && l.cfg.term {
		return wire.RefreshTerm(&l.keys, l.owner, l.timing().ttlArg)
	}
	if l.plainRenewal() {
		return wire.Refresh(l.keys.Lease, l.owner, l.timing().ttlArg)
	}
	sk := l.shared.keys
	switch l.shared.kind {
	case kindPermit:
		return wire.SemaphoreRefresh(&l.keys, sk, l.owner, l.shared.permitArg, l.timing().ttlArg)
	case kindRead:
		return wire.ReadRefresh(&l.keys, sk, l.owner, l.timing().ttlArg)
	}
	return wire.WriteRefresh(&l.keys, sk, l.owner, l.timing().ttlArg)
}

// releaseCallOf is the compare-and-release call of a lease of kind, on keys
// k and sk, for owner: member is its queue member if it may be waiting
// ("" if not), permit its permit ("" if unknown).
func releaseCallOf(kind leaseKind, k *wire.Keys, sk *wire.SharedKeys, owner, member, permit string, sharded bool) wire.Call {
	switch kind {
	case kindPermit:
		return wire.SemaphoreRelease(k, sk, owner, permit, member, sharded)
	case kindRead:
		return wire.ReadRelease(k, sk, owner, member, sharded)
	case kindWrite:
		return wire.WriteRelease(k, sk, owner, member, sharded)
	}
	return wire.Release(k, owner, member, sharded)
}

// releaseCall is the lease's release call.
func (l *Lease) releaseCall(member string) wire.Call {
	if l.shared == nil {
		return wire.Release(&l.keys, l.owner, member, l.c.conn.Sharded())
	}
	return releaseCallOf(l.shared.kind, &l.keys, l.shared.keys, l.owner, member, l.shared.permitArg, l.c.conn.Sharded())
}

// permitText is a permit's script argument.
func permitText(p int) string { return strconv.Itoa(p) }
