// Package require is a small copy of testify's require package, written
// with the standard library only: the functions that redlease's tests call,
// with testify's signatures and semantics, so that a test reads as it did
// with testify. It exists so that the core module's go.mod carries no test
// dependency, which every module that requires redlease would otherwise take
// into its module graph and its go.sum.
//
// Each function marks t as a helper and, on failure, reports what it
// expected and what it got, followed by the optional message, with t.Errorf,
// then stops the test with t.FailNow. As with testify, the message is a
// single value, or a format string and its arguments. Unlike testify, the
// failure report carries no diff, and Greater, Less and the like are
// generic: their arguments must have one ordered type, which the compiler
// checks where testify checked it as the test ran.
package require

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// TestingT is the part of *testing.T and *testing.B that the functions use.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// fail reports failure and msgAndArgs on t and stops the test.
func fail(t TestingT, failure string, msgAndArgs []any) {
	t.Helper()
	if msg := message(msgAndArgs); msg != "" {
		failure += "\nmessage: " + msg
	}
	t.Errorf("%s", failure)
	t.FailNow()
}

// message formats msgAndArgs as testify does: one value as it is, more as a
// format string and its arguments.
func message(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		if s, ok := msgAndArgs[0].(string); ok {
			return s
		}
		return fmt.Sprintf("%+v", msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// objectsAreEqual reports whether expected and actual are equal: with
// bytes.Equal when both are []byte, else with reflect.DeepEqual.
func objectsAreEqual(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	exp, ok := expected.([]byte)
	if !ok {
		return reflect.DeepEqual(expected, actual)
	}
	act, ok := actual.([]byte)
	if !ok {
		return false
	}
	if exp == nil || act == nil {
		return exp == nil && act == nil
	}
	return bytes.Equal(exp, act)
}

// objectsAreEqualValues reports whether expected and actual are equal, or
// equal after converting one to the other's type (a numeric value to the
// larger of the two types).
func objectsAreEqualValues(expected, actual any) bool {
	if objectsAreEqual(expected, actual) {
		return true
	}
	ev, av := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if !ev.IsValid() || !av.IsValid() || !ev.Type().ConvertibleTo(av.Type()) {
		return false
	}
	et, at := ev.Type(), av.Type()
	if !isNumeric(et) || !isNumeric(at) {
		return reflect.DeepEqual(ev.Convert(at).Interface(), actual)
	}
	if et.Size() >= at.Size() {
		return av.Convert(et).Interface() == expected
	}
	return ev.Convert(at).Interface() == actual
}

func isNumeric(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	}
	return false
}

// unequal is the failure report of Equal and EqualValues: %#v, with the
// types when they differ; a time.Duration as %v.
func unequal(expected, actual any) string {
	e, a := fmt.Sprintf("%#v", expected), fmt.Sprintf("%#v", actual)
	if reflect.TypeOf(expected) != reflect.TypeOf(actual) {
		e, a = fmt.Sprintf("%T(%s)", expected, e), fmt.Sprintf("%T(%s)", actual, a)
	} else if _, ok := expected.(time.Duration); ok {
		e, a = fmt.Sprint(expected), fmt.Sprint(actual)
	}
	return "Not equal:\nexpected: " + e + "\nactual  : " + a
}

// Equal requires expected and actual to be equal: bytes.Equal when both
// are []byte, reflect.DeepEqual otherwise.
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !objectsAreEqual(expected, actual) {
		fail(t, unequal(expected, actual), msgAndArgs)
	}
}

// NotEqual requires expected and actual not to be equal, as Equal compares.
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if objectsAreEqual(expected, actual) {
		fail(t, fmt.Sprintf("Should not be: %#v", actual), msgAndArgs)
	}
}

// EqualValues requires expected and actual to be equal as Equal compares,
// or equal once one is converted to the other's type.
func EqualValues(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !objectsAreEqualValues(expected, actual) {
		fail(t, unequal(expected, actual), msgAndArgs)
	}
}

// True requires value to be true.
func True(t TestingT, value bool, msgAndArgs ...any) {
	t.Helper()
	if !value {
		fail(t, "Should be true", msgAndArgs)
	}
}

// False requires value to be false.
func False(t TestingT, value bool, msgAndArgs ...any) {
	t.Helper()
	if value {
		fail(t, "Should be false", msgAndArgs)
	}
}

// isNil reports whether object is nil or holds a nil chan, func, interface,
// map, pointer or slice.
func isNil(object any) bool {
	if object == nil {
		return true
	}
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map,
		reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return v.IsNil()
	}
	return false
}

// Nil requires object to be nil (see isNil).
func Nil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(object) {
		fail(t, fmt.Sprintf("Expected nil, but got: %#v", object), msgAndArgs)
	}
}

// NotNil requires object not to be nil (see isNil).
func NotNil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isNil(object) {
		fail(t, "Expected value not to be nil.", msgAndArgs)
	}
}

func isZero(i any) bool {
	return i == nil || reflect.DeepEqual(i, reflect.Zero(reflect.TypeOf(i)).Interface())
}

// Zero requires i to be the zero value of its type.
func Zero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if !isZero(i) {
		fail(t, fmt.Sprintf("Should be zero, but was %v", i), msgAndArgs)
	}
}

// NotZero requires i not to be the zero value of its type.
func NotZero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if isZero(i) {
		fail(t, fmt.Sprintf("Should not be zero, but was %v", i), msgAndArgs)
	}
}

// isEmpty reports whether object is nil, a zero value, a chan, map or slice
// of no element, or a pointer to an empty value.
func isEmpty(object any) bool {
	if object == nil {
		return true
	}
	return isEmptyValue(reflect.ValueOf(object))
}

func isEmptyValue(v reflect.Value) bool {
	if v.IsZero() {
		return true
	}
	switch v.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice:
		return v.Len() == 0
	case reflect.Pointer:
		return isEmptyValue(v.Elem())
	}
	return false
}

// Empty requires object to be empty (see isEmpty).
func Empty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isEmpty(object) {
		fail(t, fmt.Sprintf("Should be empty, but was %v", object), msgAndArgs)
	}
}

// NotEmpty requires object not to be empty (see isEmpty).
func NotEmpty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(object) {
		fail(t, fmt.Sprintf("Should NOT be empty, but was %v", object), msgAndArgs)
	}
}

// Len requires object, which len() must apply to, to have length elements.
func Len(t TestingT, object any, length int, msgAndArgs ...any) {
	t.Helper()
	l, ok := lenOf(object)
	if !ok {
		fail(t, fmt.Sprintf("%q could not be applied builtin len()", fmt.Sprint(object)), msgAndArgs)
	} else if l != length {
		fail(t, fmt.Sprintf("%q should have %d item(s), but has %d", fmt.Sprint(object), length, l), msgAndArgs)
	}
}

func lenOf(x any) (n int, ok bool) {
	defer func() { ok = recover() == nil }()
	return reflect.ValueOf(x).Len(), true
}

// contains reports whether s has element: as a substring of a string, an
// element of an array or slice, or a key of a map. ok is false when s is
// none of them.
func contains(s, element any) (ok, found bool) {
	v := reflect.ValueOf(s)
	defer func() {
		if recover() != nil {
			ok, found = false, false
		}
	}()
	switch v.Kind() {
	case reflect.Invalid:
		return false, false
	case reflect.String:
		return true, strings.Contains(v.String(), reflect.ValueOf(element).String())
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if objectsAreEqual(k.Interface(), element) {
				return true, true
			}
		}
		return true, false
	}
	for i := range v.Len() {
		if objectsAreEqual(v.Index(i).Interface(), element) {
			return true, true
		}
	}
	return true, false
}

// Contains requires s to contain element: a substring of a string, an
// element of an array or slice, a key of a map.
func Contains(t TestingT, s, element any, msgAndArgs ...any) {
	t.Helper()
	ok, found := contains(s, element)
	if !ok {
		fail(t, fmt.Sprintf("%#v could not be applied builtin len()", s), msgAndArgs)
	} else if !found {
		fail(t, fmt.Sprintf("%#v does not contain %#v", s, element), msgAndArgs)
	}
}

// NotContains requires s, as for Contains, not to contain element.
func NotContains(t TestingT, s, element any, msgAndArgs ...any) {
	t.Helper()
	ok, found := contains(s, element)
	if !ok {
		fail(t, fmt.Sprintf("%#v could not be applied builtin len()", s), msgAndArgs)
	} else if found {
		fail(t, fmt.Sprintf("%#v should not contain %#v", s, element), msgAndArgs)
	}
}

// ElementsMatch requires the arrays or slices listA and listB to have the
// same elements, each as many times, in any order. Two empty lists match.
func ElementsMatch(t TestingT, listA, listB any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(listA) && isEmpty(listB) {
		return
	}
	for _, l := range []any{listA, listB} {
		if k := reflect.ValueOf(l).Kind(); k != reflect.Array && k != reflect.Slice {
			fail(t, fmt.Sprintf("%#v has an unsupported type %s, expecting array or slice", l, k), msgAndArgs)
			return
		}
	}
	a, b := reflect.ValueOf(listA), reflect.ValueOf(listB)
	var extraA, extraB []any
	used := make([]bool, b.Len())
	for i := range a.Len() {
		found := false
		for j := range b.Len() {
			if !used[j] && objectsAreEqual(b.Index(j).Interface(), a.Index(i).Interface()) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			extraA = append(extraA, a.Index(i).Interface())
		}
	}
	for j := range b.Len() {
		if !used[j] {
			extraB = append(extraB, b.Index(j).Interface())
		}
	}
	if len(extraA) > 0 || len(extraB) > 0 {
		fail(t, fmt.Sprintf("elements differ\nextra elements in list A: %#v\nextra elements in list B: %#v\nlistA: %#v\nlistB: %#v",
			extraA, extraB, listA, listB), msgAndArgs)
	}
}

// Greater requires e1 > e2.
func Greater[T cmp.Ordered](t TestingT, e1, e2 T, msgAndArgs ...any) {
	t.Helper()
	if !(e1 > e2) {
		fail(t, fmt.Sprintf("%q is not greater than %q", fmt.Sprint(e1), fmt.Sprint(e2)), msgAndArgs)
	}
}

// GreaterOrEqual requires e1 >= e2.
func GreaterOrEqual[T cmp.Ordered](t TestingT, e1, e2 T, msgAndArgs ...any) {
	t.Helper()
	if !(e1 >= e2) {
		fail(t, fmt.Sprintf("%q is not greater than or equal to %q", fmt.Sprint(e1), fmt.Sprint(e2)), msgAndArgs)
	}
}

// Less requires e1 < e2.
func Less[T cmp.Ordered](t TestingT, e1, e2 T, msgAndArgs ...any) {
	t.Helper()
	if !(e1 < e2) {
		fail(t, fmt.Sprintf("%q is not less than %q", fmt.Sprint(e1), fmt.Sprint(e2)), msgAndArgs)
	}
}

// LessOrEqual requires e1 <= e2.
func LessOrEqual[T cmp.Ordered](t TestingT, e1, e2 T, msgAndArgs ...any) {
	t.Helper()
	if !(e1 <= e2) {
		fail(t, fmt.Sprintf("%q is not less than or equal to %q", fmt.Sprint(e1), fmt.Sprint(e2)), msgAndArgs)
	}
}

// Positive requires e > 0.
func Positive[T cmp.Ordered](t TestingT, e T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if !(e > zero) {
		fail(t, fmt.Sprintf("%q is not positive", fmt.Sprint(e)), msgAndArgs)
	}
}

// Negative requires e < 0.
func Negative[T cmp.Ordered](t TestingT, e T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if !(e < zero) {
		fail(t, fmt.Sprintf("%q is not negative", fmt.Sprint(e)), msgAndArgs)
	}
}

// chain lists err and the errors it wraps, one a line, each with its type
// when withType is set.
func chain(err error, withType bool) string {
	var lines []string
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		line := fmt.Sprintf("%q", err.Error())
		if withType {
			line += fmt.Sprintf(" (%T)", err)
		}
		lines = append(lines, line)
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return strings.Join(lines, "\n\t")
}

// NoError requires err to be nil.
func NoError(t TestingT, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("Received unexpected error:\n%+v", err), msgAndArgs)
	}
}

// Error requires err not to be nil.
func Error(t TestingT, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, "An error is expected but got nil.", msgAndArgs)
	}
}

// ErrorIs requires errors.Is(err, target).
func ErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		return
	}
	var want string
	if target != nil {
		want = target.Error()
		if err == nil {
			fail(t, fmt.Sprintf("Expected error with %q in chain but got nil.", want), msgAndArgs)
			return
		}
	}
	fail(t, fmt.Sprintf("Target error should be in err chain:\nexpected: %q\nin chain: %s", want, chain(err, false)), msgAndArgs)
}

// NotErrorIs requires !errors.Is(err, target).
func NotErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		var found string
		if target != nil {
			found = target.Error()
		}
		fail(t, fmt.Sprintf("Target error should not be in err chain:\nfound: %q\nin chain: %s", found, chain(err, false)), msgAndArgs)
	}
}

// ErrorAs requires errors.As(err, target); target is a non-nil pointer, as
// for errors.As.
func ErrorAs(t TestingT, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if errors.As(err, target) {
		return
	}
	want := reflect.TypeOf(target).Elem().String()
	if err == nil {
		fail(t, "An error is expected but got nil.\nexpected: "+want, msgAndArgs)
		return
	}
	fail(t, fmt.Sprintf("Should be in error chain:\nexpected: %s\nin chain: %s", want, chain(err, true)), msgAndArgs)
}

// ErrorContains requires err to be an error whose message contains
// contains.
func ErrorContains(t TestingT, err error, contains string, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, fmt.Sprintf("An error is expected but got nil.\nexpected: an error containing %q", contains), msgAndArgs)
	} else if !strings.Contains(err.Error(), contains) {
		fail(t, fmt.Sprintf("Error %q does not contain %q", err.Error(), contains), msgAndArgs)
	}
}

// EqualError requires err to be an error whose message is errString.
func EqualError(t TestingT, err error, errString string, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, fmt.Sprintf("An error is expected but got nil.\nexpected: %q", errString), msgAndArgs)
	} else if err.Error() != errString {
		fail(t, fmt.Sprintf("Error message not equal:\nexpected: %q\nactual  : %q", errString, err.Error()), msgAndArgs)
	}
}

// Regexp requires str, formatted with %v unless it is a string or []byte,
// to match rx, a *regexp.Regexp or a pattern that must compile.
func Regexp(t TestingT, rx, str any, msgAndArgs ...any) {
	t.Helper()
	r, ok := rx.(*regexp.Regexp)
	if !ok {
		r = regexp.MustCompile(fmt.Sprint(rx))
	}
	var match bool
	if b, ok := str.([]byte); ok {
		match = r.Match(b)
	} else {
		match = r.MatchString(fmt.Sprint(str))
	}
	if !match {
		fail(t, fmt.Sprintf("Expect %q to match %q", fmt.Sprint(str), r.String()), msgAndArgs)
	}
}

// JSONEq requires expected and actual to be valid JSON documents of equal
// value: key order and white space do not matter.
func JSONEq(t TestingT, expected, actual string, msgAndArgs ...any) {
	t.Helper()
	var e, a any
	if err := json.Unmarshal([]byte(expected), &e); err != nil {
		fail(t, fmt.Sprintf("Expected value (%q) is not valid json.\nJSON parsing error: %v", expected, err), msgAndArgs)
		return
	}
	if err := json.Unmarshal([]byte(actual), &a); err != nil {
		fail(t, fmt.Sprintf("Input (%q) needs to be valid json.\nJSON parsing error: %v", actual, err), msgAndArgs)
		return
	}
	if !objectsAreEqual(e, a) {
		fail(t, fmt.Sprintf("JSON not equal:\nexpected: %s\nactual  : %s", expected, actual), msgAndArgs)
	}
}

// WithinDuration requires expected and actual to be at most delta apart.
func WithinDuration(t TestingT, expected, actual time.Time, delta time.Duration, msgAndArgs ...any) {
	t.Helper()
	if dt := expected.Sub(actual); dt < -delta || dt > delta {
		fail(t, fmt.Sprintf("Max difference between %v and %v allowed is %v, but difference was %v", expected, actual, delta, dt), msgAndArgs)
	}
}

// didPanic calls f and reports whether it panicked, with what value, and
// where. (A panic(nil) counts as a panic.)
func didPanic(f func()) (panicked bool, value any, stack string) {
	panicked = true
	defer func() {
		value = recover()
		if panicked {
			stack = string(debug.Stack())
		}
	}()
	f()
	panicked = false
	return
}

// Panics requires f to panic.
func Panics(t TestingT, f func(), msgAndArgs ...any) {
	t.Helper()
	if panicked, _, _ := didPanic(f); !panicked {
		fail(t, "func should panic", msgAndArgs)
	}
}

// PanicsWithValue requires f to panic with a value == expected.
func PanicsWithValue(t TestingT, expected any, f func(), msgAndArgs ...any) {
	t.Helper()
	panicked, value, stack := didPanic(f)
	if !panicked {
		fail(t, fmt.Sprintf("func should panic with value: %#v", expected), msgAndArgs)
	} else if value != expected {
		fail(t, fmt.Sprintf("func should panic with value: %#v\npanic value: %#v\npanic stack: %s", expected, value, stack), msgAndArgs)
	}
}

// NotPanics requires f not to panic.
func NotPanics(t TestingT, f func(), msgAndArgs ...any) {
	t.Helper()
	if panicked, value, stack := didPanic(f); panicked {
		fail(t, fmt.Sprintf("func should not panic\npanic value: %v\npanic stack: %s", value, stack), msgAndArgs)
	}
}
