package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemoOnEmbeddedRedis(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "-ttl", "300ms"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut.String())
	}
	for _, want := range []string{
		`acquired "invoice:42" with fence 1`,
		"lease context ended",
		`acquired "invoice:42" with fence 2`,
		`wrote "paid by B" with fence 2: accepted`,
		"REJECTED by the resource: stale fence 1, newest accepted is 2",
		`resource holds "paid by B" from fence 2`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
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
