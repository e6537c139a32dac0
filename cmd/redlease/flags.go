package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/shared"
)

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// newFlagSet returns a flag set that reports nothing itself: parse does.
func newFlagSet(name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args. done is true when the command should end with code:
// after -h (help on stdout, 0) or a bad flag (one line on stderr, 2).
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, true
	case err != nil:
		return fail(stderr, fs.Name(), &usageError{err.Error()}), true
	}
	return exitOK, false
}

// fail reports err on one line of stderr and returns the exit code for it:
// exitUsage for usage errors and invalid arguments, exitUnavailable for
// anything else (Redis could not be reached or refused).
func fail(stderr io.Writer, cmd string, err error) int {
	var ue *usageError
	msg := oneRedlease(err.Error())
	if errors.As(err, &ue) || errors.Is(err, redlease.ErrInvalidArgument) {
		fmt.Fprintf(stderr, "redlease %s: %s (see 'redlease %s -h')\n", cmd, msg, cmd)
		return exitUsage
	}
	fmt.Fprintf(stderr, "redlease %s: %s\n", cmd, msg)
	return exitUnavailable
}

// oneRedlease returns msg without the "redlease: " that begins each of the
// library's errors, wherever one begins a part of msg (its start, or after
// ": ", "; ", "(" or a newline, which is what errors.Join puts between
// errors, as in Client.Close's) outside a quoted name: printed after
// "redlease <cmd>: ", a line names redlease once. It stays one line:
// control characters (a newline in a holder description that another
// program set) are escaped.
func oneRedlease(msg string) string {
	const lib = "redlease: "
	var b strings.Builder
	quoted := false
	for i := 0; i < len(msg); i++ {
		if !quoted && strings.HasPrefix(msg[i:], lib) &&
			(i == 0 || msg[i-1] == '(' || msg[i-1] == '\n' || strings.HasSuffix(msg[:i], ": ") || strings.HasSuffix(msg[:i], "; ")) {
			i += len(lib) - 1
			continue
		}
		switch c := msg[i]; {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted && i+1 < len(msg): // an escaped character of a %q name, a quote too
			b.WriteByte(c)
			i++
		}
		b.WriteByte(msg[i])
	}
	return escaped(b.String(), "")
}

// flagOption is the lease option that a flag sets, for checkInput.
type flagOption struct {
	flag  string
	value any // as the user gave it, for the message
	opt   redlease.WaitOption
}

// input is what a command checks before it connects: its resources, and
// the flags that set lease options or the kind of lease (run).
type input struct {
	resources []string
	flags     []flagOption
	kind      leaseKind
}

// checkInput checks, before any connection and without any I/O, what the
// library would refuse: the key prefix, each resource name, the kind of
// lease (run's -permits N) and the lease options of the flags, in their
// order. Its error is a *usageError naming the first flag or argument that
// is wrong. The rules are the library's: it checks its input before any
// round trip, and an acquire whose context has already ended goes no
// further than that.
func (s *session) checkInput(in input) error {
	lease := leaseKind{}.acquire(s.locks, true)
	if err := s.check(lease, "any"); err != nil {
		return &usageError{fmt.Sprintf("-prefix %q: %s", s.prefix, invalidReason(err))}
	}
	for _, r := range in.resources {
		if err := s.check(lease, r); err != nil {
			// Quoted as the library quotes it: a name too long to take
			// is cut, and does not make the message as long.
			return &usageError{fmt.Sprintf("RESOURCE %s: %s", shared.Quote(r), invalidReason(err))}
		}
	}
	// The waiting call takes every option (-wait's too) and checks them,
	// with an ended context, before any round trip.
	try := in.kind.acquire(s.locks, true)
	if err := s.check(try, "any"); err != nil {
		return &usageError{fmt.Sprintf("%s: %s", in.kind.flag(), invalidReason(err))}
	}
	var opts []redlease.WaitOption
	for _, f := range in.flags {
		opts = append(opts, f.opt)
		if err := s.check(try, "any", opts...); err != nil {
			return &usageError{fmt.Sprintf("%s %v: %s", f.flag, f.value, invalidReason(err))}
		}
	}
	return nil
}

// check returns the library's ErrInvalidArgument error for an acquire
// (try) of resource with opts, or nil.
func (s *session) check(try acquireFunc, resource string, opts ...redlease.WaitOption) error {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := try(ended, resource, opts...); errors.Is(err, redlease.ErrInvalidArgument) {
		return err
	}
	return nil
}

// invalidReason is the reason an ErrInvalidArgument error gives, without
// the resource and the sentinel's text that wrap it.
func invalidReason(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		// The error that wraps the sentinel itself holds the reason after it.
		if errors.Unwrap(e) == redlease.ErrInvalidArgument {
			if reason, ok := strings.CutPrefix(e.Error(), redlease.ErrInvalidArgument.Error()+": "); ok {
				return reason
			}
		}
	}
	return err.Error()
}
