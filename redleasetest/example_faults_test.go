package redleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/redleasetest"
)

// A fencing guard rejects the old holder's write once the new owner has
// written: the lease alone does not stop a holder that has not yet heard.
func ExampleKit_Steal() {
	t := &exampleT{} // a test's t (see ExampleKit)
	defer t.end()
	k := redleasetest.New(t)
	ctx := context.Background()
	guard := fencing.NewRedisGuard(k.Redis())

	lease, err := k.Client().Acquire(ctx, "invoice:7")
	if err != nil {
		panic(err)
	}
	fmt.Println("holder writes:", guard.Set(ctx, "invoice:7:total", "100", 0, lease.Fence(), lease.Owner()))

	fence := k.Steal("invoice:7")
	owner := k.Status("invoice:7").Owner
	fmt.Println("new owner writes:", guard.Set(ctx, "invoice:7:total", "120", 0, fence, owner))

	err = guard.Set(ctx, "invoice:7:total", "90", 0, lease.Fence(), lease.Owner())
	fmt.Println("old holder's write refused:", errors.Is(err, fencing.ErrStaleFence))
	fmt.Println("old holder told yet:", lease.Context().Err() != nil)

	k.FastForward(redlease.DefaultTTL / 3) // its next renewal
	fmt.Println("old holder told:", errors.Is(context.Cause(lease.Context()), redlease.ErrLeaseLost))
	fmt.Println("its release:", errors.Is(lease.Release(ctx), redlease.ErrLeaseLost))
	// Output:
	// holder writes: <nil>
	// new owner writes: <nil>
	// old holder's write refused: true
	// old holder told yet: false
	// old holder told: true
	// its release: true
}

// While Redis cannot be reached, requests fail at once; a holder whose
// renewals fail is told at its local deadline, before Redis can let the
// lease go; after the outage another client takes the lease with a higher
// fence.
func ExampleKit_Outage() {
	t := &exampleT{} // a test's t (see ExampleKit)
	defer t.end()
	k := redleasetest.New(t)
	ctx := context.Background()

	lease, err := k.Client().Acquire(ctx, "nightly")
	if err != nil {
		panic(err)
	}
	k.Outage()
	_, err = k.NewClient().TryAcquire(ctx, "other")
	fmt.Println("acquire refused:", errors.Is(err, syscall.ECONNREFUSED))

	k.FastForward(lease.Deadline().Sub(k.Now()))
	fmt.Println("holder told at its deadline:", errors.Is(context.Cause(lease.Context()), redlease.ErrLeaseLost))

	k.FastForward(redlease.DefaultTTL) // Redis, cut off, expires the lease meanwhile
	k.Restore()
	next, err := k.NewClient().TryAcquire(ctx, "nightly")
	if err != nil {
		panic(err)
	}
	fmt.Println("next holder's fence:", next.Fence())
	// Output:
	// acquire refused: true
	// holder told at its deadline: true
	// next holder's fence: 2
}
