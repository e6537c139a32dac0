package servertest

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The goroutine leak check. It does what go.uber.org/goleak did for these
// tests, without the dependency: it reads the stacks of all goroutines with
// runtime.Stack and ignores the caller's and those that goleak ignores by
// default: the testing package's own, waiting on a channel in
// testing.RunTests, (*T).Run or (*T).Parallel (or the fuzzing equivalents);
// os/signal's loop; a goroutine in a system call with runtime.goexit on its
// stack (cgo's); the execution tracer's reader. Main checks that no other
// goroutine remains after the tests. A test that must leave no goroutine of
// its own takes Goroutines() first and calls CheckLeaks at its end, as it
// called goleak's IgnoreCurrent and VerifyNone. Both wait up to a limit for
// the goroutines to end: a goroutine told to stop needs a moment to do it.

// A goroutine is one goroutine's stack, as runtime.Stack writes it.
type goroutine struct {
	id    int
	state string   // "chan receive", "select", "IO wait, 2 minutes"
	funcs []string // the functions on the stack, innermost first
	stack string
}

// goroutines returns the stacks of all goroutines but the runtime's own.
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for block := range strings.SplitSeq(string(buf), "\n\n") {
		if g, ok := parseGoroutine(block); ok {
			gs = append(gs, g)
		}
	}
	return gs
}

// parseGoroutine reads one goroutine's block of runtime.Stack's output:
//
//	goroutine 7 [chan receive, 2 minutes]:
//	testing.(*T).Run(0xc000102380, {0x6a1d2b, 0x8}, 0x6b4d50)
//		/usr/local/go/src/testing/testing.go:1750 +0x3ab
//	created by testing.runTests in goroutine 1
//		/usr/local/go/src/testing/testing.go:2161 +0x3c5
func parseGoroutine(block string) (goroutine, bool) {
	header, frames, _ := strings.Cut(block, "\n")
	rest, ok := strings.CutPrefix(header, "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, rest, _ := strings.Cut(rest, " ")
	id, err := strconv.Atoi(idText)
	if err != nil {
		return goroutine{}, false
	}
	_, state, _ := strings.Cut(rest, "[")
	state, _, _ = strings.Cut(state, "]")
	g := goroutine{id: id, state: state, stack: block}
	for line := range strings.SplitSeq(frames, "\n") {
		if line == "" || line[0] == '\t' || strings.HasPrefix(line, "created by ") {
			continue
		}
		if i := strings.LastIndexByte(line, '('); i > 0 {
			g.funcs = append(g.funcs, line[:i])
		}
	}
	return g, true
}

// ignored reports whether g is one that goleak ignores by default.
func (g goroutine) ignored() bool {
	var top string
	if len(g.funcs) > 0 {
		top = g.funcs[0]
	}
	has := func(f string) bool { return slices.Contains(g.funcs, f) }
	switch {
	case strings.HasPrefix(g.state, "chan receive") && slices.Contains([]string{
		"testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel",
		"testing.runFuzzing", "testing.runFuzzTests"}, top):
		return true // the testing package, waiting for tests to end or to start
	case strings.HasPrefix(g.state, "syscall") && has("runtime.goexit"):
		return true // cgo
	case top == "os/signal.signal_recv" || top == "os/signal.loop" || has("runtime.ensureSigM"):
		return true // started by importing os/signal and by signal.Notify
	case has("runtime.ReadTrace"):
		return true
	}
	return false
}

// currentID returns the ID of the calling goroutine.
func currentID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	g, _ := parseGoroutine(string(buf))
	return g.id
}

// Goroutines returns the IDs of the goroutines running now, for CheckLeaks
// to ignore.
func Goroutines() map[int]bool {
	ids := map[int]bool{}
	for _, g := range goroutines() {
		ids[g.id] = true
	}
	return ids
}

// CheckLeaks fails tb if goroutines remain after limit other than the
// caller's, the ignored ones (see above) and those in before, which comes
// from Goroutines.
func CheckLeaks(tb testing.TB, before map[int]bool, limit time.Duration) {
	tb.Helper()
	if gs := leaked(before, limit); len(gs) > 0 {
		tb.Errorf("goroutines leaked:\n%s", formatGoroutines(gs))
	}
}

// leaked returns the goroutines that remain after limit other than the
// caller's, the ignored ones and those in before.
func leaked(before map[int]bool, limit time.Duration) []goroutine {
	self := currentID()
	deadline := time.Now().Add(limit)
	for {
		var gs []goroutine
		for _, g := range goroutines() {
			if g.id != self && !before[g.id] && !g.ignored() {
				gs = append(gs, g)
			}
		}
		if len(gs) == 0 || time.Now().After(deadline) {
			return gs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func formatGoroutines(gs []goroutine) string {
	stacks := make([]string, len(gs))
	for i, g := range gs {
		stacks[i] = g.stack
	}
	return strings.Join(stacks, "\n\n")
}
