package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
)

// contended tells a -wait that ran out on a lease that stayed held from one
// that met Redis trouble, which run words otherwise (its exit status is
// up to Redis answering when asked again: TestWaitThatRunsOut).
func TestContendedOnlyWhileTheLeaseStayedHeld(t *testing.T) {
	redis.SetLogger(&quietRedisLogger{})
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	newLocks := func() *redlease.Client {
		// Few connections and no retries: once Redis is gone, a dial fails
		// at once (the pool returns its last dial error), so a wait runs
		// out between failed attempts rather than in one.
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		locks := redlease.New(rdb, redlease.WithAutoRenew(false))
		t.Cleanup(func() { _ = locks.Close(context.Background()) })
		return locks
	}
	locks := newLocks()
	ctx := t.Context()
	if _, err := locks.TryAcquire(ctx, "r"); err != nil {
		t.Fatal(err)
	}

	_, busy := locks.TryAcquire(ctx, "r")
	var ranOut error
	for range 5 {
		// On a busy machine an attempt may still be on its way when the
		// wait runs out, and then its outcome is unknown: that error has
		// the shape of an outage's (the case "reply lost" below).
		if _, ranOut = locks.Acquire(ctx, "r", redlease.WithMaxWait(50*time.Millisecond)); !errors.Is(ranOut, redlease.ErrOutcomeUnknown) {
			break
		}
	}
	mr.Close()
	// A connection that breaks: the outcome of the attempt is unknown.
	_, gone := locks.Acquire(ctx, "r", redlease.WithMaxWait(300*time.Millisecond))
	// No connection at all: the last attempt's dial error.
	_, unreachable := newLocks().Acquire(ctx, "r", redlease.WithMaxWait(time.Second))

	// As Acquire words it when the wait ends after an attempt failed (acquire.go).
	lastAttempt := func(err error) error {
		return fmt.Errorf("%w: %q: %w", redlease.ErrNotAcquired, "r",
			fmt.Errorf("%w (last attempt: %w)", context.DeadlineExceeded, err))
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"busy", busy, true},
		{"wait ran out", ranOut, true},
		{"Redis gone", gone, false},
		{"Redis unreachable", unreachable, false},
		{"connection refused", lastAttempt(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), false},
		{"dial timeout", lastAttempt(&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}), false},
		{"sentinels unreachable", lastAttempt(errors.New("redis: all sentinels specified in configuration are unreachable")), false},
		{"pool timeout", lastAttempt(redis.ErrPoolTimeout), false},
		{"reply lost", fmt.Errorf("%w: %q: %w", redlease.ErrNotAcquired, "r",
			fmt.Errorf("%w: %w: %w", context.DeadlineExceeded, redlease.ErrOutcomeUnknown, context.DeadlineExceeded)), false},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if got := contended(tc.err); got != tc.want {
			t.Errorf("%s: contended(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	var op *net.OpError
	if !errors.Is(unreachable, context.DeadlineExceeded) || !errors.As(unreachable, &op) ||
		errors.Is(unreachable, redlease.ErrOutcomeUnknown) {
		t.Errorf("Redis unreachable: %v: not the wait that ran out on a dial error, once taken for busy", unreachable)
	}
}
