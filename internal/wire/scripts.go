package wire

import (
	_ "embed"
	"strconv"
	"strings"
)

// Every script redlease runs, with the builder of its call beside it. Each
// script's header (in lua/) states its keys, arguments and reply; a builder
// lists them in the same order (TestBuildersMatchTheScriptHeaders checks
// them against the headers), and the reader of its reply is in replies.go.

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

// Flag is a script's boolean argument.
func Flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Timing of waiters that the scripts know of.
const (
	// WaiterTimeoutMs is how long, in ms, a waiter's place in a queue lasts
	// without a refresh: more than the longest sleep between two attempts
	// of a waiter (1 s), so that only a waiter that stopped trying is
	// dropped.
	WaiterTimeoutMs  = 3000
	waiterTimeoutArg = "3000"
)

// Millis returns a duration in ms as a script argument.
func Millis(ms int64) string { return strconv.FormatInt(ms, 10) }

var (
	//go:embed lua/acquire.lua
	acquireSrc    string
	acquireScript = NewScript(withQueue(acquireSrc))

	//go:embed lua/acquire_all.lua
	acquireAllSrc    string
	acquireAllScript = NewScript(withQueue(acquireAllSrc))
)

// Acquire is acquire.lua's call: ttl in ms; wait says the acquirer waits
// (queues when the lease is busy), again that this is not the acquire
// call's first attempt. An empty holder is not sent. A waiter that asks for
// a direct handoff sends its stamp (see acquire.lua): its clock's reading
// when it sent this call, in digits, which a release that hands it the
// lease sends back (ParseWake); "" asks for none.
func Acquire(k *Keys, owner, member, ttl string, wait, fair, again bool, holder, stamp string) Call {
	mode := acquireModes[bit(wait)<<2|bit(fair)<<1|bit(again)]
	if wait && stamp != "" {
		mode += "h" + stamp
	}
	if holder == "" {
		return newCall(acquireScript, 4, k.Lease, k.Fence, k.Queue, k.Alive, owner, ttl, mode, member)
	}
	return newCall(acquireScript, 4, k.Lease, k.Fence, k.Queue, k.Alive, owner, ttl, mode, member, holder)
}

// Campaign is acquire.lua's call for an election's campaign: Acquire's,
// with the handover key of the election (see handover.lua), the holder
// always sent, and the Cluster flag for waking the preferred campaigner.
func Campaign(k *Keys, owner, member, ttl string, wait, fair, again bool, holder string, sharded bool) Call {
	mode := acquireModes[bit(wait)<<2|bit(fair)<<1|bit(again)]
	return newCall(acquireScript, 5, k.Lease, k.Fence, k.Queue, k.Alive, k.HandoverKey(),
		owner, ttl, mode, member, holder, Flag(sharded))
}

// BrokenOwner is the owner of a lease that break.lua removed but keeps for
// its lock delay: no owner token matches it.
const BrokenOwner = "broken"

// LeaseTail is the holder argument of acquire.lua and acquire_all.lua, which
// ends the lease value: the holder's description and, for a lease with a
// lock delay, a NUL byte and the delay in ms, which the value keeps for
// break.lua (see lua/break.lua).
func LeaseTail(holder string, lockDelayMs int64) string {
	if lockDelayMs <= 0 {
		return holder
	}
	return holder + "\x00" + Millis(lockDelayMs)
}

// acquireModes are acquire.lua's modes (its ARGV[3]), at the index that
// Acquire computes from its flags.
var acquireModes = func() (m [8]string) {
	for i := range m {
		wait, fair, again := i&4 != 0, i&2 != 0, i&1 != 0
		if fair {
			m[i] += "f"
		}
		if again {
			m[i] += "a"
		}
		if wait {
			m[i] += waiterTimeoutArg
		} else {
			m[i] += "0"
		}
	}
	return m
}()

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AcquireAll is acquire_all.lua's call, on the keys of several resources.
func AcquireAll(names []Keys, owner, member, ttl string, wait, again bool, holder string) Call {
	words := make([]string, 0, 4*len(names)+6)
	for i := range names {
		k := &names[i]
		words = append(words, k.Lease, k.Fence, k.Queue, k.Alive)
	}
	words = append(words, owner, ttl, timeoutArg(wait), Flag(again), member, holder)
	return newCall(acquireAllScript, 4*len(names), words...)
}

// timeoutArg is a script's waiter timeout argument: 0 for one that does not
// wait.
func timeoutArg(wait bool) string {
	if wait {
		return waiterTimeoutArg
	}
	return "0"
}

var (
	//go:embed lua/confirm.lua
	confirmSrc    string
	confirmScript = NewScript(confirmSrc)
)

// Confirm is confirm.lua's call: record fence in owner's lease.
func Confirm(k *Keys, owner string, fence int64, ttl string) Call {
	return newCall(confirmScript, 1, k.Lease, owner, strconv.FormatInt(fence, 10), ttl)
}

var (
	//go:embed lua/refresh.lua
	refreshSrc    string
	refreshScript = NewScript(refreshSrc)
)

// Refresh is refresh.lua's call, for an exclusive lease (lease: its lease
// key) or a write lease (its writer key).
func Refresh(lease, owner, ttl string) Call {
	return newCall(refreshScript, 1, lease, owner, ttl)
}

// RefreshTerm is refresh.lua's call for an election's term, whose lease
// keys are k: a pending handover refuses it (Handed).
func RefreshTerm(k *Keys, owner, ttl string) Call {
	return newCall(refreshScript, 2, k.Lease, k.HandoverKey(), owner, ttl)
}

var (
	//go:embed lua/refresh_many.lua
	refreshManySrc    string
	refreshManyScript = NewScript(refreshManySrc)
)

// RefreshManyMax is the most leases one RefreshMany call renews. On 100,000
// keys renewed every 3.3 s (bench/scalefloor.go), calls of 100 took a fifth
// to two fifths less CPU than a refresh.lua call per key, in the client and
// in Redis, and calls of 250 or 1,000 no less beyond the noise
// (docs/PERFORMANCE.md). A call keeps Redis from other clients while it
// runs, as a pipeline of as many calls does.
const RefreshManyMax = 100

// RefreshMany is refresh_many.lua's call: renew n exclusive leases (no
// election's term), lease(i) giving the i-th one's lease key, owner and TTL
// in ms. Its keys are in many hash slots, so it is for a server that is not
// Redis Cluster. ParseRefreshMany reads its reply.
func RefreshMany(n int, lease func(i int) (key, owner, ttl string)) Call {
	words := make([]string, 3*n) // one allocation for the keys and the arguments
	for i := range n {
		words[i], words[n+2*i], words[n+2*i+1] = lease(i)
	}
	return newCall(refreshManyScript, n, words...)
}

// Handed is refresh.lua's reply to a term's renewal while a handover to
// another campaigner is pending: not renewed.
const Handed = 2

var (
	//go:embed lua/release.lua
	releaseSrc    string
	releaseScript = NewScript(withQueue(releaseSrc))
)

// Release is release.lua's call; member is "" for an owner that is not
// queued. Trailing arguments that say nothing (no member, not Cluster) are
// not sent.
func Release(k *Keys, owner, member string, sharded bool) Call {
	switch {
	case sharded:
		return newCall(releaseScript, 5, k.Lease, k.Queue, k.Alive, k.Released, k.Fence, owner, member, "1")
	case member != "":
		return newCall(releaseScript, 5, k.Lease, k.Queue, k.Alive, k.Released, k.Fence, owner, member)
	}
	return newCall(releaseScript, 5, k.Lease, k.Queue, k.Alive, k.Released, k.Fence, owner)
}

var (
	//go:embed lua/break.lua
	breakSrc    string
	breakScript = NewScript(withQueue(breakSrc))
)

// Break is break.lua's call; fence 0 removes any lease. stem is the break
// channels' stem (BreakStem), "" to tell no holder.
func Break(k *Keys, sk *SharedKeys, fence int64, sharded bool, stem string) Call {
	c := allKeys(breakScript, k, sk, 4)
	c.Args = append(c.Args, strconv.FormatInt(fence, 10), k.Wake, Flag(sharded), stem)
	return c
}

// allKeys is a call of s on every kind of lease of a resource, in
// inspect.lua's order, with room for args arguments.
func allKeys(s *Script, k *Keys, sk *SharedKeys, args int) Call {
	words := make([]string, 10, 10+args)
	copy(words, []string{k.Lease, k.Fence, k.Queue, k.Alive,
		sk.Permits, sk.Holders, sk.Writer, sk.Readers, sk.ReadInfo, sk.ReadQ})
	return Call{Script: s, Keys: words[:10:10], Args: words[10:]}
}

var (
	//go:embed lua/inspect.lua
	inspectSrc    string
	inspectScript = NewScript(inspectSrc)
)

// Inspect is inspect.lua's call.
func Inspect(k *Keys, sk *SharedKeys) Call { return allKeys(inspectScript, k, sk, 0) }

var (
	//go:embed lua/advance.lua
	advanceSrc    string
	advanceScript = NewScript(advanceSrc)
)

// Advance is advance.lua's call.
func Advance(k *Keys, atLeast int64) Call {
	return newCall(advanceScript, 1, k.Fence, strconv.FormatInt(atLeast, 10))
}

var (
	//go:embed lua/migrate.lua
	migrateSrc    string
	migrateScript = NewScript(migrateSrc)
)

// Migrate is migrate.lua's call: fold the old per-resource counter into
// counter, the slot's.
func Migrate(old, counter string) Call { return newCall(migrateScript, 2, old, counter) }

var (
	//go:embed lua/counter.lua
	counterSrc    string
	counterScript = NewScript(counterSrc)
)

// Counter is counter.lua's call: read counter.
func Counter(counter string) Call { return newCall(counterScript, 1, counter) }

// The scripts of shared leases: a semaphore's permits, read and write
// leases.
var (
	//go:embed lua/semaphore.lua
	semaphoreSrc    string
	semaphoreScript = NewScript(withQueue(semaphoreSrc))
	//go:embed lua/semaphore_refresh.lua
	semaphoreRefreshSrc    string
	semaphoreRefreshScript = NewScript(withQueue(semaphoreRefreshSrc))
	//go:embed lua/semaphore_release.lua
	semaphoreReleaseSrc    string
	semaphoreReleaseScript = NewScript(withQueue(semaphoreReleaseSrc))

	//go:embed lua/rw_read.lua
	readSrc    string
	readScript = NewScript(withQueue(readSrc))
	//go:embed lua/rw_read_refresh.lua
	readRefreshSrc    string
	readRefreshScript = NewScript(withQueue(readRefreshSrc))
	//go:embed lua/rw_read_release.lua
	readReleaseSrc    string
	readReleaseScript = NewScript(withQueue(readReleaseSrc))
	//go:embed lua/rw_write.lua
	writeSrc    string
	writeScript = NewScript(withQueue(writeSrc))
	//go:embed lua/rw_write_release.lua
	writeReleaseSrc    string
	writeReleaseScript = NewScript(withQueue(writeReleaseSrc))
	//go:embed lua/rw_write_refresh.lua
	writeRefreshSrc    string
	writeRefreshScript = NewScript(withQueue(writeRefreshSrc))
)

// Semaphore is semaphore.lua's call: take one of permits permits.
func Semaphore(k *Keys, sk *SharedKeys, owner, member, ttl string, wait, fair, queued bool, holder string, permits int, sharded bool) Call {
	return newCall(semaphoreScript, 6, sk.Permits, sk.Holders, k.Fence, k.Queue, k.Alive, k.Lease,
		owner, ttl, timeoutArg(wait), Flag(fair), Flag(queued), member, holder, strconv.Itoa(permits),
		k.Wake, Flag(sharded))
}

// Read is rw_read.lua's call: take a read lease.
func Read(k *Keys, sk *SharedKeys, owner, member, ttl string, wait bool, holder string) Call {
	return newCall(readScript, 8, sk.Writer, sk.Readers, sk.ReadInfo, k.Fence, k.Queue, k.Alive, sk.ReadQ, k.Lease,
		owner, ttl, timeoutArg(wait), member, holder)
}

// Write is rw_write.lua's call: take the write lease.
func Write(k *Keys, sk *SharedKeys, owner, member, ttl string, wait, fair, queued bool, holder string) Call {
	return newCall(writeScript, 6, sk.Writer, sk.Readers, k.Fence, k.Queue, k.Alive, k.Lease,
		owner, ttl, timeoutArg(wait), Flag(fair), Flag(queued), member, holder)
}

// SemaphoreRefresh is semaphore_refresh.lua's call: renew permit.
func SemaphoreRefresh(k *Keys, sk *SharedKeys, owner, permit, ttl string) Call {
	return newCall(semaphoreRefreshScript, 3, sk.Permits, sk.Holders, k.Lease, owner, permit, ttl)
}

// ReadRefresh is rw_read_refresh.lua's call: renew a read lease.
func ReadRefresh(k *Keys, sk *SharedKeys, owner, ttl string) Call {
	return newCall(readRefreshScript, 3, sk.Readers, sk.ReadInfo, k.Lease, owner, ttl)
}

// WriteRefresh is rw_write_refresh.lua's call: renew a write lease.
func WriteRefresh(k *Keys, sk *SharedKeys, owner, ttl string) Call {
	return newCall(writeRefreshScript, 2, sk.Writer, k.Lease, owner, ttl)
}

// SemaphoreRelease is semaphore_release.lua's call: permit is "" when the
// owner does not know it, member "" for an owner that is not queued.
func SemaphoreRelease(k *Keys, sk *SharedKeys, owner, permit, member string, sharded bool) Call {
	return newCall(semaphoreReleaseScript, 5, sk.Permits, sk.Holders, k.Queue, k.Alive, k.Lease,
		owner, permit, k.Wake, Flag(sharded), member)
}

// ReadRelease is rw_read_release.lua's call.
func ReadRelease(k *Keys, sk *SharedKeys, owner, member string, sharded bool) Call {
	return newCall(readReleaseScript, 7, sk.Readers, k.Queue, k.Alive, sk.ReadQ, sk.ReadRel, sk.ReadInfo, k.Lease,
		owner, k.Wake, Flag(sharded), member)
}

// WriteRelease is rw_write_release.lua's call.
func WriteRelease(k *Keys, sk *SharedKeys, owner, member string, sharded bool) Call {
	return newCall(writeReleaseScript, 7, sk.Writer, k.Queue, k.Alive, sk.WRel, sk.ReadQ, sk.Readers, k.Lease,
		owner, k.Wake, Flag(sharded), member)
}

var (
	//go:embed lua/resume.lua
	resumeSrc    string
	resumeScript = NewScript(withQueue(resumeSrc))
)

// The kinds of lease that resume.lua takes (its ARGV[1]).
const (
	ResumeExclusive = "x"
	ResumePermit    = "p"
	ResumeRead      = "r"
	ResumeWrite     = "w"
)

// Resume is resume.lua's call: take up owner's lease of kind with fence,
// and renew it to ttl. permit and permits are a permit's (ResumePermit),
// and not sent for the other kinds.
func Resume(k *Keys, sk *SharedKeys, kind, owner string, fence int64, ttl string, permit, permits int) Call {
	c := newCall(resumeScript, 6, k.Lease, sk.Permits, sk.Holders, sk.Writer, sk.Readers, sk.ReadInfo,
		kind, owner, strconv.FormatInt(fence, 10), ttl)
	if kind == ResumePermit {
		c.Args = append(c.Args, strconv.Itoa(permit), strconv.Itoa(permits))
	}
	return c
}

var (
	//go:embed lua/announce.lua
	announceSrc    string
	announceScript = NewScript(announceSrc)
)

// Announce is announce.lua's call: the observers of the election whose
// lease keys are k hear of a new term.
func Announce(k *Keys, sharded bool) Call {
	if sharded {
		return newCall(announceScript, 1, k.Lease, "1")
	}
	return newCall(announceScript, 1, k.Lease)
}

var (
	//go:embed lua/handover.lua
	handoverSrc    string
	handoverScript = NewScript(handoverSrc)
)

// Handover is handover.lua's call: the election whose lease keys are k
// promises its next term to the campaigner whose value is to, for the
// current term's time left plus ms.
func Handover(k *Keys, to string, ms int64) Call {
	return newCall(handoverScript, 2, k.Lease, k.HandoverKey(), to, Millis(ms))
}

// Named returns the script whose file in lua/ is name ("acquire.lua"),
// nil for none: for tests, and tools that look at what redlease runs.
func Named(name string) *Script { return named[name] }

var named = map[string]*Script{
	"acquire.lua": acquireScript, "acquire_all.lua": acquireAllScript, "confirm.lua": confirmScript,
	"refresh.lua": refreshScript, "refresh_many.lua": refreshManyScript, "release.lua": releaseScript, "break.lua": breakScript,
	"inspect.lua": inspectScript, "advance.lua": advanceScript, "migrate.lua": migrateScript,
	"counter.lua": counterScript, "semaphore.lua": semaphoreScript, "semaphore_refresh.lua": semaphoreRefreshScript,
	"semaphore_release.lua": semaphoreReleaseScript, "rw_read.lua": readScript, "rw_read_refresh.lua": readRefreshScript,
	"rw_read_release.lua": readReleaseScript, "rw_write.lua": writeScript, "rw_write_release.lua": writeReleaseScript,
	"rw_write_refresh.lua": writeRefreshScript, "resume.lua": resumeScript,
	"announce.lua": announceScript, "handover.lua": handoverScript,
}
