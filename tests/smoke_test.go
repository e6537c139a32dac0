package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
)

// Every library, on every server: a lease is taken, a second owner is
// refused, a waiter gets it when it is released.
func TestLeaseOnEveryClient(t *testing.T) {
	each(t, func(t *testing.T, lib library, kind servertest.Kind) {
		srv := servertest.Start(t, kind)
		a := lib.plain(t, srv.Addr, false, redlease.WithTTL(5*time.Second))
		b := lib.plain(t, srv.Addr, false, redlease.WithTTL(5*time.Second))
		ctx := t.Context()
		r := resource(t, "r")
		l, err := a.TryAcquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var busy *redlease.BusyError
		if _, err := b.TryAcquire(ctx, r); !errors.As(err, &busy) {
			t.Fatalf("second owner: %v, want a *BusyError", err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l2, err := b.Acquire(wctx, r)
			if err == nil {
				if l2.Fence() <= l.Fence() {
					err = errors.New("the waiter's fence is not larger")
				}
				err = errors.Join(err, l2.Release(ctx))
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond) // let the waiter queue
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}
