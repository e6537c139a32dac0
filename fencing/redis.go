package fencing

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlease/redlease"
	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/goredis"
	"github.com/redlease/redlease/internal/shared"
	"github.com/redlease/redlease/internal/wire"
)

// The fenced scripts: a body, then lua/check.lua, which runs it.
var (
	//go:embed lua/check.lua
	checkSrc string
	//go:embed lua/set.lua
	setSrc string
	//go:embed lua/del.lua
	delSrc string
	//go:embed lua/forget.lua
	forgetSrc string

	fencedSet    = NewScript(setSrc)
	fencedDel    = NewScript(delSrc)
	forgetScript = wire.NewScript(forgetSrc)
)

// conn returns the Conn of a go-redis client, or the error of every call on
// it: a nil client, a *redis.Ring.
func conn(rdb redis.UniversalClient) (*wire.Conn, error) {
	if shared.IsNil(rdb) {
		return nil, invalidf("nil Redis client")
	}
	d, err := goredis.New(rdb)
	if err != nil {
		return nil, invalidf("%w", err)
	}
	return wire.NewConn(d, 0), nil
}

// connOn returns the Conn of a driver, or the error of every call on it.
func connOn(d driver.Driver) (*wire.Conn, error) {
	if shared.IsNil(d) {
		return nil, invalidf("nil driver")
	}
	return wire.NewConn(d, 0), nil
}

// fenceRecords returns what starts the key of every fence record for a key
// prefix (WithPrefix): "<prefix>fenced:". A prefix with a '{' is refused: the
// braces that follow it must be the record's hash tag, or the record could
// fall in another Redis Cluster slot than its data. And a record cannot be
// confused with a lease's keys, which have a '{' right after the prefix.
func fenceRecords(prefix string) (string, error) {
	if strings.Contains(prefix, "{") {
		return "", invalidf("key prefix %q holds a '{': a fence record's hash tag must be its data key's", prefix)
	}
	return prefix + "fenced:", nil
}

// fenceRecordKey returns the key that records the newest fence accepted for
// the data key k; records is fenceRecords' result. It is in k's Redis Cluster
// hash slot, so that one script may use both: per the Cluster spec, a key's
// slot is that of its hash tag (what lies between its first '{' and the first
// '}' after it) when the tag is not empty, and else that of the whole key.
// The record key makes that string its own tag. A key without a tag whose
// whole text holds a '}' cannot be a tag, and the empty key has an empty one;
// both are refused.
//
//	"user:{42}:balance" -> "redlease:fenced:{42}:user:{42}:balance"
//	"balance"           -> "redlease:fenced:{balance}"
func fenceRecordKey(records, k string) (string, error) {
	if tag, ok := hashTag(k); ok {
		// Different keys with one tag get different records; no untagged
		// key's record can equal this one, as that key would hold a '}'.
		return records + "{" + tag + "}:" + k, nil
	}
	if k == "" || strings.Contains(k, "}") {
		return "", invalidf("key %q has no hash tag and cannot be one; give it a tag like {id}", k)
	}
	return records + "{" + k + "}", nil
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

// Script is a Lua script whose body runs only behind the fence check:
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
//
// The fence record of a data key k is a hash {fence, owner} at
// "<prefix>fenced:{<k's hash tag, or k>}…", kept as RedisGuard keeps it: a
// Script and a RedisGuard with one prefix (WithPrefix; default
// redlease.DefaultPrefix) share a key's record.
type Script struct {
	s       *wire.Script
	records string // the start of the fence records' keys: <prefix>fenced:
	err     error  // of the options; returned by Run
}

// NewScript returns a fenced script with the given body. It does no I/O;
// Lua syntax errors surface on the first Run. Of the options, WithPrefix
// applies; if the prefix holds a '{', every Run returns an error matching
// redlease.ErrInvalidArgument.
func NewScript(body string, opts ...Option) *Script {
	records, err := fenceRecords(newConfig(opts).prefix)
	return &Script{s: wire.NewScript("local function body(KEYS, ARGV, FENCE, OWNER)\n" + body + "\nend\n" + checkSrc),
		records: records, err: err}
}

// Run runs the script on rdb with EVALSHA, and then with EVAL if the server
// answers that it does not have the script cached (NOSCRIPT): one round trip
// once the script is cached, two the first time. keys[0] is the fenced data key,
// fence and owner the caller's token. The returned command's value is the
// body's reply; its error is a *StaleFenceError (matching ErrStaleFence) if
// the fencing rule refused the token (nothing ran then), redis.Nil if the body
// returned nil, an error matching redlease.ErrInvalidArgument for no keys, a
// fence outside 1..MaxFence, an empty owner or a data key that cannot share a
// slot with its record (all before any round trip), an error matching
// redlease.ErrOutcomeUnknown if the reply was lost after the request may have
// run, or the Redis error.
func (s *Script) Run(ctx context.Context, rdb redis.UniversalClient, keys []string, fence int64, owner string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	v, err := s.run(ctx, rdb, nil, keys, fence, owner, args)
	switch {
	case err != nil:
		cmd.SetErr(err)
	case v == nil:
		cmd.SetErr(redis.Nil)
	default:
		cmd.SetVal(v)
	}
	return cmd
}

// RunWithDriver is Run on any client's driver (the modules rueidislease and
// valkeylease have one for rueidis and valkey-go). It returns the body's
// reply as driver.Reply's Value is, nil for nil, and Run's errors.
func (s *Script) RunWithDriver(ctx context.Context, d driver.Driver, keys []string, fence int64, owner string, args ...any) (any, error) {
	return s.run(ctx, nil, d, keys, fence, owner, args)
}

// run is Run and RunWithDriver, on rdb or d.
func (s *Script) run(ctx context.Context, rdb redis.UniversalClient, d driver.Driver, keys []string,
	fence int64, owner string, args []any) (any, error) {
	if s == nil {
		return nil, invalidf("nil Script")
	}
	if s.err != nil {
		return nil, s.err
	}
	var c *wire.Conn
	var err error
	if d != nil || rdb == nil {
		c, err = connOn(d)
	} else {
		c, err = conn(rdb)
	}
	if err != nil {
		return nil, err
	}
	return s.runOn(ctx, c, s.records, keys, fence, owner, args)
}

// runOn runs the script on c with the fence records' keys starting with
// records.
func (s *Script) runOn(ctx context.Context, c *wire.Conn, records string, keys []string,
	fence int64, owner string, args []any) (any, error) {
	if len(keys) == 0 {
		return nil, invalidf("a fenced script needs its data key as keys[0]")
	}
	record, err := fenceRecordKey(records, keys[0])
	if err != nil {
		return nil, err
	}
	return runFenced(ctx, c, s.s, keys[0], record, keys, fence, owner, args)
}

// runFenced runs a fenced script and maps its reply. record is the fence
// record's key; resource names what is protected in a refusal.
func runFenced(ctx context.Context, c *wire.Conn, s *wire.Script, resource, record string,
	keys []string, fence int64, owner string, args []any) (any, error) {
	if err := checkLuaToken(fence, owner); err != nil {
		return nil, err
	}
	words := make([]string, 0, 1+len(keys)+2+len(args))
	words = append(append(words, record), keys...)
	words = append(words, strconv.FormatInt(fence, 10), owner)
	for _, a := range args {
		w, err := arg(a)
		if err != nil {
			return nil, err
		}
		words = append(words, w)
	}
	r := c.Run(ctx, wire.Call{Script: s, Keys: words[:1+len(keys)], Args: words[1+len(keys):]})
	if r.Err != nil {
		return nil, requestError(c, resource, r.Err)
	}
	res, _ := r.Value.([]any)
	if len(res) == 0 {
		return nil, shared.Errorf("fenced write to %s: unexpected reply %v", quote(resource), r.Value)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		if len(res) < 2 {
			return nil, nil
		}
		return res[1], nil
	}
	if len(res) != 3 {
		return nil, shared.Errorf("fenced write to %s: unexpected reply %v", quote(resource), res)
	}
	newestText, _ := res[1].(string)
	newest, err := strconv.ParseInt(newestText, 10, 64)
	if err != nil {
		return nil, shared.Errorf("fenced write to %s refused, newest fence unreadable: %v", quote(resource), res)
	}
	newestOwner, _ := res[2].(string)
	return nil, &StaleFenceError{Resource: resource, Fence: fence, Owner: owner, Newest: newest, NewestOwner: newestOwner}
}

// RedisGuard makes fenced writes to data kept in Redis, on the Redis that
// holds the data, which need not be the one that holds the leases. Each write
// is one Lua script (one round trip once the script is cached on the
// server, two before: EVALSHA, then EVAL): the fence check and the write happen
// atomically, and only if the fencing rule admits the writer's fence for the
// key (fence > newest, or fence == newest from the same owner).
//
// For each data key k the guard keeps a fence record, a hash {fence, owner}
// at "<prefix>fenced:{<k's hash tag, or k>}…" (prefix: redlease.DefaultPrefix,
// or WithPrefix), in k's Redis Cluster hash slot. Records have no TTL and are
// never deleted, not even by Del: a record that disappeared would let a stale
// holder write again. That is one small hash per key ever written; Forget
// removes the record of a key that no lease will write again. Keys that a
// cluster would hash whole but that hold a '}' (and the empty key) cannot
// have a record in their slot and are refused: give them a hash tag.
//
// Every write to a fenced key must go through the guard; a plain SET or DEL
// bypasses the check. For writes other than Set and Del, use a Script.
// A RedisGuard is safe for concurrent use.
type RedisGuard struct {
	conn      *wire.Conn
	observers []redlease.Observer
	records   string // the start of the fence records' keys: <prefix>fenced:
	err       error  // of the client or the options; returned by every call
}

// NewRedisGuard returns a guard that writes through rdb: a plain, Sentinel
// (failover) or cluster go-redis client. A nil rdb makes every call return
// an error matching redlease.ErrInvalidArgument. All the options apply:
// WithObserver and WithLogger see each refused write; WithPrefix sets the
// prefix of the fence records' keys. Guards of one key must agree on the
// prefix: a guard does not see the fences accepted under another. A prefix
// with a '{' makes every call return an error matching
// redlease.ErrInvalidArgument.
func NewRedisGuard(rdb redis.UniversalClient, opts ...Option) *RedisGuard {
	c, err := conn(rdb)
	return newRedisGuard(c, err, opts)
}

// NewRedisGuardWithDriver is NewRedisGuard on any client's driver (the
// modules rueidislease and valkeylease have one for rueidis and valkey-go).
func NewRedisGuardWithDriver(d driver.Driver, opts ...Option) *RedisGuard {
	c, err := connOn(d)
	return newRedisGuard(c, err, opts)
}

func newRedisGuard(c *wire.Conn, err error, opts []Option) *RedisGuard {
	cfg := newConfig(opts)
	records, perr := fenceRecords(cfg.prefix)
	return &RedisGuard{conn: c, observers: cfg.observers, records: records, err: errors.Join(err, perr)}
}

// Set sets key to value, with the TTL ttl (0 for none; else a whole number of
// milliseconds), as SET does, if the fencing rule admits fence and owner for
// key. It returns nil when written, a *StaleFenceError when refused (nothing
// is written), and otherwise the errors of Script.Run.
func (g *RedisGuard) Set(ctx context.Context, key string, value any, ttl time.Duration, fence int64, owner string) error {
	if g == nil {
		return invalidf("nil RedisGuard")
	}
	if ttl < 0 || ttl%time.Millisecond != 0 {
		return invalidf("TTL %v is not 0 or a positive whole number of milliseconds", ttl)
	}
	start := time.Now()
	_, err := g.run(ctx, fencedSet, key, fence, owner, value, ttl.Milliseconds())
	reportStale(ctx, g.observers, start, err)
	return err
}

// Del deletes key if the fencing rule admits fence and owner for key, and
// reports whether the key existed. The key's fence record stays, so an older
// holder cannot recreate the key. Refused, it returns a *StaleFenceError and
// deletes nothing; otherwise its errors are those of Script.Run.
func (g *RedisGuard) Del(ctx context.Context, key string, fence int64, owner string) (bool, error) {
	if g == nil {
		return false, invalidf("nil RedisGuard")
	}
	start := time.Now()
	n, err := g.run(ctx, fencedDel, key, fence, owner)
	reportStale(ctx, g.observers, start, err)
	return n == int64(1), err
}

// run runs s on key with the guard's records.
func (g *RedisGuard) run(ctx context.Context, s *Script, key string, fence int64, owner string, args ...any) (any, error) {
	if g.err != nil {
		return nil, g.err
	}
	return s.runOn(ctx, g.conn, g.records, []string{key}, fence, owner, args)
}

// Forget removes the fence record of key, for a key that the application
// deletes for good and that no lease will write again: a stale holder could
// recreate a key whose record is gone. It deletes the record only, not the
// key. A key written again after Forget starts a new record, which admits
// any fence.
func (g *RedisGuard) Forget(ctx context.Context, key string) error {
	if g == nil {
		return invalidf("nil RedisGuard")
	}
	if g.err != nil {
		return g.err
	}
	record, err := fenceRecordKey(g.records, key)
	if err != nil {
		return err
	}
	return forget(ctx, g.conn, key, record)
}

// forget deletes the fence record of what, at record.
func forget(ctx context.Context, c *wire.Conn, what, record string) error {
	if r := c.Run(ctx, wire.Call{Script: forgetScript, Keys: []string{record}}); r.Err != nil {
		return shared.Errorf("forget the fence record of %s: %w", quote(what), r.Err)
	}
	return nil
}

// requestError describes a fenced write whose request failed.
func requestError(c *wire.Conn, resource string, err error) error {
	if c.Classify(err) == driver.Unknown {
		return shared.Errorf("fenced write to %s: %w: %w", quote(resource), redlease.ErrOutcomeUnknown, err)
	}
	return shared.Errorf("fenced write to %s: %w", quote(resource), err)
}
