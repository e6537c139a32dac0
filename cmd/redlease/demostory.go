package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlease/redlease"
)

// tell tells the story: A takes the lease and freezes past its TTL; its
// lease context ends; B takes the lease with a higher fence and writes; A
// wakes up, writes with its old fence, and the resource rejects it. It
// returns early, with the context's error, on Ctrl-C.
func (d *demoRun) tell() error {
	// A's whole process freezes, its watchdog included; turning A's watchdog
	// off models that. (A waits out a lease left by a run that was killed.)
	actx, cancel := context.WithTimeout(d.ctx, 3*d.ttl)
	defer cancel()
	a, err := d.locks.Acquire(actx, d.resource, redlease.WithTTL(d.ttl), redlease.WithAutoRenew(false))
	if err != nil {
		return fmt.Errorf("A: %w", err)
	}
	d.say("A", "acquired %q with fence %d", d.resource, a.Fence())
	noticed := make(chan struct{})
	go func() { // ends with A's lease
		defer close(noticed)
		<-a.Context().Done()
		if cause := context.Cause(a.Context()); !errors.Is(cause, redlease.ErrReleased) {
			d.say("A", "lease context ended (A is frozen and cannot see it yet): %v", cause)
		}
	}()
	defer func() { <-noticed }()
	defer a.Release(context.WithoutCancel(d.ctx)) // on every path; Release once more only repeats its verdict

	bDone := make(chan error, 1)
	go d.holderB(bDone)
	if a.Context().Err() == nil {
		d.say("A", "checked its lease: still held; starts the payment and freezes (GC pause, VM migration)")
	}
	frozen := time.NewTimer(d.ttl * 3 / 2)
	defer frozen.Stop()
	select {
	case <-frozen.C:
	case <-d.ctx.Done():
	}
	if err := errors.Join(<-bDone, d.ctx.Err()); err != nil {
		return err
	}
	d.say("A", "wakes up and writes %q with fence %d", "paid by A", a.Fence())
	switch rejected, err := d.write(d.ctx, a, "paid by A"); {
	case rejected:
		d.say("A", "REJECTED by the resource: %v", err)
	case err != nil:
		return fmt.Errorf("A's write: %w", err)
	default:
		return errStaleAccepted
	}
	if err := a.Release(d.ctx); err != nil {
		d.say("A", "release reports: %v", err)
	}
	return d.showInvoice()
}

// holderB takes the lease once A's has expired, and writes.
func (d *demoRun) holderB(done chan<- error) {
	b, err := d.locks.Acquire(d.ctx, d.resource, redlease.WithTTL(d.ttl))
	if err != nil {
		done <- fmt.Errorf("B: %w", err)
		return
	}
	defer b.Release(context.WithoutCancel(d.ctx))
	d.say("B", "acquired %q with fence %d after A's lease expired in Redis", d.resource, b.Fence())
	if _, err := d.write(d.ctx, b, "paid by B"); err != nil {
		done <- fmt.Errorf("B's write: %w", err)
		return
	}
	d.say("B", "wrote %q with fence %d: accepted", "paid by B", b.Fence())
	done <- nil
}

// showInvoice prints what the resource holds in the end.
func (d *demoRun) showInvoice() error {
	value, err := d.rdb.Get(d.ctx, d.invoice).Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "\nthe invoice says %q: the stale write changed nothing.\n", value)
	return nil
}
