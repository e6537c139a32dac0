package redlease

import (
	"context"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// waitDone waits up to limit for ctx to end and fails the test otherwise.
func waitDone(t testing.TB, ctx context.Context, limit time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("context not done after %v", limit)
	}
}

// recv receives from ch, failing the test if nothing arrives within limit.
func recv[T any](t testing.TB, ch <-chan T, limit time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("nothing received within %v", limit)
		var zero T
		return zero
	}
}
