// Package redlease gives services leases on Redis with fencing tokens: a
// lease lets one worker at a time run a job, and its fencing token lets the
// protected resource refuse a worker that has gone stale.
//
// A lease alone is not safe. A holder can pause (garbage collection, a VM
// freeze, descheduling) past its TTL, wake up after another holder took over,
// and write anyway. So every lease carries a fencing token (Lease.Fence)
// larger than that of every earlier holder of the resource, and the resource
// refuses a write whose token is older than the newest it has accepted, in
// the same atomic step as the write. Package
// github.com/redlease/redlease/fencing has the guards that do that for SQL
// databases, data in Redis and HTTP services.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	locks := redlease.New(rdb, redlease.WithTTL(10*time.Second))
//	defer locks.Close(ctx)
//
//	lease, err := locks.Acquire(ctx, "nightly-report") // waits while another owner holds it
//	if err != nil {
//		return err
//	}
//	defer lease.Release(ctx)
//	work := lease.Context() // ends when the lease is lost or cannot be renewed in time
//	// ... do the work under work, passing lease.Fence() with every write
//
// # What a lease does
//
// An acquire is one Lua script: it takes the lease only if it is free, with
// the TTL and an owner token (Lease.Owner, a UUID), and draws its fence from a
// counter in the same step, so no lease exists without a fence. A retry of
// an acquire whose reply was lost reuses the owner token, and the script
// returns the same lease and fence. Refresh and Release act only while Redis
// stores our owner token (compare-and-renew, compare-and-delete), and never
// recreate a lease. With auto-renew on (the default), the Client's watchdog,
// one goroutine for all its leases, renews each every TTL/3.
//
// Each lease keeps a local deadline on the monotonic clock: the send time of
// the last confirmed acquire or renew, plus TTL less a drift allowance
// (TTL·DriftFactor) and a safety margin (TTL/10 by default). Lease.Context
// ends, with context.Cause matching ErrLeaseLost, when Redis says the lease
// is not ours or when that deadline passes without a confirmed renewal,
// whichever comes first: the holder is told to stop before Redis can give
// the resource to anyone else, even while Redis cannot be reached. Release
// ends it with ErrReleased, WithMaxHold with ErrMaxHold.
//
// # Waiting, shared leases, elections
//
// Acquire waits without polling: the waiter queues in Redis, and the
// holder's release hands the lease to the first live waiter, with a new
// fence, and tells it through its Client's wake channel, one message to one
// process; timers with jitter cover lost messages and expiries. Acquire keeps its context's deadline even when
// Redis is silent, and rides out an outage (EventOutage, EventRecovered).
// AcquireAll takes several leases, all or none. AcquireSemaphore gives up to
// N holders a numbered permit each, fenced per permit (fencing.Key);
// AcquireRead and AcquireWrite give many readers or one writer, writers
// first. NewElection elects one leader at a time; a term is a lease, and
// Election.Run is the loop of campaigning, leading and resigning.
//
// # What stays in Redis
//
// A resource's keys are <prefix>{R}:<kind> (the prefix defaults to
// "redlease:"), all in R's Redis Cluster hash slot and all with a TTL: they
// live as long as a lease, a waiter or a release marker does. The fence
// counters are the only keys without a TTL, and there is one per hash slot,
// <prefix>{t}:fences, shared by the resources of that slot: of the keys
// that leases write, at most 16,384 per prefix stay, whatever the number of
// resources ever leased. So
// fences may skip (the slot's other resources, and a first attempt that
// found the lease busy, draw from the same counter); they only rise.
// Versions before the per-slot counter kept one counter per resource:
// Client.MigrateFences folds those in.
//
// # Clients
//
// New takes a go-redis client: plain, Sentinel (failover) or cluster. The
// modules github.com/redlease/redlease/rueidislease and
// github.com/redlease/redlease/valkeylease do the same for rueidis and
// valkey-go, on package driver, the small interface that a client
// implements for NewWithDriver. Beneath the lease logic, a protocol layer
// holds the key layout, every script with the builder of its call and the
// reader of its reply, and runs every script the one way (EVALSHA, then the
// source after NOSCRIPT): the lease logic names no Redis command.
//
// # Guarantees
//
// On one Redis deployment that loses no data (no failover, no restart
// without persistence, no eviction or flush of the counters), with clocks
// whose rates differ by less than DriftFactor (ρ):
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
//   - Fences across asynchronous failover: a counter can go back after a
//     failover, a restart without persistence, an eviction or a flush, and
//     two holders can then get the same fence. The guards accept an equal
//     fence only from the same owner; WithReplicaAck narrows the window,
//     WithFenceSource closes it, Client.AdvanceFence repairs a counter
//     (docs/FAILOVER.md says it whole).
//   - Exclusion without fencing: a holder that pauses between checking its
//     context and acting acts late; only the resource's fence check stops it.
//   - Safety under clock jumps without fencing: a suspended machine, or a
//     server clock that jumps, expires leases unseen.
//   - Release is best effort: when Redis cannot be reached, the TTL frees
//     the resource. A lost reply leaves an outcome unknown, and redlease
//     reports it as such (ErrOutcomeUnknown) rather than guessing.
//
// The module github.com/redlease/redlease/otel records the leases' events
// as OpenTelemetry metrics and spans; the command
// github.com/redlease/redlease/cmd/redlease runs a command under a lease
// and shows and breaks leases from the shell.
package redlease
