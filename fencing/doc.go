// Package fencing is the resource side of redlease: guards that make the
// protected resource the final arbiter of which lease holder may write.
//
// A lease alone does not keep two holders apart. A holder can pause (a GC
// pause, a VM freeze) past its TTL, wake up after another holder took over,
// and write anyway. Every redlease lease carries a fencing token
// (redlease.Lease.Fence) that rises with each new holder of a resource; a
// guard remembers the newest token the resource accepted and, in the same
// atomic step as the write, refuses an older one. A check on the client side
// followed by a write is a race; the guards never do that.
//
//	guard, err := fencing.NewSQLGuard(fencing.DialectPostgres, "fence_guard")
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := guard.Check(ctx, tx, lease.Resource(), lease.Fence(), lease.Owner()); err != nil {
//		return err // errors.Is(err, fencing.ErrStaleFence): write nothing
//	}
//	// ... the writes the check protects, in tx
//	return tx.Commit()
//
// # The rule
//
// Every guard applies one rule. A write that presents fence f and owner token
// o is accepted iff
//
//	f > newest, or f == newest and o == the owner recorded with newest,
//
// where newest is the highest fence the resource has accepted so far; an
// accepted write records f and o as the new newest. The second half exists
// because a fence counter can go back (a Redis failover that lost the last
// INCR, a restart without persistence): two holders can then draw the same
// fence, and only the first of them to write may go on, while one holder may
// write as often as it needs. A refusal is a *StaleFenceError (matching
// ErrStaleFence) and leaves the resource unchanged. Fences may skip values
// (redlease draws them from a counter per Redis Cluster hash slot); the rule
// needs only that they rise.
//
// # Guards
//
//   - SQL: SQLGuard keeps the newest fence per resource in a table of its
//     own and checks inside the writer's transaction; RowGuard is the
//     per-row pattern, a fence column in each row and a conditional UPDATE
//     whose zero rows affected Verify explains (ErrNoRowMatched or a stale
//     fence). PostgreSQL and SQLite; not MySQL (see SQLDialect). The SQL
//     guards use database/sql and import no driver; their runnable
//     examples, on SQLite, are in the tests module (Example_sqlGuard and
//     Example_rowGuard in github.com/redlease/redlease/tests).
//   - Redis: RedisGuard's Set and Del, and Script for any other write,
//     run the check and the write in one Lua script, on the data's Redis.
//   - HTTP: HTTPGuard is middleware that admits a request by its fencing
//     headers (SetHeaders) through a Store: MemoryStore in one gateway
//     process, RedisStore across several.
//
// A semaphore's permits have fences of their own: Key(lease) names what a
// guard fences a lease by, "<resource>#<permit>" for a permit, the resource
// for every other lease.
//
// # Records
//
// A guard's records are the resource's own data, and live as long as the
// resource does: a record that disappeared would let a stale holder write
// once more. SQLGuard keeps one row (resource, fence, owner) per resource;
// RowGuard keeps the fence and owner in the caller's rows; RedisGuard and
// Script keep one small hash {fence, owner} per data key, without a TTL, at
// "<prefix>fenced:{<the key's hash tag, or the key>}…" (Del keeps it);
// RedisStore one hash per resource at "<prefix>{R}:accepted"; MemoryStore
// one entry per resource in the process's memory. SQLGuard.Forget,
// RedisGuard.Forget and RedisStore.Forget remove the record of a resource
// that is gone for good and that no lease will write again.
//
// When a fence counter went back, every new holder is refused; the refusal's
// StaleFenceError.Newest is how far redlease.Client.AdvanceFence must move
// the counter. Sequence, a PostgreSQL sequence, is a fence source for
// redlease.WithFenceSource whose fences keep rising across Redis failovers.
// The guards report refused writes to observers (WithObserver, WithLogger;
// HTTPGuard.Observer) as redlease.EventStaleFence.
//
// # What is not promised
//
// A guard protects only the writes that pass through it: every write path
// of a resource must pass a guard, or the unchecked one voids the rest. A
// guard's records are as durable as the store that holds them; a record that
// is lost lets a stale holder through once. RedisStore checks a token but
// does not order the writes it admitted (see its documentation). A write to
// a service that no guard can stand in front of (a third party's) cannot be
// fenced: give it an idempotency key instead.
package fencing
