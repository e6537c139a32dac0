package main

import (
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redlease/redlease"
)

func TestShellLine(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"./report.sh", "--date", "today"}, "./report.sh --date today"},
		{[]string{"sh", "-c", "pg_dump app | gzip > /b/app.gz"}, "sh -c 'pg_dump app | gzip > /b/app.gz'"},
		{[]string{"echo", ""}, "echo ''"},
		{[]string{"echo", "it's"}, `echo 'it'\''s'`},
		{[]string{"echo", "$HOME", "a*", "~x"}, `echo '$HOME' 'a*' '~x'`},
		{[]string{"echo", "a\nb", "tab\there"}, `echo $'a\nb' $'tab\there'`},
		{[]string{"echo", "it's\n", `back\slash` + "\x1b"}, `echo $'it\'s\n' $'back\\slash\x1b'`},
		{[]string{"echo", "\xff"}, `echo $'\xff'`},
		{[]string{"echo", "naïve", "a=b,c:d@e%f+g"}, "echo 'naïve' a=b,c:d@e%f+g"},
		{[]string{"echo", "zero\u200bwidth"}, `echo $'zero\u200bwidth'`},
	} {
		if got := shellLine(tc.argv); got != tc.want {
			t.Errorf("shellLine(%q) = %s, want %s", tc.argv, got, tc.want)
		}
	}
}

// A shell reads the line back as the arguments it was made of.
func TestShellLineReadsBack(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	argv := []string{"", "it's", "a\nb", "$HOME", "`x`", "tab\t", `\`, "é", "\x01\x7f", "a b", "*", "!x", "'\"'"}
	out, err := exec.Command(bash, "-c", `printf '%s\0' `+shellLine(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(argv, "|") {
		t.Errorf("bash read %q back from %s, want %q", got, shellLine(argv), argv)
	}
}

func TestCommandHolderFitsMaxHolder(t *testing.T) {
	h := commandHolder([]string{"./report.sh", "--date", "today"})
	if h != redlease.DefaultHolder()+": ./report.sh --date today" {
		t.Errorf("holder %q", h)
	}
	long := commandHolder([]string{"echo", strings.Repeat("é", 2000)})
	if len(long) > redlease.MaxHolder || !utf8.ValidString(long) || !strings.HasSuffix(long, "…") {
		t.Errorf("a long command: %d bytes, valid UTF-8 %v, %q at the end", len(long), utf8.ValidString(long), long[len(long)-8:])
	}
	if len(long) < redlease.MaxHolder-4 {
		t.Errorf("a long command cut to %d bytes, not about MaxHolder", len(long))
	}
}

func TestCell(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"web-1 pid 42: ./x", 60, "web-1 pid 42: ./x"},
		{"two\nlines\tand tab", 0, `two\nlines\tand tab`},
		{"abcdef", 4, "abc…"},
		{"ééééé", 3, "éé…"},
		{"\xffbad", 0, `\xffbad`},
	} {
		if got := cell(tc.in, tc.max); got != tc.want {
			t.Errorf("cell(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
