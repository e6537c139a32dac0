// Package shared holds what the packages redlease and fencing both need to
// know: which failed requests may have reached Redis, how a resource name is
// shown in a message, and whether an argument is a nil in disguise. It is
// not part of the API.
package shared

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MayHaveReached reports whether a failed request may have been executed by
// Redis: everything except a Redis error reply (the server answered) and
// failures that happen before anything is written to the connection (a
// refused or failed dial, a pool that gave no connection, a closed client).
func MayHaveReached(err error) bool {
	if IsServerError(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// IsServerError reports whether err is an error reply of the Redis server.
func IsServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

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
