// Package rueidislease runs redlease on github.com/redis/rueidis: New
// returns a redlease Client that takes leases through a rueidis client, and
// Driver returns the driver beneath it, for package fencing's
// NewRedisGuardWithDriver, NewRedisStoreWithDriver and Script.RunWithDriver.
// Any rueidis client will do: a single server, Sentinel, or Redis Cluster
// (Valkey too; github.com/redlease/redlease/valkeylease is the same for
// valkey-go).
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	locks := rueidislease.New(client, redlease.WithTTL(10*time.Second))
//	defer locks.Close(ctx)
//
// The redlease Client does not close the rueidis client; close the redlease
// Client first (see Classify below).
//
// # What rueidis does underneath (v1.0.79)
//
// Auto-pipelining, on by default (ClientOption.DisableAutoPipelining):
// every non-blocking command, EVALSHA and EVAL included, goes on a
// connection that the client's goroutines share (on a single server or
// Sentinel, up to 2^PipelineMultiplex of them, 4 from GOMAXPROCS 4; one per
// node on Cluster), and commands issued while others are in flight are
// written together and their replies read in order. A command issued while
// none is in flight is written at once, a system call of its own. So
// concurrent lease operations share round trips, and under heavier load
// redlease combines them too: once 16 requests of a Client are in flight,
// the calls of other goroutines queue and go out together in one DoMulti
// (redlease.WithCombinedRequests). Blocking commands
// (WAIT among them) take a connection of a pool instead.
//
// Retries: rueidis retries, on a network error or LOADING, only commands
// that its command table marks read-only (and those made retryable with
// ToRetryable, which this package never does); EVAL and EVALSHA are not,
// so a script call is never sent twice on a network error
// (ClientOption.DisableRetry turns even the read-only retries off). What
// rueidis does send again: on Cluster a call answered MOVED or ASK, to the
// node named (the script did not run); with ClientOption.ConnLifetime, a
// call that met the connection's expiry, on a new connection, and only
// while the call's context has not ended (a call whose context has ended is
// never written). Both are within what package driver allows.
//
// Deadlines: rueidis ends a call at its context's deadline (whether it is
// waiting to be written, on the network, or waiting for a pooled
// connection), so this driver is no driver.DeadlineKeeper. One exception
// is rueidis's: its default queue (RUEIDIS_QUEUE_TYPE unset) does not
// watch the context while the connection already has 1024 requests in
// flight; if the server has stopped answering, the client gives the
// connection up after about ClientOption.ConnWriteTimeout (10 s by
// default), which ends that wait.
//
// A call that ends with its context may still be written after it
// returned: rueidis writes every request it has queued, and a later request
// may go out first on another of its connections (PipelineMultiplex). So
// the driver is a driver.LateSender: when an acquire gives up at its
// context's end with its outcome unknown, redlease sends the release that
// undoes it again over the next seconds, in case the attempt reached Redis
// after the first one.
//
// Subscriptions (the wake-ups of waiters, and the break channel by which
// Client.Break tells a holder) use Receive, one per channel. Without
// Cluster they share one connection of their own (Dedicate), so that the
// client's connection for requests keeps rueidis's unpipelined path, in
// which an uncontended request is written and read on the caller's
// goroutine; the connection is closed with the last subscription, and the
// client's Close leaves it open: close the redlease Client first. On
// Cluster they go on the connections that rueidis shares with requests.
// Either way a subscription is made again after a reconnect; see
// subscribe.go for what ends one.
//
// No client-side caching: every call goes by Do and DoMulti, never DoCache.
// A lease's state changes on the server, under scripts; only a round trip
// tells it.
//
// Replies: rueidis speaks RESP3, in which Redis sends a script's Lua false
// as a boolean; the driver hands it to redlease as nil, and true as 1, as
// a RESP2 client gets them. An error reply keeps its full text (rueidis's
// own error drops a leading "ERR "); it unwraps to *rueidis.RedisError.
//
// Classify: an error reply is refused; a refused or failed dial, a slot
// with no node, a closed rueidis client (ErrClosing) are not sent;
// anything else (a timeout, a reset connection, a context that ended while
// the call was queued or on the network) may have reached Redis. rueidis
// also fails with ErrClosing the calls that a server has not answered a
// second after the rueidis client's Close began, though they were written.
package rueidislease
