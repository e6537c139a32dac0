package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTwoCPUs(t *testing.T) {
	set := func(cpus ...int) *unix.CPUSet {
		var s unix.CPUSet
		for _, c := range cpus {
			s.Set(c)
		}
		return &s
	}
	for _, tc := range []struct {
		set            *unix.CPUSet
		client, server int
	}{
		{set(0, 1), 0, 1},
		{set(3, 5, 7), 3, 5},
		{set(1, 200), 1, 200},
	} {
		c, s, err := twoCPUs(tc.set)
		if err != nil || c != tc.client || s != tc.server {
			t.Errorf("twoCPUs(%v) = %d, %d, %v; want %d, %d", tc.set, c, s, err, tc.client, tc.server)
		}
	}
	for _, one := range []*unix.CPUSet{set(), set(4)} {
		if _, _, err := twoCPUs(one); err == nil {
			t.Errorf("twoCPUs(%v): no error", one)
		}
	}
}

func TestReadPinned(t *testing.T) {
	defer func(p pinning) { pinned = p }(pinned)
	// The affinity is the calling thread's: keep this goroutine on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &all)
	client, server, err := twoCPUs(&all)
	if err != nil {
		t.Skip(err)
	}
	env := fmt.Sprintf("%d,%d", client, server)
	t.Setenv(pinnedEnv, env)
	if err := readPinned(); err == nil || pinned.on {
		t.Errorf("readPinned with %s=%s in a process that may run on %d CPUs: %v, %+v", pinnedEnv, env, all.Count(), err, pinned)
	}
	var one unix.CPUSet
	one.Set(client)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	if err := readPinned(); err != nil || pinned != (pinning{on: true, client: client, server: server}) {
		t.Errorf("readPinned with %s=%s on CPU %d alone: %+v, %v", pinnedEnv, env, client, pinned, err)
	}
	for _, bad := range []string{"", fmt.Sprint(client), fmt.Sprintf("%d,x", client), fmt.Sprintf("a,%d", server)} {
		pinned = pinning{}
		t.Setenv(pinnedEnv, bad)
		if err := readPinned(); err == nil {
			t.Errorf("readPinned with %s=%q: no error (%+v)", pinnedEnv, bad, pinned)
		}
	}
}

// A -pin run runs on one CPU and says so in its report; redis-server's
// threads are pinned too, or the run fails.
func TestPinRunsPinned(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 2 {
		t.Skipf("needs two CPUs (%d, %v)", set.Count(), err)
	}
	report := runBench(t, "-pin", "-quick", "-parts", "pairs", "-rows", nameBSM, "-out", "-")
	for _, want := range []string{"(GOMAXPROCS 1)", "| pinned (`-pin`) | this process on CPU ", "This run is pinned",
		"bench/run.sh -pin -quick -parts pairs -rows '" + nameBSM + "' -out -   # this report"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report of a -pin run lacks %q:\n%s", want, report)
		}
	}
	for _, part := range []string{"## 2. Parallel", "## 3. One hot key"} { // parts it did not run
		if strings.Contains(report, part) {
			t.Errorf("the report of a run of the pairs part has %q:\n%s", part, report)
		}
	}
}
