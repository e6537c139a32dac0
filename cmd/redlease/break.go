package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redlease/redlease"
)

const breakHelp = `usage: redlease break [flags] RESOURCE

Removes leases of RESOURCE by force: an operator's release, for a holder
that is gone or stuck. It reads and removes in one atomic step, prints what
it removed, and wakes waiters as the holders' releases would. The fence
counter stays as it is, so the next holder gets a larger fence than any
removed one.

With -fence N, break removes only the lease or shared-lease holder that has
fence N (the holder you saw in 'redlease status': its lease, a permit of its
semaphore, its write lease or one of its read leases), never a newer holder
that took over meanwhile. Without -fence it removes every holder of
RESOURCE at once: its lease, every permit of its semaphore, its write lease
and every read lease.

A removed holder learns of the loss within a round trip (its Client hears
of it on its break channel; one that misses the message, at its next
renewal, within TTL/3), but it may still be writing when the next holder
starts. Only a resource that checks fences keeps them apart.

A lease taken with a lock delay ('redlease run -lock-delay', WithLockDelay)
keeps RESOURCE for its delay after the break, owned by "broken" in
'redlease status', as after a lease that lapsed; break it again to free it
at once. So do permits and read/write leases.

Exits 0 if it removed something, 1 if there was nothing (or nothing with
that fence). With -json it prints what it found as 'redlease status -json'
does, as one object, with "removed": true or false, and "removed_leases",
the holders it removed (kind "lease" for the lease itself).

Examples:
  redlease status nightly-report         # ... fence 34
  redlease break -fence 34 nightly-report
  redlease break -json nightly-report | jq .owner
  redlease break -fence 12 encoders      # the holder of one permit
`

func breakCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("break", breakHelp)
	cf := addConnFlags(fs)
	fence := fs.Int64("fence", 0, "remove only the lease or holder with this fence (0: every holder)")
	asJSON := fs.Bool("json", false, "print what was found and whether it was removed as a JSON object")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	switch {
	case fs.NArg() != 1:
		return fail(stderr, "break", &usageError{"want exactly one RESOURCE"})
	case *fence < 0:
		return fail(stderr, "break", &usageError{fmt.Sprintf("-fence %d: must not be negative", *fence)})
	}
	resource := fs.Arg(0)
	ctx := context.Background()
	s, err := cf.open(ctx, stderr, input{resources: []string{resource}})
	if err != nil {
		return fail(stderr, "break", err)
	}
	defer s.close()
	st, removed, err := s.locks.Break(ctx, resource, *fence)
	if err != nil {
		return fail(stderr, "break", err)
	}
	gone := removedBy(st, *fence)
	if *asJSON {
		out := breakJSON{statusJSON: toJSON(st), Removed: removed, RemovedLeases: []holderJSON{}}
		if removed {
			for _, h := range gone {
				out.RemovedLeases = append(out.RemovedLeases, holderToJSON(h))
			}
		}
		if err := writeJSON(stdout, out); err != nil {
			fmt.Fprintln(stderr, "redlease break:", err)
			return exitFailed
		}
	} else {
		printBreak(stdout, st, removed, *fence, gone)
	}
	if !removed {
		return exitFailed
	}
	return exitOK
}

// breakJSON is break's -json output: what was found, and what was removed.
type breakJSON struct {
	statusJSON
	Removed       bool         `json:"removed"`
	RemovedLeases []holderJSON `json:"removed_leases"`
}

// removedBy returns the holders of st that a break with fence removes, as
// break.lua chooses them: those with that fence, or all of them for 0.
func removedBy(st redlease.Status, fence int64) []redlease.SharedLease {
	var out []redlease.SharedLease
	for _, h := range holdersOf(st) {
		if fence == 0 || h.Fence == fence {
			out = append(out, h)
		}
	}
	return out
}

// printBreak says what break found and did.
func printBreak(w io.Writer, st redlease.Status, removed bool, fence int64, gone []redlease.SharedLease) {
	all := holdersOf(st)
	switch {
	case len(all) == 0:
		fmt.Fprintf(w, "%q is not held; nothing removed (fence counter %d)\n", st.Resource, st.LastFence)
		return
	case !removed:
		fences := make([]string, len(all))
		for i, h := range all {
			fences[i] = strconv.FormatInt(h.Fence, 10)
		}
		fmt.Fprintf(w, "%q is held under fence %s, not %d; nothing removed\n", st.Resource, strings.Join(fences, ", "), fence)
		return
	}
	for _, h := range gone {
		fmt.Fprintf(w, "removed %s: fence %d, owner %s, %s left", removedName(h, st), h.Fence, cell(h.Owner, 0), formatTTL(h.Remaining))
		if h.Holder != "" {
			fmt.Fprintf(w, ", holder %s", cell(h.Holder, 0))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "the fence counter stays at %d: the next holder gets a larger fence\n", st.LastFence)
	switch {
	case st.Waiters == 0:
	case len(gone) == 1 && gone[0].Kind == "lease":
		fmt.Fprintf(w, "%d waiter(s) queued; the first live one was woken\n", st.Waiters)
	default:
		fmt.Fprintf(w, "%d waiter(s) queued; woken as the holders' releases would have woken them\n", st.Waiters)
	}
}

// removedName names a removed holder h of st's resource.
func removedName(h redlease.SharedLease, st redlease.Status) string {
	switch h.Kind {
	case "permit":
		return fmt.Sprintf("permit %d/%d of %q", h.Permit, st.Permits, st.Resource)
	case "write":
		return fmt.Sprintf("the write lease of %q", st.Resource)
	case "read":
		return fmt.Sprintf("a read lease of %q", st.Resource)
	}
	return fmt.Sprintf("the lease of %q", st.Resource)
}
