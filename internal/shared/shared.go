// Package shared holds what the packages of redlease all need to know: how
// a resource name is shown in a message, how a message says "redlease:"
// once, and whether an argument is a nil in disguise. It is not part of the
// API.
package shared

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of a resource name that a message shows.
const MaxQuoted = 128

// Quote quotes a resource name for an error or a log line. A name longer
// than MaxQuoted bytes is cut there and marked with how much was left out,
// so that a 1 MiB name does not make a 1 MiB message.
func Quote(name string) string {
	head, rest := cut(name)
	return strconv.Quote(head) + rest
}

// Cut is Quote without the quotes, for a log attribute.
func Cut(name string) string {
	head, rest := cut(name)
	return head + rest
}

// cut splits name at MaxQuoted bytes, at a rune boundary, and says what was
// left out.
func cut(name string) (head, rest string) {
	if len(name) <= MaxQuoted {
		return name, ""
	}
	n := MaxQuoted
	for n > 0 && !isRuneStart(name[n]) { // do not split a UTF-8 sequence
		n--
	}
	return name[:n], "… (" + strconv.Itoa(len(name)) + " bytes)"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// IsNil reports whether v is nil, or an interface holding a nil pointer,
// map, slice, function or channel: a nil *redis.Client passed as a
// redis.UniversalClient is not == nil.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// prefix starts every message of redlease's errors, once.
const prefix = "redlease: "

// wrapped is an error made by Errorf: its message has one "redlease: ",
// and it matches what its format wrapped with %w.
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }

// Errorf formats as fmt.Errorf does (%w wraps), and drops the "redlease: "
// that starts the message of each error among args, so that a message says
// it once, at its start: "redlease: lease not acquired: "job": client
// closed", not "redlease: lease not acquired: "job": redlease: client
// closed". Only a leading prefix of an error argument goes: the same text
// elsewhere (a resource named "redlease: job", a driver's message that
// quotes one) is part of what the message reports.
func Errorf(format string, args ...any) error {
	// The error chain is formatted from the arguments as given, so that
	// errors.Is, errors.As and errors.Unwrap see exactly what fmt.Errorf
	// would wrap (the CLI compares errors.Unwrap results with a sentinel);
	// only the message is formatted from trimmed copies.
	err := fmt.Errorf(format, args...)
	var shown []any
	for i, a := range args {
		e, ok := a.(error)
		if !ok || IsNil(e) || !strings.HasPrefix(e.Error(), prefix) {
			continue
		}
		if shown == nil {
			shown = slices.Clone(args)
		}
		shown[i] = trimmed{e}
	}
	msg := err.Error()
	if shown != nil {
		msg = fmt.Errorf(format, shown...).Error()
	}
	return &wrapped{msg: prefix + msg, err: err}
}

// trimmed shows an error's message without its leading "redlease: ".
type trimmed struct{ err error }

func (t trimmed) Error() string { return strings.TrimPrefix(t.err.Error(), prefix) }

// MaxName is the longest resource name, in bytes, that a lease and every
// guard take (redlease.MaxResourceName).
const MaxName = 1024

// NameProblem says what is wrong with a resource name whose longest
// allowed length is max, "" if nothing: it may not be empty, longer than
// max, hold a NUL byte or not be valid UTF-8 (neither travels in an HTTP
// header or a command's arguments, and PostgreSQL's text stores neither).
func NameProblem(name string, max int) string {
	switch {
	case name == "":
		return "empty resource name"
	case len(name) > max:
		return fmt.Sprintf("resource name %s is over %d bytes", Quote(name), max)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Sprintf("resource name %s holds a NUL byte", Quote(name))
	case !utf8.ValidString(name):
		return fmt.Sprintf("resource name %s is not valid UTF-8", Quote(name))
	}
	return ""
}
