// Package fencing is the resource side of redlease: guards that make a
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
// # The rule
//
// Every guard applies one rule. A write that presents fence f and owner token
// o is accepted iff
//
//	f > newest, or f == newest and o == the owner recorded with newest,
//
// where newest is the highest fence the resource has accepted so far; an
// accepted write records f and o as the new newest. The second half exists
// because the fence counter can go back (a Redis failover that lost the last
// INCR, a restart without persistence): two holders can then draw the same
// fence, and only the first of them to write may go on, while one holder may
// write as often as it needs. A refusal is a *StaleFenceError (matching
// ErrStaleFence) and leaves the resource unchanged.
//
// # Guards
//
//   - SQL: SQLGuard keeps the newest fence per resource in a table of its
//     own and checks inside the writer's transaction; RowGuard is the
//     per-row pattern, a fence column in each row and a conditional UPDATE.
//   - Redis: RedisGuard's Set and Del, and Script for any other write,
//     run the check and the write in one Lua script.
//   - HTTP: HTTPGuard is middleware that admits a request by its fencing
//     headers (SetHeaders) through a Store: MemoryStore in one gateway
//     process, RedisStore across several.
//
// Sequence is a fence source for redlease.WithFenceSource whose fences keep
// rising across Redis failovers: a PostgreSQL sequence.
//
// # What is not promised
//
// A guard protects only the writes that pass through it: every write path
// of a resource must pass a guard, or the unchecked one voids the rest. A
// guard's records are the resource's own data and are as durable as the
// store that holds them; a record that is lost lets a stale holder through
// once. RedisStore checks a token but does not order the writes it admitted
// (see its documentation).
package fencing
