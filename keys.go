package redlease

import "strings"

// The key layout: the only place where a key redlease writes is spelled.
//
// Every key of resource R is <prefix>{R}:<kind>. The braces make R the
// keys' Redis Cluster hash tag, so all of them share R's slot and one script
// may use them all; that is why the prefix may not hold a brace, nor R begin
// with '}' (see config.validate and Client.leaseConfig).
//
//	<prefix>{R}:lease     the lease: "<owner>:<fence>", with the TTL
//	<prefix>{R}:fence     the fence counter, without a TTL
//	<prefix>{R}:queue     the waiters, in arrival order (see lua/queue.lua)
//	<prefix>{R}:alive     the waiters' liveness deadlines
//	<prefix>{R}:released  the last released lease, for the time it had left
//	<prefix>{R}:wake:<id> the wake channel of the waiters of Client <id>
//	<prefix>{R}:leader    an election's leader record
const (
	kindLease    = "lease"
	kindFence    = "fence"
	kindQueue    = "queue"
	kindAlive    = "alive"
	kindReleased = "released"
	kindWake     = "wake"
	kindLeader   = "leader"
)

// resourceKeys are the keys (and the wake channel's stem) of one resource.
// leader is set only for an election's name.
type resourceKeys struct {
	lease, fence, queue, alive, released, wake, leader string
}

// key names one of resource's keys.
func key(prefix, resource, kind string) string {
	return prefix + "{" + resource + "}:" + kind
}

// keys returns resource's keys, cut from one string: one allocation
// instead of six on the acquire and release paths.
func keys(prefix, resource string) resourceKeys {
	var b strings.Builder
	b.Grow(6*(len(prefix)+len(resource)+3) + len(kindLease+kindFence+kindQueue+kindAlive+kindReleased+kindWake))
	name := func(kind string) string {
		start := b.Len()
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(resource)
		b.WriteString("}:")
		b.WriteString(kind)
		return b.String()[start:] // the buffer never moves: earlier names stay valid
	}
	return resourceKeys{lease: name(kindLease), fence: name(kindFence), queue: name(kindQueue),
		alive: name(kindAlive), released: name(kindReleased), wake: name(kindWake)}
}

// electionKeys returns the keys of an election's name: its lease's, and its
// leader record.
func electionKeys(prefix, name string) resourceKeys {
	k := keys(prefix, name)
	k.leader = key(prefix, name, kindLeader)
	return k
}

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
