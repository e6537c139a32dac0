package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChooseRows(t *testing.T) {
	impls := []impl{{name: nameRaw}, {name: nameSetNX}, {name: nameFenced}, {name: nameRL}, {name: nameRLAlone}, {name: nameBSM}}
	names := func(rows string) []string {
		t.Helper()
		kept, err := chooseRows(slices.Clone(impls), rows)
		if err != nil {
			t.Fatalf("chooseRows(%q): %v", rows, err)
		}
		var out []string
		for _, im := range kept {
			out = append(out, im.name)
		}
		return out
	}
	for rows, want := range map[string][]string{
		"":                  {nameRaw, nameSetNX, nameFenced, nameRL, nameRLAlone, nameBSM},
		"SET NX":            {nameSetNX, nameFenced},         // a part of two names
		"redlease":          {nameRL},                        // an exact name, not every name that contains it
		"bsm,by hand":       {nameRaw, nameBSM},              // in the part's order, not the list's
		"SET NX,,redlease,": {nameSetNX, nameFenced, nameRL}, // empty strings pick nothing
	} {
		if got := names(rows); !slices.Equal(got, want) {
			t.Errorf("chooseRows(%q) = %q, want %q", rows, got, want)
		}
	}
	if _, err := chooseRows(impls, "no such row"); err == nil {
		t.Error("chooseRows with a string that matches nothing: no error")
	}
}

// stuckLocker's Lock returns only when its context ends, as a call that
// never gets its reply.
type stuckLocker struct{}

func (stuckLocker) Lock(ctx context.Context, key string) error { <-ctx.Done(); return ctx.Err() }
func (stuckLocker) Unlock(ctx context.Context) error           { return nil }

// A parallel round whose pair does not return fails with an error that
// says so, instead of waiting for the whole run's deadline.
func TestRunParallelGivesUpOnAStuckPair(t *testing.T) {
	defer func(d time.Duration) { stuckAfter = d }(stuckAfter)
	stuckAfter = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := runParallel(ctx, []locker{stuckLocker{}}, "stuck", 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not return") || !errors.Is(err, context.Canceled) {
		t.Fatalf("runParallel = %v, want the stuck pair's error", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("runParallel took %v", took)
	}
}
