package redlease_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redlease/redlease"
)

// An operator's view of a resource, and the forced release of a holder that
// is stuck: the lease goes, the fence counter stays, so the next holder's
// fence is larger.
func ExampleClient_Break() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := redlease.New(rdb)
	defer locks.Close(ctx)

	stuck, err := locks.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	st, err := locks.Inspect(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", st.Held, "fence:", st.Fence, "by the stuck holder:", st.Owner == stuck.Owner())

	// -fence: remove the lease only while it is still the one inspected.
	st, removed, err := locks.Break(ctx, "nightly-report", st.Fence)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("removed:", removed, "fence counter:", st.LastFence)

	next, err := locks.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("next holder's fence:", next.Fence())
	// Output:
	// held: true fence: 1 by the stuck holder: true
	// removed: true fence counter: 1
	// next holder's fence: 2
}
