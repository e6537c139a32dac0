// Package driver defines what redlease asks of a Redis client library, as
// database/sql/driver does for SQL databases: a handful of methods, each
// with its contract. redlease implements it for go-redis (redlease.New);
// the modules github.com/redlease/redlease/rueidislease and
// github.com/redlease/redlease/valkeylease implement it for rueidis and
// valkey-go. A fourth client needs an implementation of Driver, passed to
// redlease.NewWithDriver; nothing of the lease logic changes.
//
// A Driver runs Lua scripts and does little else: every operation on a lease
// is one script, and redlease builds each script call (its keys and
// arguments) and reads its reply itself. It decides whether a call goes by
// EVALSHA or by EVAL, and sends the source again when the server has lost
// its script cache (NOSCRIPT): a Driver sends what it is given. It also
// subscribes to the channels by which a lease's release wakes its waiters,
// walks the keyspace for the administrative calls, and tells what a failed
// request's error says of the request.
//
// A Driver must be safe for concurrent use. It must not retry a script call
// on its own after the request may have reached Redis unless the client
// library does so only while the call's context allows (redlease counts
// from the moment it sends a request, and a retry sent late could renew a
// lease whose holder was told it is lost); retrying a request that was
// never sent, or after MOVED and ASK on Redis Cluster, is fine.
//
// Drivers must not use a client-side cache for these calls: a lease's state
// changes on the server, under scripts, and only a round trip tells it.
package driver

import (
	"context"
	"time"
)

// Driver is a Redis client as redlease uses it.
type Driver interface {
	// Eval runs one script call and returns its reply. It returns by the
	// deadline of ctx, if it has one, unless the Driver implements
	// DeadlineKeeper and says otherwise.
	Eval(ctx context.Context, c Call) Reply

	// EvalMany runs calls and puts the reply of calls[i] in replies[i]
	// (len(replies) == len(calls)). It sends them in as few round trips as
	// it can: in one pipeline, or on Redis Cluster one per node that serves
	// their keys. Every call gets a reply or an error of its own; one that
	// fails does not stop the others. redlease sends at most MaxBatch calls
	// at once.
	EvalMany(ctx context.Context, calls []Call, replies []Reply)

	// EvalWait runs c and then WAIT replicas timeout on the same
	// connection, in one round trip, so that WAIT counts the replicas that
	// received the script's writes (on Redis Cluster, c goes to the master
	// that serves its first key). It returns the script's reply and the
	// number of replicas that acknowledged (WAIT's reply). A failure of WAIT
	// is the reply's error when the script itself succeeded. A MOVED or ASK
	// answer is returned as the reply's error, not followed: following it
	// alone would pair the script with another node's WAIT. The request
	// takes up to timeout longer than a plain Eval: a Driver with a read
	// timeout must allow for it.
	EvalWait(ctx context.Context, c Call, replicas int, timeout time.Duration) (Reply, int64)

	// Ping makes sure, with a round trip, that the master that serves key
	// answers: a harmless request routed as a script call on key would be
	// (EXISTS key, sent where a write would go: a client that takes EXISTS
	// for a read may send it to a replica, or retry it). redlease pings
	// before the first acquire of a Client and before an acquire that
	// follows a request that got no answer, so that an acquire is not sent
	// into an outage, where its outcome could only be unknown.
	Ping(ctx context.Context, key string) error

	// Scan calls fn with each batch of keys that SCAN with MATCH match and
	// COUNT count finds, on every master of a Redis Cluster (in address
	// order) or on the one server, until SCAN has walked the keyspace once;
	// it stops at fn's first error and returns it.
	Scan(ctx context.Context, match string, count int, fn func(keys []string) error) error

	// Sharded reports whether the client talks to a Redis Cluster. Then the
	// scripts publish wake-ups with SPUBLISH on shard channels, and
	// Subscribe must subscribe with SSUBSCRIBE on the master that serves the
	// channel's slot; otherwise with PUBLISH and SUBSCRIBE.
	Sharded() bool

	// Subscribe subscribes to channel and calls handle with the payload of
	// every message published on it from the moment Redis confirms the
	// subscription (Subscription.Ready) until it ends. handle is called on
	// one goroutine at a time per subscription and must not block. The
	// subscription stays until Close, reconnecting as the client does; it
	// ends by itself (Done) only when it can no longer receive the channel's
	// messages: on Redis Cluster, when the channel's slot moved to another
	// node. redlease subscribes to a channel at most once at a time. An
	// error means the subscription was not made (redlease then relies on its
	// timers); Subscribe returns by the deadline of ctx.
	Subscribe(ctx context.Context, channel string, handle func(payload string)) (Subscription, error)

	// Classify tells what a failed request's error says of the request.
	// Only a request that cannot have been written may be NotSent: a
	// context error, which a client returns both before and after a request
	// is written, is Unknown unless the driver knows better (it may wrap
	// the error to say so).
	Classify(err error) ErrorClass
}

// MaxBatch is the most calls redlease passes to EvalMany at once.
const MaxBatch = 1000

// Call is one run of a Lua script: EVALSHA Hash, or EVAL Source when Hash is
// empty, with the keys and arguments. The first key routes the call on
// Redis Cluster, where every key of one call is in one hash slot. Where
// Sharded is false, a call may name keys of many slots (the watchdog renews
// many leases in one call), and a Driver sends it to its one server as it
// is. A Driver must not keep or modify the slices after the call returns.
type Call struct {
	Hash   string // the SHA-1 of Source in hex; "" to send Source with EVAL
	Source string
	Keys   []string
	Args   []string
}

// Reply is a script's reply, or the request's error. Value holds what the
// script returned, as Redis converts it for a RESP2 client: an int64 for an
// integer (Lua's true is 1), a string for a bulk or status string, a []any
// of such values for an array, and nil for a null (Lua's false or nil); a
// RESP3 client's booleans must be converted so. An error reply (a script that
// raised an error, NOSCRIPT) is Err, and its message must be the text of the
// reply as the server sent it, less the leading '-': redlease reads the
// error codes at its start (NOSCRIPT, LOADING, BUSY, "ERR max number of
// clients reached"), so a driver whose client rewrites them (rueidis drops
// a leading "ERR ") must restore them.
type Reply struct {
	Value any
	Err   error
}

// ErrorClass is what a failed request's error says of the request.
type ErrorClass uint8

const (
	// NotSent: the request was not run: never written to a connection (a
	// refused dial, no connection from the pool in time, a closed client).
	NotSent ErrorClass = iota
	// Refused: Redis answered with an error reply; the script did not run,
	// or ran and raised the error. (redlease counts some error replies, by
	// which Redis says it runs nothing now, such as LOADING, READONLY,
	// CLUSTERDOWN or BUSY, as NotSent itself.)
	Refused
	// Unknown: the request may have reached Redis, and its reply was lost
	// (a timeout, a connection reset, a context that ended while the request
	// was on the network).
	Unknown
)

// Subscription is one channel subscribed with Driver.Subscribe.
type Subscription interface {
	// Ready is closed once Redis has confirmed the subscription.
	Ready() <-chan struct{}
	// Done is closed once the subscription has ended without Close and
	// will deliver no more messages. A Driver may find that out only when
	// Done is called (on Cluster, from a slot map that no longer names the
	// subscription's node), so redlease calls it before it relies on a
	// subscription.
	Done() <-chan struct{}
	// Close unsubscribes the channel; handle is not called once Close has
	// returned. It returns by the deadline of ctx.
	Close(ctx context.Context) error
}

// ClassicSubscriber is implemented by a Driver that can subscribe to a
// classic channel on Redis Cluster, as the three drivers of redlease's
// modules do. redlease tells a Client at once that Client.Break removed one
// of its leases through such a channel, one per Client (without a hash tag,
// so it is no shard channel); a Driver that does not implement it leaves
// the holder to find out at its next renewal on Cluster.
type ClassicSubscriber interface {
	// SubscribeClassic is Subscribe with SUBSCRIBE on every deployment:
	// on Redis Cluster too, where a message published with PUBLISH on any
	// node reaches the subscribers of every node, so that the subscription
	// may go through any node and need not follow a slot. Without Cluster
	// it is Subscribe. Its Subscription's Done must not wait for I/O.
	SubscribeClassic(ctx context.Context, channel string, handle func(payload string)) (Subscription, error)
}

// Addresser is implemented by a Driver that can say where it connects, for
// error messages: an address, or the seeds of a cluster or the Sentinels,
// comma-separated.
type Addresser interface {
	Addr() string
}

// DeadlineKeeper is implemented by a Driver whose requests may outlast the
// deadline of their context (go-redis without ContextTimeoutEnabled). A
// Driver that does not implement it must keep every deadline.
type DeadlineKeeper interface {
	// KeepsDeadline reports whether a request made now with a context whose
	// deadline is d returns by d whatever Redis does: the client ends it at
	// d, or its own timeouts end it sooner. When it does not, redlease runs
	// an acquire's request on a goroutine of its own and stops waiting for
	// it at d.
	KeepsDeadline(d time.Time) bool
}

// LateSender is implemented by a Driver whose Eval, when its context ends
// first, may return before the request was written and write it afterwards,
// after requests made since on another connection: rueidis and valkey-go
// queue a request for the writer goroutine of one of several connections,
// and a request that its caller stopped waiting for stays in the queue. An
// acquire of unknown outcome is undone by a release of its owner token;
// when that release may have overtaken the acquire, which would then take
// the lease for nobody until its TTL ran out, redlease sends the release
// again, a few times over the next seconds, until one deletes the lease.
type LateSender interface {
	// SendsLate reports whether a request whose context ended may reach
	// Redis after a request made later.
	SendsLate() bool
}
