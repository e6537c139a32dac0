package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/redlease/redlease"
)

// Text that redlease shows: the holder description that run gives its
// lease, and the cells of the status table, whose text comes from Redis
// and may hold anything.

// commandHolder is the holder description of a lease that run takes:
// "<host> pid <pid of redlease>: <COMMAND as a shell line>", cut to
// redlease.MaxHolder bytes.
func commandHolder(argv []string) string {
	return fit(redlease.DefaultHolder()+": "+shellLine(argv), redlease.MaxHolder)
}

// shellLine joins argv as a shell line that would give argv back: an
// argument with characters special to the shell is single-quoted, and one
// with control characters or invalid UTF-8 written $'...' (bash, zsh, ksh),
// so that the line stays one line.
func shellLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = shellWord(a)
	}
	return strings.Join(words, " ")
}

func shellWord(a string) string {
	switch {
	case a == "":
		return "''"
	case strings.IndexFunc(a, func(r rune) bool { return !isShellSafe(r) }) < 0:
		return a
	case !utf8.ValidString(a) || strings.IndexFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "$'" + escaped(a, `'\`) + "'"
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// isShellSafe reports whether r means itself to a shell wherever it is in
// a word.
func isShellSafe(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("@%+=:,./_-", r))
}

// escaped is s with its control and other unprintable characters, the
// bytes of invalid UTF-8, and each character of also, written as Go (and
// $'...') escapes: \n, \t, \x1b, \u200b, \\.
func escaped(s, also string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strings.ContainsRune(also, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u200b'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// fit cuts s to at most n bytes, at a rune boundary, ending with "…" when
// it cut.
func fit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	end := n - len(more)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + more
}

// cell is s as one cell of a table shows it: on one line, unprintable
// characters escaped, and at most max runes (0: no limit), "…" marking a
// cut. -json has the text whole.
func cell(s string, max int) string {
	s = escaped(s, "")
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	runes := []rune(s)
	return string(runes[:max-1]) + "…"
}
