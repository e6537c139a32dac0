package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChooseRows(t *testing.T) {
	impls := []impl{{name: nameRaw}, {name: nameSetNX}, {name: nameFenced}, {name: nameRL}, {name: nameRLAlone}, {name: nameBSM},
		{name: nameBSMFast}, {name: nameRS}}
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
		"":                    {nameRaw, nameSetNX, nameFenced, nameRL, nameRLAlone, nameBSM, nameBSMFast, nameRS},
		"SET NX":              {nameSetNX, nameFenced},         // a part of two names
		"redlease":            {nameRL},                        // an exact name, not every name that contains it
		"bsm,by hand":         {nameRaw, nameBSM, nameBSMFast}, // in the part's order, not the list's
		"SET NX,,redlease,":   {nameSetNX, nameFenced, nameRL}, // empty strings pick nothing
		nameBSM + ",redlease": {nameRL, nameBSM},               // a comma and a space are the name's: not "bsm/redislock" and " defaults"
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

// A parallel round whose pair does not return is given up on, and says
// where the pair waited, instead of waiting for the whole run's deadline;
// the cancellation that frees the pair is no error of the round.
func TestRunParallelGivesUpOnAStuckPair(t *testing.T) {
	defer func(d time.Duration) { stuckAfter = d }(stuckAfter)
	stuckAfter = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, hung, err := runParallel(ctx, []locker{stuckLocker{}}, "stuck", 10*time.Millisecond)
	lock := strings.TrimSuffix(pairFunc, "pair") + "stuckLocker.Lock"
	if err != nil || !slices.Equal(hung, []string{lock}) {
		t.Fatalf("runParallel = %q, %v; want the stuck pair's lock and no error", hung, err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("runParallel took %v", took)
	}
}

// A round whose pairs return has nothing hung, and a pair's error is the
// round's.
func TestRunParallelReturnsAPairsError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, hung, err := runParallel(ctx, []locker{failingLocker{}}, "failing", 10*time.Millisecond)
	if hung != nil || !errors.Is(err, errFailing) {
		t.Fatalf("runParallel = %q, %v; want nothing hung and the pair's error", hung, err)
	}
}

var errFailing = errors.New("failing locker")

// failingLocker's Lock fails at once.
type failingLocker struct{}

func (failingLocker) Lock(ctx context.Context, key string) error { return errFailing }
func (failingLocker) Unlock(ctx context.Context) error           { return nil }

func TestStandard(t *testing.T) {
	for fn, want := range map[string]bool{
		"runtime.gopark":           true,
		"internal/poll.(*FD).Read": true,
		"sync.(*Cond).Wait":        true,
		"main.pair":                false,
		"github.com/valkey-io/valkey-go/valkeylock.(*locker).WithContext": false,
		"github.com/redlease/redlease.(*Client).Acquire":                  false,
	} {
		if got := standard(fn); got != want {
			t.Errorf("standard(%q) = %v, want %v", fn, got, want)
		}
	}
}

// A hung round is named under the parallel table, with where its pairs
// waited.
func TestReportNamesAHungRound(t *testing.T) {
	r := &report{started: time.Now(), plan: plan{parDur: time.Second, parRounds: 7},
		parallel: []parallelResult{{name: "a lock", perSec: map[int]float64{8: 1, 64: 1},
			serverCPU: map[int]time.Duration{}, clientCPU: map[int]time.Duration{},
			hung: []hungRound{{goroutines: 8, round: 2, in: []string{"example.com/lock.Wait"}}}}}}
	md := r.markdown()
	want := "**a lock, 8 goroutines, round 3 of 7:** a pair had not returned 1m0s after the round's end, waiting in `example.com/lock.Wait`"
	if !strings.Contains(md, want) {
		t.Fatalf("the report does not say %q:\n%s", want, md)
	}
}

func TestShellWords(t *testing.T) {
	args := []string{"-pin", "-rows", "bsm/redislock, defaults,redlease", "it's", "", "-out", "/tmp/x.md"}
	got := shellWords(args)
	want := `-pin -rows 'bsm/redislock, defaults,redlease' 'it'\''s' '' -out /tmp/x.md`
	if got != want {
		t.Fatalf("shellWords = %s, want %s", got, want)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to read the words back")
	}
	out, err := exec.Command(sh, "-c", "set -- "+got+`; for a in "$@"; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if back := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !slices.Equal(back, args) {
		t.Errorf("sh reads %q back as %q", got, back)
	}
}

// runBench builds the bench and runs it with args; it returns its standard
// output. It skips without redis-server, unless REDLEASE_REQUIRE_SERVERS is
// set.
func runBench(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the bench")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDLEASE_REQUIRE_SERVERS") != "" {
			t.Fatal("redis-server not found")
		}
		t.Skip("redis-server not found")
	}
	bin := filepath.Join(t.TempDir(), "bench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("bench %s: %v\n%s", shellWords(args), err, out)
	}
	return string(out)
}

// The direct handoff's floor hands the hot key over, at every number of
// contenders, and the report explains the row.
func TestHandoffFloor(t *testing.T) {
	report := runBench(t, "-quick", "-parts", "hot", "-rows", nameHandoff, "-out", "-")
	for _, n := range []int{2, 8, 32} {
		var handoffs, free int
		prefix := fmt.Sprintf("| %d | %s | ", n, nameHandoff)
		i := strings.Index(report, prefix)
		if i < 0 {
			t.Fatalf("no row %q in the report:\n%s", prefix, report)
		}
		cells := strings.Split(report[i:strings.Index(report[i:], "\n")+i], " | ")
		if len(cells) < 7 {
			t.Fatalf("row %q: %q", prefix, cells)
		}
		if _, err := fmt.Sscanf(cells[6], "%d · %d", &handoffs, &free); err != nil || handoffs == 0 {
			t.Errorf("%d contenders: handoffs · free %q (%v): no handoff to a waiter", n, cells[6], err)
		}
	}
	if !strings.Contains(report, "is the floor of a protocol that none of the libraries has") {
		t.Errorf("the report does not explain the row:\n%s", report)
	}
}
