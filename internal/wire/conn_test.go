package wire

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/driver"
)

// fakeServer is a driver that runs no Lua: it knows the scripts it was
// sent by EVAL (its script cache), answers NOSCRIPT for others, and
// answers every script with 1, and the hash script with the hash.
type fakeServer struct {
	cache map[string]bool
	sent  []string // "evalsha <hash>" or "eval", per call
}

var errNoScript = errors.New("NOSCRIPT No matching script. Please use EVAL.")

func hashOf(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

func (f *fakeServer) Eval(_ context.Context, c driver.Call) driver.Reply {
	if c.Hash != "" {
		f.sent = append(f.sent, "evalsha")
		if !f.cache[c.Hash] {
			return driver.Reply{Err: errNoScript}
		}
		return driver.Reply{Value: int64(1)}
	}
	f.sent = append(f.sent, "eval")
	f.cache[hashOf(c.Source)] = true
	if c.Source == hashScript.Source() {
		return driver.Reply{Value: hashOf(c.Args[0])}
	}
	return driver.Reply{Value: int64(1)}
}

func (f *fakeServer) EvalMany(ctx context.Context, calls []driver.Call, replies []driver.Reply) {
	for i, c := range calls {
		replies[i] = f.Eval(ctx, c)
	}
}

func (f *fakeServer) EvalWait(ctx context.Context, c driver.Call, _ int, _ time.Duration) (driver.Reply, int64) {
	return f.Eval(ctx, c), 1
}

func (f *fakeServer) Ping(context.Context, string) error { return nil }

func (f *fakeServer) Scan(context.Context, string, int, func([]string) error) error { return nil }

func (f *fakeServer) Sharded() bool { return false }

func (f *fakeServer) Subscribe(context.Context, string, func(string)) (driver.Subscription, error) {
	return nil, errors.New("no")
}

func (f *fakeServer) Classify(err error) driver.ErrorClass {
	if errors.Is(err, errNoScript) {
		return driver.Refused
	}
	return driver.Unknown
}

// A script goes by EVALSHA; where the server lacks it, once more by EVAL,
// alone or in a batch; then by EVALSHA again.
func TestRunSendsTheSourceAfterNoScript(t *testing.T) {
	f := &fakeServer{cache: map[string]bool{}}
	c := NewConn(f, 0)
	ctx := context.Background()
	k := KeysOf("p:", "r")
	for range 2 {
		if r := c.Run(ctx, Refresh(k.Lease, "o", "1000")); r.Value != int64(1) || r.Err != nil {
			t.Fatalf("reply %+v", r)
		}
	}
	f.cache = map[string]bool{} // SCRIPT FLUSH
	replies := c.RunMany(ctx, 3, func(i int) Call { return Refresh(k.Lease, "o", "1000") })
	for _, r := range replies {
		if r.Value != int64(1) || r.Err != nil {
			t.Fatalf("reply %+v", r)
		}
	}
	want := []string{"evalsha", "eval", "evalsha", "evalsha", "evalsha", "evalsha", "eval", "eval", "eval"}
	if !slices.Equal(f.sent, want) {
		t.Fatalf("sent %v, want %v", f.sent, want)
	}
}

// Where the process may not use SHA-1 (GODEBUG=fips140=only), the hash of
// a script is the server's, asked once: nothing here computes it.
func TestHashesComeFromTheServerWhereSHA1IsNotAllowed(t *testing.T) {
	defer func(f func() bool) { sha1Allowed = f }(sha1Allowed)
	sha1Allowed = func() bool { return false }
	s := NewScript("return 1") // not one of the package's: their hashes may be computed already
	if s.Hash() != "" {
		t.Fatal("a hash was computed")
	}
	f := &fakeServer{cache: map[string]bool{}}
	c := NewConn(f, 0)
	ctx := context.Background()
	for range 3 {
		if r := c.Run(ctx, Call{Script: s}); r.Value != int64(1) {
			t.Fatalf("reply %+v", r)
		}
	}
	// The hash script (by EVAL, once), the script by EVALSHA (NOSCRIPT),
	// by EVAL, then by EVALSHA.
	want := []string{"eval", "evalsha", "eval", "evalsha", "evalsha"}
	if !slices.Equal(f.sent, want) {
		t.Fatalf("sent %v, want %v", f.sent, want)
	}
}

// heldServer is a fakeServer whose Evals wait for open once hold is called.
type heldServer struct {
	*fakeServer
	mu     sync.Mutex
	closed bool
	held   int
	gate   chan struct{}
}

func (h *heldServer) Eval(ctx context.Context, c driver.Call) driver.Reply {
	h.mu.Lock()
	hold := h.closed
	if hold {
		h.held++
	}
	h.mu.Unlock()
	if hold {
		<-h.gate
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fakeServer.Eval(ctx, c)
}

// A call that leaves the combining queue unsent at the end of its context
// is not sent, and tells nothing of Redis: the Conn still counts it as
// answering, so the next acquire needs no check of it.
func TestCallLeftUnsentKeepsTheConnsHealth(t *testing.T) {
	h := &heldServer{fakeServer: &fakeServer{cache: map[string]bool{}}, gate: make(chan struct{})}
	c := NewConn(h, 1)
	ctx := context.Background()
	call := Refresh(KeysOf("p:", "r").Lease, "o", "1000")
	if r := c.Run(ctx, call); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	first := make(chan driver.Reply, 1)
	go func() { first <- c.Run(ctx, call) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		if held == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request in flight")
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	r := c.Run(short, call)
	if !errors.Is(r.Err, context.DeadlineExceeded) || c.Classify(r.Err) != driver.NotSent {
		t.Fatalf("the queued call: %v, class %v; want its deadline, not sent", r.Err, c.Classify(r.Err))
	}
	if got := c.health.Load(); got != healthAnswering {
		t.Fatalf("health %d after a call left unsent, want %d (answering)", got, healthAnswering)
	}
	close(h.gate)
	if r := <-first; r.Err != nil {
		t.Fatal(r.Err)
	}
}

// Recording that a request got its answer allocates nothing: it runs twice
// for every acquire and release.
func TestNotingAnAnswerAllocatesNothing(t *testing.T) {
	c := NewConn(&fakeServer{cache: map[string]bool{}}, 0)
	if n := testing.AllocsPerRun(100, func() { c.note(nil) }); n != 0 {
		t.Errorf("note(nil) allocates %v times", n)
	}
}
