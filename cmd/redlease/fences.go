package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/redlease/redlease"
)

// The fence counters: what stays in Redis for good (list -fences), and the
// migration from the per-resource counters of earlier versions to one per
// hash slot (migrate-fences).

const migrateHelp = `usage: redlease migrate-fences [flags]

Folds the per-resource fence counters that versions of redlease before the
per-slot counters left (<prefix>{RESOURCE}:fence) into the counters of their
Redis Cluster hash slots, so that no resource's fence goes back, and deletes
them: one atomic step per counter, on every master of a cluster. It prints
how many it folded in. It is idempotent and safe while leases are taken.

Run it once before the first client of this version acquires (until then a
new holder may draw a fence that a guard has already seen, and be refused:
safe, but stuck until the counter is advanced), and once more after the
last client of an earlier version has stopped, for the counters those
recreated meanwhile. 'redlease list -fences' shows what remains.

Exits 0, also when there was nothing to fold in. With -json it prints
{"folded": N}.

Examples:
  redlease list -fences | grep legacy
  redlease migrate-fences
  redlease migrate-fences -prefix app1: -json
`

// fenceJSON is one fence counter in list -fences -json output.
type fenceJSON struct {
	Slot     int    `json:"slot"`
	Value    int64  `json:"value"`
	Key      string `json:"key"`
	Legacy   bool   `json:"legacy"`             // a per-resource counter of an earlier version
	Resource string `json:"resource,omitempty"` // a legacy counter's
}

// listFences writes the fence counters, sorted by slot (a slot's counter
// before the legacy ones of its resources), and says on stderr if legacy
// counters remain.
func listFences(ctx context.Context, s *session, asJSON bool, stdout, stderr io.Writer) int {
	var fcs []redlease.FenceCounter
	err := s.locks.ScanFences(ctx, func(fc redlease.FenceCounter) error {
		fcs = append(fcs, fc)
		return nil
	})
	if err != nil {
		return fail(stderr, "list", err)
	}
	slices.SortFunc(fcs, func(a, b redlease.FenceCounter) int {
		return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Key, b.Key))
	})
	legacy := 0
	out := make([]fenceJSON, len(fcs))
	for i, fc := range fcs {
		out[i] = fenceJSON{Slot: fc.Slot, Value: fc.Value, Key: fc.Key, Legacy: fc.Resource != "", Resource: fc.Resource}
		if fc.Resource != "" {
			legacy++
		}
	}
	if asJSON {
		err = writeJSON(stdout, out)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SLOT\tVALUE\tKIND\tKEY")
		for _, fc := range out {
			kind := "slot"
			if fc.Legacy {
				kind = "legacy"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", fc.Slot, fc.Value, kind, cell(fc.Key, 0))
		}
		err = tw.Flush()
	}
	if err != nil {
		fmt.Fprintln(stderr, "redlease list:", err)
		return exitFailed
	}
	if legacy > 0 {
		fmt.Fprintf(stderr, "redlease list: %d legacy per-resource fence counter(s) of an earlier version remain; "+
			"'redlease migrate-fences' folds them into their slots' counters\n", legacy)
	}
	return exitOK
}

func migrateFencesCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate-fences", migrateHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, `print {"folded": N} instead of a sentence`)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "migrate-fences", &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())})
	}
	ctx := context.Background()
	s, err := cf.open(ctx, stderr, input{})
	if err != nil {
		return fail(stderr, "migrate-fences", err)
	}
	defer s.close()
	n, err := s.locks.MigrateFences(ctx)
	if err != nil && n > 0 {
		err = fmt.Errorf("%w (%d counter(s) were folded in before; run it again)", err, n)
	}
	if err != nil {
		return fail(stderr, "migrate-fences", err)
	}
	switch {
	case *asJSON:
		err = writeJSON(stdout, struct {
			Folded int `json:"folded"`
		}{n})
	case n == 0:
		_, err = fmt.Fprintln(stdout, "nothing to fold in: no per-resource fence counter of an earlier version is left")
	default:
		_, err = fmt.Fprintf(stdout, "folded %d per-resource fence counter(s) into their hash slots' counters, and deleted them\n", n)
	}
	if err != nil {
		fmt.Fprintln(stderr, "redlease migrate-fences:", err)
		return exitFailed
	}
	return exitOK
}
