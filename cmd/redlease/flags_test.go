package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
)

// Flags are checked before any connection: with nothing listening, a bad
// flag is a usage error (2) that names the flag, not an outage (69).
func TestFlagsAreCheckedBeforeConnecting(t *testing.T) {
	const down = "redis://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"run", "-redis", down, "-ttl", "10.5ms", "res", "--", "true"}, "-ttl 10.5ms: TTL 10.5ms is not a whole number of milliseconds"},
		{[]string{"run", "-redis", down, "-ttl", "0", "res", "--", "true"}, "-ttl 0s: "},
		{[]string{"run", "-redis", down, "-ttl", "3s", "-margin", "3s", "res", "--", "true"}, "-margin 3s: "},
		{[]string{"run", "-redis", down, "-margin", "-1s", "res", "--", "true"}, "-margin -1s: "},
		{[]string{"run", "-redis", down, "-max-hold", "-1s", "res", "--", "true"}, "-max-hold -1s: "},
		{[]string{"run", "-redis", down, "-lock-delay", "1500us", "res", "--", "true"}, "-lock-delay 1.5ms: "},
		{[]string{"run", "-redis", down, "-wait", "-1s", "res", "--", "true"}, "-wait -1s: "},
		{[]string{"run", "-redis", down, "-grace", "-1s", "res", "--", "true"}, "-grace -1s: "},
		{[]string{"run", "-redis", down, "-prefix", "a{", "res", "--", "true"}, `-prefix "a{": `},
		{[]string{"run", "-redis", down, "}res", "--", "true"}, `RESOURCE "}res": `},
		{[]string{"run", "-redis", down, "", "--", "true"}, `RESOURCE "": `},
		{[]string{"status", "-redis", down, "-prefix", "a}", "res"}, `-prefix "a}": `},
		{[]string{"status", "-redis", down, "ok", "}res"}, `RESOURCE "}res": `},
		{[]string{"list", "-redis", down, "-prefix", "{"}, `-prefix "{": `},
		{[]string{"break", "-redis", down, "}res"}, `RESOURCE "}res": `},
		{[]string{"break", "-redis", down, "-fence", "-3", "res"}, "-fence -3: "},
		{[]string{"run", "-redis", down, "-permits", "0", "res", "--", "true"}, "-permits 0: 0 permits is not in 1..MaxPermits"},
		{[]string{"run", "-redis", down, "-permits", "-2", "res", "--", "true"}, "-permits -2: "},
		{[]string{"run", "-redis", down, "-permits", "2000000", "res", "--", "true"}, "-permits 2000000: "},
		{[]string{"run", "-redis", down, "-permits", "2", "-ttl", "1.5ms", "res", "--", "true"}, "-ttl 1.5ms: "},
		{[]string{"run", "-redis", down, "-read", "-margin", "-1s", "res", "--", "true"}, "-margin -1s: "},
		{[]string{"run", "-redis", down, "-write", "-max-hold", "-1s", "res", "--", "true"}, "-max-hold -1s: "},
		{[]string{"run", "-redis", down, "-read", "}res", "--", "true"}, `RESOURCE "}res": `},
		{[]string{"run", "-redis", down, "-read", "-write", "res", "--", "true"}, "-permits, -read and -write exclude each other"},
		{[]string{"migrate-fences", "-redis", down, "-prefix", "a{"}, `-prefix "a{": `},
		{[]string{"list", "-redis", down, "-fences", "-prefix", "a}"}, `-prefix "a}": `},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), tc.want) || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// A resource name is at most 1 KiB of valid UTF-8 without a NUL byte (the
// core's rule, which every guard shares: neither a NUL nor invalid UTF-8
// travels in an HTTP header or a command's arguments). The command checks it
// through the library before it connects: a usage error (2) that says
// which rule the name breaks, on one line that does not quote all of it.
func TestResourceNamesFollowTheCoresRule(t *testing.T) {
	const down = "redis://127.0.0.1:1"
	long := strings.Repeat("n", 1025)
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"run", "-redis", down, long, "--", "true"}, "is over 1024 bytes"},
		{[]string{"run", "-redis", down, "-permits", "2", long, "--", "true"}, "is over 1024 bytes"},
		{[]string{"run", "-redis", down, "-read", "a\x00b", "--", "true"}, `RESOURCE "a\x00b": resource name "a\x00b" holds a NUL byte`},
		{[]string{"run", "-redis", down, "a\xffb", "--", "true"}, `RESOURCE "a\xffb": resource name "a\xffb" is not valid UTF-8`},
		{[]string{"status", "-redis", down, "ok", "a\x00b"}, "holds a NUL byte"},
		{[]string{"break", "-redis", down, long}, "is over 1024 bytes"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), tc.want) || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%.60q: exit %d, stderr %.300q; want exit 2 and one line with %q", tc.args, code, errOut.String(), tc.want)
		}
		if len(errOut.String()) > 512 {
			t.Errorf("%.60q: a message of %d bytes: %.300q", tc.args, len(errOut.String()), errOut.String())
		}
	}
	// 1 KiB is allowed, multi-byte UTF-8 too: the check passes, and the
	// command goes on to connect (and finds nothing there: 69).
	for _, name := range []string{strings.Repeat("n", 1024), strings.Repeat("é", 512)} {
		var out, errOut bytes.Buffer
		if code := run([]string{"run", "-redis", down + "?max_retries=-1", name, "--", "true"}, &out, &errOut); code != exitUnavailable {
			t.Errorf("a name of %d bytes: exit %d, stderr %.300q; want %d", len(name), code, errOut.String(), exitUnavailable)
		}
	}
}

// The check behind TestFlagsAreCheckedBeforeConnecting relies on the
// library rejecting bad input before any round trip, and on an acquire
// whose context has ended going no further: nothing is dialled.
func TestCheckingInputSendsNothing(t *testing.T) {
	var dials atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	defer rdb.Close()
	s := &session{rdb: rdb, locks: redlease.New(rdb), prefix: redlease.DefaultPrefix}
	defer s.close()
	if err := s.checkInput(input{resources: []string{"fine"}}); err != nil {
		t.Errorf("valid input: %v", err)
	}
	if err := s.checkInput(input{resources: []string{"fine"}, flags: []flagOption{{"-ttl", "1.5ms", redlease.WithTTL(1500000)}}}); err == nil {
		t.Error("-ttl 1.5ms: no error")
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("checking input dialled Redis %d times", n)
	}
}

// Flags that connect may come before the command, where the usage text
// once put them, or get a message that shows the order.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, cmd := range [][]string{{"status", "res"}, {"migrate-fences"}} {
		out.Reset()
		errOut.Reset()
		code := run(append([]string{"-redis", "redis://127.0.0.1:1"}, cmd...), &out, &errOut)
		if code != exitUnavailable || !strings.Contains(errOut.String(), "127.0.0.1:1 unreachable") {
			t.Errorf("-redis before %s: exit %d, stderr %q; want it used (69, unreachable)", cmd[0], code, errOut.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-ttl", "5s", "run", "res", "--", "true"}, "redlease run [flags]"},
		{[]string{"-redis", "redis://h:1"}, "redlease <command> [flags]"},
		{[]string{"-prefix", "p:", "demo"}, "-prefix does not apply to demo"},
		{[]string{"-permits", "3", "run", "res", "--", "true"}, "redlease run [flags]"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), tc.want) ||
			strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestBreakJSON(t *testing.T) {
	_, url, other := testRedis(t)
	l, err := other.TryAcquire(t.Context(), "j")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		code    int
		removed bool
	}{{0, true}, {1, false}} {
		var out, errOut bytes.Buffer
		code := run([]string{"break", "-redis", url, "-json", "j"}, &out, &errOut)
		var got struct {
			Resource  string `json:"resource"`
			Removed   bool   `json:"removed"`
			Held      bool   `json:"held"`
			Owner     string `json:"owner"`
			Fence     int64  `json:"fence"`
			LastFence int64  `json:"last_fence"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != want.code || got.Removed != want.removed ||
			got.Resource != "j" || got.LastFence != l.Fence() || want.removed && (got.Owner != l.Owner() || got.Fence != l.Fence()) {
			t.Errorf("break -json: exit %d, %+v (%v), stderr %q; want exit %d, removed %v", code, got, err, errOut.String(), want.code, want.removed)
		}
	}
}

func TestOneRedlease(t *testing.T) {
	for in, want := range map[string]string{
		`redlease: "job1": redlease: invalid argument: TTL 1.5ms is not a whole number of milliseconds`:                        `"job1": invalid argument: TTL 1.5ms is not a whole number of milliseconds`,
		`not acquired: redlease: lease not acquired: "r": context deadline exceeded (last attempt: redlease: outcome unknown)`: `not acquired: lease not acquired: "r": context deadline exceeded (last attempt: outcome unknown)`,
		`redlease: redlease: twice`: `twice`,
		`a; redlease: b`:            `a; b`,
		// errors.Join (Client.Close) puts each error on a line of its own.
		"redlease: a\nredlease: b": `a\nb`,
		// Inside a quoted name, or not at the start of a part, it stays.
		`redlease: "x: redlease: y" is held`:        `"x: redlease: y" is held`,
		`redlease: "q\": redlease: z": redlease: w`: `"q\": redlease: z": w`,
		`myredlease: x`:    `myredlease: x`,
		`no prefix at all`: `no prefix at all`,
		"redlease: \"r\" is held by another owner (web-1\nrm x); its lease": `"r" is held by another owner (web-1\nrm x); its lease`,
	} {
		if got := oneRedlease(in); got != want {
			t.Errorf("oneRedlease(%q) = %q, want %q", in, got, want)
		}
	}
}

// A command that cannot be run is found out before Redis is asked: with
// nothing listening, run exits 127 or 126 as a shell would, not 69.
func TestRunLooksUpTheCommandBeforeConnecting(t *testing.T) {
	const down = "redis://127.0.0.1:1"
	for _, tc := range []struct {
		command string
		code    int
	}{
		{"no-such-command-here", exitNotFound},
		{"/no/such/path", exitNotFound},
		{t.TempDir(), exitCannotExec}, // a directory
	} {
		var out, errOut bytes.Buffer
		code := run([]string{"run", "-redis", down, "res", "--", tc.command}, &out, &errOut)
		if code != tc.code || strings.Contains(errOut.String(), "unreachable") || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line", tc.command, code, errOut.String(), tc.code)
		}
	}
}
