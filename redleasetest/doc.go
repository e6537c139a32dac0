// Package redleasetest is a test kit for code that uses redlease: an
// embedded Redis (miniredis), a redlease.Client on it, and helpers that
// bring about the rare paths a lease holder must handle, as a real
// deployment would show them, in a unit test that takes milliseconds:
//
//   - Expire: the lease lapses in Redis, as if its TTL ran out while the
//     holder was paused; another client acquires it with a higher fence.
//   - Steal: another owner takes the lease with a higher fence; the
//     holder's next renewal is refused, its context ends with
//     redlease.ErrLeaseLost, its Release returns ErrLeaseLost, and a
//     fencing guard rejects its fence.
//     Expire and Steal act on exclusive leases; on a resource with shared
//     leases (a semaphore, read and write leases) they fail the test.
//   - Outage, Restore, Unreachable: Redis cannot be reached for a while;
//     requests fail (connection refused), a holder whose renewals fail is
//     told at its local deadline, and later requests succeed again.
//   - FastForward: time passes. The watchdog renews, leases that cannot be
//     renewed lapse, Redis expires keys, waiters retry.
//
// # Time
//
// The Kit's Clients run on a fake clock of the Kit's, and the embedded
// Redis keeps the same time (its TTLs and its TIME), so nothing in the kit
// waits for a TTL in real time: a test waits for the lease's TTL, with the
// default 30 s or a user's 100 ms alike, by calling FastForward. Nothing
// else moves the clock. FastForward steps from one timer of the Clients to
// the next in order, moves Redis by the same amount, and waits after each
// step (in real time, a few seconds at most) until the Clients have done
// what fell due: sent their renewals and read the replies, ended the
// leases whose local deadline passed, and put their waiting acquire calls
// back to sleep. At an instant when a key expires in Redis and a Client's
// timer fires, Redis goes first; that matters only for requests sent at the
// very millisecond a key expires, which real Redis would still serve.
//
// What stays in real time: network timeouts, context deadlines,
// redlease.WithMaxWait and WithReleaseTimeout, and the wake-ups that
// release sends to waiters over pub/sub. An Acquire that has to wait for a
// busy lease sleeps on the fake clock between its attempts: run it on a
// goroutine of its own and move the clock (AwaitWaiters tells when it is
// waiting).
//
// # Clients
//
// Client is the Kit's Client, made with New's options; NewClient makes
// more on the same Redis and clock, for a second worker. A Client that the
// test makes itself with redlease.New(k.Redis()) runs on the real clock and
// is out of the Kit's reach: FastForward does not move it, and Steal does
// not hold back its requests. The Kit closes its Clients, its Redis clients
// and the embedded Redis when the test ends, releasing the leases still
// held.
//
// # What it does not do
//
// It runs one plain Redis: not Cluster, not Sentinel, no replicas
// (WithReplicaAck cannot be satisfied). It has no helper for a slow Redis:
// in a test on the fake clock, slowness in real time does not age a lease,
// and the failure a slow Redis causes a holder, a renewal not confirmed
// before the local deadline, is the one Outage and FastForward cause. Its
// helpers fail the test with tb.Fatal, so call them from the test's
// goroutine, and not from two at once for one Kit (they take turns).
package redleasetest
