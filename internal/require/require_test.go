package require

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeT records a failure instead of stopping the test.
type fakeT struct {
	failed bool
	msg    string
}

func (*fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func (f *fakeT) FailNow() { f.failed = true }

var _ TestingT = (*testing.T)(nil)
var _ TestingT = (*testing.B)(nil)

type point struct{ X, Y int }

func TestFunctions(t *testing.T) {
	wrapped := fmt.Errorf("open: %w", fs.ErrNotExist)
	joined := errors.Join(errors.New("a"), wrapped)
	var pathErr *fs.PathError
	now := time.Now()
	tests := []struct {
		name string
		pass bool
		f    func(t TestingT)
	}{
		{"Equal", true, func(t TestingT) { Equal(t, point{1, 2}, point{1, 2}) }},
		{"Equal/bytes", true, func(t TestingT) { Equal(t, []byte("ab"), []byte("ab")) }},
		{"Equal/nil bytes", false, func(t TestingT) { Equal(t, []byte(nil), []byte{}) }},
		{"Equal/types", false, func(t TestingT) { Equal(t, int64(1), 1) }},
		{"Equal/values", false, func(t TestingT) { Equal(t, "a", "b") }},
		{"NotEqual", true, func(t TestingT) { NotEqual(t, 1, 2) }},
		{"NotEqual/equal", false, func(t TestingT) { NotEqual(t, []int{1}, []int{1}) }},
		{"EqualValues", true, func(t TestingT) { EqualValues(t, int64(3), uint8(3)) }},
		{"EqualValues/duration", true, func(t TestingT) { EqualValues(t, 5, time.Duration(5)) }},
		{"EqualValues/differ", false, func(t TestingT) { EqualValues(t, 3, 4.5) }},
		{"True", true, func(t TestingT) { True(t, true) }},
		{"True/false", false, func(t TestingT) { True(t, false) }},
		{"False", true, func(t TestingT) { False(t, false) }},
		{"False/true", false, func(t TestingT) { False(t, true) }},
		{"Nil", true, func(t TestingT) { Nil(t, (*point)(nil)) }},
		{"Nil/untyped", true, func(t TestingT) { Nil(t, nil) }},
		{"Nil/not", false, func(t TestingT) { Nil(t, &point{}) }},
		{"NotNil", true, func(t TestingT) { NotNil(t, 0) }},
		{"NotNil/nil map", false, func(t TestingT) { NotNil(t, map[string]int(nil)) }},
		{"Zero", true, func(t TestingT) { Zero(t, point{}) }},
		{"Zero/nil", true, func(t TestingT) { Zero(t, nil) }},
		{"Zero/not", false, func(t TestingT) { Zero(t, int64(1)) }},
		{"NotZero", true, func(t TestingT) { NotZero(t, "x") }},
		{"NotZero/zero", false, func(t TestingT) { NotZero(t, time.Duration(0)) }},
		{"Empty", true, func(t TestingT) { Empty(t, []int{}) }},
		{"Empty/pointer", true, func(t TestingT) { Empty(t, &point{}) }},
		{"Empty/not", false, func(t TestingT) { Empty(t, "x") }},
		{"NotEmpty", true, func(t TestingT) { NotEmpty(t, map[int]int{1: 1}) }},
		{"NotEmpty/empty", false, func(t TestingT) { NotEmpty(t, "") }},
		{"Len", true, func(t TestingT) { Len(t, map[int]int{1: 1, 2: 2}, 2) }},
		{"Len/differs", false, func(t TestingT) { Len(t, "abc", 2) }},
		{"Len/no len", false, func(t TestingT) { Len(t, 3, 0) }},
		{"Contains/string", true, func(t TestingT) { Contains(t, "redlease", "lea") }},
		{"Contains/slice", true, func(t TestingT) { Contains(t, []point{{1, 2}}, point{1, 2}) }},
		{"Contains/map key", true, func(t TestingT) { Contains(t, map[string]int{"k": 1}, "k") }},
		{"Contains/map value", false, func(t TestingT) { Contains(t, map[string]int{"k": 1}, 1) }},
		{"Contains/absent", false, func(t TestingT) { Contains(t, "redlease", "lock") }},
		{"Contains/not a list", false, func(t TestingT) { Contains(t, 3, 3) }},
		{"NotContains", true, func(t TestingT) { NotContains(t, []int{1, 2}, 3) }},
		{"NotContains/present", false, func(t TestingT) { NotContains(t, "abc", "b") }},
		{"NotContains/not a list", false, func(t TestingT) { NotContains(t, nil, 1) }},
		{"ElementsMatch", true, func(t TestingT) { ElementsMatch(t, []int{1, 2, 2}, []int{2, 1, 2}) }},
		{"ElementsMatch/empty", true, func(t TestingT) { ElementsMatch(t, []int{}, []string(nil)) }},
		{"ElementsMatch/counts", false, func(t TestingT) { ElementsMatch(t, []int{1, 2, 2}, []int{1, 1, 2}) }},
		{"ElementsMatch/not a list", false, func(t TestingT) { ElementsMatch(t, 1, []int{1}) }},
		{"Greater", true, func(t TestingT) { Greater(t, int64(2), 1) }},
		{"Greater/equal", false, func(t TestingT) { Greater(t, 2*time.Second, 2*time.Second) }},
		{"GreaterOrEqual", true, func(t TestingT) { GreaterOrEqual(t, uint(2), 2) }},
		{"GreaterOrEqual/less", false, func(t TestingT) { GreaterOrEqual(t, "a", "b") }},
		{"Less", true, func(t TestingT) { Less(t, 1.5, 2) }},
		{"Less/equal", false, func(t TestingT) { Less(t, int32(2), 2) }},
		{"LessOrEqual", true, func(t TestingT) { LessOrEqual(t, time.Second, time.Second) }},
		{"LessOrEqual/greater", false, func(t TestingT) { LessOrEqual(t, 3, 2) }},
		{"Positive", true, func(t TestingT) { Positive(t, time.Millisecond) }},
		{"Positive/zero", false, func(t TestingT) { Positive(t, int64(0)) }},
		{"Negative", true, func(t TestingT) { Negative(t, time.Duration(-1)) }},
		{"Negative/zero", false, func(t TestingT) { Negative(t, 0.0) }},
		{"NoError", true, func(t TestingT) { NoError(t, nil) }},
		{"NoError/error", false, func(t TestingT) { NoError(t, wrapped) }},
		{"Error", true, func(t TestingT) { Error(t, wrapped) }},
		{"Error/nil", false, func(t TestingT) { Error(t, nil) }},
		{"ErrorIs", true, func(t TestingT) { ErrorIs(t, joined, fs.ErrNotExist) }},
		{"ErrorIs/nil target", true, func(t TestingT) { ErrorIs(t, nil, nil) }},
		{"ErrorIs/nil", false, func(t TestingT) { ErrorIs(t, nil, fs.ErrNotExist) }},
		{"ErrorIs/other", false, func(t TestingT) { ErrorIs(t, joined, fs.ErrExist) }},
		{"NotErrorIs", true, func(t TestingT) { NotErrorIs(t, joined, fs.ErrExist) }},
		{"NotErrorIs/in chain", false, func(t TestingT) { NotErrorIs(t, joined, fs.ErrNotExist) }},
		{"ErrorAs", true, func(t TestingT) { ErrorAs(t, fmt.Errorf("x: %w", &fs.PathError{Err: fs.ErrExist}), &pathErr) }},
		{"ErrorAs/nil", false, func(t TestingT) { ErrorAs(t, nil, &pathErr) }},
		{"ErrorAs/other", false, func(t TestingT) { ErrorAs(t, joined, &pathErr) }},
		{"ErrorContains", true, func(t TestingT) { ErrorContains(t, wrapped, "open:") }},
		{"ErrorContains/nil", false, func(t TestingT) { ErrorContains(t, nil, "") }},
		{"ErrorContains/absent", false, func(t TestingT) { ErrorContains(t, wrapped, "close") }},
		{"EqualError", true, func(t TestingT) { EqualError(t, wrapped, "open: file does not exist") }},
		{"EqualError/nil", false, func(t TestingT) { EqualError(t, nil, "") }},
		{"EqualError/differs", false, func(t TestingT) { EqualError(t, wrapped, "open") }},
		{"Regexp", true, func(t TestingT) { Regexp(t, `^re\w+$`, "redlease") }},
		{"Regexp/compiled", true, func(t TestingT) { Regexp(t, regexp.MustCompile(`\d+`), 42) }},
		{"Regexp/no match", false, func(t TestingT) { Regexp(t, `^\d+$`, []byte("4x")) }},
		{"JSONEq", true, func(t TestingT) { JSONEq(t, `{"a": 1, "b": [true]}`, `{"b":[true],"a":1.0}`) }},
		{"JSONEq/differs", false, func(t TestingT) { JSONEq(t, `{"a": 1}`, `{"a": "1"}`) }},
		{"JSONEq/invalid", false, func(t TestingT) { JSONEq(t, `{}`, `{`) }},
		{"WithinDuration", true, func(t TestingT) { WithinDuration(t, now, now.Add(-time.Second), time.Second) }},
		{"WithinDuration/outside", false, func(t TestingT) { WithinDuration(t, now, now.Add(2*time.Second), time.Second) }},
		{"Panics", true, func(t TestingT) { Panics(t, func() { panic("x") }) }},
		{"Panics/nil", true, func(t TestingT) { Panics(t, func() { panic(nil) }) }},
		{"Panics/not", false, func(t TestingT) { Panics(t, func() {}) }},
		{"PanicsWithValue", true, func(t TestingT) { PanicsWithValue(t, "x", func() { panic("x") }) }},
		{"PanicsWithValue/other", false, func(t TestingT) { PanicsWithValue(t, "x", func() { panic("y") }) }},
		{"PanicsWithValue/not", false, func(t TestingT) { PanicsWithValue(t, "x", func() {}) }},
		{"NotPanics", true, func(t TestingT) { NotPanics(t, func() {}) }},
		{"NotPanics/panics", false, func(t TestingT) { NotPanics(t, func() { panic(os.ErrClosed) }) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fakeT
			tt.f(&f)
			if f.failed == tt.pass {
				t.Fatalf("failed = %v, want %v (message %q)", f.failed, !tt.pass, f.msg)
			}
			if f.failed && f.msg == "" {
				t.Fatal("failed without a message")
			}
		})
	}
}

func TestMessage(t *testing.T) {
	for _, tt := range []struct {
		msgAndArgs []any
		want       string
	}{
		{nil, "Should be true"},
		{[]any{"plain %d"}, "Should be true\nmessage: plain %d"},
		{[]any{"fence %d of %s", 3, "r"}, "Should be true\nmessage: fence 3 of r"},
		{[]any{point{1, 2}}, "Should be true\nmessage: {X:1 Y:2}"},
	} {
		var f fakeT
		True(&f, false, tt.msgAndArgs...)
		if f.msg != tt.want {
			t.Errorf("message %q, want %q", f.msg, tt.want)
		}
	}
}

// The failure reports what was expected and what was got.
func TestReports(t *testing.T) {
	for _, tt := range []struct {
		f    func(t TestingT)
		want []string
	}{
		{func(t TestingT) { Equal(t, int64(1), 1) }, []string{"expected: int64(1)", "actual  : int(1)"}},
		{func(t TestingT) { Equal(t, time.Second, time.Minute) }, []string{"expected: 1s", "actual  : 1m0s"}},
		{func(t TestingT) { ErrorIs(t, fmt.Errorf("open: %w", fs.ErrNotExist), fs.ErrExist) },
			[]string{`expected: "file already exists"`, `"open: file does not exist"` + "\n\t" + `"file does not exist"`}},
		{func(t TestingT) { ErrorAs(t, fs.ErrExist, new(*fs.PathError)) }, []string{"expected: *fs.PathError", "(*errors.errorString)"}},
		{func(t TestingT) { Greater(t, 1, 2) }, []string{`"1" is not greater than "2"`}},
	} {
		var f fakeT
		tt.f(&f)
		for _, w := range tt.want {
			if !strings.Contains(f.msg, w) {
				t.Errorf("message %q lacks %q", f.msg, w)
			}
		}
	}
}
