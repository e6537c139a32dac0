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
// # What is not promised
//
//   - Fences rise only while the counter does. Redis replicates
//     asynchronously: after a failover, or a restart without persistence, the
//     counter can go back and two holders can get the same fence. Resources
//     should accept an equal fence only from the same owner.
//   - Without fencing at the resource, a lease gives mutual exclusion only
//     while no holder pauses longer than its margin, and while clocks run at
//     nearly the same rate; a pause of the whole machine that the monotonic
//     clock does not count (suspend) is not seen.
//   - A lost reply leaves an outcome unknown; redlease reports it as such
//     (ErrOutcomeUnknown) rather than guessing.
package redlease
