package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/servertest"
)

// kindOfLease is one kind of lease, as a test takes it.
type kindOfLease struct {
	name string // as ErrWrongKind's message names it
	try  func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error)
	wait func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error)
}

var kindsOfLease = []kindOfLease{
	{"an exclusive lease",
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.TryAcquire(ctx, r)
		},
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.Acquire(ctx, r)
		}},
	{"a semaphore",
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.TryAcquireSemaphore(ctx, r, 1)
		},
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.AcquireSemaphore(ctx, r, 1)
		}},
	{"read/write leases (read)",
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.TryAcquireRead(ctx, r)
		},
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.AcquireRead(ctx, r)
		}},
	{"read/write leases (write)",
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.TryAcquireWrite(ctx, r)
		},
		func(ctx context.Context, c *redlease.Client, r string) (*redlease.Lease, error) {
			return c.AcquireWrite(ctx, r)
		}},
}

// group is the kind as one name holds it: a read and a write lease are one
// kind's, read/write leases.
func (k kindOfLease) group() string {
	return strings.TrimSuffix(strings.TrimSuffix(k.name, " (read)"), " (write)")
}

// One name is one kind's at a time, enforced by Redis in the acquire's
// script: while a lease of one kind holds a name, or waits for it, an
// acquire of another kind fails at once with ErrWrongKind, naming both
// kinds, in every direction (the 10 mixes all succeeded before); once the
// last lease and waiter of a kind are gone, another kind takes the name at
// once. Inspect shows a name held by any kind as held, with its kind.
func TestOneKindPerName(t *testing.T) {
	each(t, func(t *testing.T, lib library, kind servertest.Kind) {
		srv := servertest.Start(t, kind)
		c := lib.plain(t, srv.Addr, false, redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
		ctx := t.Context()
		for _, held := range kindsOfLease {
			for _, asked := range kindsOfLease {
				if held.group() == asked.group() {
					continue
				}
				r := resource(t, fmt.Sprintf("%s:%s", held.name, asked.name))
				l, err := held.try(ctx, c, r)
				if err != nil {
					t.Fatalf("%s: %v", held.name, err)
				}
				_, err = asked.try(ctx, c, r)
				if !errors.Is(err, redlease.ErrWrongKind) || errors.Is(err, redlease.ErrNotAcquired) {
					t.Fatalf("%s while %s holds it: %v, want ErrWrongKind only", asked.name, held.name, err)
				}
				if msg := err.Error(); !strings.Contains(msg, held.group()) || !strings.Contains(msg, asked.group()) {
					t.Errorf("the error does not name both kinds: %v", err)
				}
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				start := time.Now()
				_, err = asked.wait(wctx, c, r)
				cancel()
				if !errors.Is(err, redlease.ErrWrongKind) || time.Since(start) > 5*time.Second {
					t.Fatalf("a waiting %s: %v after %v, want ErrWrongKind at once", asked.name, err, time.Since(start))
				}
				st, err := c.Inspect(ctx, r)
				if err != nil || !st.Held || st.Kind == "" {
					t.Fatalf("Inspect while %s holds it: %+v, %v", held.name, st, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l, err = asked.try(ctx, c, r)
				if err != nil {
					t.Fatalf("%s once %s was released: %v", asked.name, held.name, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// A name that a kind waits for is that kind's too: its holder released,
// and its waiter has yet to come back (or has the lease by now); once that
// waiter is done too, the name is free for another kind.
func TestOneKindPerNameCountsWaiters(t *testing.T) {
	each(t, func(t *testing.T, lib library, kind servertest.Kind) {
		srv := servertest.Start(t, kind)
		c := lib.plain(t, srv.Addr, false, redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
		ctx := t.Context()
		r := resource(t, "pool")
		held, err := c.TryAcquireSemaphore(ctx, r, 1)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan *redlease.Lease, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := c.AcquireSemaphore(wctx, r, 1)
			if err != nil {
				t.Error(err)
			}
			waited <- l
		}()
		for i := 0; ; i++ { // the waiter queues (bounded: 10 s)
			st, err := c.Inspect(ctx, r)
			if err == nil && st.Waiters == 1 {
				break
			}
			if i == 1000 {
				t.Fatal("no waiter queued")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, r); !errors.Is(err, redlease.ErrWrongKind) {
			t.Fatalf("an exclusive lease while the semaphore's waiter has the name: %v, want ErrWrongKind", err)
		}
		l := <-waited
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, r); err != nil {
			t.Fatalf("an exclusive lease once the semaphore is done: %v", err)
		}
	})
}
