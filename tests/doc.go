// Package tests is redlease's integration and fault suite, written once
// and run on every client library redlease supports (go-redis, rueidis,
// valkey-go) and every server it is tested on (redis-server, Valkey). It
// is a module of its own: it imports the adapter modules, which the core
// may not, and the test-only dependencies (porcupine, pgx, sqlite), which
// the core's consumers should not carry. It has no API; run it with
//
//	cd tests && go test -race ./...
//
// Like the core's, its tests start their servers on loopback, and a
// missing server skips them unless REDLEASE_REQUIRE_SERVERS is set.
package tests
