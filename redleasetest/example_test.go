package redleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/redleasetest"
)

// runReports is the code under test: a worker that writes one report per job
// while it holds the lease "reports", and must stop as soon as it loses it.
func runReports(ctx context.Context, locks *redlease.Client, jobs <-chan string, write func(job string, fence int64)) error {
	lease, err := locks.Acquire(ctx, "reports")
	if err != nil {
		return err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	work := lease.Context()
	for {
		select {
		case <-work.Done():
			return fmt.Errorf("reports: stopped: %w", context.Cause(work))
		case job := <-jobs:
			write(job, lease.Fence()) // pass the fence with every write
		}
	}
}

// A test of runReports: the lease holds while the watchdog renews it, for as
// long as the clock runs, and the worker stops once another owner takes the
// lease over, at its next renewal. In a test, New takes the test's t:
//
//	func TestReportsStopOnLeaseLoss(t *testing.T) {
//		k := redleasetest.New(t)
//		...
func ExampleKit() {
	t := &exampleT{} // stands in for the test's t
	defer t.end()

	k := redleasetest.New(t)
	jobs, written := make(chan string), make(chan string)
	stopped := make(chan error, 1)
	go func() {
		stopped <- runReports(context.Background(), k.Client(), jobs, func(job string, fence int64) {
			written <- fmt.Sprintf("%s with fence %d", job, fence)
		})
	}()

	jobs <- "monday"
	fmt.Println("wrote", <-written)
	k.FastForward(time.Hour) // an hour of renewals, in milliseconds
	jobs <- "tuesday"
	fmt.Println("wrote", <-written)

	fence := k.Steal("reports")            // another owner takes over
	k.FastForward(redlease.DefaultTTL / 3) // the worker's next renewal is refused
	err := <-stopped
	fmt.Println("stopped on lease loss:", errors.Is(err, redlease.ErrLeaseLost))
	fmt.Println("the new owner's fence:", fence)
	// Output:
	// wrote monday with fence 1
	// wrote tuesday with fence 1
	// stopped on lease loss: true
	// the new owner's fence: 2
}

// exampleT stands in for the *testing.T that a test has and an example has
// not: it runs the Kit's cleanups when the example ends. (A Kit calls only
// these methods of its testing.TB.)
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
