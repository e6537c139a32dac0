package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlease/redlease"
)

// Taking the lease: waiting for it, and what run says when it did not get
// it.

// probeTimeout bounds the inspect that follows a -wait that ran out: as
// long as go-redis waits for a reply by default (its ReadTimeout).
const probeTimeout = 3 * time.Second

// signalError is the cause of an acquire stopped by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "got signal " + e.sig.String() }

// acquire takes the lease, or returns nil and the exit code.
func (r *runner) acquire(ctx context.Context, sigs <-chan os.Signal, wait bool, opts []redlease.WaitOption) (*redlease.Lease, int) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // ends when a signal came or the acquire is over
		defer close(watched)
		select {
		case sig := <-sigs:
			cancel(signalError{sig})
		case <-stop:
		}
	}()
	lease, err := r.kind.acquire(r.s.locks, wait)(actx, r.resource, opts...)
	close(stop)
	<-watched

	var sig signalError
	if errors.As(context.Cause(actx), &sig) {
		if lease != nil {
			_ = r.release(lease)
		}
		r.say("%v while waiting for %q", sig, r.resource)
		return nil, signalStatus(sig.sig)
	}
	if err != nil {
		return nil, r.notAcquired(err)
	}
	return lease, exitOK
}

// contended reports whether an acquire error means only that the lease
// stayed held until -wait ran out. When the wait met Redis trouble, the
// error also carries the last attempt's error ("(last attempt: ...)") or
// ErrOutcomeUnknown. It picks run's message; whether run exits 75 or 69 is
// up to Redis answering once more (notAcquired). The last attempt's error
// can be of any type (Sentinel and Cluster clients return plain errors), so
// rather than list them, the error tree is walked: it must hold nothing but
// ErrNotAcquired and the wait's deadline.
func contended(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		return !slices.ContainsFunc(e.Unwrap(), func(e error) bool { return !contended(e) })
	case interface{ Unwrap() error }:
		return contended(e.Unwrap())
	}
	// Leaves are compared, not matched with errors.Is: a network timeout
	// matches context.DeadlineExceeded too, and it is an outage.
	return err == redlease.ErrNotAcquired || err == context.DeadlineExceeded
}

// notAcquired reports an acquire that failed with err and returns run's
// exit status. When -wait ran out, Redis is asked once more who holds the
// lease: if it answers, that is contention (75), whatever went wrong
// during the wait (on a loaded machine, an attempt may still be on its way
// when the wait runs out), and the message names the holder; if it does
// not, an outage (69), however the wait went.
func (r *runner) notAcquired(err error) int {
	var busy *redlease.BusyError
	switch {
	case errors.As(err, &busy):
		r.say("not acquired: %s", r.busyMessage(busy))
		return exitBusy
	case !errors.Is(err, redlease.ErrNotAcquired) && !errors.Is(err, redlease.ErrUnavailable),
		!errors.Is(err, context.DeadlineExceeded), errors.Is(err, redlease.ErrInvalidArgument):
		// Not a wait that ran out (while the lease was held, or while Redis
		// did not answer), or one that ran out on a refusal that the library
		// retried (AcquireSemaphore with another number of permits than the
		// semaphore's): fail says which.
		return fail(r.stderr, "run", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	st, ierr := r.s.locks.Inspect(ctx, r.resource)
	switch {
	case ierr != nil:
		return fail(r.stderr, "run", fmt.Errorf("%w; asked again who holds it, Redis did not answer: %w", err, ierr))
	case contended(err):
		r.say("not acquired within -wait %v: %s", r.wait, r.heldBy(st))
	default:
		r.say("not acquired within -wait %v, Redis answering late or not at all meanwhile: %s", r.wait, r.heldBy(st))
	}
	return exitBusy
}

// busyMessage is the library's message for busy, except where run knows
// more: a semaphore's permits are all held (its busy error names no
// holder), or a reader waits behind a writer that waits.
func (r *runner) busyMessage(busy *redlease.BusyError) string {
	switch {
	case r.kind.semaphore && busy.Remaining > 0:
		return fmt.Sprintf("all %d permits of %q are held; the first lapses in %v unless its holder renews it",
			r.kind.permits, busy.Resource, busy.Remaining)
	case r.kind.read && busy.Remaining == 0:
		return fmt.Sprintf("%q is busy: a writer waits for it, and writers come first (or the write lease is about to expire)",
			busy.Resource)
	}
	return busy.Error()
}

// heldBy says who holds the kind of lease that run waited for, as st has it.
func (r *runner) heldBy(st redlease.Status) string {
	var hs []redlease.SharedLease
	for _, h := range holdersOf(st) {
		if r.kind.excludedBy(h.Kind) {
			hs = append(hs, h)
		}
	}
	switch {
	case len(hs) == 0 && r.kind.read:
		return fmt.Sprintf("no writer holds %q now; a writer may be waiting for it (writers come first)", st.Resource)
	case len(hs) == 0:
		return fmt.Sprintf("%q is free now", st.Resource)
	case len(hs) == 1:
		h, by := hs[0], "another owner"
		if h.Holder != "" {
			by += " (" + cell(h.Holder, holderWidth) + ")"
		}
		what := "fence"
		if h.Kind != "lease" {
			what = kindCell(h, st.Permits) + ", fence"
		}
		return fmt.Sprintf("%q is still held by %s, %s %d; its lease lapses in %s unless the holder renews it",
			st.Resource, by, what, h.Fence, formatTTL(h.Remaining))
	}
	const shown = 3
	fences, first := make([]string, 0, shown+1), hs[0].Remaining
	for i, h := range hs {
		first = min(first, h.Remaining)
		if i < shown {
			fences = append(fences, kindCell(h, st.Permits)+" fence "+strconv.FormatInt(h.Fence, 10))
		}
	}
	if len(hs) > shown {
		fences = append(fences, fmt.Sprintf("%d more", len(hs)-shown))
	}
	return fmt.Sprintf("%q is still held by %d owners (%s); the first lease lapses in %s unless renewed "+
		"('redlease status' names the holders)", st.Resource, len(hs), strings.Join(fences, ", "), formatTTL(first))
}
