package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/fencing"
	"github.com/redlease/redlease/internal/embedded"
)

const demoHelp = `usage: redlease demo [flags]

Tells the story redlease exists for, as a timeline: holder A takes the
lease and freezes past its TTL; its lease context ends; B takes the lease
with a higher fence and writes; A wakes up and writes with its old fence,
and the resource, which checks fences, rejects it.

It runs on an embedded Redis, or with -redis URL on a real one. There it
uses only keys that begin with "redlease-demo:", and removes every key
with that prefix when it exits, Ctrl-C included (so two demos at once on
one Redis disturb each other).

Exit status: 0 done; 2 usage error; 69 Redis unreachable or refusing;
128+N interrupted by signal N (130 for Ctrl-C).

Examples:
  redlease demo
  redlease demo -redis redis://127.0.0.1:6379/0 -ttl 2s
`

// demoPrefix begins every key the demo writes.
const demoPrefix = "redlease-demo:"

func demoCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", demoHelp)
	redisURL := fs.String("redis", "", "Redis `URL`, as in 'redlease -h' (default: an embedded Redis)")
	ttl := fs.Duration("ttl", time.Second, "lease `TTL`")
	resource := fs.String("resource", "invoice:42", "resource to lease")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "demo", &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())})
	}
	s, stopEmbedded, err := demoSession(*redisURL)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	defer stopEmbedded()
	defer s.close()
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() { // ends with the demo or on its first signal
		select {
		case sig := <-sigs:
			stop(signalError{sig})
		case <-ctx.Done():
		}
	}()
	if err := s.checkInput(input{resources: []string{*resource}, flags: []flagOption{{"-ttl", *ttl, redlease.WithTTL(*ttl)}}}); err != nil {
		return fail(stderr, "demo", err)
	}
	if err := s.connect(ctx); err != nil {
		return fail(stderr, "demo", err)
	}
	invoice := demoPrefix + *resource + ":status"
	d := &demoRun{ctx: ctx, out: stdout, rdb: s.rdb, locks: s.locks, resource: *resource, ttl: *ttl, start: time.Now(),
		invoice: invoice, write: invoiceWriter(s.rdb, invoice)}
	fmt.Fprintf(stdout, "redlease demo: a stale holder meets a fenced resource (Redis: %s, TTL %v)\n\n", s.where, *ttl)
	storyErr := d.tell()
	cleanErr := d.cleanUp(s.rdb)
	var sig signalError
	switch {
	case errors.As(context.Cause(ctx), &sig):
		fmt.Fprintf(stderr, "redlease demo: %v: stopped, and its keys removed\n", sig)
		return signalStatus(sig.sig)
	case errors.Is(storyErr, errStaleAccepted):
		fmt.Fprintln(stderr, "redlease demo:", oneRedlease(storyErr.Error()))
		return exitFailed
	case storyErr != nil:
		return fail(stderr, "demo", storyErr)
	case cleanErr != nil:
		return fail(stderr, "demo", cleanErr)
	}
	return exitOK
}

// demoSession returns a session on the Redis at url, or on an embedded
// miniredis when url is empty, with a Client for the demo's leases, and a
// function that stops the embedded server. It does no I/O.
func demoSession(url string) (*session, func(), error) {
	stopEmbedded := func() {}
	var rdb redis.UniversalClient
	where := redacted(url)
	if url != "" {
		var err error
		if rdb, err = newRedis(url); err != nil {
			return nil, nil, &usageError{fmt.Sprintf("-redis %q: %s", where, urlReason(err))}
		}
	} else {
		mr, stop, err := embeddedRedis()
		if err != nil {
			return nil, nil, err
		}
		rdb, where, stopEmbedded = redis.NewClient(&redis.Options{Addr: mr.Addr()}), "embedded miniredis", stop
	}
	// -ttl goes on each acquire (demostory.go), not on the Client: as the
	// Client's default, a bad one would fail checkInput's first check, of
	// the prefix, which would then be blamed for it.
	locks := redlease.New(rdb, redlease.WithPrefix(demoPrefix))
	return &session{rdb: rdb, locks: locks, prefix: demoPrefix, where: where}, stopEmbedded, nil
}

// fencedWrite writes a value to the demo's resource with a lease's fence.
// rejected reports a write that the resource refused for a stale fence.
type fencedWrite func(ctx context.Context, l *redlease.Lease, value string) (rejected bool, err error)

// invoiceWriter returns the write of the invoice's status at key: the
// demo's resource, written only through a fencing guard, which checks the
// fence in the same script as the write and keeps its fence records under
// demoPrefix too. It is all of the demo's use of the guards.
func invoiceWriter(rdb redis.UniversalClient, key string) fencedWrite {
	guard := fencing.NewRedisGuard(rdb, fencing.WithPrefix(demoPrefix))
	return func(ctx context.Context, l *redlease.Lease, value string) (bool, error) {
		err := guard.Set(ctx, key, value, 0, l.Fence(), l.Owner())
		return errors.Is(err, fencing.ErrStaleFence), err
	}
}

// embeddedRedis starts a miniredis whose clock follows real time, and
// returns it with a function that stops it.
func embeddedRedis() (*miniredis.Miniredis, func(), error) {
	mr := miniredis.NewMiniRedis()
	if err := embedded.Start(mr); err != nil {
		return nil, nil, err
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
	return mr, func() {
		close(done)
		<-ticked
		mr.Close()
	}, nil
}

// demoRun is one telling of the story.
type demoRun struct {
	ctx      context.Context // ends on Ctrl-C
	out      io.Writer
	rdb      redis.UniversalClient
	locks    *redlease.Client
	invoice  string      // the resource's key
	write    fencedWrite // its only writer
	resource string
	ttl      time.Duration
	start    time.Time
	outMu    sync.Mutex
}

// errStaleAccepted is a stale write the resource let through: a bug.
var errStaleAccepted = errors.New("the resource accepted a stale write; this is a bug")

func (d *demoRun) say(who, format string, a ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "%6dms  %-2s %s\n", time.Since(d.start).Milliseconds(), who, oneRedlease(fmt.Sprintf(format, a...)))
}

// cleanUp gives back the leases and removes every key under demoPrefix,
// on every master of a cluster, unbounded by the demo's context.
func (d *demoRun) cleanUp(rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), redlease.DefaultReleaseTimeout)
	defer cancel()
	closeErr := d.locks.Close(ctx) // a release leaves a key behind: Close comes first
	remove := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, demoPrefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, remove)
	case *redis.Client:
		err = remove(ctx, c)
	}
	if err != nil {
		return fmt.Errorf("removing the demo's keys (%s*): %w", demoPrefix, err)
	}
	return closeErr
}
