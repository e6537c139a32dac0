package redlease

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"time"
)

// Token names a held lease, for another process to take it up with
// Client.Resume: Lease.Token returns it, Token.String writes it as one word
// of printable ASCII, for an environment variable or a pipe, and ParseToken
// reads it back.
//
// A Token is a capability: whoever has it can renew and release the lease
// as its holder can, until the lease ends. Keep it as secret as a
// credential: pass it in an environment variable, a pipe or a file only its
// reader can read, not on a command line (other users see those in ps), and
// do not log it: fmt prints a Token as its String, the capability itself.
//
// The key prefix does not travel in a Token: the resuming Client's
// (WithPrefix, of New or of Resume) names the keys, so it must be the one
// the lease was taken with; under another one, Resume finds no lease and
// returns ErrLeaseLost.
type Token struct {
	Resource string
	Owner    string // the lease's owner token (Lease.Owner)
	Fence    int64  // the lease's fence (Lease.Fence)
	Kind     LeaseKind
	Permit   int // SemaphorePermit: which permit (Lease.Permit); 0 for the other kinds
	Permits  int // SemaphorePermit: of how many (Lease.Semaphore); 0 for the other kinds
	// TTL is the lease's TTL (WithTTL), in whole milliseconds. It travels
	// with the lease because every process that holds the lease renews it
	// to this TTL: a shorter one would cut the lease in Redis below another
	// holder's local deadline.
	TTL time.Duration
}

// LeaseKind is the kind of lease a Token names.
type LeaseKind uint8

// The kinds of lease, in the order of leaseKind (shared_lease.go).
const (
	ExclusiveLease  LeaseKind = iota // Acquire, TryAcquire, AcquireAll, Do, an Election's term
	SemaphorePermit                  // AcquireSemaphore: one permit
	ReadLease                        // AcquireRead
	WriteLease                       // AcquireWrite
)

var leaseKindNames = [...]string{"exclusive", "permit", "read", "write"}

func (k LeaseKind) String() string {
	if int(k) < len(leaseKindNames) {
		return leaseKindNames[k]
	}
	return "LeaseKind(" + strconv.Itoa(int(k)) + ")"
}

// Token returns the lease's token, for another process to take the lease up
// with Client.Resume (see Handoff). The token is the lease's whether or not
// the lease is still active; a nil Lease's is the zero Token, which
// Resume refuses.
func (l *Lease) Token() Token {
	if l == nil {
		return Token{}
	}
	t := Token{Resource: l.resource, Owner: l.owner, Fence: l.fence, Kind: LeaseKind(l.kind()), TTL: l.timing().ttl}
	if l.kind() == kindPermit {
		t.Permit, t.Permits = l.shared.permit, l.shared.permits
	}
	return t
}

// tokenVersion begins the text of a Token. A later form of the text will
// begin with another version, which ParseToken of this one refuses.
const tokenVersion = "rl1"

// String returns the token as one word of printable ASCII, safe unquoted in
// an environment variable and a shell word (letters, digits and "-_:/"):
//
//	rl1:<kind>:<resource>:<owner>:<fence>:<TTL in ms>
//
// where kind is x (exclusive), p<permit>/<permits>, r (read) or w (write),
// and resource is the name in unpadded base64url (names may hold any
// UTF-8), so it is at most 1,458 bytes long. ParseToken reads it back:
// ParseToken(t.String()) returns t for every token that Resume takes.
func (t Token) String() string {
	var kind string
	switch t.Kind {
	case ExclusiveLease:
		kind = "x"
	case SemaphorePermit:
		kind = "p" + strconv.Itoa(t.Permit) + "/" + strconv.Itoa(t.Permits)
	case ReadLease:
		kind = "r"
	case WriteLease:
		kind = "w"
	default:
		kind = "?" // ParseToken refuses it
	}
	return tokenVersion + ":" + kind + ":" + base64.RawURLEncoding.EncodeToString([]byte(t.Resource)) + ":" +
		t.Owner + ":" + strconv.FormatInt(t.Fence, 10) + ":" + strconv.FormatInt(t.TTL.Milliseconds(), 10)
}

// ParseToken reads a token that Token.String wrote. It is strict: anything
// else, a token with a field out of range (a resource name that no lease
// may have, a fence below 1, a TTL below MinTTL, a permit not below the
// number of permits) or in a form String does not write (leading zeros,
// padding), returns an error matching ErrInvalidArgument. It makes no round
// trip: whether the lease is still held, Resume finds out.
func ParseToken(s string) (Token, error) {
	f := strings.Split(s, ":")
	if len(f) != 6 || f[0] != tokenVersion {
		if v, _, ok := strings.Cut(s, ":"); ok && len(v) > 2 && v[:2] == "rl" && v != tokenVersion {
			return Token{}, invalidf("lease token of version %.10q: this version of redlease reads %s", v, tokenVersion)
		}
		return Token{}, invalidf("not a lease token (%s:<kind>:<resource>:<owner>:<fence>:<ttl>)", tokenVersion)
	}
	var t Token
	switch kind := f[1]; {
	case kind == "x":
		t.Kind = ExclusiveLease
	case kind == "r":
		t.Kind = ReadLease
	case kind == "w":
		t.Kind = WriteLease
	case strings.HasPrefix(kind, "p"):
		permit, permits, ok := strings.Cut(kind[1:], "/")
		p, okp := decimal(permit, 0, MaxPermits-1)
		n, okn := decimal(permits, 1, MaxPermits)
		if !ok || !okp || !okn {
			return Token{}, invalidf("lease token: bad permit %.40q", kind)
		}
		t.Kind, t.Permit, t.Permits = SemaphorePermit, int(p), int(n)
	default:
		return Token{}, invalidf("lease token: unknown kind %.10q", kind)
	}
	name, err := base64.RawURLEncoding.Strict().DecodeString(f[2])
	if err != nil {
		return Token{}, invalidf("lease token: resource name is not unpadded base64url: %w", err)
	}
	t.Resource, t.Owner = string(name), f[3]
	fence, ok := decimal(f[4], 1, math.MaxInt64)
	if !ok {
		return Token{}, invalidf("lease token: bad fence %.30q", f[4])
	}
	t.Fence = fence
	ms, ok := decimal(f[5], MinTTL.Milliseconds(), math.MaxInt64/int64(time.Millisecond))
	if !ok {
		return Token{}, invalidf("lease token: bad TTL %.30q (ms, at least %d)", f[5], MinTTL.Milliseconds())
	}
	t.TTL = time.Duration(ms) * time.Millisecond
	if err := t.validate(); err != nil {
		return Token{}, err
	}
	return t, nil
}

// decimal reads s, a decimal number in lo..hi written as strconv writes it:
// no sign, no leading zero.
func decimal(s string, lo, hi int64) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// validate refuses a token that no lease has: Resume's check of a Token
// that did not come from ParseToken.
func (t *Token) validate() error {
	if err := validResource(t.Resource); err != nil {
		return errorf("lease token: %w", err)
	}
	switch {
	case !validOwner(t.Owner):
		return invalidf("lease token of %s: the owner is not an owner token (a UUID)", quote(t.Resource))
	case t.Fence < 1:
		return invalidf("lease token of %s: fence %d is below 1", quote(t.Resource), t.Fence)
	case t.Kind > WriteLease:
		return invalidf("lease token of %s: unknown kind %v", quote(t.Resource), t.Kind)
	case t.Kind == SemaphorePermit && (t.Permits < 1 || t.Permits > MaxPermits || t.Permit < 0 || t.Permit >= t.Permits):
		return invalidf("lease token of %s: permit %d of %d permits", quote(t.Resource), t.Permit, t.Permits)
	case t.Kind != SemaphorePermit && (t.Permit != 0 || t.Permits != 0):
		return invalidf("lease token of %s: a permit for %s lease", quote(t.Resource), t.Kind)
	case t.TTL < MinTTL || t.TTL%time.Millisecond != 0:
		return invalidf("lease token of %s: TTL %v is not a whole number of ms of at least MinTTL", quote(t.Resource), t.TTL)
	}
	return nil
}

// validOwner reports whether s has the form of an owner token (newOwner):
// a UUID in lower-case hex.
func validOwner(s string) bool {
	return len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
		isLowerHex(s[:8]) && isLowerHex(s[9:13]) && isLowerHex(s[14:18]) && isLowerHex(s[19:23]) && isLowerHex(s[24:])
}

// isLowerHex reports whether s is hex digits in lower case.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
