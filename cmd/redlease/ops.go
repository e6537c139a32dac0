package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/redlease/redlease"
)

const statusHelp = `usage: redlease status [flags] RESOURCE...

Shows, for each resource, what Redis holds, one row per holder: its lease
(KIND lease), and each holder of its shared leases: a permit of its
semaphore (KIND permit P/N: permit P of N), its write lease (write), its
read leases (read). A row has the holder's fence, the time its lease has
left, the first eight characters of its owner token (REDLEASE_OWNER), the
resource's fence counter (LAST FENCE: at least the newest fence handed out
for it; the next holder gets a larger one), the number of queued waiters,
and the holder's description (HOLDER: for 'redlease run', the host, the pid
of redlease and the command; cut to 60 characters in the table). A resource
that nobody holds has one row of dashes (KIND permit -/N for a semaphore
whose permits are all free). Each resource is read in one atomic step. It
only reads.

-json prints an array with an object per resource, whole: resource, held
(its lease), owner, fence, holder, ttl_ms (-1: no expiry), last_fence,
waiters, permits (its semaphore's number, if any) and holders, the holders
of its shared leases, each with kind ("permit", "write" or "read"), permit
(for kind "permit"), owner, fence, holder and ttl_ms.

Examples:
  redlease status nightly-report
  redlease status -json tenant:42:billing tenant:43:billing
  REDIS_URL=redis+cluster://10.0.0.1:6379,10.0.0.2:6379 redlease status invoices
`

const listHelp = `usage: redlease list [flags] [PATTERN]
       redlease list -fences [-json]

Lists the resources whose names match PATTERN (a Redis glob: *, ?, [a-z];
default *) that are held or waited for, sorted by name, in the rows and
columns of 'redlease status' (-json as well). A resource nobody holds or
waits for leaves nothing in Redis to list. -held leaves out those that are
only waited for. It walks the keyspace with SCAN (never KEYS, which blocks
Redis), on every master of a cluster; a resource first acquired during the
walk may be missed.

-fences lists the fence counters instead, what stays in Redis for good: one
per Redis Cluster hash slot that was ever used (16,384 at most per prefix),
shared by the resources of the slot, with its slot, value and key, sorted
by slot. A per-resource counter that an earlier version of redlease left is
marked legacy; 'redlease migrate-fences' folds those into their slots'
counters, and list -fences says so on stderr while any remain. With -json:
an array of objects with slot, value, key, legacy, and resource for a
legacy counter.

Examples:
  redlease list
  redlease list -held 'tenant:*'
  redlease list -json | jq '.[] | select(.waiters > 0)'
  redlease list -fences
`

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
	s, err := cf.open(ctx, stderr, input{resources: fs.Args()})
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
	held := fs.Bool("held", false, "only resources that someone holds now (a lease or a shared lease)")
	fences := fs.Bool("fences", false, "list the fence counters instead of the resources")
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	switch {
	case *fences && *held:
		return fail(stderr, "list", &usageError{"-fences and -held exclude each other"})
	case *fences && fs.NArg() > 0:
		return fail(stderr, "list", &usageError{fmt.Sprintf("-fences takes no PATTERN, got %q", fs.Args())})
	case fs.NArg() > 1:
		return fail(stderr, "list", &usageError{fmt.Sprintf("one PATTERN at most, got %q", fs.Args())})
	}
	ctx := context.Background()
	s, err := cf.open(ctx, stderr, input{})
	if err != nil {
		return fail(stderr, "list", err)
	}
	defer s.close()
	if *fences {
		return listFences(ctx, s, *asJSON, stdout, stderr)
	}
	var sts []redlease.Status
	err = s.locks.Scan(ctx, fs.Arg(0), func(st redlease.Status) error {
		if !*held || st.Held {
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
