package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redlease/redlease"
)

const statusHelp = `usage: redlease status [flags] RESOURCE...

Shows, for each resource, what Redis holds: the holder's owner token and
fence, the time its lease has left, the fence counter (the newest fence
handed out; the next holder gets a larger one) and the number of queued
waiters. Each resource is read in one atomic step. It only reads.

Examples:
  redlease status nightly-report
  redlease status -json tenant:42:billing tenant:43:billing
  REDIS_URL=redis+cluster://10.0.0.1:6379,10.0.0.2:6379 redlease status invoices
`

const listHelp = `usage: redlease list [flags] [PATTERN]

Lists the resources whose names match PATTERN (a Redis glob: *, ?, [a-z];
default *), held or not, sorted by name, with the columns of 'redlease
status'. It walks the keyspace with SCAN (never KEYS, which blocks Redis),
on every master of a cluster; a resource first acquired during the walk may
be missed.

Examples:
  redlease list
  redlease list -held 'tenant:*'
  redlease list -json | jq '.[] | select(.waiters > 0)'
`

const breakHelp = `usage: redlease break [flags] RESOURCE

Removes the lease of RESOURCE by force: an operator's release, for a holder
that is gone or stuck. It reads and deletes the lease in one atomic step,
prints what it removed, and wakes the first waiter. The fence counter stays
as it is, so the next holder gets a larger fence than the removed one.

The removed holder is not stopped: it learns of the loss at its next renewal
(within TTL/3) and may still be writing until then, while the next holder
starts. Only a resource that checks fences keeps them apart. With -fence,
break removes the lease only while it still has that fence (the holder you
saw in 'redlease status'), never a newer holder that took over meanwhile.

Exits 0 if it removed a lease, 1 if there was none (or it had another fence).
With -json it prints the lease it found as 'redlease status -json' does, as
one object, with "removed": true or false.

Examples:
  redlease status nightly-report         # holder ..., fence 34
  redlease break -fence 34 nightly-report
  redlease break -json nightly-report | jq .owner
`

// statusJSON is one resource in -json output.
type statusJSON struct {
	Resource  string `json:"resource"`
	Held      bool   `json:"held"`
	Owner     string `json:"owner,omitempty"`
	Fence     int64  `json:"fence,omitempty"`
	TTLMS     int64  `json:"ttl_ms"` // -1: the lease key has no expiry
	LastFence int64  `json:"last_fence"`
	Waiters   int64  `json:"waiters"`
}

func toJSON(st redlease.Status) statusJSON {
	ttl := st.TTL.Milliseconds()
	if st.TTL < 0 {
		ttl = -1
	}
	return statusJSON{Resource: st.Resource, Held: st.Held, Owner: st.Owner, Fence: st.Fence, TTLMS: ttl,
		LastFence: st.LastFence, Waiters: st.Waiters}
}

// printStatuses writes sts as an aligned table, or as a JSON array.
func printStatuses(w io.Writer, sts []redlease.Status, asJSON bool) error {
	if asJSON {
		out := make([]statusJSON, len(sts))
		for i, st := range sts {
			out[i] = toJSON(st)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tHOLDER\tFENCE\tTTL\tLAST FENCE\tWAITERS")
	for _, st := range sts {
		holder, fence, ttl := "-", "-", "-"
		if st.Held {
			holder, ttl = st.Owner, formatTTL(st.TTL)
			if st.Fence > 0 {
				fence = strconv.FormatInt(st.Fence, 10)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", st.Resource, holder, fence, ttl, st.LastFence, st.Waiters)
	}
	return tw.Flush()
}

func formatTTL(d time.Duration) string {
	if d < 0 {
		return "no expiry"
	}
	return d.Round(time.Millisecond).String()
}

func statusCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", statusHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() == 0 {
		return fail(stderr, "status", &usageError{"no RESOURCE given"})
	}
	ctx := context.Background()
	s, err := cf.open(ctx, stderr, fs.Args(), nil)
	if err != nil {
		return fail(stderr, "status", err)
	}
	defer s.close()
	sts := make([]redlease.Status, 0, fs.NArg())
	for _, r := range fs.Args() {
		st, err := s.locks.Inspect(ctx, r)
		if err != nil {
			return fail(stderr, "status", err)
		}
		sts = append(sts, st)
	}
	if err := printStatuses(stdout, sts, *asJSON); err != nil {
		fmt.Fprintln(stderr, "redlease status:", err)
		return exitFailed
	}
	return exitOK
}

func listCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list", listHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	held := fs.Bool("held", false, "only resources whose lease is held now")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 1 {
		return fail(stderr, "list", &usageError{fmt.Sprintf("one PATTERN at most, got %q", fs.Args())})
	}
	ctx := context.Background()
	s, err := cf.open(ctx, stderr, nil, nil)
	if err != nil {
		return fail(stderr, "list", err)
	}
	defer s.close()
	var sts []redlease.Status
	err = s.locks.Scan(ctx, fs.Arg(0), func(st redlease.Status) error {
		if st.Held || !*held {
			sts = append(sts, st)
		}
		return nil
	})
	if err != nil {
		return fail(stderr, "list", err)
	}
	slices.SortFunc(sts, func(a, b redlease.Status) int { return cmp.Compare(a.Resource, b.Resource) })
	if err := printStatuses(stdout, sts, *asJSON); err != nil {
		fmt.Fprintln(stderr, "redlease list:", err)
		return exitFailed
	}
	return exitOK
}

func breakCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("break", breakHelp)
	cf := addConnFlags(fs)
	fence := fs.Int64("fence", 0, "remove the lease only while it has this fence (0: whatever lease is there)")
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
	s, err := cf.open(ctx, stderr, []string{resource}, nil)
	if err != nil {
		return fail(stderr, "break", err)
	}
	defer s.close()
	st, removed, err := s.locks.Break(ctx, resource, *fence)
	if err != nil {
		return fail(stderr, "break", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(breakJSON{toJSON(st), removed}); err != nil {
			fmt.Fprintln(stderr, "redlease break:", err)
			return exitFailed
		}
	} else {
		printBreak(stdout, st, removed, *fence)
	}
	if !removed {
		return exitFailed
	}
	return exitOK
}

// breakJSON is break's -json output: the lease found, and whether it was
// removed.
type breakJSON struct {
	statusJSON
	Removed bool `json:"removed"`
}

// printBreak says what break found and did.
func printBreak(w io.Writer, st redlease.Status, removed bool, fence int64) {
	switch {
	case !st.Held:
		fmt.Fprintf(w, "%q is not held; nothing removed (fence counter %d)\n", st.Resource, st.LastFence)
		return
	case !removed:
		fmt.Fprintf(w, "%q is held under fence %d, not %d; nothing removed\n", st.Resource, st.Fence, fence)
		return
	}
	fmt.Fprintf(w, "removed the lease of %q: holder %s, fence %d, %s left\n",
		st.Resource, st.Owner, st.Fence, formatTTL(st.TTL))
	fmt.Fprintf(w, "the fence counter stays at %d: the next holder gets a larger fence\n", st.LastFence)
	if st.Waiters > 0 {
		fmt.Fprintf(w, "%d waiter(s) queued; the first live one was woken\n", st.Waiters)
	}
}
