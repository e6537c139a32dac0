package redlease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
)

// The README's first program, as a service would write it: a go-redis
// client, a redlease Client on it, one lease whose fence goes with every
// write, and Close at the end. It differs from the README in one word: the
// README's program dials localhost:6379, the example an embedded Redis.
func Example_program() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()

	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{
		Addr:                  mr.Addr(),
		ContextTimeoutEnabled: true, // deadlines then bound requests already on the network
	})
	defer rdb.Close()
	locks := redlease.New(rdb, redlease.WithTTL(10*time.Second))
	defer locks.Close(ctx) // releases what is still held; ends the Client's goroutines

	lease, err := locks.Acquire(ctx, "nightly-report") // waits while another owner holds it
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx) // on every path; a second Release returns the first one's verdict

	work := lease.Context() // ends when the lease is lost or cannot be renewed in time
	for step := 1; step <= 3; step++ {
		if work.Err() != nil {
			log.Fatal(context.Cause(work)) // matches redlease.ErrLeaseLost
		}
		// Pass the fence with every write: the resource refuses an older one.
		fmt.Printf("step %d with fence %d\n", step, lease.Fence())
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err) // matches redlease.ErrLeaseLost: the lease ended before the work did
	}
	fmt.Println("released")
	// Output:
	// step 1 with fence 1
	// step 2 with fence 1
	// step 3 with fence 1
	// released
}
