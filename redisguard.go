package redlease

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fenced scripts: a body, then fence_check.lua, which runs it.
var (
	//go:embed fence_check.lua
	fenceCheckSrc string
	//go:embed fenced_set.lua
	fencedSetSrc string
	//go:embed fenced_del.lua
	fencedDelSrc string

	fencedSet = NewFencedScript(fencedSetSrc)
	fencedDel = NewFencedScript(fencedDelSrc)
)

// fenceRecordPrefix starts the key of every fence record. It has no braces, so
// the braces that follow it are the record's hash tag; and it cannot be
// confused with a lease's keys, which start with the prefix and a '{'.
const fenceRecordPrefix = "redlease:fenced:"

// fenceRecordKey returns the key that records the newest fence accepted for
// the data key k. It is in k's Redis Cluster hash slot, so that one script may
// use both: per the Cluster spec, a key's slot is that of its hash tag (what
// lies between its first '{' and the first '}' after it) when the tag is not
// empty, and else that of the whole key. The record key makes that string its
// own tag. A key without a tag whose whole text holds a '}' cannot be a tag,
// and the empty key has an empty one; both are refused.
//
//	"user:{42}:balance" -> "redlease:fenced:{42}:user:{42}:balance"
//	"balance"           -> "redlease:fenced:{balance}"
func fenceRecordKey(k string) (string, error) {
	if tag, ok := hashTag(k); ok {
		// Different keys with one tag get different records; no untagged
		// key's record can equal this one, as that key would hold a '}'.
		return fenceRecordPrefix + "{" + tag + "}:" + k, nil
	}
	if k == "" || strings.Contains(k, "}") {
		return "", invalidf("key %q has no hash tag and cannot be one; give it a tag like {id}", k)
	}
	return fenceRecordPrefix + "{" + k + "}", nil
}

// hashTag returns k's hash tag per the Redis Cluster spec, and whether it has
// a non-empty one.
func hashTag(k string) (string, bool) {
	open := strings.IndexByte(k, '{')
	if open < 0 {
		return "", false
	}
	n := strings.IndexByte(k[open+1:], '}')
	if n <= 0 { // no '}' after the '{', or "{}": the whole key is hashed
		return "", false
	}
	return k[open+1 : open+1+n], true
}

// FencedScript is a Lua script whose body runs only behind the fence check:
// in the same script, so atomically with it, and only if the fencing rule
// admits the caller's fence for the script's first key. The check records the
// admitted fence (and owner) in a fence record kept beside that key, in its
// Redis Cluster hash slot.
//
// The body is Lua, run by Redis as the rest of a script. It sees:
//
//	KEYS[1]      the fenced data key (keys[0] of Run)
//	KEYS[2…]     Run's other keys, which must share KEYS[1]'s hash slot in a cluster
//	ARGV[1…]     Run's args
//	FENCE, OWNER the admitted fence (a number) and owner token (a string)
//
// Its return value is Run's reply, converted as for EVAL; an error reply
// (redis.error_reply, or an error raised by redis.call) is Run's error. Only
// the first return value counts. The fence record is written before the body
// runs and, as Redis does not roll a script back, stays written if the body
// fails: it then names a holder that tried, which never lets an older one
// through.
type FencedScript struct {
	s *redis.Script
}

// NewFencedScript returns a fenced script with the given body. It does no I/O;
// Lua syntax errors surface on the first Run.
func NewFencedScript(body string) *FencedScript {
	return &FencedScript{s: redis.NewScript("local function body(KEYS, ARGV, FENCE, OWNER)\n" + body + "\nend\n" + fenceCheckSrc)}
}

// Run runs the script on rdb with EVALSHA, or EVAL when the server does not
// have the script cached, in one round trip: keys[0] is the fenced data key,
// fence and owner the caller's token. The returned command's value is the
// body's reply; its error is a *StaleFenceError (matching ErrStaleFence) if
// the fencing rule refused the token (nothing ran then), redis.Nil if the body
// returned nil, ErrInvalidArgument for no keys, a fence outside 1..MaxFence,
// an empty owner or a data key that cannot share a slot with its record (all
// before any round trip), an error matching ErrOutcomeUnknown if the reply was
// lost after the request may have run, or the Redis error.
func (s *FencedScript) Run(ctx context.Context, rdb redis.UniversalClient, keys []string, fence int64, owner string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	switch {
	case s == nil || isNil(rdb):
		cmd.SetErr(invalidf("nil FencedScript or Redis client"))
		return cmd
	case len(keys) == 0:
		cmd.SetErr(invalidf("a fenced script needs its data key as keys[0]"))
		return cmd
	}
	v, err := runFenced(ctx, rdb, s.s, keys[0], "", keys, fence, owner, args)
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(v)
	}
	return cmd
}

// runFenced runs a fenced script and maps its reply. record is the fence
// record's key, or "" for the one kept beside keys[0]; resource names what is
// protected in a refusal.
func runFenced(ctx context.Context, rdb redis.Scripter, s *redis.Script, resource, record string,
	keys []string, fence int64, owner string, args []any) (any, error) {
	if err := checkLuaToken(fence, owner); err != nil {
		return nil, err
	}
	if record == "" {
		var err error
		if record, err = fenceRecordKey(keys[0]); err != nil {
			return nil, err
		}
	}
	res, err := s.Run(ctx, rdb, append([]string{record}, keys...), append([]any{fence, owner}, args...)...).Slice()
	if err != nil {
		return nil, requestError("fenced write to", resource, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("redlease: fenced write to %q: empty reply", resource)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		if len(res) < 2 || res[1] == nil {
			return nil, redis.Nil
		}
		return res[1], nil
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("redlease: fenced write to %q: unexpected reply %v", resource, res)
	}
	newestText, _ := res[1].(string)
	newest, err := strconv.ParseInt(newestText, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("redlease: fenced write to %q refused, newest fence unreadable: %v", resource, res)
	}
	newestOwner, _ := res[2].(string)
	return nil, &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: newest, NewestOwner: newestOwner}
}

// RedisGuard makes fenced writes to data kept in Redis, on the Redis that
// holds the data, which need not be the one that holds the leases. Each write
// is one Lua script, one round trip: the fence check and the write happen
// atomically, and only if the fencing rule admits the writer's fence for the
// key (fence > newest, or fence == newest from the same owner).
//
// For each data key k the guard keeps a fence record, a hash {fence, owner}
// at "redlease:fenced:{<k's hash tag, or k>}…", in k's Redis Cluster hash
// slot. Records have no TTL and are never deleted, not even by Del: a record
// that disappeared would let a stale holder write again. That is one small
// hash per key ever written; delete records by hand only for keys that no
// lease will write again. Keys that a cluster would hash whole but that hold
// a '}' (and the empty key) cannot have a record in their slot and are
// refused: give them a hash tag.
//
// Every write to a fenced key must go through the guard; a plain SET or DEL
// bypasses the check. For writes other than Set and Del, use a FencedScript.
// A RedisGuard is safe for concurrent use.
type RedisGuard struct {
	rdb       redis.UniversalClient
	observers []Observer
}

// NewRedisGuard returns a guard that writes through rdb: a plain, Sentinel
// (failover) or cluster go-redis client. A nil rdb makes every call return
// ErrInvalidArgument. Of the options, WithObserver and WithLogger apply: they
// see each refused write as an EventStaleFence.
func NewRedisGuard(rdb redis.UniversalClient, opts ...Option) *RedisGuard {
	return &RedisGuard{rdb: rdb, observers: observersOf(opts)}
}

// Set sets key to value, with the TTL ttl (0 for none; else a whole number of
// milliseconds), as SET does, if the fencing rule admits fence and owner for
// key. It returns nil when written, a *StaleFenceError when refused (nothing
// is written), and otherwise the errors of FencedScript.Run.
func (g *RedisGuard) Set(ctx context.Context, key string, value any, ttl time.Duration, fence int64, owner string) error {
	if g == nil {
		return invalidf("nil RedisGuard")
	}
	if ttl < 0 || ttl%time.Millisecond != 0 {
		return invalidf("TTL %v is not 0 or a positive whole number of milliseconds", ttl)
	}
	start := time.Now()
	err := fencedSet.Run(ctx, g.rdb, []string{key}, fence, owner, value, ttl.Milliseconds()).Err()
	reportStale(ctx, g.observers, start, err)
	return err
}

// Del deletes key if the fencing rule admits fence and owner for key, and
// reports whether the key existed. The key's fence record stays, so an older
// holder cannot recreate the key. Refused, it returns a *StaleFenceError and
// deletes nothing; otherwise its errors are those of FencedScript.Run.
func (g *RedisGuard) Del(ctx context.Context, key string, fence int64, owner string) (bool, error) {
	if g == nil {
		return false, invalidf("nil RedisGuard")
	}
	start := time.Now()
	n, err := fencedDel.Run(ctx, g.rdb, []string{key}, fence, owner).Int64()
	reportStale(ctx, g.observers, start, err)
	return n == 1, err
}
