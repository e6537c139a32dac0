package redlease_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redlease/redlease"
)

// An upgrade from a version that kept a fence counter per resource: fold the
// old counters into their hash slots' counters before the first Client of
// this version acquires, and once more after the last old Client stopped.
func ExampleClient_MigrateFences() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	// As an earlier version left it: "invoice:42" has drawn fences up to 41.
	if err := rdb.Set(ctx, "redlease:{invoice:42}:fence", 41, 0).Err(); err != nil {
		log.Fatal(err)
	}
	locks := redlease.New(rdb)
	defer locks.Close(ctx)

	n, err := locks.MigrateFences(ctx) // idempotent, safe while leases are taken
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("counters folded in:", n)

	lease, err := locks.TryAcquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("next fence:", lease.Fence())
	// Output:
	// counters folded in: 1
	// next fence: 42
}
