package fencing

import (
	"context"
	"testing"

	"github.com/redlease/redlease/internal/servertest"
)

// What a fence check adds to a write. Run with
//
//	go test -run '^$' -bench Guard -benchtime 2000x
//
// Each guarded write is compared with the same write unguarded. The SQL
// guard's benchmark, which needs SQL drivers, is BenchmarkSQLGuardCheck in
// the tests module (tests/fencing_bench_test.go).

func BenchmarkRedisGuardSet(b *testing.B) {
	rdb := servertest.Redis(b).Client(b)
	ctx := context.Background()
	g := NewRedisGuard(rdb)
	b.Run("plain SET", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Set(ctx, "{k}", "v", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced Set", func(b *testing.B) {
		for b.Loop() {
			if err := g.Set(ctx, "{k}", "v", 0, 1, "o"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
