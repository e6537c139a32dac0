package shared

import (
	"errors"
	"testing"
)

func TestErrorfPrefixOnce(t *testing.T) {
	sentinel := errors.New("redlease: lease not acquired")
	driver := errors.New(`pq: relation "redlease: x" does not exist`)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"wrapped prefix dropped", Errorf("%w: %s: %w", sentinel, Quote("job"), errors.New("redlease: client closed")),
			`redlease: lease not acquired: "job": client closed`},
		{"nested Errorf", Errorf("outer: %w", Errorf("inner: %w", sentinel)),
			`redlease: outer: inner: lease not acquired`},
		// The reviewer's cases: the prefix inside a resource name or inside
		// another library's message is not a redlease prefix.
		{"resource named like the prefix", Errorf("%w: %s", sentinel, Quote("redlease: job")),
			`redlease: lease not acquired: "redlease: job"`},
		{"driver error quoting the prefix", Errorf("guard %s: %w", Quote("job"), driver),
			`redlease: guard "job": pq: relation "redlease: x" does not exist`},
		{"%v of an error", Errorf("failed: %v", sentinel), `redlease: failed: lease not acquired`},
		{"nil error", Errorf("failed: %v", error(nil)), `redlease: failed: <nil>`},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestErrorfKeepsChain(t *testing.T) {
	sentinel := errors.New("redlease: invalid argument")
	other := &customError{"redlease: custom"}
	err := Errorf("%w: bad %w", sentinel, other)
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, sentinel) = false", err)
	}
	var ce *customError
	if !errors.As(err, &ce) || ce != other {
		t.Errorf("errors.As(%v, *customError) = %v, %v", err, ce, ce == other)
	}
	// The wrapped error unwraps to the argument itself, not to a copy that
	// shows it trimmed: callers compare errors.Unwrap results with ==.
	one := Errorf("%w: reason", sentinel)
	if u := errors.Unwrap(errors.Unwrap(one)); u != sentinel {
		t.Errorf("errors.Unwrap twice = %#v, want the sentinel", u)
	}
	if got, want := one.Error(), "redlease: invalid argument: reason"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

type customError struct{ msg string }

func (e *customError) Error() string { return e.msg }
