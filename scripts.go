package redlease

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"strings"
)

// Every script redlease runs, and the builder of its call beside it. Each
// script's header (in lua/) states its keys, arguments and reply; a builder
// lists them in the same order, so the two are kept in step in one place.
// A call names its script; it runs through backend.eval (EVALSHA, EVAL
// after NOSCRIPT).

// script is one Lua script. hash and src are EVALSHA's and EVAL's second
// words, boxed once.
type script struct {
	hash, src any
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{hash: hex.EncodeToString(sum[:]), src: src}
}

//go:embed lua/queue.lua
var queueSrc string

// withQueue returns src with queue.lua's functions inserted at its line
// '--#queue'. They come after a script's common case rather than before it,
// because defining them costs time on every call.
func withQueue(src string) string {
	const marker = "\n--#queue\n"
	before, after, ok := strings.Cut(src, marker)
	if !ok {
		panic("redlease: script without " + marker)
	}
	return before + "\n" + queueSrc + after
}

// flag is a script's boolean argument, boxed once.
func flag(b bool) any {
	if b {
		return flagOn
	}
	return flagOff
}

var flagOn, flagOff any = "1", "0"

// noMember is the queue member of an owner that is not queued.
var noMember = ""

var (
	//go:embed lua/acquire.lua
	acquireSrc    string
	acquireScript = newScript(withQueue(acquireSrc))

	//go:embed lua/acquire_all.lua
	acquireAllSrc    string
	acquireAllScript = newScript(withQueue(acquireAllSrc))
)

// acquireCall is acquire.lua's call. ttl is boxed by the caller once; wait
// says the acquirer waits (queues when the lease is busy), again that this
// is not the acquire call's first attempt. An empty holder is not sent.
func acquireCall(k *resourceKeys, owner, member *string, ttl any, wait, fair, again bool, holder *string) call {
	words := []any{nil, nil, 4, &k.lease, &k.fence, &k.queue, &k.alive,
		owner, ttl, acquireModes[modeIndex(wait, fair, again)], member, holder}
	if *holder == "" {
		words = words[:len(words)-1]
	}
	return call{s: acquireScript, words: words, kind: mixedReply}
}

// acquireModes are acquire.lua's modes (its ARGV[3]), boxed once, at
// their modeIndex.
var acquireModes = func() (m [8]any) {
	for i := range m {
		wait, fair, again := i&4 != 0, i&2 != 0, i&1 != 0 // modeIndex's bits
		mode := ""
		if fair {
			mode += "f"
		}
		if again {
			mode += "a"
		}
		if wait {
			mode += strconv.FormatInt(waiterTimeout.Milliseconds(), 10)
		} else {
			mode += "0"
		}
		m[i] = mode
	}
	return m
}()

func modeIndex(wait, fair, again bool) int { return bit(wait)<<2 | bit(fair)<<1 | bit(again) }

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// acquireAllCall is acquire_all.lua's call.
func acquireAllCall(names []resourceKeys, owner, member *string, ttl, timeout any, again bool, holder *string) call {
	words := make([]any, 3, 3+4*len(names)+6)
	words[2] = 4 * len(names)
	for i := range names {
		k := &names[i]
		words = append(words, &k.lease, &k.fence, &k.queue, &k.alive)
	}
	words = append(words, owner, ttl, timeout, flag(again), member, holder)
	return call{s: acquireAllScript, words: words, kind: arrayReply}
}

var (
	//go:embed lua/confirm.lua
	confirmSrc    string
	confirmScript = newScript(confirmSrc)
)

// confirmCall is confirm.lua's call: record fence in owner's lease.
func confirmCall(k *resourceKeys, owner *string, fence int64, ttl any) call {
	return call{s: confirmScript, words: []any{nil, nil, 1, &k.lease, owner, fence, ttl}, kind: intReply}
}

var (
	//go:embed lua/refresh.lua
	refreshSrc    string
	refreshScript = newScript(refreshSrc)
)

// refreshCall is refresh.lua's call, for Refresh and the watchdog: lease
// is the lease key (a write lease's: its writer key).
func refreshCall(lease, owner *string, ttl any) call {
	return call{s: refreshScript, words: []any{nil, nil, 1, lease, owner, ttl}, kind: intReply}
}

var (
	//go:embed lua/release.lua
	releaseSrc    string
	releaseScript = newScript(withQueue(releaseSrc))
)

// releaseCall is release.lua's call; member is &noMember for an owner that
// is not queued. Trailing arguments that say nothing (no member, not
// Cluster) are not sent.
func releaseCall(k *resourceKeys, owner, member *string, sharded bool) call {
	words := []any{nil, nil, 4, &k.lease, &k.queue, &k.alive, &k.released, owner, member, flagOn}
	switch {
	case sharded:
	case *member != "":
		words = words[:len(words)-1]
	default:
		words = words[:len(words)-2]
	}
	return call{s: releaseScript, words: words, kind: intReply}
}

var (
	//go:embed lua/break.lua
	breakSrc    string
	breakScript = newScript(withQueue(breakSrc))
)

// breakCall is break.lua's call; fence is "0" for any lease.
func breakCall(k *resourceKeys, sk *sharedKeys, fence string, sharded bool) call {
	return call{s: breakScript, words: append(allKeys(k, sk), fence, &k.wake, flag(sharded)), kind: arrayReply}
}

// allKeys are the words of a call on every kind of lease of a resource:
// the number of keys and the keys, in inspect.lua's order.
func allKeys(k *resourceKeys, sk *sharedKeys) []any {
	return []any{nil, nil, 10, &k.lease, &k.fence, &k.queue, &k.alive,
		&sk.permits, &sk.holders, &sk.writer, &sk.readers, &sk.readinfo, &sk.readq}
}

var (
	//go:embed lua/inspect.lua
	inspectSrc    string
	inspectScript = newScript(inspectSrc)
)

// inspectCall is inspect.lua's call.
func inspectCall(k *resourceKeys, sk *sharedKeys) call {
	return call{s: inspectScript, words: allKeys(k, sk), kind: arrayReply}
}

var (
	//go:embed lua/advance.lua
	advanceSrc    string
	advanceScript = newScript(advanceSrc)
)

// advanceCall is advance.lua's call.
func advanceCall(k *resourceKeys, atLeast int64) call {
	return call{s: advanceScript, words: []any{nil, nil, 1, &k.fence, atLeast}, kind: intReply}
}

var (
	//go:embed lua/migrate.lua
	migrateSrc    string
	migrateScript = newScript(migrateSrc)
)

// migrateCall is migrate.lua's call: fold the old per-resource counter into
// counter, the slot's.
func migrateCall(old, counter *string) call {
	return call{s: migrateScript, words: []any{nil, nil, 2, old, counter}, kind: intReply}
}

var (
	//go:embed lua/counter.lua
	counterSrc    string
	counterScript = newScript(counterSrc)
)

// counterCall is counter.lua's call: read counter (its value as a string,
// in an array: a backend reads only integer and array replies).
func counterCall(counter *string) call {
	return call{s: counterScript, words: []any{nil, nil, 1, counter}, kind: arrayReply}
}
