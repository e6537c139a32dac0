package wire

import (
	"errors"
	"strconv"
	"strings"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/shared"
)

// The readers of the scripts' replies, as each script's header states it.
// A reply of another shape is an error that shows it.

// Int reads an integer reply: release, refresh and confirm reply 1 or 0;
// advance.lua its counter in decimal (exact above 2^53).
func Int(r driver.Reply) (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	switch v := r.Value.(type) {
	case int64:
		return v, nil
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n, nil
		}
	}
	return 0, shared.Errorf("script replied %v", r.Value)
}

// ParseRefreshMany reads refresh_many.lua's reply to a call on n leases:
// refresh.lua's reply for each.
func ParseRefreshMany(r driver.Reply, n int) ([]int64, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	vals, ok := r.Value.([]any)
	if ok && len(vals) == n {
		if out, ok := int64s(vals); ok {
			return out, nil
		}
	}
	return nil, shared.Errorf("script replied %v to the renewal of %d leases", r.Value, n)
}

// Done reads the reply of a compare-and-act script (release, refresh,
// confirm): whether it acted, which it did only while the lease was ours.
func Done(r driver.Reply) (bool, error) {
	n, err := Int(r)
	return n == 1, err
}

// WrongKind reports whether err is a script's refusal of a name that is
// another kind's (the error reply 'WRONGKIND <kind>': see lua/queue.lua),
// and which kind it is: "lease" (an exclusive lease), "semaphore" or
// "read/write".
func WrongKind(err error) (kind string, ok bool) {
	if err == nil {
		return "", false
	}
	return strings.CutPrefix(err.Error(), "WRONGKIND ")
}

// Mark reports whether a lease value is the mark of a kind of shared lease
// that holds the name (see lua/queue.lua), and which kind.
func Mark(value string) (kind string, ok bool) { return strings.CutPrefix(value, "\x01") }

// BusyCause says what keeps a lease from being taken.
type BusyCause uint8

const (
	BusyHeld    BusyCause = iota // the lease (or the write lease) is held
	BusyPermits                  // every permit of a semaphore is held
	BusyReaders                  // a writer waits for the read leases
	BusyWriter                   // a reader waits behind a waiting writer
)

// Busy is an acquire script's reply for a lease held by another owner.
type Busy struct {
	Index  int   // of the resource among those asked for
	PTTL   int64 // the holder's lease's time left in ms; -1: no TTL
	First  bool  // the acquirer is the first live waiter in the queue
	Holder string
	Why    BusyCause
}

// Acquired is what an acquire script replied.
type Acquired struct {
	Fence  int64   // of the lease taken (one resource); 0 if none
	Fences []int64 // acquire_all.lua: of the leases taken, in the order asked for; nil if none
	Permit int     // semaphore.lua: the permit taken
	Busy   *Busy   // not nil when a lease is held by another owner
	// InUseWith is, for semaphore.lua, the number of permits that the
	// resource is in use with when it is not the number asked for.
	InUseWith int64
}

// ParseAcquire reads the reply of acquire.lua (n == 1), acquire_all.lua
// (n resources) or rw_write.lua (n == 1).
func ParseAcquire(r driver.Reply, n int) (Acquired, error) {
	if r.Err != nil {
		return Acquired{}, r.Err
	}
	if fence, ok := r.Value.(int64); ok && n == 1 {
		if fence <= 0 {
			return Acquired{}, shared.Errorf("acquire script replied %d", fence)
		}
		return Acquired{Fence: fence}, nil
	}
	v, _ := r.Value.([]any)
	switch {
	case n == 1 && (len(v) == 3 || len(v) == 4): // {pttl, first, holder[, 'readers']}
		if x, ok := int64s(v[:2]); ok {
			holder, _ := v[2].(string)
			busy := &Busy{PTTL: x[0], First: x[1] == 1, Holder: holder}
			if len(v) == 4 {
				busy.Why = BusyReaders
			}
			return Acquired{Busy: busy}, nil
		}
	case n > 1 && len(v) == n+1: // {1, fence...}
		if x, ok := int64s(v); ok && x[0] == 1 {
			return Acquired{Fences: x[1:]}, nil
		}
	case n > 1 && len(v) == 5: // {0, pttl, first, i, holder}
		if x, ok := int64s(v[:4]); ok && x[0] == 0 && x[3] >= 1 && int(x[3]) <= n {
			holder, _ := v[4].(string)
			return Acquired{Busy: &Busy{Index: int(x[3]) - 1, PTTL: x[1], First: x[2] == 1, Holder: holder}}, nil
		}
	}
	return Acquired{}, shared.Errorf("acquire script replied %v", r.Value)
}

// ParseShared reads the reply of semaphore.lua (permit true) or rw_read.lua.
func ParseShared(r driver.Reply, permit bool) (Acquired, error) {
	if r.Err != nil {
		return Acquired{}, r.Err
	}
	v, _ := r.Value.([]any)
	x, ok := int64s(v[:min(len(v), 3)])
	switch {
	case !ok:
	case permit && len(v) == 2 && x[0] == -1:
		return Acquired{InUseWith: x[1]}, nil
	case permit && len(v) == 3 && x[0] == 1:
		return Acquired{Permit: int(x[1]), Fence: x[2]}, nil
	case !permit && len(v) == 2 && x[0] == 1:
		return Acquired{Fence: x[1]}, nil
	case len(v) == 4 && x[0] == 0:
		holder, _ := v[3].(string)
		busy := &Busy{PTTL: x[1], First: x[2] == 1, Holder: holder}
		switch {
		case permit:
			busy.Why = BusyPermits
		case x[1] == 0: // a reader behind a waiting writer
			busy.Why = BusyWriter
		}
		return Acquired{Busy: busy}, nil
	}
	return Acquired{}, shared.Errorf("acquire script replied %v", r.Value)
}

// Resumed is resume.lua's reply.
type Resumed struct {
	OK bool // the lease was the token's and now has the full TTL again
	// Value is the lease as Redis keeps it, "<owner>:<fence>[:<holder>]"
	// (ParseLease reads it), when OK.
	Value string
	// Permits is, for a permit that is the owner's with its fence, the
	// semaphore's number of permits when it is not the one asked for; then
	// nothing was renewed. Otherwise 0.
	Permits int64
}

// ParseResume reads resume.lua's reply.
func ParseResume(r driver.Reply) (Resumed, error) {
	if r.Err != nil {
		return Resumed{}, r.Err
	}
	v, _ := r.Value.([]any)
	x, ok := int64s(v[:min(len(v), 1)])
	switch {
	case !ok || len(x) == 0:
	case x[0] == 0 && len(v) == 1:
		return Resumed{}, nil
	case x[0] == 1 && len(v) == 2:
		if value, ok := v[1].(string); ok {
			return Resumed{OK: true, Value: value}, nil
		}
	case x[0] == -1 && len(v) == 2:
		if n, ok := v[1].(int64); ok {
			return Resumed{Permits: n}, nil
		}
	}
	return Resumed{}, shared.Errorf("resume script replied %v", r.Value)
}

// int64s returns vals as integers, and false if one is not.
func int64s(vals []any) ([]int64, bool) {
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// ParseLease splits a lease value, "<owner>:<fence>[:<holder>]", less what
// follows a NUL byte: a lock delay (LeaseTail) and the mark of a lease
// waited for (see lua/acquire.lua).
func ParseLease(v string) (owner string, fence int64, holder string, ok bool) {
	v, _, _ = strings.Cut(v, "\x00")
	owner, rest, found := strings.Cut(v, ":")
	if !found || owner == "" {
		return "", 0, "", false
	}
	digits, holder, _ := strings.Cut(rest, ":")
	fence, err := strconv.ParseInt(digits, 10, 64)
	return owner, fence, holder, err == nil && fence > 0
}

// ParseWake reads a message on a waiter's wake channel (lua/queue.lua): the
// owner token it wakes, and, if the release handed that owner the lease
// (lua/release.lua), the fence it drew and the stamp of the owner's attempt
// that asked for it. A message of another shape is no handoff.
func ParseWake(msg string) (owner string, fence, stamp int64, handed bool) {
	owner, rest, found := strings.Cut(msg, ":")
	if !found {
		return msg, 0, 0, false
	}
	digits, stampDigits, _ := strings.Cut(rest, ":")
	fence, err := strconv.ParseInt(digits, 10, 64)
	stamp, err2 := strconv.ParseInt(stampDigits, 10, 64)
	if err != nil || err2 != nil || fence <= 0 || stamp < 0 {
		return owner, 0, 0, false
	}
	return owner, fence, stamp, true
}

// ParseCounterReply reads counter.lua's reply {value} for counter.
func ParseCounterReply(counter string, r driver.Reply) (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	v, _ := r.Value.([]any)
	if len(v) != 1 {
		return 0, shared.Errorf("fence counter %s: script replied %v", counter, r.Value)
	}
	return ParseCounter(counter, v[0])
}

// ParseCounter reads a fence counter's value as Redis holds it. The Lua
// scripts return it as it is, because tonumber reads "0x10" as 16 and "1.5"
// as 1 and rounds above 2^53; only what INCR counts from (no sign, no
// leading zero, no other spelling: strconv.ParseInt alone takes "+7" and
// "007") is a count.
func ParseCounter(counter string, v any) (int64, error) {
	s, _ := v.(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, shared.Errorf("%w: fence counter %s holds %q, not a decimal integer that INCR counts from: "+
			"every acquisition of its slot fails until AdvanceFence repairs it", ErrCorruptCounter, counter, v)
	}
	return n, nil
}

// ErrCorruptCounter marks ParseCounter's error.
var ErrCorruptCounter = errors.New("corrupt fence counter")

// Status is inspect.lua's reply, and break.lua's.
type Status struct {
	Value   string // the lease value, "" if none
	PTTL    int64  // the lease's time left in ms; -2 if none, -1 if it has no expiry
	Counter any    // the slot's fence counter as Redis holds it (see ParseCounter)
	Waiters int64
	Permits int64 // a semaphore's number of permits, 0 if none
	Holders []SharedHolder
	Removed int64 // break.lua: the number of leases removed
}

// SharedHolder is one holder of a shared lease in a Status.
type SharedHolder struct {
	Kind   string // "permit", "write" or "read"
	Permit int64
	Value  string // "<owner>:<fence>[:<holder>]"
	PTTL   int64
}

// holderKinds names the kinds of inspect.lua's reply.
var holderKinds = map[string]string{"p": "permit", "w": "write", "r": "read"}

// ParseStatus reads the reply of inspect.lua (broke false) or break.lua:
// {value, pttl, counter, waiters, permits, holders[, removed]}.
func ParseStatus(resource string, r driver.Reply, broke bool) (Status, error) {
	if r.Err != nil {
		return Status{}, r.Err
	}
	res, _ := r.Value.([]any)
	bad := shared.Errorf("%s: script replied %v", shared.Quote(resource), r.Value)
	n := 6
	if broke {
		n = 7
	}
	if len(res) != n {
		return Status{}, bad
	}
	value, ok := res[0].(string)
	ints, ok2 := int64s([]any{res[1], res[3], res[4]})
	holders, ok3 := res[5].([]any)
	if !ok || !ok2 || !ok3 {
		return Status{}, bad
	}
	st := Status{Value: value, PTTL: ints[0], Counter: res[2], Waiters: ints[1], Permits: ints[2]}
	if broke {
		st.Removed, _ = res[6].(int64)
	}
	for _, h := range holders {
		f, _ := h.([]any)
		if len(f) != 4 {
			return Status{}, bad
		}
		kind, _ := f[0].(string)
		v, _ := f[2].(string)
		x, ok := int64s([]any{f[1], f[3]})
		if !ok || holderKinds[kind] == "" {
			return Status{}, bad
		}
		st.Holders = append(st.Holders, SharedHolder{Kind: holderKinds[kind], Permit: x[0], Value: v, PTTL: x[1]})
	}
	return st, nil
}
