package wire

//go:generate go run gen_slottags.go

import "strings"

// The key layout: the only place where a key redlease writes is spelled.
//
// Every key of resource R is <prefix>{R}:<kind>. The braces make R the
// keys' Redis Cluster hash tag, so all of them share R's slot and one script
// may use them all; that is why the prefix may not hold a brace, nor R begin
// with '}' (the lease logic refuses both). All of them expire: they live as
// long as a lease, a waiter or a release marker does.
//
//	<prefix>{R}:lease     the lease: "<owner>:<fence>[:<holder>]", with the TTL
//	<prefix>{R}:queue     the waiters, in arrival order (see lua/queue.lua)
//	<prefix>{R}:alive     the waiters' liveness deadlines
//	<prefix>{R}:released  the last released lease, for the time it had left
//	<prefix>{R}:wake:<id> the wake channel of the waiters of Client <id>
//	<prefix>{R}:handover  an election's pending handover (Election.Handover):
//	                      the preferred next leader, until it leads or the
//	                      handover expires
//	<prefix>break:<id>    the break channel of Client <id>: a classic
//	                      channel (not a shard channel) on Cluster too,
//	                      without a hash tag (see lua/break.lua)
//
// One name is spelled elsewhere too: lua/release.lua makes the wake
// channel's stem from the lease key, its kind swapped, rather than being
// sent it on every release (TestReleaseWakesOnTheChannelOfItsPrefix).
//
// A semaphore's and read/write leases' (SharedKeys, and the headers of
// their scripts) live as long as their longest holder or waiter:
//
//	<prefix>{R}:permits   a semaphore's permits and their expiries
//	<prefix>{R}:holders   a semaphore's holders, and its number of permits
//	<prefix>{R}:writer    the write lease
//	<prefix>{R}:wreleased the last released write lease
//	<prefix>{R}:readers   the read leases and their expiries
//	<prefix>{R}:readinfo  the read leases' fences and holders
//	<prefix>{R}:readq     the waiting readers
//	<prefix>{R}:readrel   the released read leases, for the time they had left
//
// The fence counter is the one key without a TTL, and there is one per
// Redis Cluster hash slot, not per resource, so that what stays in Redis
// does not grow with the number of resources ever leased: at most 16,384
// keys per prefix.
//
//	<prefix>{<t>}:fences  the fence counter of hash slot s, where t is a
//	                      three-character name that hashes to s (SlotTag)
//
// It shares R's slot, so the acquire script stays one script on Cluster,
// and moves with the slot when a cluster is resharded. Versions before the
// per-slot counter kept <prefix>{R}:fence per resource (MigrateFences).

// The kinds of key, the last word of a key's name.
const (
	KindLease    = "lease"
	KindQueue    = "queue"
	KindAlive    = "alive"
	KindReleased = "released"
	KindWake     = "wake"
	KindLeader   = "leader"   // an election's channel (announce.lua), not a key
	KindHandover = "handover" // an election's pending handover (handover.lua)
	KindFences   = "fences"   // a hash slot's fence counter

	KindPermits       = "permits"
	KindHolders       = "holders"
	KindWriter        = "writer"
	KindWriteReleased = "wreleased"
	KindReaders       = "readers"
	KindReadInfo      = "readinfo"
	KindReadQueue     = "readq"
	KindReadReleased  = "readrel"
	KindFence         = "fence" // a resource's fence counter, before the per-slot counter
)

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = 16384

// Keys are the keys (and the wake channel's stem) of one resource; Fence is
// the counter of its hash slot.
type Keys struct {
	Lease, Fence, Queue, Alive, Released, Wake string
}

// Key names one of resource's keys.
func Key(prefix, resource, kind string) string {
	return prefix + "{" + resource + "}:" + kind
}

// KeysOf returns resource's keys, cut from one string: one allocation
// instead of six on the acquire and release paths.
func KeysOf(prefix, resource string) Keys {
	var b strings.Builder
	// Five names of the form prefix{resource}:kind, and the fence counter's
	// prefix{tag}:fences with its 3-byte slot tag.
	b.Grow(5*(len(prefix)+len(resource)+3) + len(prefix) + 3 + 3 +
		len(KindLease+KindFences+KindQueue+KindAlive+KindReleased+KindWake))
	name := func(tag, kind string) string {
		start := b.Len()
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteString("}:")
		b.WriteString(kind)
		return b.String()[start:] // the buffer never moves: earlier names stay valid
	}
	return Keys{Lease: name(resource, KindLease), Fence: name(SlotTag(SlotOf(resource)), KindFences),
		Queue: name(resource, KindQueue), Alive: name(resource, KindAlive), Released: name(resource, KindReleased),
		Wake: name(resource, KindWake)}
}

// LeaderChannel is the channel on which announce.lua tells the observers
// of the election on the resource of k that a new term began.
func (k *Keys) LeaderChannel() string { return k.Lease[:len(k.Lease)-len(KindLease)] + KindLeader }

// HandoverKey is the key of the pending handover of the election on the
// resource of k (handover.lua): only elections make it, so it is not in
// Keys, which every acquire makes.
func (k *Keys) HandoverKey() string { return k.Lease[:len(k.Lease)-len(KindLease)] + KindHandover }

// WakeChannel returns the wake channel of the waiters of the Client with id.
func (k *Keys) WakeChannel(id string) string { return k.Wake + ":" + id }

// BreakChannel returns the break channel of the Client with id under
// prefix: break.lua publishes on it the leases of that Client's that it
// removes. id is the first 8 characters of the Client's owner tokens.
func BreakChannel(prefix, id string) string { return prefix + "break:" + id }

// BreakStem is the break channels' stem under prefix, as break.lua takes it.
func BreakStem(prefix string) string { return prefix + "break:" }

// SharedKeys are the keys of a resource's shared leases.
type SharedKeys struct {
	Permits, Holders                                string // a semaphore
	Writer, Readers, ReadInfo, ReadQ, WRel, ReadRel string // read/write leases
}

// SharedKeysOf returns the keys of resource's shared leases.
func SharedKeysOf(prefix, resource string) *SharedKeys {
	k := func(kind string) string { return Key(prefix, resource, kind) }
	return &SharedKeys{Permits: k(KindPermits), Holders: k(KindHolders),
		Writer: k(KindWriter), Readers: k(KindReaders), ReadInfo: k(KindReadInfo), ReadQ: k(KindReadQueue),
		WRel: k(KindWriteReleased), ReadRel: k(KindReadReleased)}
}

// SlotCounter returns the key of hash slot s's fence counter.
func SlotCounter(prefix string, s int) string { return Key(prefix, SlotTag(s), KindFences) }

// SlotTag returns the hash tag of slot s's fence counter.
func SlotTag(s int) string { return slotTags[3*s : 3*s+3] }

// SlotOf returns the Redis Cluster hash slot of resource's keys: the CRC16
// of their hash tag, which is resource up to its first '}' (see the Cluster
// spec; resource is not empty and does not begin with '}').
func SlotOf(resource string) int {
	tag := resource
	if i := strings.IndexByte(resource, '}'); i >= 0 {
		tag = resource[:i]
	}
	return int(CRC16(tag) % NumSlots)
}

// CRC16 is CRC16-XMODEM, by which Redis Cluster hashes keys.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// ResourcePattern returns the SCAN pattern that matches the keys of the
// resources whose names match pattern (a Redis glob).
func ResourcePattern(prefix, pattern string) string {
	return EscapeGlob(prefix) + "{" + pattern + "}:*"
}

// ResourceOf returns the resource and the kind of a key written under
// prefix, and false for a key that is not one of redlease's.
func ResourceOf(prefix, k string) (resource, kind string, ok bool) {
	rest, ok := strings.CutPrefix(k, prefix+"{")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, "}:")
	if i < 0 {
		return "", "", false
	}
	return rest[:i], rest[i+2:], true
}

// EscapeGlob quotes the characters that are special in a Redis glob.
func EscapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
