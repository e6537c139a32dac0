package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
)

// demo tells the stale-writer story as a timeline: A takes the lease and
// freezes past its TTL; its lease context ends; B takes the lease with a
// higher fence and writes; A wakes up, writes with its old fence, and the
// resource rejects it.
func demo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db); empty: an embedded Redis")
	ttl := fs.Duration("ttl", time.Second, "lease TTL")
	resource := fs.String("resource", "invoice:42", "resource to lease")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	ctx := context.Background()

	rdb, where, stop, err := connect(*redisURL)
	if err != nil {
		return err
	}
	defer stop()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", where, err)
	}

	start := time.Now()
	var outMu sync.Mutex
	say := func(who, format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, "%6dms  %-2s %s\n", time.Since(start).Milliseconds(), who, fmt.Sprintf(format, a...))
	}
	fmt.Fprintf(stdout, "redlease demo: a stale holder meets a fenced resource (Redis: %s, TTL %v)\n\n", where, *ttl)

	// On a real server the fences continue from earlier runs, as they should.
	locks := redlease.New(rdb, redlease.WithTTL(*ttl), redlease.WithPrefix("redlease-demo:"))
	// The resource: an invoice's status in Redis, written only through the
	// fencing guard, which checks the fence in the same script as the write.
	guard := fencing.NewRedisGuard(rdb)
	invoice := *resource + ":status"
	write := func(l *redlease.Lease, value string) error {
		return guard.Set(ctx, invoice, value, 0, l.Fence(), l.Owner())
	}

	// A's whole process freezes, its watchdog included; turning A's watchdog
	// off models that. (A waits out a lease left by an interrupted run.)
	actx, cancel := context.WithTimeout(ctx, 3**ttl)
	defer cancel()
	a, err := locks.Acquire(actx, *resource, redlease.WithAutoRenew(false))
	if err != nil {
		return fmt.Errorf("A: %w", err)
	}
	say("A", "acquired %q with fence %d", *resource, a.Fence())
	go func() {
		<-a.Context().Done()
		say("A", "lease context ended (A is frozen and cannot see it yet): %v", context.Cause(a.Context()))
	}()

	bDone := make(chan error, 1)
	go func() {
		b, err := locks.Acquire(ctx, *resource)
		if err != nil {
			bDone <- fmt.Errorf("B: %w", err)
			return
		}
		defer b.Release(ctx)
		say("B", "acquired %q with fence %d after A's lease expired in Redis", *resource, b.Fence())
		if err := write(b, "paid by B"); err != nil {
			bDone <- fmt.Errorf("B's write: %w", err)
			return
		}
		say("B", "wrote %q with fence %d: accepted", "paid by B", b.Fence())
		bDone <- nil
	}()

	if a.Context().Err() == nil {
		say("A", "checked its lease: still held; starts the payment and freezes (GC pause, VM migration)")
	}
	time.Sleep(*ttl * 3 / 2)
	if err := <-bDone; err != nil {
		return err
	}
	say("A", "wakes up and writes %q with fence %d", "paid by A", a.Fence())
	switch err := write(a, "paid by A"); {
	case errors.Is(err, fencing.ErrStaleFence):
		say("A", "REJECTED by the resource: %v", err)
	case err != nil:
		return fmt.Errorf("A's write: %w", err)
	default:
		return errors.New("the resource accepted a stale write; this is a bug")
	}
	if err := a.Release(ctx); err != nil {
		say("A", "release reports: %v", err)
	}
	value, err := rdb.Get(ctx, invoice).Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nthe invoice says %q: the stale write changed nothing.\n", value)
	return nil
}

// connect returns a client of the Redis at url, or of an embedded miniredis
// whose clock follows real time when url is empty.
func connect(url string) (redis.UniversalClient, string, func(), error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, err
		}
		rdb := redis.NewClient(opt)
		return rdb, opt.Addr, func() { _ = rdb.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	// miniredis expires keys only when told time has passed.
	done := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, "embedded miniredis", func() {
		_ = rdb.Close()
		close(done)
		<-ticked
		mr.Close()
	}, nil
}
