module github.com/redlease/redlease/bench

go 1.26.0

replace github.com/redlease/redlease => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/redlease/redlease v0.0.0-00010101000000-000000000000
	github.com/redlease/redlease/rueidislease v0.0.0-00010101000000-000000000000
	github.com/redlease/redlease/valkeylease v0.0.0-00010101000000-000000000000
	github.com/valkey-io/valkey-go v1.0.80
	golang.org/x/sys v0.50.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

replace github.com/redlease/redlease/rueidislease => ../rueidislease

replace github.com/redlease/redlease/valkeylease => ../valkeylease
