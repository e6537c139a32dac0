// Package redlease gives services leases on Redis with fencing tokens: a
// lease that lets one worker at a time run a job, and a number that lets the
// protected resource reject a worker that has gone stale.
//
// A lease alone is not safe. A holder can pause (garbage collection, a VM
// freeze, descheduling) past its TTL, wake up after another holder took over,
// and write anyway. redlease therefore hands every lease a fencing token that
// rises with each new holder of a resource (Lease.Fence), and the resource
// must refuse a write whose token is older than the newest it has accepted,
// in the same atomic step as the write.
//
// # What a lease does
//
// Acquire and TryAcquire run one Lua script: create the lease only if it is
// absent, with a TTL and a random owner token, and increment the resource's
// fence counter in the same step. Refresh and Release act only while Redis
// stores our owner token (compare-and-renew, compare-and-delete). With
// auto-renew on (the default), the Client's watchdog renews every TTL/3.
//
// Each lease keeps a local deadline on the monotonic clock: the moment the
// last confirmed acquire or renew request was sent, plus TTL less a clock
// drift allowance (TTL·DriftFactor) and a safety margin (TTL/10 by default).
// Lease.Context ends, with context.Cause matching ErrLeaseLost, when Redis
// says the lease is not ours or when that deadline passes without a confirmed
// renewal, whichever comes first, so the holder is told to stop before Redis
// can give the resource to someone else, even when Redis cannot be reached.
// Release ends it with ErrReleased.
//
// # Keys
//
// A resource R uses two keys, both in R's Redis Cluster hash slot:
// <prefix>{R}:lease (the lease, "<owner>:<fence>", with the TTL) and
// <prefix>{R}:fence (the counter, without a TTL). The prefix defaults to
// "redlease:". Plain, Sentinel (failover) and cluster clients all work.
//
// # Protecting the resource
//
// The guards check fences at the resource, in the same atomic step as the
// write, by one rule: a write is accepted iff its fence is greater than the
// newest the resource has accepted, or equal to it and presented by the same
// owner. SQLGuard (a guard table, checked inside the caller's transaction)
// and RowGuard (a fence column in each row) serve SQL databases; RedisGuard
// and FencedScript data in Redis; HTTPGuard, with a MemoryFenceStore or a
// RedisFenceStore, HTTP services. A refusal is a *StaleFenceError. When the
// fence counter went back, Client.AdvanceFence repairs it.
//
// # Guarantees
//
// On one Redis deployment that loses no data (no failover, no restart
// without persistence, no eviction or flush of the counter), with clocks
// that drift apart by less than DriftFactor (ρ):
//
//   - S1: no two successful acquisitions of a resource get the same fence,
//     and an acquisition that returned before another began has the smaller.
//   - S2: renew and release change a lease only while it stores our owner
//     token, and never recreate it.
//   - S3: a lease context ends no later than t + TTL·(1−ρ) − margin, t being
//     the send time of the last successful acquire or renew, whatever Redis
//     or the network does; a lease whose bound passed before its acquire
//     reply arrived is never handed out.
//   - S4: no renew is sent for a lease whose context has ended; an acquire of
//     unknown outcome is resolved idempotently (same owner token, same fence)
//     or released by owner, never reported as held.
//   - S5: the fencing guards accept a write iff its fence is greater than the
//     newest accepted, or equal and from the same owner, atomically with the
//     write.
//
// # What is not promised
//
//   - Fences across asynchronous failover: the counter can go back after a
//     failover, a restart without persistence, an eviction or a flush, and
//     two holders can get the same fence. Resources accept an equal fence
//     only from the same owner; WithReplicaAck narrows the window,
//     WithFenceSource closes it, AdvanceFence repairs the counter.
//   - Exclusion without fencing: a holder that pauses between checking its
//     context and acting acts late; only the resource's fence check stops it.
//   - Safety under clock jumps without fencing: a suspended machine, or a
//     server clock that jumps, expires leases unseen.
//   - A lost reply leaves an outcome unknown; redlease reports it as such
//     (ErrOutcomeUnknown) rather than guessing.
package redlease
