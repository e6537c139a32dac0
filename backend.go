package redlease

import (
	"context"
	"time"
)

// backend is everything the lease logic asks of a Redis client: run a
// script once, run one many times in pipelines, run one followed by WAIT,
// walk the keyspace, and subscribe to the wake channels. The lease logic
// never calls a client library directly; go-redis implements backend in
// goredis.go, and another client library (rueidis) can be adapted by
// implementing it, without touching the lease logic.
//
// Every script runs by EVALSHA and, if the server has lost its script cache
// (NOSCRIPT), again by EVAL; each implementation does that in one place.
type backend interface {
	// eval runs c (a script and its command words) once.
	eval(ctx context.Context, c call) reply
	// evalAll runs calls(i), i < n, in pipelines of at most maxBatch
	// commands. On Redis Cluster a pipeline is split by node. Every run gets
	// a reply or an error of its own.
	evalAll(ctx context.Context, n int, calls func(i int) call) []reply
	// evalAcked runs c and then WAIT replicas timeout, in one round trip to
	// the master that owns the keys of c, so that WAIT covers the script's
	// writes. It returns the script's reply and how many replicas
	// acknowledged.
	evalAcked(ctx context.Context, c call, replicas int, timeout time.Duration) (reply, int64)
	// scan calls fn with each batch of keys that SCAN finds for match on
	// every master, stopping at fn's first error.
	scan(ctx context.Context, match string, fn func(keys []string) error) error
	// connect makes sure that Redis answers, with a harmless round trip on
	// the node that serves key unless the client's last request was
	// answered; an acquire that follows then fails before it is sent, not
	// after, when Redis cannot be reached. The go-redis backend keeps that
	// health for the whole client: on Cluster, answers from other masters
	// skip the check for a master that has gone silent.
	connect(ctx context.Context, key string) error
	// classify tells what a failed request's error says of it.
	classify(err error) errorClass
	// bounded reports whether a request made now with a context whose
	// deadline is d returns by d whatever Redis does: the client ends it at
	// d (go-redis: ContextTimeoutEnabled), or its own timeouts end it sooner.
	bounded(d time.Time) bool

	// sharded reports whether wake channels are shard channels (Redis
	// Cluster: SSUBSCRIBE, one subscription connection per master).
	sharded() bool
	// nodeOf returns the node that serves channel: the zero node without
	// Cluster.
	nodeOf(ctx context.Context, channel string) (node, error)
	// subscribe opens a subscription connection to n.
	subscribe(ctx context.Context, n node) subscription
}

// call is one run of a script: its command words after the first two,
// which the backend fills in with EVALSHA and the hash, or EVAL and the
// source (so a call is one slice, allocated once): the number of keys, the
// keys, the arguments. Strings are passed as *string, which a slice of any
// holds without allocating. The builder of each script's call sits beside
// the script in scripts.go.
type call struct {
	s     *script
	words []any
	kind  replyKind
}

// replyKind is how a script's reply is read.
type replyKind uint8

const (
	intReply   replyKind = iota // an integer, read without allocating
	arrayReply                  // an array of integers and strings
	mixedReply                  // an integer or an array
)

// reply is a script's reply: n for an integer reply, vals (not nil) for an
// array.
type reply struct {
	n    int64
	vals []any
	err  error
}

// errorClass is what a failed request's error says of the request.
type errorClass uint8

const (
	// notSent: the request was not run: never written to a connection (a
	// refused dial, no connection from the pool, a closed client), or
	// answered by a Redis that runs nothing now (loading its data, a
	// replica, no quorum, a script over its time limit).
	notSent errorClass = iota
	// refused: Redis answered with an error; the script did not run, or ran
	// and raised it.
	refused
	// unknown: the request may have reached Redis, and its reply was lost.
	unknown
)

// node is a Redis node as a backend names it; conn is the backend's own.
type node struct {
	addr string // "" without Cluster
	conn any
}

// subscription is one subscription connection.
type subscription interface {
	// add subscribes channel; remove unsubscribes it.
	add(ctx context.Context, channel string) error
	remove(ctx context.Context, channel string) error
	// receive calls fn for each message and each subscription change, until
	// the connection is closed.
	receive(fn func(m subMessage))
	close() error
}

// subMessage is what a subscription connection received.
type subMessage struct {
	kind    subKind
	channel string
	payload string // kind message only: a waiter's owner token
}

type subKind uint8

const (
	subMessageKind subKind = iota // a published message
	subConfirmed                  // the channel is subscribed
	subDropped                    // the channel was unsubscribed (asked, or the slot moved)
)
