package wire

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/driver"
)

// Script is one Lua script. It is sent by EVALSHA and its hash; by EVAL
// and its source where the server lacks it (NOSCRIPT) or its hash is not
// known yet.
type Script struct {
	src string

	// The hash is computed here only where the process may use SHA-1: in
	// FIPS 140-only mode (GODEBUG=fips140=only) crypto/sha1 panics, and the
	// hash is the server's (see Conn.hash).
	once   sync.Once
	local  string                 // the hash computed here, "" if it may not be
	served atomic.Pointer[string] // the hash as the server computed it
}

// NewScript returns the script with source src. It computes nothing: a
// package may declare its scripts at init, even in FIPS 140-only mode.
func NewScript(src string) *Script { return &Script{src: src} }

// Source returns the script's source.
func (s *Script) Source() string { return s.src }

// localHash returns the script's SHA-1 in hex, or "" where the process may
// not compute it.
func (s *Script) localHash() string {
	s.once.Do(func() {
		if !sha1Allowed() {
			return
		}
		sum := sha1.Sum([]byte(s.src))
		s.local = hex.EncodeToString(sum[:])
	})
	return s.local
}

// sha1Allowed reports whether the process may use SHA-1 (a test makes it
// false).
var sha1Allowed = func() bool { return !fips140.Enforced() }

// hashScript asks the server for the SHA-1 of its ARGV[1], the hash by which
// EVALSHA finds a script.
var hashScript = NewScript("return redis.sha1hex(ARGV[1])")

// Call is one run of a script, with its keys and arguments.
type Call struct {
	Script     *Script
	Keys, Args []string
}

// newCall returns a call of s whose first nkeys words are its keys: one
// allocation for all of them.
func newCall(s *Script, nkeys int, words ...string) Call {
	return Call{Script: s, Keys: words[:nkeys:nkeys], Args: words[nkeys:]}
}

// Conn is how redlease and package fencing talk to Redis: every script runs
// through Conn.Run or Conn.RunMany, by EVALSHA and, on NOSCRIPT, again by
// EVAL (the one cache-miss path), on a driver. It remembers whether Redis
// answered the last request (see Connect).
type Conn struct {
	d      driver.Driver
	keeper driver.DeadlineKeeper // nil: d keeps every deadline
	late   bool                  // d is a driver.LateSender that sends late
	health atomic.Int32
	comb   combiner // see combine.go
}

// The health of a Conn.
const (
	healthUnknown   = iota // no request yet, or none since the last silence
	healthAnswering        // the last request got an answer (a reply, or an error reply)
	healthSilent           // the last request got none
)

// NewConn returns a Conn on d. Once combineAfter of its requests are in
// flight, its concurrent calls share round trips (see combine.go); never if
// combineAfter is 0.
func NewConn(d driver.Driver, combineAfter int) *Conn {
	c := &Conn{d: d, comb: combiner{after: combineAfter}}
	c.keeper, _ = d.(driver.DeadlineKeeper)
	if l, ok := d.(driver.LateSender); ok {
		c.late = l.SendsLate()
	}
	return c
}

// Addr says where the driver connects, "" if it cannot say
// (driver.Addresser).
func (c *Conn) Addr() string {
	if a, ok := c.d.(driver.Addresser); ok {
		return a.Addr()
	}
	return ""
}

// Driver returns the Conn's driver.
func (c *Conn) Driver() driver.Driver { return c.d }

// hash returns the hash to send s by: computed here, or once asked of the
// server in FIPS 140-only mode; "" to send the source (the server could not
// be asked now).
func (c *Conn) hash(ctx context.Context, s *Script) string {
	if h := s.localHash(); h != "" || s == hashScript {
		return h
	}
	if h := s.served.Load(); h != nil {
		return *h
	}
	r := c.d.Eval(ctx, driver.Call{Source: hashScript.src, Args: []string{s.src}})
	h, ok := r.Value.(string)
	if r.Err != nil || !ok || len(h) != 40 {
		return ""
	}
	s.served.Store(&h)
	return h
}

// call is c as the driver sends it: by EVALSHA, unless source.
func (c *Conn) call(ctx context.Context, cl Call, source bool) driver.Call {
	dc := driver.Call{Source: cl.Script.src, Keys: cl.Keys, Args: cl.Args}
	if !source {
		dc.Hash = c.hash(ctx, cl.Script)
	}
	return dc
}

// noScript reports whether err is the server's answer that it lacks the
// script: a call that must be sent again with its source.
func (c *Conn) noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") && c.d.Classify(err) == driver.Refused
}

// Run runs cl once: by EVALSHA, and by EVAL after NOSCRIPT.
func (c *Conn) Run(ctx context.Context, cl Call) driver.Reply {
	dc := c.call(ctx, cl, false)
	r := c.eval(ctx, dc)
	if dc.Hash != "" && c.noScript(r.Err) {
		dc.Hash = ""
		r = c.eval(ctx, dc)
	}
	c.note(r.Err)
	return r
}

// RunMany runs calls(i), i < n, in batches of at most driver.MaxBatch, each
// sent by the driver in as few round trips as it can; the calls that meet
// NOSCRIPT go again, with their source, in one more. Every call gets a reply
// of its own.
func (c *Conn) RunMany(ctx context.Context, n int, calls func(i int) Call) []driver.Reply {
	out := make([]driver.Reply, n)
	if n == 1 {
		out[0] = c.Run(ctx, calls(0))
		return out
	}
	batch := make([]driver.Call, min(n, driver.MaxBatch))
	for from := 0; from < n; from += driver.MaxBatch {
		b, replies := batch[:min(driver.MaxBatch, n-from)], out[from:min(from+driver.MaxBatch, n)]
		for i := range b {
			b[i] = c.call(ctx, calls(from+i), false)
		}
		c.d.EvalMany(ctx, b, replies)
		var again []int
		for i := range b {
			if b[i].Hash != "" && c.noScript(replies[i].Err) {
				again = append(again, i)
			}
		}
		if len(again) > 0 { // the server lost its script cache: send the source
			resend, got := make([]driver.Call, len(again)), make([]driver.Reply, len(again))
			for j, i := range again {
				resend[j] = b[i]
				resend[j].Hash = ""
			}
			c.d.EvalMany(ctx, resend, got)
			for j, i := range again {
				replies[i] = got[j]
			}
		}
	}
	c.note(out[n-1].Err)
	return out
}

// RunWait runs cl and then WAIT replicas timeout, in one round trip (see
// driver.Driver.EvalWait). After NOSCRIPT both go again: WAIT waited for
// nothing of ours.
func (c *Conn) RunWait(ctx context.Context, cl Call, replicas int, timeout time.Duration) (driver.Reply, int64) {
	dc := c.call(ctx, cl, false)
	r, acked := c.d.EvalWait(ctx, dc, replicas, timeout)
	if dc.Hash != "" && c.noScript(r.Err) {
		dc.Hash = ""
		r, acked = c.d.EvalWait(ctx, dc, replicas, timeout)
	}
	c.note(r.Err)
	return r, acked
}

// note records whether a request got an answer. A call that left the
// combining queue unsent was no request: it says nothing of Redis.
func (c *Conn) note(err error) {
	if err != nil && errors.As(err, new(unsent)) { // the target escapes: only on failure
		return
	}
	h := int32(healthAnswering)
	if err != nil && c.Classify(err) != driver.Refused {
		h = healthSilent
	}
	if c.health.Load() != h {
		c.health.Store(h)
	}
}

// Connect makes sure that Redis answers, with a harmless round trip on the
// node that serves key (driver.Driver.Ping), unless the Conn's last request
// was answered: an acquire that follows then fails before it is sent, not
// after, when Redis cannot be reached. The health is the Conn's as a whole:
// on Cluster, answers from other masters skip the check for a master that
// has gone silent.
func (c *Conn) Connect(ctx context.Context, key string) error {
	if c.health.Load() == healthAnswering {
		return nil
	}
	err := c.d.Ping(ctx, key)
	c.note(err)
	return err
}

// Classify is the driver's view of a failed request's error, except that
// an error reply by which Redis says it runs nothing now counts as not sent
// (see unavailable), and so does a call that left the combining queue
// unsent.
func (c *Conn) Classify(err error) driver.ErrorClass {
	if errors.As(err, new(unsent)) {
		return driver.NotSent
	}
	class := c.d.Classify(err)
	if class == driver.Refused && unavailable(err.Error()) {
		return driver.NotSent
	}
	return class
}

// unavailable reports whether msg is an error reply by which Redis says it
// runs nothing now, the request included: it is loading its data, is a
// replica, has no master or cluster quorum, too few replicas or too many
// clients, or is running a script that overran its time limit. Such an
// outage is ridden out as one where Redis cannot be reached.
func unavailable(msg string) bool {
	for _, code := range []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ",
		"NOREPLICAS ", "BUSY ", "ERR max number of clients reached"} {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}

// KeepsDeadline reports whether a request made now with a context whose
// deadline is d returns by d (see driver.DeadlineKeeper).
func (c *Conn) KeepsDeadline(d time.Time) bool {
	return c.keeper == nil || c.keeper.KeepsDeadline(d)
}

// MayArriveLate reports whether a request that failed with err, when its
// context ended, may still reach Redis after requests made since: the
// driver writes such requests late (driver.LateSender), or err is that of a
// combined call that stopped waiting while another call sent its batch.
func (c *Conn) MayArriveLate(err error) bool {
	return c.late || errors.As(err, new(late))
}

// Sharded reports whether the wake channels are shard channels (Cluster).
func (c *Conn) Sharded() bool { return c.d.Sharded() }

// ScanCount is the COUNT hint of each SCAN call: about how many keys one
// call looks at, and so the size of one batch given to Scan's fn.
const ScanCount = 200

// Scan calls fn with each batch of keys that SCAN finds for match on every
// master, stopping at fn's first error.
func (c *Conn) Scan(ctx context.Context, match string, fn func(keys []string) error) error {
	return c.d.Scan(ctx, match, ScanCount, fn)
}

// Subscribe subscribes to channel (see driver.Driver.Subscribe).
func (c *Conn) Subscribe(ctx context.Context, channel string, handle func(payload string)) (driver.Subscription, error) {
	return c.d.Subscribe(ctx, channel, handle)
}

// SubscribeClassic subscribes to the classic channel channel (see
// driver.ClassicSubscriber), with Subscribe off Cluster; on Cluster it
// fails if the driver cannot.
func (c *Conn) SubscribeClassic(ctx context.Context, channel string, handle func(payload string)) (driver.Subscription, error) {
	if !c.d.Sharded() {
		return c.d.Subscribe(ctx, channel, handle)
	}
	if cs, ok := c.d.(driver.ClassicSubscriber); ok {
		return cs.SubscribeClassic(ctx, channel, handle)
	}
	return nil, errors.New("redlease: the Redis driver cannot subscribe to a classic channel on Cluster (driver.ClassicSubscriber)")
}

// Hash returns the script's SHA-1 in hex as EVALSHA takes it, computed
// here; "" where the process may not use SHA-1.
func (s *Script) Hash() string { return s.localHash() }
