package servertest

import (
	"strings"
	"testing"
	"time"
)

func TestLeaked(t *testing.T) {
	before := Goroutines()
	// A second to settle: the goroutine that started this test may not be
	// parked yet (runnable in (*T).Run) on a loaded machine.
	if gs := leaked(nil, time.Second); len(gs) > 0 {
		t.Fatalf("the testing package's goroutines are not ignored:\n%s", formatGoroutines(gs))
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	gs := leaked(before, 50*time.Millisecond)
	if len(gs) != 1 || gs[0].state != "chan receive" || !strings.Contains(gs[0].funcs[0], "TestLeaked") {
		t.Fatalf("want the one goroutine started, got:\n%s", formatGoroutines(gs))
	}
	close(stop)
	<-done
	CheckLeaks(t, before, time.Second)
}
