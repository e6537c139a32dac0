package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestDemoOnEmbeddedRedis(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "-ttl", "300ms"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut.String())
	}
	// B's fence is above A's; it may skip one (B's first, busy attempt
	// drew a fence it did not use).
	m := regexp.MustCompile(`B  acquired "invoice:42" with fence (\d+)`).FindStringSubmatch(out.String())
	if m == nil || m[1] == "1" {
		t.Fatalf("B's fence is not above A's:\n%s", out.String())
	}
	for _, want := range []string{
		`acquired "invoice:42" with fence 1`,
		"lease context ended",
		`wrote "paid by B" with fence ` + m[1] + `: accepted`,
		`REJECTED by the resource: stale fence 1 for "redlease-demo:invoice:42:status": newest accepted is ` + m[1],
		`the invoice says "paid by B"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The demo on its embedded Redis runs under GODEBUG=fips140=only, where
// crypto/sha1 panics: miniredis names scripts by their SHA-1, and the
// demo crashed at its first acquire.
func TestDemoOnEmbeddedRedisUnderFIPSOnly(t *testing.T) {
	cmd, out, errOut := redleaseProcess(t, "demo", "-ttl", "300ms")
	cmd.Env = append(cmd.Env, "GODEBUG=fips140=only")
	if err := cmd.Run(); err != nil {
		t.Fatalf("under fips140=only: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if want := `the invoice says "paid by B"`; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"demo", "-ttl", "banana"}, {"demo", "extra"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%q: exit 0", args)
		}
		if errOut.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "redlease demo") {
		t.Errorf("-h: exit %d, output %q", code, out.String())
	}
}

func TestCommandLineMistakesExitTwoWithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"run"},
		{"run", "res"},
		{"run", "res", "--"},
		{"run", "-bogus", "res", "--", "true"},
		{"run", "res", "-ttl", "5s", "--", "true"},
		{"run", "-nowait", "-wait", "1s", "res", "--", "true"},
		{"run", "-grace", "-1s", "res", "--", "true"},
		{"run", "-ttl", "banana", "res", "--", "true"},
		{"run", "-read", "-write", "res", "--", "true"},
		{"run", "-permits", "2", "-read", "res", "--", "true"},
		{"run", "-permits", "2", "-write", "res", "--", "true"},
		{"run", "-permits", "x", "res", "--", "true"},
		{"status"},
		{"status", "-redis", "http://example", "res"},
		{"status", "-redis", "redis+cluster://a:1,,b:2", "res"},
		{"list", "a", "b"},
		{"list", "-fences", "a"},
		{"list", "-fences", "-held"},
		{"migrate-fences", "extra"},
		{"migrate-fences", "-fence", "3"},
		{"break"},
		{"break", "-fence", "x", "res"},
		{"demo", "-ttl", "banana"},
		{"demo", "extra"},
		{"demo", "-ttl", "1.5ms"},
		{"demo", "-redis", "http://example"},
		{"version", "extra"},
		{"nope"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, code, errOut.String())
		}
		if lines := strings.Count(errOut.String(), "\n"); lines != 1 {
			t.Errorf("%q: %d lines on stderr, want 1: %q", args, lines, errOut.String())
		}
	}
}

func TestHelpOfEveryCommand(t *testing.T) {
	for cmd, want := range map[string]string{
		"run":            "REDLEASE_PERMIT",
		"status":         "permit P/N",
		"list":           "-fences",
		"break":          "every permit of its",
		"migrate-fences": "idempotent",
		"demo":           "redlease-demo:",
	} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "-h"}, &out, &errOut); code != 0 {
			t.Errorf("%s -h: exit %d", cmd, code)
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "Examples:") ||
			!strings.Contains(out.String(), "-redis URL") {
			t.Errorf("%s -h lacks %q, examples or flags:\n%s", cmd, want, out.String())
		}
	}
	var out, errOut bytes.Buffer
	run([]string{"run", "-h"}, &out, &errOut)
	for _, code := range []string{"69 ", "75 ", "76 ", "126 ", "127 "} {
		if !strings.Contains(out.String(), "\n  "+code) {
			t.Errorf("run -h does not document exit status %s", code)
		}
	}
}

func TestUnreachableRedisExits69WithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"status", "-redis", "redis://127.0.0.1:1", "res"},
		{"list", "-redis", "redis://127.0.0.1:1"},
		{"break", "-redis", "redis://127.0.0.1:1", "res"},
		{"run", "-redis", "redis://127.0.0.1:1", "res", "--", "true"},
		{"list", "-redis", "redis://127.0.0.1:1", "-fences"},
		{"migrate-fences", "-redis", "redis://127.0.0.1:1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 69 {
			t.Errorf("%q: exit %d, want 69; stderr %q", args, code, errOut.String())
		}
		if s := errOut.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "unreachable") {
			t.Errorf("%q: stderr %q", args, s)
		}
	}
}

func TestRedisURLs(t *testing.T) {
	for _, tc := range []struct {
		url, kind string
		addrs     []string
	}{
		{"redis://127.0.0.1:6379/2", "single", []string{"127.0.0.1:6379"}},
		{"rediss://user:pw@h:6380", "single", []string{"h:6380"}},
		{"redis+cluster://a:1,b:2,c:3", "cluster", []string{"a:1", "b:2", "c:3"}},
		{"rediss+cluster://u:p@a:1,b:2?dial_timeout=3s", "cluster", []string{"a:1", "b:2"}},
		{"redis+sentinel://s1:26379,s2:26379/1?master_name=mymaster", "sentinel", nil},
	} {
		rdb, err := newRedis(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		switch c := rdb.(type) {
		case *redis.Client:
			if tc.kind == "single" && c.Options().Addr != tc.addrs[0] {
				t.Errorf("%s: addr %s", tc.url, c.Options().Addr)
			}
			if tc.kind == "sentinel" && c.Options().DB != 1 {
				t.Errorf("%s: db %d", tc.url, c.Options().DB)
			}
		case *redis.ClusterClient:
			if tc.kind != "cluster" || !slices.Equal(c.Options().Addrs, tc.addrs) {
				t.Errorf("%s: cluster addrs %v", tc.url, c.Options().Addrs)
			}
			if strings.HasPrefix(tc.url, "rediss") && (c.Options().TLSConfig == nil || c.Options().Password != "p") {
				t.Errorf("%s: no TLS or password", tc.url)
			}
		}
		_ = rdb.Close()
	}
	for _, bad := range []string{"127.0.0.1:6379", "http://h:1", "redis+sentinel://s:1", "redis+cluster://"} {
		if rdb, err := newRedis(bad); err == nil {
			_ = rdb.Close()
			t.Errorf("%s: no error", bad)
		}
	}
	if got := redacted("redis://me:secret@h:1/0"); got != "redis://me:xxxxx@h:1/0" {
		t.Errorf("redacted: %s", got)
	}
	for raw, want := range map[string]string{
		"redis+sentinel://u:secret@h1:1,h2:2/0?master_name=m&password=topsecret&dial_timeout=1s": "redis+sentinel://u:xxxxx@h1:1,h2:2/0?master_name=m&password=xxxxx&dial_timeout=1s",
		"redis+sentinel://h1:1?sentinel_password=topsecret&Password=topsecret":                   "redis+sentinel://h1:1?sentinel_password=xxxxx&Password=xxxxx",
		"rediss://h:1/0":                            "rediss://h:1/0",
		"redis://u:pa/ss@h:1/0":                     "redis://xxxxx@h:1/0",                     // net/url cannot parse it
		"redis+cluster://:secret@[::1]:1,[::1]:2/0": "redis+cluster://xxxxx@[::1]:1,[::1]:2/0", // nor this
		"u:secret@h":                                "xxxxx@h",                                 // no "//": opaque to net/url
		"redis://u:secret@h/%zz?password=topsecret": "redis://xxxxx@h/%zz?password=xxxxx",
	} {
		if got := redacted(raw); got != want {
			t.Errorf("redacted(%q) = %q, want %q", raw, got, want)
		}
	}
}

// No message shows a password of the Redis URL: not one that quotes a URL
// that could not be used, nor one that names the Redis that did not answer.
func TestMessagesHideTheURLsPasswords(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // $REDIS_URL
	}{
		{args: []string{"status", "-redis", "redis://u:topsecret@127.0.0.1:1/x", "r"}},
		{args: []string{"status", "r"}, env: "redis://u:topsecret@127.0.0.1:1/x"},
		{args: []string{"status", "-redis", "redis://u:top/secret@127.0.0.1:1/0", "r"}},
		{args: []string{"status", "-redis", "redis://u:topsecret@127.0.0.1:1/%zz", "r"}},
		{args: []string{"status", "-redis", "redis+sentinel://127.0.0.1:1?master_name=m&password=topsecret", "r"}},
		{args: []string{"status", "-redis", "redis+sentinel://127.0.0.1:1/x?master_name=m&password=topsecret", "r"}},
		{args: []string{"demo", "-redis", "redis://u:topsecret@127.0.0.1:1/x"}},
		{args: []string{"demo", "-redis", "redis+sentinel://127.0.0.1:1?master_name=m&password=topsecret"}},
	} {
		t.Setenv("REDIS_URL", tc.env)
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code == exitOK || strings.Contains(out.String()+errOut.String(), "secret") || !strings.Contains(errOut.String(), "xxxxx") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the password masked", tc.args, code, out.String(), errOut.String())
		}
	}
}
