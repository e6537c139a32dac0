package redlease

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redlease/redlease/internal/require"
)

// tokenText is what Token.String writes: one shell word of printable ASCII.
var tokenText = regexp.MustCompile(`^[A-Za-z0-9_:/-]+$`)

// oddNames are resource names that a token must carry intact.
var oddNames = []string{
	"r", "billing:42", "a/b/c", "tenant:42:billing", "{tag}name", "x}", "name with spaces", " lead", "trail ",
	"tab\tand\nnewline", "\x01control", "é", "日本語のリソース", "emoji 🔒🗝️", "=", "==", "+/", "-_", "rl1:x:fake",
	strings.Repeat("x", MaxResourceName), strings.Repeat("é", MaxResourceName/2),
	strings.Repeat("a", MaxResourceName-3) + "語", strings.Repeat("🔒", MaxResourceName/4),
}

// randomToken returns a valid token with random fields, its name drawn
// from oddNames or made of random runes.
func randomToken(r *rand.Rand) Token {
	owner, _ := newOwner("")
	t := Token{Owner: owner, Fence: r.Int64N(math.MaxInt64) + 1, Kind: LeaseKind(r.IntN(4)),
		TTL: time.Duration(MinTTL.Milliseconds()+r.Int64N(math.MaxInt64/int64(time.Millisecond)-MinTTL.Milliseconds()+1)) * time.Millisecond}
	if r.IntN(4) == 0 {
		t.Fence = r.Int64N(100) + 1
		t.TTL = time.Duration(r.Int64N(100_000)+10) * time.Millisecond
	}
	if t.Kind == SemaphorePermit {
		t.Permits = r.IntN(MaxPermits) + 1
		t.Permit = r.IntN(t.Permits)
	}
	if r.IntN(2) == 0 {
		t.Resource = oddNames[r.IntN(len(oddNames))]
		return t
	}
	var b strings.Builder
	for n := r.IntN(40) + 1; n > 0; n-- {
		c := rune(r.IntN(0x10FFFF) + 1)
		if !utf8.ValidRune(c) {
			c = 'x'
		}
		if b.Len() == 0 && c == '}' {
			c = '{'
		}
		b.WriteRune(c)
	}
	t.Resource = b.String()
	return t
}

// ParseToken(t.String()) is t, for every token that Resume takes.
func TestTokenStringRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 2))
	longest := 0
	check := func(tok Token) {
		t.Helper()
		require.NoError(t, tok.validate(), "%#v", tok)
		s := tok.String()
		require.Regexp(t, tokenText, s)
		longest = max(longest, len(s))
		got, err := ParseToken(s)
		require.NoError(t, err, "%s", s)
		require.Equal(t, tok, got)
	}
	for range 5000 {
		check(randomToken(r))
	}
	for _, name := range oddNames {
		for k := ExclusiveLease; k <= WriteLease; k++ {
			tok := randomToken(r)
			tok.Resource, tok.Kind, tok.Permit, tok.Permits = name, k, 0, 0
			if k == SemaphorePermit {
				tok.Permit, tok.Permits = 3, 8
			}
			check(tok)
		}
	}
	// The longest token String writes: the longest name, permit and numbers.
	owner, _ := newOwner("")
	tok := Token{Resource: strings.Repeat("x", MaxResourceName), Owner: owner, Fence: math.MaxInt64,
		Kind: SemaphorePermit, Permit: MaxPermits - 1, Permits: MaxPermits,
		TTL: time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond}
	check(tok)
	require.Equal(t, 1458, len(tok.String()), "Token.String's doc says so")
}

func TestTokenStringForm(t *testing.T) {
	tok := Token{Resource: "jobs:nightly", Owner: "0f8c2b1e-5d4a-4c3b-9a2f-1e0d9c8b7a65", Fence: 42, TTL: 30 * time.Second}
	require.Equal(t, "rl1:x:am9iczpuaWdodGx5:0f8c2b1e-5d4a-4c3b-9a2f-1e0d9c8b7a65:42:30000", tok.String())
	tok.Kind, tok.Permit, tok.Permits = SemaphorePermit, 3, 8
	require.Equal(t, "rl1:p3/8:am9iczpuaWdodGx5:0f8c2b1e-5d4a-4c3b-9a2f-1e0d9c8b7a65:42:30000", tok.String())
	tok.Kind, tok.Permit, tok.Permits = ReadLease, 0, 0
	require.True(t, strings.HasPrefix(tok.String(), "rl1:r:"))
	tok.Kind = WriteLease
	require.True(t, strings.HasPrefix(tok.String(), "rl1:w:"))
	require.Equal(t, "permit", SemaphorePermit.String())
	require.Equal(t, "LeaseKind(9)", LeaseKind(9).String())
}

// LeaseKind's values are leaseKind's, so that one converts to the other.
func TestLeaseKindsMatch(t *testing.T) {
	require.Equal(t, ExclusiveLease, LeaseKind(kindExclusive))
	require.Equal(t, SemaphorePermit, LeaseKind(kindPermit))
	require.Equal(t, ReadLease, LeaseKind(kindRead))
	require.Equal(t, WriteLease, LeaseKind(kindWrite))
}

// ParseToken takes what Token.String writes for a valid token, and nothing
// else.
func TestParseTokenIsStrict(t *testing.T) {
	const (
		owner = "0f8c2b1e-5d4a-4c3b-9a2f-1e0d9c8b7a65"
		res   = "am9iczpuaWdodGx5" // jobs:nightly
	)
	// text is a token's text with the fields given, the others good.
	text := func(kind, resource, owner, fence, ttl string) string {
		return strings.Join([]string{"rl1", kind, resource, owner, fence, ttl}, ":")
	}
	good := text("x", res, owner, "42", "30000")
	_, err := ParseToken(good)
	require.NoError(t, err)
	for _, tc := range []struct{ what, s string }{
		{"empty", ""},
		{"version alone", "rl1"},
		{"no fields", "rl1:"},
		{"another version", "rl2" + good[3:]},
		{"upper case", "RL1" + good[3:]},
		{"space before", " " + good},
		{"space after", good + " "},
		{"newline after", good + "\n"},
		{"a field short", strings.Join([]string{"rl1", "x", res, owner, "42"}, ":")},
		{"a field more", good + ":1"},
		{"kind unknown", text("q", res, owner, "42", "30000")},
		{"kind empty", text("", res, owner, "42", "30000")},
		{"kind upper case", text("X", res, owner, "42", "30000")},
		{"permit missing", text("p", res, owner, "42", "30000")},
		{"permits missing", text("p3", res, owner, "42", "30000")},
		{"permit not below permits", text("p3/3", res, owner, "42", "30000")},
		{"permit negative", text("p-1/3", res, owner, "42", "30000")},
		{"permit with a sign", text("p+1/8", res, owner, "42", "30000")},
		{"permit with a leading zero", text("p03/8", res, owner, "42", "30000")},
		{"no permits", text("p0/0", res, owner, "42", "30000")},
		{"permits over MaxPermits", text("p0/1048577", res, owner, "42", "30000")},
		{"padding", text("x", res+"=", owner, "42", "30000")},
		{"trailing bits", text("x", "QR", owner, "42", "30000")}, // "QQ" is "A"
		{"standard base64", text("x", "a+b/", owner, "42", "30000")},
		{"empty name", text("x", "", owner, "42", "30000")},
		{"NUL in the name", text("x", "AA", owner, "42", "30000")},
		{"name not UTF-8", text("x", "_w", owner, "42", "30000")},
		{"name begins with '}'", text("x", "fQ", owner, "42", "30000")},
		{"name of 1026 bytes", text("x", strings.Repeat("eHh4", 342), owner, "42", "30000")},
		{"owner upper case", text("x", res, strings.ToUpper(owner), "42", "30000")},
		{"owner short", text("x", res, owner[:35], "42", "30000")},
		{"owner long", text("x", res, owner+"0", "42", "30000")},
		{"owner without dashes", text("x", res, strings.ReplaceAll(owner, "-", "_"), "42", "30000")},
		{"owner empty", text("x", res, "", "42", "30000")},
		{"fence 0", text("x", res, owner, "0", "30000")},
		{"fence negative", text("x", res, owner, "-1", "30000")},
		{"fence with a sign", text("x", res, owner, "+42", "30000")},
		{"fence with a leading zero", text("x", res, owner, "042", "30000")},
		{"fence over int64", text("x", res, owner, "9223372036854775808", "30000")},
		{"fence empty", text("x", res, owner, "", "30000")},
		{"fence with a space", text("x", res, owner, "4 2", "30000")},
		{"TTL below MinTTL", text("x", res, owner, "42", "9")},
		{"TTL with a leading zero", text("x", res, owner, "42", "030000")},
		{"TTL with a unit", text("x", res, owner, "42", "30s")},
		{"TTL empty", text("x", res, owner, "42", "")},
		{"TTL over the longest Duration", text("x", res, owner, "42", "9223372036855")},
		{"the zero Token", Token{}.String()},
	} {
		_, err := ParseToken(tc.s)
		require.ErrorIs(t, err, ErrInvalidArgument, "%s: %q", tc.what, tc.s)
	}
	_, err = ParseToken("rl2" + good[3:])
	require.ErrorContains(t, err, `lease token of version "rl2": this version of redlease reads rl1`)
}

// Resume refuses a Token that did not come from a lease, as ParseToken
// would its text.
func TestTokenValidate(t *testing.T) {
	owner, _ := newOwner("")
	good := Token{Resource: "r", Owner: owner, Fence: 1, TTL: MinTTL}
	require.NoError(t, good.validate())
	for _, bad := range []func(*Token){
		func(t *Token) { t.Resource = "" },
		func(t *Token) { t.Resource = "}x" },
		func(t *Token) { t.Owner = "" },
		func(t *Token) { t.Fence = 0 },
		func(t *Token) { t.Kind = WriteLease + 1 },
		func(t *Token) { t.Kind, t.Permit, t.Permits = SemaphorePermit, 0, 0 },
		func(t *Token) { t.Kind, t.Permit, t.Permits = SemaphorePermit, 2, 2 },
		func(t *Token) { t.Kind, t.Permit, t.Permits = SemaphorePermit, -1, 2 },
		func(t *Token) { t.Permits = 2 },
		func(t *Token) { t.TTL = MinTTL - time.Millisecond },
		func(t *Token) { t.TTL = time.Second + time.Microsecond },
	} {
		tok := good
		bad(&tok)
		require.ErrorIs(t, tok.validate(), ErrInvalidArgument, "%#v", tok)
	}
}
