package redlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TryAcquire takes the lease of resource if it is free, without waiting.
//
// If another owner holds it, TryAcquire returns a *BusyError, which matches
// ErrNotAcquired and says how long the holder's lease has left. If Redis did
// not answer (the request may or may not have taken effect), TryAcquire
// retries a few times with the same owner token, which the acquire script
// recognises, so a retry never creates a second holder or draws a second
// fence. If the outcome is still unknown, it releases by owner token (best
// effort, bounded by the release timeout) and returns an error matching both
// ErrNotAcquired and ErrOutcomeUnknown; the TTL removes a lease that the
// release could not reach.
//
// The lease's context keeps the values of ctx but not its cancellation.
func (c *Client) TryAcquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	ls, err := c.acquire(ctx, []string{resource}, opts, false) // the slice does not escape
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// Acquire takes the lease of resource, waiting while another owner holds it,
// until it is acquired, ctx ends, or the wait limit (WithMaxWait) passes.
//
// A waiter does not poll. It queues itself in Redis and sleeps until the
// holder's Release wakes it (release wakes one waiter, the first in the
// queue, not all of them), until the holder's lease would expire, or until a
// backoff timer with full jitter (25 ms growing to 1 s) fires, which bounds
// the cost of a lost wake-up. Without WithFair, a free lease goes to whoever
// asks first, queued or not; with it, to the waiters in arrival order.
//
// When ctx ends first, Acquire leaves the queue and returns an error that
// matches both ErrNotAcquired and ctx.Err(). Unknown outcomes are resolved
// as in TryAcquire, retrying with the same owner token for as long as ctx
// allows.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	ls, err := c.acquire(ctx, []string{resource}, opts, true) // the slice does not escape
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// AcquireAll takes the leases of several resources, all or none, waiting as
// Acquire does. It returns them in the order of resources; each lease has its
// own fence, context and renewals, and is released on its own.
//
// When all keys share a Redis Cluster hash slot (always, without Cluster),
// one script takes every lease or none, in one round trip. Otherwise it
// takes them one by one in sorted order, so that two calls never wait for
// each other in a cycle, and releases those it took if one cannot be had.
// A resource named twice, and WithFair, are invalid here.
func (c *Client) AcquireAll(ctx context.Context, resources []string, opts ...Option) ([]*Lease, error) {
	return c.acquire(ctx, resources, opts, true)
}

// TryAcquireAll is AcquireAll without waiting: if any resource is held, it
// takes none and returns a *BusyError naming it.
func (c *Client) TryAcquireAll(ctx context.Context, resources []string, opts ...Option) ([]*Lease, error) {
	return c.acquire(ctx, resources, opts, false)
}

// maxUnknownRetries bounds how often TryAcquire repeats an acquire whose
// outcome it could not learn.
const maxUnknownRetries = 2

// acquisition is one acquire call: its resources, their keys and one owner
// token used for every attempt.
type acquisition struct {
	c         *Client
	cfg       *config
	resources []string
	owner     string // a random UUID
	member    string // the owner's queue member, '<owner>/<client id>'; see queue.lua
	names     []resourceKeys
	wait      bool
	queued    bool // an attempt may have put the owner in a queue

	// The storage of an acquisition of one resource, the common case, so
	// that the acquisition is one allocation.
	resource [1]string
	name     [1]resourceKeys
	fence    [1]int64
	lease    [1]*Lease
}

func (c *Client) acquire(ctx context.Context, resources []string, opts []Option, wait bool) ([]*Lease, error) {
	cfg, err := c.leaseConfig(resources, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notAcquired(resources[0], context.Cause(ctx))
	}
	if wait && cfg.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	a := &acquisition{c: c, cfg: cfg, wait: wait}
	a.owner, a.member = newOwner(c.hub.id)
	if len(resources) == 1 {
		a.resource[0], a.name[0] = resources[0], cfg.keys(resources[0])
		a.resources, a.names = a.resource[:], a.name[:]
	} else {
		a.resources, a.names = slices.Clone(resources), make([]resourceKeys, len(resources))
		for i, r := range resources {
			a.names[i] = cfg.keys(r)
		}
	}
	var start time.Time // for the observers only: reading the clock is not free
	if len(cfg.observers) > 0 {
		start = time.Now()
	}
	var leases []*Lease
	if wait {
		leases, err = a.waitFor(ctx)
	} else {
		leases, err = a.try(ctx)
	}
	if len(resources) > 1 && redis.HasErrorPrefix(err, "CROSSSLOT") {
		return c.acquireInOrder(ctx, resources, opts, wait)
	}
	if len(cfg.observers) > 0 {
		a.report(ctx, start, leases, err)
	}
	return leases, err
}

// newOwner returns a new owner token, a random UUID (version 4), and its
// queue member, '<owner>/<client id>': one string, of which the owner is the
// head.
func newOwner(clientID string) (owner, member string) {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	var text [36]byte
	hex.Encode(text[0:8], u[0:4])
	hex.Encode(text[9:13], u[4:6])
	hex.Encode(text[14:18], u[6:8])
	hex.Encode(text[19:23], u[8:10])
	hex.Encode(text[24:36], u[10:16])
	text[8], text[13], text[18], text[23] = '-', '-', '-', '-'
	var b strings.Builder
	b.Grow(len(text) + 1 + len(clientID))
	b.Write(text[:])
	b.WriteByte('/')
	b.WriteString(clientID)
	member = b.String()
	return member[:len(text)], member
}

// report sends the acquire events: one per lease taken, or one for the failure.
func (a *acquisition) report(ctx context.Context, start time.Time, leases []*Lease, err error) {
	end := time.Now()
	if err != nil {
		e := Event{Kind: EventAcquire, Outcome: outcomeOf(err), Resource: a.resources[0], Start: start, End: end, Err: err}
		var busy *BusyError
		if errors.As(err, &busy) {
			e.Resource = busy.Resource
		}
		a.cfg.observe(ctx, e)
		return
	}
	for _, l := range leases {
		a.cfg.observe(ctx, Event{Kind: EventAcquire, Outcome: OutcomeOK, Resource: l.resource, Owner: l.owner,
			Fence: l.fence, Start: start, End: end})
	}
}

// acquireInOrder takes leases one by one, in sorted order of their names.
func (c *Client) acquireInOrder(ctx context.Context, resources []string, opts []Option, wait bool) ([]*Lease, error) {
	order := make([]int, len(resources))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(resources[i], resources[j]) })
	leases := make([]*Lease, len(resources))
	for _, i := range order {
		ls, err := c.acquire(ctx, resources[i:i+1], opts, wait)
		if err != nil {
			for _, l := range leases {
				if l != nil {
					_ = l.Release(ctx)
				}
			}
			return nil, err
		}
		leases[i] = ls[0]
	}
	return leases, nil
}

// try makes one attempt, repeated only while its outcome is unknown.
func (a *acquisition) try(ctx context.Context) ([]*Lease, error) {
	bo := backoff{min: minBackoff, max: maxBackoff}
	for attempt := 0; ; attempt++ {
		ls, err := a.attempt(ctx)
		if err == nil || errors.Is(err, ErrNotAcquired) {
			return ls, err
		}
		if !mayHaveReached(err) {
			return nil, notAcquired(a.resources[0], err)
		}
		if attempt >= maxUnknownRetries {
			return nil, a.giveUp(ctx, nil, err)
		}
		if serr := a.c.hub.sleep(ctx, nil, bo.next()); serr != nil {
			return nil, a.giveUp(ctx, serr, err)
		}
	}
}

// waitFor attempts until the leases are ours or ctx ends.
func (a *acquisition) waitFor(ctx context.Context) ([]*Lease, error) {
	// The waiter joins the hub only once an attempt found a lease busy: an
	// uncontended acquire costs nothing here.
	var (
		wake    chan struct{}
		waiters []*waiter
	)
	defer func() {
		for _, w := range waiters {
			w.leave()
		}
	}()
	retry := backoff{min: minBackoff, max: maxBackoff}        // after errors
	poll := backoff{min: waitBackoffMin, max: waitBackoffMax} // between wake-ups
	var (
		unknown error // the last error after which our lease may exist
		failed  error // the last error that was not contention
	)
	for {
		ls, err := a.attempt(ctx)
		if err == nil || errors.Is(err, ErrClientClosed) {
			return ls, err
		}
		var (
			busy  *BusyError
			delay time.Duration
		)
		switch {
		case errors.As(err, &busy):
			unknown, failed = nil, nil // someone else holds it, so no attempt of ours does
			if waiters == nil {
				wake = make(chan struct{}, 1)
				for i := range a.resources {
					waiters = append(waiters, a.c.hub.join(a.names[i].wake+":"+a.c.hub.id, a.owner, wake))
				}
			}
			if w := waiters[busy.index]; !w.subscribed() && w.subscribe(ctx) {
				continue // at once: the lease may have been freed before the subscription
			}
			delay = poll.next()
			if busy.first && busy.Remaining >= 0 {
				delay = min(delay, busy.Remaining+time.Millisecond)
			}
		case errors.Is(err, ErrNotAcquired) || !mayHaveReached(err):
			// Known not taken: the reply came too late and the lease was
			// given up, or the request could not be sent. A waiting caller
			// rides out an outage; a refused request is final.
			if isServerError(err) {
				return nil, a.giveUp(ctx, err, nil)
			}
			failed, delay = err, retry.next()
		default:
			unknown, failed = err, err
			delay = retry.next()
		}
		if serr := a.c.hub.sleep(ctx, wake, delay); serr != nil {
			if failed != nil && unknown == nil {
				serr = fmt.Errorf("%w (last attempt: %w)", serr, failed)
			}
			return nil, a.giveUp(ctx, serr, unknown)
		}
	}
}

// giveUp ends an acquisition that will not return leases: it leaves the
// queues and releases any lease that an attempt of unknown outcome may have
// taken. cause is why it stops (nil when retries ran out); unknown, if not
// nil, the error that left an attempt's outcome unknown.
func (a *acquisition) giveUp(ctx context.Context, cause, unknown error) error {
	if a.queued || unknown != nil {
		a.leave(ctx)
	}
	switch {
	case unknown == nil:
		return notAcquired(a.resources[0], cause)
	case cause == nil:
		return notAcquired(a.resources[0], fmt.Errorf("%w: %w", ErrOutcomeUnknown, unknown))
	}
	return notAcquired(a.resources[0], fmt.Errorf("%w: %w: %w", cause, ErrOutcomeUnknown, unknown))
}

// leave runs the release script for the owner token on every resource,
// detached from ctx and bounded by the release timeout: it deletes a lease
// the owner may hold and takes it out of the queue, waking the next waiter
// if the lease is free. It is best effort: the lease's TTL and the waiter
// timeout clean up after it.
func (a *acquisition) leave(ctx context.Context) {
	rctx, cancel := context.WithTimeout(detach(ctx), a.cfg.releaseTimeout)
	defer cancel()
	for i := range a.resources {
		_, _ = a.c.release(rctx, &a.names[i], &a.owner, &a.member)
	}
}

func notAcquired(resource string, err error) error {
	if errors.Is(err, ErrNotAcquired) {
		return err
	}
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, err)
}

// release runs the release script for owner: compare-and-delete, leave the
// queue if member (not nil) may be waiting there, wake the next waiter.
func (c *Client) release(ctx context.Context, k *resourceKeys, owner, member any) (bool, error) {
	n, err := releaseScript.run(ctx, c.rdb, c.releaseArgs(k, owner, member), intReply).(*redis.IntCmd).Result()
	return n == 1, err
}

// releaseArgs is the release script's command (see script.command); member
// is nil or "" for an owner that is not queued.
func (c *Client) releaseArgs(k *resourceKeys, owner, member any) []any {
	if member == nil {
		member = ""
	}
	return []any{nil, nil, 4, &k.lease, &k.queue, &k.alive, &k.released, owner, &k.wake, c.hub.shardedArg(), member}
}

// attempt runs the acquire script once.
func (a *acquisition) attempt(ctx context.Context) ([]*Lease, error) {
	cfg := a.cfg
	timeout := any(0)
	if a.wait {
		timeout = waiterTimeoutArg
	}
	var (
		s      = acquireScript
		newCmd = intReply
		args   []any
	)
	if len(a.resources) == 1 {
		k := &a.names[0]
		args = []any{nil, nil, 4, &k.lease, &k.fence, &k.queue, &k.alive,
			&a.owner, cfg.ttlArg, timeout, flag(cfg.fair), flag(a.queued), &a.member}
	} else {
		s, newCmd = acquireAllScript, sliceReply
		args = make([]any, 3, 3+4*len(a.names)+5)
		args[2] = 4 * len(a.names)
		for i := range a.names {
			k := &a.names[i]
			args = append(args, &k.lease, &k.fence, &k.queue, &k.alive)
		}
		args = append(args, &a.owner, cfg.ttlArg, timeout, flag(a.queued), &a.member)
	}
	sent := time.Now()
	var (
		cmd   scriptCmd
		acked int64
		err   error
	)
	if cfg.replicas > 0 {
		cmd, acked, err = a.runAcked(ctx, s, args, newCmd)
	} else {
		cmd = s.run(ctx, a.c.rdb, args, newCmd)
		err = cmd.Err()
	}
	if a.wait && (err == nil || mayHaveReached(err)) {
		a.queued = true // the script ran, or may have
	}
	if err != nil {
		return nil, err
	}
	fences, err := a.decode(cmd)
	if err != nil {
		return nil, err
	}
	if cfg.replicas > 0 && acked < int64(cfg.replicas) {
		a.leave(ctx)
		return nil, fmt.Errorf("%w: %w: %q: %d of %d replicas acknowledged within %v",
			ErrNotAcquired, ErrNotReplicated, a.resources[0], acked, cfg.replicas, cfg.replicaTimeout)
	}
	leases := a.lease[:]
	if len(a.resources) > 1 {
		leases = make([]*Lease, len(a.resources))
	}
	for i, r := range a.resources {
		leases[i] = a.c.newLease(ctx, cfg, r, &a.names[i], a.owner, fences[i])
	}
	// Each lease is complete (deadline, fence) before the Client tracks it,
	// and from then on Close may release it.
	for _, l := range leases {
		if !l.start(sent) {
			// The reply came so late that the leases could expire any moment:
			// never hand out a lease whose local deadline has already passed.
			return nil, a.giveBack(ctx, leases, fmt.Errorf("%w: %q: the reply arrived after the lease's local deadline", ErrNotAcquired, l.resource))
		}
	}
	if cfg.fences != nil {
		if err := a.drawFences(ctx, leases); err != nil {
			return nil, a.giveBack(ctx, leases, err)
		}
	}
	if !a.c.trackAll(leases) { // Close began while the request was on its way
		return nil, a.giveBack(ctx, leases, notAcquired(a.resources[0], ErrClientClosed))
	}
	for _, l := range leases {
		if next := sent.Add(l.interval); cfg.autoRenew && l.renewsUntil(next) {
			a.c.wd.schedule(l, next)
		}
	}
	// Close, or the local deadline during a slow fence source, may have ended
	// a lease already: hand out none that has.
	for i, l := range leases {
		if err := l.handOut(); err != nil {
			if a.c.closed.Load() {
				err = ErrClientClosed
			}
			for _, l := range leases[:i] {
				l.takeBack()
			}
			return nil, a.giveBack(ctx, leases, notAcquired(l.resource, err))
		}
	}
	return leases, nil
}

// giveBack ends leases that the acquire call will not hand out, releases
// them in Redis by owner token, and returns err.
func (a *acquisition) giveBack(ctx context.Context, leases []*Lease, err error) error {
	for _, l := range leases {
		l.discard(err)
	}
	a.leave(ctx)
	return err
}

// decode reads an acquire script's reply (see acquire.lua and
// acquire_all.lua): the fences of the new leases, or a *BusyError.
func (a *acquisition) decode(cmd scriptCmd) ([]int64, error) {
	if ic, ok := cmd.(*redis.IntCmd); ok {
		v := ic.Val()
		switch {
		case v > 0:
			a.fence[0] = v
			return a.fence[:], nil
		case v < -1:
			x := -v
			return nil, a.busy(0, x/2-2, x&1 == 1)
		}
		return nil, fmt.Errorf("redlease: acquire script replied %d", v)
	}
	res, err := cmd.(*redis.Cmd).Int64Slice()
	if err != nil {
		return nil, err
	}
	switch {
	case len(res) == len(a.resources)+1 && res[0] == 1:
		return res[1:], nil
	case len(res) == 4 && res[0] == 0 && res[3] >= 1 && int(res[3]) <= len(a.resources):
		return nil, a.busy(int(res[3])-1, res[1], res[2] == 1)
	}
	return nil, fmt.Errorf("redlease: acquire script replied %v", res)
}

// busy is the error for resource i, held by another owner whose lease has
// pttl ms left (-1: no TTL).
func (a *acquisition) busy(i int, pttl int64, first bool) *BusyError {
	busy := &BusyError{Resource: a.resources[i], Remaining: time.Duration(pttl) * time.Millisecond, first: first, index: i}
	if pttl < 0 {
		busy.Remaining = -1
	}
	return busy
}

// drawFences gives each new lease a fence from the configured source, and
// records it in the lease in Redis while the lease is still ours; that also
// renews the lease, whose local deadline moves on as a renewal's would.
func (a *acquisition) drawFences(ctx context.Context, leases []*Lease) error {
	for _, l := range leases {
		fence, err := a.cfg.fences.NextFence(ctx, l.resource)
		if err == nil && fence <= 0 {
			err = fmt.Errorf("fence source returned %d", fence)
		}
		var ok bool
		sent := time.Now()
		if err == nil {
			ok, err = isOne(confirmScript.run(ctx, a.c.rdb,
				[]any{nil, nil, 1, &l.keys.lease, &l.owner, fence, l.cfg.ttlArg}, intReply))
			if err == nil && !ok {
				err = ErrLeaseLost
			}
		}
		if err != nil {
			return fmt.Errorf("%w: %q: drawing its fence: %w", ErrNotAcquired, l.resource, err)
		}
		l.mu.Lock() // the deadline timer's observers read the fence
		l.fence = fence
		if l.state == stateActive {
			l.extendLocked(sent)
		}
		l.mu.Unlock()
	}
	return nil
}

// runAcked runs an acquire script and WAIT in one pipeline on the master
// that owns the keys, so that WAIT covers the script's writes: the reply
// says how many replicas acknowledged them.
func (a *acquisition) runAcked(ctx context.Context, s *script, args []any,
	newCmd func(context.Context, ...any) scriptCmd) (scriptCmd, int64, error) {
	conn := redis.Cmdable(a.c.rdb)
	if cc, ok := a.c.rdb.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, a.names[0].lease)
		if err != nil {
			return nil, 0, err
		}
		conn = master
	}
	for loaded := false; ; loaded = true {
		pipe := conn.Pipeline()
		cmd := s.command(ctx, args, false, newCmd)
		_ = pipe.Process(ctx, cmd)
		wait := waitCmd(ctx, pipe, a.cfg.replicas, a.cfg.replicaTimeout)
		_, _ = pipe.Exec(ctx)
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") && !loaded {
			if err := s.Load(ctx, conn).Err(); err != nil {
				return nil, 0, err
			}
			continue
		}
		if err := cmd.Err(); err != nil {
			return nil, 0, err
		}
		return cmd, wait.Val(), wait.Err()
	}
}

// waitCmd queues WAIT on pipe. go-redis's own Wait, which extends the read
// timeout by the WAIT timeout, is on the concrete pipeline type only.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, n int, timeout time.Duration) *redis.IntCmd {
	if p, ok := pipe.(interface {
		Wait(context.Context, int, time.Duration) *redis.IntCmd
	}); ok {
		return p.Wait(ctx, n, timeout)
	}
	cmd := redis.NewIntCmd(ctx, "wait", n, timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// flag is a script's boolean argument, boxed once.
func flag(b bool) any {
	if b {
		return flagOn
	}
	return flagOff
}

var flagOn, flagOff any = "1", "0"

// key names one of resource's keys, <prefix>{<resource>}:<kind>. The braces
// put all of them in one Redis Cluster hash slot.
func (c *config) key(resource, kind string) string {
	return c.prefix + "{" + resource + "}:" + kind
}

// resourceKeys are the keys (and the wake channel) of one resource.
type resourceKeys struct {
	lease, fence, queue, alive, released, wake string
}

// keys returns all of resource's key names, cut from one string: one
// allocation instead of six on the acquire and release paths.
func (c *config) keys(resource string) resourceKeys {
	var b strings.Builder
	b.Grow(6*(len(c.prefix)+len(resource)+3) + len("leasefencequeuealivereleasedwake"))
	name := func(kind string) string {
		start := b.Len()
		b.WriteString(c.prefix)
		b.WriteByte('{')
		b.WriteString(resource)
		b.WriteString("}:")
		b.WriteString(kind)
		return b.String()[start:] // the buffer never moves: earlier names stay valid
	}
	return resourceKeys{lease: name("lease"), fence: name("fence"), queue: name("queue"),
		alive: name("alive"), released: name("released"), wake: name("wake")}
}

// mayHaveReached reports whether a failed request may have been executed by
// Redis: everything except a Redis error reply (the server answered) and
// failures that happen before anything is written to the connection.
func mayHaveReached(err error) bool {
	if isServerError(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// requestError describes a failed renew or release request.
func requestError(op, resource string, err error) error {
	if mayHaveReached(err) {
		return fmt.Errorf("redlease: %s %q: %w: %w", op, resource, ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("redlease: %s %q: %w", op, resource, err)
}

// Do acquires the lease of resource (waiting as Acquire does), runs fn with
// the lease's context, and releases the lease on every path out of fn,
// panics included. It returns fn's error joined with the release error, so a
// lease that was lost while fn ran shows as ErrLeaseLost even when fn
// succeeded. fn should stop when its context ends.
func (c *Client) Do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, opts...)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, l.Release(ctx))
	}()
	return fn(l.Context(), l)
}
