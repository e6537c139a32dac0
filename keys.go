package redlease

//go:generate go run gen_slottags.go

import "strings"

// The key layout: the only place where a key redlease writes is spelled.
//
// Every key of resource R is <prefix>{R}:<kind>. The braces make R the
// keys' Redis Cluster hash tag, so all of them share R's slot and one script
// may use them all; that is why the prefix may not hold a brace, nor R begin
// with '}' (see config.validate and validResource). All of them expire: they
// live as long as a lease, a waiter or a release marker does.
//
//	<prefix>{R}:lease     the lease: "<owner>:<fence>[:<holder>]", with the TTL
//	<prefix>{R}:queue     the waiters, in arrival order (see lua/queue.lua)
//	<prefix>{R}:alive     the waiters' liveness deadlines
//	<prefix>{R}:released  the last released lease, for the time it had left
//	<prefix>{R}:wake:<id> the wake channel of the waiters of Client <id>
//
// One name is spelled elsewhere too: lua/release.lua makes the wake
// channel's stem from the lease key, its kind swapped, rather than being
// sent it on every release (TestReleaseWakesOnTheChannelOfItsPrefix).
//
// A semaphore's and read/write leases' (shared_lease.go, and the headers of
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
//	                      three-character name that hashes to s (slotTags)
//
// It shares R's slot, so the acquire script stays one script on Cluster,
// and moves with the slot when a cluster is resharded. Versions before the
// per-slot counter kept <prefix>{R}:fence per resource (see MigrateFences).
const (
	kindLease    = "lease"
	kindQueue    = "queue"
	kindAlive    = "alive"
	kindReleased = "released"
	kindWake     = "wake"
	kindFences   = "fences" // a hash slot's fence counter

	kindPermits       = "permits"
	kindHolders       = "holders"
	kindWriter        = "writer"
	kindWriteReleased = "wreleased"
	kindReaders       = "readers"
	kindReadInfo      = "readinfo"
	kindReadQueue     = "readq"
	kindReadReleased  = "readrel"
	kindFence         = "fence" // a resource's fence counter, before the per-slot counter
)

// numSlots is the number of Redis Cluster hash slots.
const numSlots = 16384

// resourceKeys are the keys (and the wake channel's stem) of one resource;
// fence is the counter of its hash slot.
type resourceKeys struct {
	lease, fence, queue, alive, released, wake string
}

// key names one of resource's keys.
func key(prefix, resource, kind string) string {
	return prefix + "{" + resource + "}:" + kind
}

// keys returns resource's keys, cut from one string: one allocation
// instead of six on the acquire and release paths.
func keys(prefix, resource string) resourceKeys {
	var b strings.Builder
	// Five names of the form prefix{resource}:kind, and the fence counter's
	// prefix{tag}:fences with its 3-byte slot tag.
	b.Grow(5*(len(prefix)+len(resource)+3) + len(prefix) + 3 + 3 +
		len(kindLease+kindFences+kindQueue+kindAlive+kindReleased+kindWake))
	name := func(tag, kind string) string {
		start := b.Len()
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteString("}:")
		b.WriteString(kind)
		return b.String()[start:] // the buffer never moves: earlier names stay valid
	}
	return resourceKeys{lease: name(resource, kindLease), fence: name(slotTag(slotOf(resource)), kindFences),
		queue: name(resource, kindQueue), alive: name(resource, kindAlive), released: name(resource, kindReleased),
		wake: name(resource, kindWake)}
}

// slotCounter returns the key of hash slot s's fence counter.
func slotCounter(prefix string, s int) string { return key(prefix, slotTag(s), kindFences) }

// slotTag returns the hash tag of slot s's fence counter.
func slotTag(s int) string { return slotTags[3*s : 3*s+3] }

// slotOf returns the Redis Cluster hash slot of resource's keys: the CRC16
// of their hash tag, which is resource up to its first '}' (see the Cluster
// spec; resource is not empty and does not begin with '}').
func slotOf(resource string) int {
	tag := resource
	if i := strings.IndexByte(resource, '}'); i >= 0 {
		tag = resource[:i]
	}
	return int(crc16(tag) % numSlots)
}

// crc16 is CRC16-XMODEM, by which Redis Cluster hashes keys.
func crc16(s string) uint16 {
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

// wakeChannel returns the wake channel of the waiters of the Client with id.
func (k *resourceKeys) wakeChannel(id string) string { return k.wake + ":" + id }

// resourcePattern returns the SCAN pattern that matches the keys of the
// resources whose names match pattern (a Redis glob).
func resourcePattern(prefix, pattern string) string {
	return escapeGlob(prefix) + "{" + pattern + "}:*"
}

// resourceOf returns the resource and the kind of a key written under
// prefix, and false for a key that is not one of redlease's.
func resourceOf(prefix, k string) (resource, kind string, ok bool) {
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

// escapeGlob quotes the characters that are special in a Redis glob.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
