package redlease

import (
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/shared"
)

// New returns a Client that takes leases through the go-redis client rdb,
// which may be a plain client (redis.NewClient), a Sentinel failover client
// (redis.NewFailoverClient) or a cluster client (redis.NewClusterClient).
// opts are the defaults of every lease; options given to an acquire call
// override them for that lease. New does no I/O; invalid options are reported
// by the first acquire call. A nil rdb makes every call return
// ErrInvalidArgument, and so does a *redis.Ring, which spreads a resource's
// keys over shards that no one script can reach. Under load the Client's
// concurrent calls share round trips (WithCombinedRequests).
//
// For another client library, see NewWithDriver and the modules
// github.com/redlease/redlease/rueidislease and .../valkeylease.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := newClient(opts)
	if shared.IsNil(rdb) {
		c.err = invalidf("nil Redis client")
		return c
	}
	d, err := goredis.New(rdb)
	if err != nil {
		c.err = invalidf("%w", err)
		return c
	}
	c.start(d, combineGoRedis)
	return c
}
