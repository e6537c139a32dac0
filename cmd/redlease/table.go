package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redlease/redlease"
)

// How status, list and break show a resource: a table with one row per
// holder (its lease, and each holder of its shared leases), or JSON.

// holderWidth is the most runes of a holder description that the table
// shows; -json has it whole.
const holderWidth = 60

// statusJSON is one resource in -json output.
type statusJSON struct {
	Resource  string       `json:"resource"`
	Held      bool         `json:"held"`           // by a lease of any kind: its holders are in Holders
	Kind      string       `json:"kind,omitempty"` // "lease", "semaphore" or "read/write" (redlease.Status.Kind)
	Owner     string       `json:"owner,omitempty"`
	Fence     int64        `json:"fence,omitempty"`
	Holder    string       `json:"holder,omitempty"`
	TTLMS     int64        `json:"ttl_ms"` // -1: the lease key has no expiry
	LastFence int64        `json:"last_fence"`
	Waiters   int64        `json:"waiters"`
	Permits   int          `json:"permits,omitempty"`
	Holders   []holderJSON `json:"holders"` // of shared leases, never null
}

// holderJSON is one holder of a shared lease in -json output, or the
// exclusive lease (kind "lease") in break's removed_leases.
type holderJSON struct {
	Kind   string `json:"kind"`             // "permit", "write", "read" or "lease"
	Permit *int   `json:"permit,omitempty"` // for kind "permit"
	Owner  string `json:"owner"`
	Fence  int64  `json:"fence"`
	Holder string `json:"holder,omitempty"`
	TTLMS  int64  `json:"ttl_ms"`
}

func ttlMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func toJSON(st redlease.Status) statusJSON {
	out := statusJSON{Resource: st.Resource, Held: st.Held, Kind: st.Kind, Owner: st.Owner, Fence: st.Fence, Holder: st.Holder,
		TTLMS: ttlMS(st.Remaining), LastFence: st.LastFence, Waiters: st.Waiters, Permits: st.Permits,
		Holders: []holderJSON{}}
	for _, h := range sortedHolders(st) {
		out.Holders = append(out.Holders, holderToJSON(h))
	}
	return out
}

func holderToJSON(h redlease.SharedLease) holderJSON {
	j := holderJSON{Kind: h.Kind, Owner: h.Owner, Fence: h.Fence, Holder: h.Holder, TTLMS: ttlMS(h.Remaining)}
	if h.Kind == "permit" {
		j.Permit = &h.Permit
	}
	return j
}

// sortedHolders returns the holders of st's shared leases in the order the
// table shows them: the write lease, the permits by number, the read
// leases by fence.
func sortedHolders(st redlease.Status) []redlease.SharedLease {
	rank := map[string]int{"write": 0, "permit": 1, "read": 2}
	hs := slices.Clone(st.Shared)
	slices.SortStableFunc(hs, func(a, b redlease.SharedLease) int {
		return cmp.Or(cmp.Compare(rank[a.Kind], rank[b.Kind]), cmp.Compare(a.Permit, b.Permit), cmp.Compare(a.Fence, b.Fence))
	})
	return hs
}

// leaseOf returns st's exclusive lease as a Holder of kind "lease", and
// whether it is held.
func leaseOf(st redlease.Status) (redlease.SharedLease, bool) {
	return redlease.SharedLease{Kind: "lease", Owner: st.Owner, Fence: st.Fence, Holder: st.Holder, Remaining: st.Remaining}, st.Kind == "lease"
}

// holdersOf returns every holder of st: its lease first, then the holders
// of its shared leases.
func holdersOf(st redlease.Status) []redlease.SharedLease {
	var hs []redlease.SharedLease
	if l, held := leaseOf(st); held {
		hs = append(hs, l)
	}
	return append(hs, sortedHolders(st)...)
}

// kindCell is the KIND cell of h: "lease", "write", "read", or "permit
// P/N" for permit P of a semaphore of N permits.
func kindCell(h redlease.SharedLease, permits int) string {
	if h.Kind == "permit" {
		return fmt.Sprintf("permit %d/%d", h.Permit, permits)
	}
	return h.Kind
}

// shortOwner is an owner token as the table shows it: a UUID's first
// eight characters, as git shortens a commit's hash (-json has it whole).
func shortOwner(owner string) string {
	if len(owner) == 36 && owner[8] == '-' {
		return owner[:8]
	}
	return cell(owner, 16) // not written by redlease
}

// printStatuses writes sts as an aligned table, or as a JSON array.
func printStatuses(w io.Writer, sts []redlease.Status, asJSON bool) error {
	if asJSON {
		out := make([]statusJSON, len(sts))
		for i, st := range sts {
			out[i] = toJSON(st)
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tKIND\tFENCE\tTTL\tOWNER\tLAST FENCE\tWAITERS\tHOLDER")
	for _, st := range sts {
		resource, rest := cell(st.Resource, 0), fmt.Sprintf("%d\t%d", st.LastFence, st.Waiters)
		hs := holdersOf(st)
		if len(hs) == 0 {
			kind := "-"
			if st.Permits > 0 {
				kind = fmt.Sprintf("permit -/%d", st.Permits)
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t%s\t-\n", resource, kind, rest)
		}
		for _, h := range hs {
			fence, holder := "-", "-"
			if h.Fence > 0 {
				fence = strconv.FormatInt(h.Fence, 10)
			}
			if h.Holder != "" {
				holder = cell(h.Holder, holderWidth)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", resource, kindCell(h, st.Permits), fence,
				formatTTL(h.Remaining), shortOwner(h.Owner), rest, holder)
		}
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // a holder's "./a > b" stays as it is
	return enc.Encode(v)
}

func formatTTL(d time.Duration) string {
	if d < 0 {
		return "no expiry"
	}
	return d.Round(time.Millisecond).String()
}
