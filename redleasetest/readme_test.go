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

// The README's example, as a test (runReports is ExampleKit's worker).
func TestReportsStopOnLeaseLoss(t *testing.T) {
	k := redleasetest.New(t)
	jobs, written := make(chan string), make(chan string)
	stopped := make(chan error, 1)
	go func() {
		stopped <- runReports(context.Background(), k.Client(), jobs, func(job string, fence int64) {
			written <- fmt.Sprintf("%s with fence %d", job, fence)
		})
	}()

	jobs <- "monday"
	<-written
	k.FastForward(time.Hour)               // an hour of renewals, in milliseconds
	k.Steal("reports")                     // another owner takes over
	k.FastForward(redlease.DefaultTTL / 3) // the worker's next renewal is refused
	if err := <-stopped; !errors.Is(err, redlease.ErrLeaseLost) {
		t.Fatalf("runReports returned %v, want ErrLeaseLost", err)
	}
}
