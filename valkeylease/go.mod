module github.com/redlease/redlease/valkeylease

go 1.26.0

replace github.com/redlease/redlease => ../

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redlease/redlease v0.0.0-00010101000000-000000000000
	github.com/valkey-io/valkey-go v1.0.80
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
