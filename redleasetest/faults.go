package redleasetest

import (
	"context"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/embedded"
)

// Expire makes the lease of resource lapse in Redis now, as if its TTL had
// run out while its holder was paused: the lease is gone, the fence counter
// stays, so the next acquire of the resource, by any client, gets a higher
// fence. The resource's first waiter is woken and tries at once, as its
// timer would make it try at a real expiry (the wake-up travels in real
// time, over pub/sub). A lease taken WithLockDelay(d) keeps the resource
// for d more (or for the time it had left, if less), as at a real expiry.
//
// The holder is not told at once, as it would not be: its next renewal is
// refused, and its context then ends with redlease.ErrLeaseLost. That
// renewal is at most one renew interval away (TTL/3 by default):
// FastForward by it, or call the lease's Refresh. A lease without
// auto-renew finds out at its Refresh, or lapses at its local deadline. Its
// Release returns ErrLeaseLost.
//
// Expire acts on exclusive leases (TryAcquire, Acquire) only. It fails the
// test if resource is not held (under New's key prefix), if it holds shared
// leases (a semaphore's permits, a read or write lease: which of them would
// lapse is not said), or if Redis is down.
func (k *Kit) Expire(resource string) {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.status("Expire", resource)
	k.exclusiveOnly("Expire", st)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// Break is an expiry but for the wake-up: it deletes the lease and
	// nothing else (not the fence counter, and it leaves no release marker,
	// so the holder's Release finds a lost lease). It is given the fence
	// just seen, so that it removes that lease and nothing that came since
	// (Break with fence 0 would also remove every shared holder).
	_, removed, err := k.other.Break(ctx, resource, st.Fence)
	switch {
	case err != nil:
		k.tb.Fatalf("redleasetest: Expire(%q): %v", resource, err)
	case !removed:
		k.tb.Fatalf("redleasetest: Expire(%q): the resource is not held", resource)
	}
}

// Steal makes another owner take the lease of resource, whoever holds it
// (or take it if it is free), and returns the new lease's fence: higher
// than every fence of the resource before. The Kit's Clients send nothing
// while it does (a waiter cannot slip in between), and the other owner's
// holder description is OtherHolder.
//
// The holder finds out at its next renewal, which Redis refuses: its
// context then ends with redlease.ErrLeaseLost. That renewal is at most one
// renew interval away (TTL/3 by default): FastForward by it, or call the
// lease's Refresh. Its Release returns ErrLeaseLost. A fencing guard that
// has seen the new fence rejects the old holder's: make the other owner's
// write in the test, with the fence Steal returns and the owner that
// Status reports.
//
// The other owner holds the lease for one TTL (New's options) and does not
// renew it, as an owner that took over and then stopped: FastForward by the
// TTL, or Expire, frees the resource.
//
// Steal acts on exclusive leases (TryAcquire, Acquire) only: it fails the
// test if resource holds shared leases (a semaphore's permits, a read or
// write lease), since taking an exclusive lease of the name would not
// exclude their holders, and if Redis is down.
func (k *Kit) Steal(resource string) int64 {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.up("Steal")
	open, ok := k.gate.hold(patience)
	defer open()
	if !ok {
		k.tb.Fatalf("redleasetest: Steal(%q): the Clients' requests did not end within %v", resource, patience)
	}
	// The Clients are held, so no shared lease can appear between the look
	// and the Break.
	k.exclusiveOnly("Steal", k.status("Steal", resource))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// Twice: a lease with a lock delay is not gone after one Break but
	// broken, and keeps the resource for its delay (see Client.Break); a
	// takeover does not wait for it.
	for range 2 {
		if _, _, err := k.other.Break(ctx, resource, 0); err != nil {
			k.tb.Fatalf("redleasetest: Steal(%q): %v", resource, err)
		}
	}
	l, err := k.other.TryAcquire(ctx, resource, redlease.WithAutoRenew(false), redlease.WithFair(false))
	if err != nil {
		k.tb.Fatalf("redleasetest: Steal(%q): %v", resource, err)
	}
	return l.Fence()
}

// exclusiveOnly fails the test if st shows shared leases: Expire and Steal
// model an exclusive holder's loss, and Break of a shared resource removes
// every holder at once, which is neither an expiry of one nor a takeover.
func (k *Kit) exclusiveOnly(op string, st redlease.Status) {
	k.tb.Helper()
	if len(st.Shared) > 0 {
		k.tb.Fatalf("redleasetest: %s(%q): the resource holds shared leases (%d holders: a semaphore's permits or a read/write lease); %s acts on exclusive leases only",
			op, st.Resource, len(st.Shared), op)
	}
}

// Outage makes the embedded Redis unreachable: it closes its listener and
// its connections, keeping its data, so that every request fails at once
// with a refused connection (matching syscall.ECONNREFUSED). The data
// lives on meanwhile: FastForward expires keys, as a Redis cut off by a
// network partition would. A holder's renewals fail, and its context ends
// with redlease.ErrLeaseLost at its local deadline; waiting acquire calls
// retry with backoff. Restore ends the outage. Outage while Redis is down
// does nothing.
func (k *Kit) Outage() {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.outage()
}

func (k *Kit) outage() {
	if !k.down {
		k.mr.Close()
		k.down = true
	}
}

// Restore ends an Outage: the embedded Redis listens again on the same
// address, with the same data (less what expired meanwhile). It returns
// once each of the Kit's Redis clients has got an answer, so that the
// next request succeeds; that can take up to a second of real time after
// a long outage, when go-redis probes a server that refused it too often
// only once a second. A waiting acquire call tries again at the end of its
// backoff, up to half a second of the Kit's clock away: FastForward to let
// it. Restore while Redis is up does nothing.
func (k *Kit) Restore() {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.restore()
}

func (k *Kit) restore() {
	k.tb.Helper()
	if !k.down {
		return
	}
	if err := embedded.Restart(k.mr); err != nil {
		k.tb.Fatalf("redleasetest: Restore: restarting the embedded Redis: %v", err)
	}
	k.down = false
	deadline := time.Now().Add(patience)
	for _, rdb := range k.redisClients() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			err := rdb.Ping(ctx).Err()
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				k.tb.Fatalf("redleasetest: Restore: Redis does not answer after %v: %v", patience, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Unreachable makes Redis unreachable for d of the Kit's clock: Outage,
// FastForward(d), Restore. It fails the test as those do.
func (k *Kit) Unreachable(d time.Duration) {
	k.tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.outage()
	k.fastForward(d)
	k.restore()
}
