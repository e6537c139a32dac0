package fencing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlease/redlease"
	"github.com/redlease/redlease/internal/require"
	"github.com/redlease/redlease/internal/servertest"
)

// recordKeyCases are data keys and the fence record keys they get ("" for a
// key that is refused), per the Redis Cluster hash tag rules.
var recordKeyCases = []struct{ key, record string }{
	{"balance", "redlease:fenced:{balance}"},
	{"user:{42}:balance", "redlease:fenced:{42}:user:{42}:balance"},
	{"{a}{b}", "redlease:fenced:{a}:{a}{b}"},                           // only the first tag counts
	{"{{a}}", "redlease:fenced:{{a}:{{a}}"},                            // the tag is "{a"
	{"a{b}c}", "redlease:fenced:{b}:a{b}c}"},                           // the first '}' after the '{'
	{"a}{b}", "redlease:fenced:{b}:a}{b}"},                             // a '}' before the '{' does not matter
	{"a{b", "redlease:fenced:{a{b}"},                                   // no '}': the whole key is hashed
	{"x:{}:y", ""},                                                     // "{}": the whole key is hashed, and it holds a '}'
	{"{}", ""},                                                         // likewise
	{"{}{a}", ""},                                                      // the empty first tag wins over the later one
	{"a}b", ""},                                                        // no tag, and a '}' the record cannot wrap
	{"", ""},                                                           // an empty tag would hash differently
	{"ключ", "redlease:fenced:{ключ}"},                                 // bytes, not runes
	{"{ключ}x", "redlease:fenced:{ключ}:{ключ}x"},                      //
	{"a{{b}}", "redlease:fenced:{{b}:a{{b}}"},                          //
	{"{ }", "redlease:fenced:{ }:{ }"},                                 // a space is a tag
	{"redlease:fenced:{x}", "redlease:fenced:{x}:redlease:fenced:{x}"}, // a record key is a key too
}

func TestFenceRecordKey(t *testing.T) {
	seen := map[string]string{}
	for _, c := range recordKeyCases {
		got, err := fenceRecordKey("redlease:fenced:", c.key)
		if c.record == "" {
			require.ErrorIs(t, err, redlease.ErrInvalidArgument, "key %q", c.key)
			continue
		}
		require.NoError(t, err, "key %q", c.key)
		require.Equal(t, c.record, got, "key %q", c.key)
		require.NotContains(t, seen, got, "keys %q and %q share a record", seen[got], c.key)
		seen[got] = c.key
	}
}

// On a real cluster, each key of the table and its record are in one slot:
// CLUSTER KEYSLOT agrees, and a fenced write (one script on both) does not
// fail with CROSSSLOT.
func TestIntegrationRedisGuardOnCluster(t *testing.T) {
	_, cc := servertest.Cluster(t, 3)
	ctx := t.Context()
	g := NewRedisGuard(cc)
	for _, c := range recordKeyCases {
		if c.record == "" {
			require.ErrorIs(t, g.Set(ctx, c.key, "v", 0, 1, "o"), redlease.ErrInvalidArgument, "key %q", c.key)
			continue
		}
		ks, err := cc.ClusterKeySlot(ctx, c.key).Result()
		require.NoError(t, err)
		rs, err := cc.ClusterKeySlot(ctx, c.record).Result()
		require.NoError(t, err)
		require.Equal(t, ks, rs, "key %q and record %q", c.key, c.record)
		require.NoError(t, g.Set(ctx, c.key, "v", 0, 1, "o"), "key %q", c.key)
		require.ErrorIs(t, g.Set(ctx, c.key, "w", 0, 1, "other"), ErrStaleFence, "key %q", c.key)
	}
	// A fenced script may use more keys of the same slot.
	n, err := NewScript(`redis.call('SET', KEYS[1], 'x'); return redis.call('INCR', KEYS[2])`).
		Run(ctx, cc, []string{"{order:7}:state", "{order:7}:version"}, 1, "o").Int64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

// chargeScript is the story's payment: it marks the invoice paid and appends
// the payer's fence to the list of charges, behind the fence check.
var chargeScript = NewScript(`
redis.call('SET', KEYS[1], 'paid')
return redis.call('RPUSH', KEYS[2], FENCE)`)

// The seeds' story on a resource kept in Redis, which is not the Redis of the
// leases: A (fence 33) freezes past its TTL, B (34) pays, A's late payment is
// refused, and the invoice is charged once.
func TestIntegrationRedisGuardDoublePaymentStory(t *testing.T) {
	ctx := t.Context()
	data := servertest.Redis(t).Client(t)
	keys := []string{"{invoice:42}:state", "{invoice:42}:charges"}
	pay := func(l *redlease.Lease) error { return chargeScript.Run(ctx, data, keys, l.Fence(), l.Owner()).Err() }

	a, b := staleAndCurrent(t)
	require.NoError(t, pay(b))

	err := pay(a) // A wakes up
	var stale *StaleFenceError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, StaleFenceError{Resource: keys[0], Fence: 33, Owner: a.Owner(), Newest: 34, NewestOwner: b.Owner()}, *stale)
	charges, err := data.LRange(ctx, keys[1], 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"34"}, charges, "charged exactly once, by B")
}

func TestIntegrationRedisGuardEqualFenceRuleSetDel(t *testing.T) {
	ctx := t.Context()
	rdb := servertest.Redis(t).Client(t)
	g := NewRedisGuard(rdb)
	const key = "{doc:1}:body"
	steps := []struct {
		fence      int64
		owner      string
		newest     int64 // 0: accepted
		newestOwnr string
	}{
		{5, "a", 0, ""},
		{5, "a", 0, ""}, // the same holder writes again
		{5, "b", 5, "a"},
		{4, "a", 5, "a"},
		{6, "b", 0, ""},
		{6, "a", 6, "b"},
		{MaxFence, "c", 0, ""},
		{MaxFence, "c", 0, ""},
		{MaxFence, "d", MaxFence, "c"},
	}
	want := ""
	for i, s := range steps {
		value := fmt.Sprintf("step %d", i)
		err := g.Set(ctx, key, value, 0, s.fence, s.owner)
		if s.newest == 0 {
			require.NoError(t, err, "step %d", i)
			want = value
		} else {
			var stale *StaleFenceError
			require.ErrorAs(t, err, &stale, "step %d", i)
			require.Equal(t, StaleFenceError{Resource: key, Fence: s.fence, Owner: s.owner,
				Newest: s.newest, NewestOwner: s.newestOwnr}, *stale, "step %d", i)
		}
		got, err := rdb.Get(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, want, got, "step %d", i)
	}

	// TTLs: a positive one is set, 0 drops it as SET does.
	const other = "{doc:2}:body"
	require.NoError(t, g.Set(ctx, other, "v", 10*time.Second, 1, "a"))
	ttl, err := rdb.PTTL(ctx, other).Result()
	require.NoError(t, err)
	require.True(t, ttl > 0 && ttl <= 10*time.Second, "PTTL %v", ttl)
	require.NoError(t, g.Set(ctx, other, "v", 0, 1, "a"))
	ttl, err = rdb.PTTL(ctx, other).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl)
	for _, bad := range []time.Duration{-time.Millisecond, time.Microsecond, 1500 * time.Microsecond} {
		require.ErrorIs(t, g.Set(ctx, other, "v", bad, 2, "a"), redlease.ErrInvalidArgument, "TTL %v", bad)
	}

	// Del: refused for an old fence, accepted for a newer one; the record
	// stays, so the old holder cannot recreate the key.
	_, err = g.Del(ctx, other, 1, "b")
	require.ErrorIs(t, err, ErrStaleFence)
	require.Equal(t, int64(1), rdb.Exists(ctx, other).Val())
	deleted, err := g.Del(ctx, other, 2, "b")
	require.NoError(t, err)
	require.True(t, deleted)
	deleted, err = g.Del(ctx, other, 2, "b")
	require.NoError(t, err)
	require.False(t, deleted, "already gone")
	require.ErrorIs(t, g.Set(ctx, other, "late", 0, 1, "a"), ErrStaleFence)
	require.Zero(t, rdb.Exists(ctx, other).Val())
	rec, err := rdb.HGetAll(ctx, "redlease:fenced:{doc:2}:{doc:2}:body").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"fence": "2", "owner": "b"}, rec)
	ttl, err = rdb.PTTL(ctx, "redlease:fenced:{doc:2}:{doc:2}:body").Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "records never expire")
}

// logScript appends "fence:owner" to the fenced list: the log of accepted
// writes, written in the same script as the check.
var logScript = NewScript(`return redis.call('RPUSH', KEYS[1], FENCE .. ':' .. OWNER)`)

// Many goroutines write with random fences and owners at once; the log of
// accepted writes never goes back, and every refusal was by the rule.
func TestIntegrationRedisGuardConcurrentFencesNeverGoBack(t *testing.T) {
	rdb := servertest.Redis(t).Client(t)
	ctx := t.Context()
	const key, workers, perWorker = "{log}", 8, 50
	refused := raceFences(t, workers, perWorker, 60, func(fence int64, owner string) error {
		return logScript.Run(ctx, rdb, []string{key}, fence, owner).Err()
	})
	log, err := rdb.LRange(ctx, key, 0, -1).Result()
	require.NoError(t, err)
	var accepted []token
	for _, entry := range log {
		var a token
		_, err := fmt.Sscanf(entry, "%d:%s", &a.fence, &a.owner)
		require.NoError(t, err, entry)
		accepted = append(accepted, a)
	}
	requireNeverBack(t, accepted, refused, workers*perWorker)
}

func TestIntegrationScriptBody(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := srv.Client(t)
	ctx := t.Context()

	// The body sees its own KEYS and ARGV, and FENCE and OWNER.
	echo := NewScript(`return {KEYS[1], KEYS[2], #KEYS, ARGV[1], ARGV[2], #ARGV, FENCE, OWNER}`)
	got, err := echo.Run(ctx, rdb, []string{"{k}a", "{k}b"}, 7, "me", "x", 42).Slice()
	require.NoError(t, err)
	require.Equal(t, []any{"{k}a", "{k}b", int64(2), "x", "42", int64(2), int64(7), "me"}, got)
	counts, err := NewScript(`return {#KEYS, #ARGV}`).Run(ctx, rdb, []string{"{k}a"}, 8, "me").Int64Slice()
	require.NoError(t, err)
	require.Equal(t, []int64{1, 0}, counts)

	// A body that returns nothing gives redis.Nil; the script survives a
	// SCRIPT FLUSH (EVALSHA falls back to EVAL).
	quiet := NewScript(`redis.call('SET', KEYS[1], ARGV[1])`)
	require.ErrorIs(t, quiet.Run(ctx, rdb, []string{"q"}, 1, "me", "v").Err(), redis.Nil)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.ErrorIs(t, quiet.Run(ctx, rdb, []string{"q"}, 2, "me", "w").Err(), redis.Nil)
	require.Equal(t, "w", rdb.Get(ctx, "q").Val())

	// A body that fails: the error comes back; the fence stays recorded.
	boom := NewScript(`return redis.error_reply('boom')`)
	err = boom.Run(ctx, rdb, []string{"q"}, 3, "me").Err()
	require.ErrorContains(t, err, "boom")
	require.NotErrorIs(t, err, ErrStaleFence)
	require.ErrorIs(t, quiet.Run(ctx, rdb, []string{"q"}, 2, "me", "late").Err(), ErrStaleFence)

	// A record that is not ours is reported, not overwritten.
	require.NoError(t, rdb.HSet(ctx, "redlease:fenced:{bad}", "fence", "x").Err())
	require.ErrorContains(t, quiet.Run(ctx, rdb, []string{"bad"}, 1, "me", "v").Err(), "non-number")
}

func TestRedisGuardRejectsBadInputBeforeAnyRoundTrip(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &servertest.CountingHook{}
	rdb.AddHook(h)
	g := NewRedisGuard(rdb)
	s := NewScript(`return 1`)
	for _, c := range []struct {
		key   string
		fence int64
		owner string
	}{{"k", 0, "o"}, {"k", -3, "o"}, {"k", MaxFence + 1, "o"}, {"k", 1, ""}, {"{}", 1, "o"}, {"", 1, "o"}, {"a}b", 1, "o"}} {
		require.ErrorIs(t, g.Set(t.Context(), c.key, "v", 0, c.fence, c.owner), redlease.ErrInvalidArgument, "%+v", c)
		_, err := g.Del(t.Context(), c.key, c.fence, c.owner)
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, "%+v", c)
		require.ErrorIs(t, s.Run(t.Context(), rdb, []string{c.key}, c.fence, c.owner).Err(), redlease.ErrInvalidArgument, "%+v", c)
	}
	require.ErrorIs(t, s.Run(t.Context(), rdb, nil, 1, "o").Err(), redlease.ErrInvalidArgument)
	require.ErrorIs(t, s.Run(t.Context(), nil, []string{"k"}, 1, "o").Err(), redlease.ErrInvalidArgument)
	require.ErrorIs(t, (*Script)(nil).Run(t.Context(), rdb, []string{"k"}, 1, "o").Err(), redlease.ErrInvalidArgument)
	require.ErrorIs(t, (*RedisGuard)(nil).Set(t.Context(), "k", "v", 0, 1, "o"), redlease.ErrInvalidArgument)
	require.ErrorIs(t, NewRedisGuard(nil).Set(t.Context(), "k", "v", 0, 1, "o"), redlease.ErrInvalidArgument)
	require.Zero(t, h.Cmds.Load(), "no command was sent")

	// The same scripts run on miniredis's Lua too.
	require.NoError(t, g.Set(t.Context(), "k", "v", time.Second, 1, "o"))
	require.ErrorIs(t, g.Set(t.Context(), "k", "v", 0, 1, "x"), ErrStaleFence)
}

// WithPrefix namespaces the fence records of RedisGuard and Script:
// guards with one prefix share a key's record, guards with others do not.
func TestRedisGuardRecordPrefix(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	app1 := NewRedisGuard(rdb, WithPrefix("app1:"))
	require.NoError(t, app1.Set(ctx, "{doc:1}:body", "v", 0, 5, "o"))
	require.Equal(t, "5", mr.HGet("app1:fenced:{doc:1}:{doc:1}:body", "fence"))
	require.False(t, mr.Exists("redlease:fenced:{doc:1}:{doc:1}:body"))

	// One prefix, one record: a Script sees the guard's fence.
	logged := NewScript(`return redis.call('RPUSH', KEYS[1], FENCE)`, WithPrefix("app1:"))
	require.ErrorIs(t, logged.Run(ctx, rdb, []string{"{doc:1}:body"}, 4, "o").Err(), ErrStaleFence)
	// The default prefix is another record, unchanged.
	require.NoError(t, NewRedisGuard(rdb).Set(ctx, "{doc:1}:other", "v", 0, 1, "o"))
	require.True(t, mr.Exists("redlease:fenced:{doc:1}:{doc:1}:other"))
	require.NoError(t, NewScript(`return 1`).Run(ctx, rdb, []string{"plain"}, 1, "o").Err())
	require.True(t, mr.Exists("redlease:fenced:{plain}"))
	_, err := NewRedisGuard(rdb, WithPrefix("")).Del(ctx, "plain", 1, "o")
	require.NoError(t, err)
	require.True(t, mr.Exists("fenced:{plain}"), "an empty prefix is a prefix")

	// A '{' in the prefix would make it the record's hash tag.
	for _, p := range []string{"app{1}:", "{"} {
		require.ErrorIs(t, NewRedisGuard(rdb, WithPrefix(p)).Set(ctx, "k", "v", 0, 9, "o"), redlease.ErrInvalidArgument, p)
		_, err := NewRedisGuard(rdb, WithPrefix(p)).Del(ctx, "k", 9, "o")
		require.ErrorIs(t, err, redlease.ErrInvalidArgument, p)
		require.ErrorIs(t, NewScript(`return 1`, WithPrefix(p)).Run(ctx, rdb, []string{"k"}, 9, "o").Err(),
			redlease.ErrInvalidArgument, p)
	}
}

// A lost reply of a fenced write is reported as an unknown outcome: the write
// may have happened.
func TestRedisGuardLostReplyIsOutcomeUnknown(t *testing.T) {
	_, rdb := servertest.Mini(t)
	h := &servertest.CountingHook{}
	rdb.AddHook(h)
	g := NewRedisGuard(rdb)
	require.NoError(t, g.Set(context.Background(), "warm", "v", 0, 1, "o")) // cache the script: EVALSHA runs it
	h.LoseReplies.Store(1)
	err := g.Set(context.Background(), "k", "v", 0, 1, "o")
	require.ErrorIs(t, err, redlease.ErrOutcomeUnknown)
	v, err := rdb.Get(context.Background(), "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", v, "it did happen")
}

// The repair story: a guard has accepted fence 3; the lock's Redis loses its
// counter; new holders draw 1, 2, 3 again and the guard refuses them all (3
// because another owner already wrote with it); AdvanceFence to the Newest
// the guard reported lets the next holder through with 4.
func TestIntegrationAdvanceFenceRepairsACounterThatWentBack(t *testing.T) {
	ctx := t.Context()
	lockRdb := servertest.Redis(t).Client(t)
	locks := redlease.New(lockRdb, redlease.WithTTL(5*time.Second))
	dataRdb := servertest.Redis(t).Client(t) // the resource's own Redis
	guard := NewRedisGuard(dataRdb)
	const resource, key = "report:9", "{report:9}:body"
	write := func(l *redlease.Lease) error { return guard.Set(ctx, key, l.Owner(), 0, l.Fence(), l.Owner()) }
	holder := func(wantFence int64) *redlease.Lease {
		t.Helper()
		l, err := locks.TryAcquire(ctx, resource)
		require.NoError(t, err)
		require.Equal(t, wantFence, l.Fence())
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		return l
	}

	for fence := int64(1); fence <= 3; fence++ {
		l := holder(fence)
		require.NoError(t, write(l))
		require.NoError(t, l.Release(ctx))
	}

	require.NoError(t, lockRdb.FlushAll(ctx).Err()) // as a restart without persistence would

	var stale *StaleFenceError
	for fence := int64(1); fence <= 3; fence++ {
		l := holder(fence)
		require.ErrorAs(t, write(l), &stale, "fence %d", fence)
		require.Equal(t, int64(3), stale.Newest)
		require.NotEqual(t, l.Owner(), stale.NewestOwner)
		require.NoError(t, l.Release(ctx))
	}

	n, err := locks.AdvanceFence(ctx, resource, stale.Newest)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	l := holder(4)
	require.NoError(t, write(l))
	got, err := dataRdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, l.Owner(), got)
	require.NoError(t, l.Release(ctx))
}

// Forget removes a key's fence record and nothing else; a Store's Forget
// does the same for a resource.
func TestForgetRemovesOnlyTheRecord(t *testing.T) {
	mr, rdb := servertest.Mini(t)
	ctx := t.Context()
	g := NewRedisGuard(rdb)
	require.NoError(t, g.Set(ctx, "{a}:x", "v", 0, 5, "o"))
	require.NoError(t, g.Set(ctx, "{a}:y", "v", 0, 5, "o"))
	require.ErrorIs(t, g.Set(ctx, "{a}:x", "w", 0, 4, "p"), ErrStaleFence)
	require.NoError(t, g.Forget(ctx, "{a}:x"))
	require.True(t, mr.Exists("{a}:x"), "the data key stays")
	require.NoError(t, g.Set(ctx, "{a}:x", "w", 0, 4, "p"), "a forgotten key admits any fence")
	require.ErrorIs(t, g.Set(ctx, "{a}:y", "w", 0, 4, "p"), ErrStaleFence, "the other record stays")
	require.ErrorIs(t, g.Forget(ctx, ""), redlease.ErrInvalidArgument)

	s := NewRedisStore(rdb)
	_, err := s.Admit(ctx, "r", 5, "o")
	require.NoError(t, err)
	_, err = s.Admit(ctx, "r", 4, "p")
	require.ErrorIs(t, err, ErrStaleFence)
	require.NoError(t, s.Forget(ctx, "r"))
	_, err = s.Admit(ctx, "r", 4, "p")
	require.NoError(t, err)
}
