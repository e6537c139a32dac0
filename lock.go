package redlease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Client takes leases on one Redis deployment. It is safe for concurrent use;
// create one per Redis deployment and share it. Its zero value is not usable;
// call New.
type Client struct {
	rdb redis.UniversalClient
	cfg config
	err error // set by New for a nil client; returned by every call
	wd  watchdog
}

// New returns a Client that takes leases through rdb, which may be a plain
// client (redis.NewClient), a Sentinel failover client
// (redis.NewFailoverClient) or a cluster client (redis.NewClusterClient).
// opts are the defaults of every lease; options given to an acquire call
// override them for that lease. New does no I/O; invalid options are reported
// by the first acquire call. A nil rdb makes every call return
// ErrInvalidArgument.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, cfg: defaultConfig()}
	c.cfg.apply(opts)
	if isNil(rdb) {
		c.err = invalidf("nil Redis client")
	}
	c.wd.rdb = rdb
	return c
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// leaseConfig merges the Client's defaults with opts and validates them.
func (c *Client) leaseConfig(resource string, opts []Option) (config, error) {
	if c == nil {
		return config{}, invalidf("nil Client")
	}
	if c.err != nil {
		return config{}, c.err
	}
	if resource == "" {
		return config{}, invalidf("empty resource name")
	}
	cfg := c.cfg
	cfg.apply(opts)
	if err := cfg.validate(); err != nil {
		return config{}, fmt.Errorf("redlease: %q: %w", resource, err)
	}
	return cfg, nil
}

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
	return c.acquire(ctx, resource, opts, false)
}

// Acquire takes the lease of resource, waiting while another owner holds it,
// until it is acquired or ctx ends. Between attempts it backs off
// exponentially with full jitter, never sleeping past the moment the
// holder's lease will expire. When ctx ends first, Acquire returns an error
// that matches both ErrNotAcquired and ctx.Err(). Unknown outcomes are
// resolved as in TryAcquire, retrying with the same owner token for as long
// as ctx allows.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, resource, opts, true)
}

// maxUnknownRetries bounds how often TryAcquire repeats an acquire whose
// outcome it could not learn.
const maxUnknownRetries = 2

func (c *Client) acquire(ctx context.Context, resource string, opts []Option, wait bool) (*Lease, error) {
	cfg, err := c.leaseConfig(resource, opts)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("redlease: owner token: %w", err)
	}
	owner := id.String()
	keys := []string{cfg.leaseKey(resource), cfg.fenceKey(resource)}

	var (
		unknown error // the last error after which our lease may exist
		bo      backoff
	)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, context.Cause(ctx))
	}
	for attempt := 0; ; attempt++ {
		l, err := c.attempt(ctx, &cfg, resource, owner, keys)
		if err == nil {
			return l, nil
		}
		delay := bo.next()
		var busy *BusyError
		switch {
		case errors.As(err, &busy):
			unknown = nil // someone else holds it, so no attempt of ours does
			if !wait {
				return nil, err
			}
			if busy.Remaining >= 0 && delay > busy.Remaining {
				delay = busy.Remaining
			}
		case errors.Is(err, ErrNotAcquired) || !mayHaveReached(err):
			// Known not taken: the server refused the request, it could not be
			// sent, or the reply came too late and the lease was given up.
			// Waiting callers ride out an outage.
			if !wait || isServerError(err) {
				return nil, notAcquired(resource, err)
			}
		default:
			unknown = err
			if !wait && attempt >= maxUnknownRetries {
				c.abandon(ctx, &cfg, resource, owner)
				return nil, notAcquired(resource, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
			}
		}
		if err := sleep(ctx, delay); err != nil {
			if unknown != nil {
				c.abandon(ctx, &cfg, resource, owner)
				return nil, notAcquired(resource, fmt.Errorf("%w: %w: %w", err, ErrOutcomeUnknown, unknown))
			}
			return nil, notAcquired(resource, err)
		}
	}
}

func notAcquired(resource string, err error) error {
	if errors.Is(err, ErrNotAcquired) {
		return err
	}
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, err)
}

// attempt runs the acquire script once.
func (c *Client) attempt(ctx context.Context, cfg *config, resource, owner string, keys []string) (*Lease, error) {
	sent := time.Now()
	res, err := acquireScript.Run(ctx, c.rdb, keys, owner, cfg.ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("redlease: acquire script replied %v", res)
	}
	if res[0] == 0 {
		remaining := time.Duration(res[1]) * time.Millisecond
		if res[1] < 0 {
			remaining = -1
		}
		return nil, &BusyError{Resource: resource, Remaining: remaining}
	}
	l := &Lease{
		c:        c,
		resource: resource,
		key:      keys[0],
		owner:    owner,
		fence:    res[1],
		ttlMS:    cfg.ttl.Milliseconds(),
		lifetime: cfg.lifetime(),
		interval: cfg.interval(),
		relTO:    cfg.releaseTimeout,
		index:    -1,
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if !l.start(sent) {
		// The reply came so late that the lease could expire any moment: never
		// hand out a lease whose local deadline has already passed.
		c.abandon(ctx, cfg, resource, owner)
		return nil, fmt.Errorf("%w: %q: the reply arrived after the lease's local deadline", ErrNotAcquired, resource)
	}
	if cfg.autoRenew {
		c.wd.schedule(l, sent.Add(l.interval))
	}
	return l, nil
}

// abandon releases by owner token a lease that may exist but will not be
// handed out, detached from ctx and bounded by the release timeout. It is best
// effort: the TTL removes the lease if this release cannot reach Redis.
func (c *Client) abandon(ctx context.Context, cfg *config, resource, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
	defer cancel()
	_ = releaseScript.Run(rctx, c.rdb, []string{cfg.leaseKey(resource)}, owner).Err()
}

func (c *config) leaseKey(resource string) string { return c.prefix + "{" + resource + "}:lease" }
func (c *config) fenceKey(resource string) string { return c.prefix + "{" + resource + "}:fence" }

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

type leaseState uint8

const (
	stateActive   leaseState = iota
	stateLost                // Redis said the lease is not ours
	stateLapsed              // no renewal confirmed before the local deadline, or max hold reached
	stateReleased            // Release was called
)

// Lease is a lease held on one resource. Its methods are safe for concurrent
// use. A Lease must not be copied.
type Lease struct {
	c        *Client
	resource string
	key      string
	owner    string
	fence    int64
	ttlMS    int64
	lifetime time.Duration
	interval time.Duration
	relTO    time.Duration
	ctx      context.Context
	cancel   context.CancelCauseFunc

	mu       sync.Mutex
	state    leaseState
	deadline time.Time // local deadline, with a monotonic reading
	timer    *time.Timer

	// Guarded by c.wd.mu.
	renewAt time.Time
	index   int  // in the watchdog's queue; -1 when not queued
	ended   bool // never queue again

	relMu   sync.Mutex // serialises Release
	relDone bool       // a Release reached a verdict
	relErr  error      // that verdict
}

// Resource returns the resource name the lease was taken on.
func (l *Lease) Resource() string {
	if l == nil {
		return ""
	}
	return l.resource
}

// Owner returns the lease's ownership token: a random UUID (v4), unique to
// this acquisition. Renew and release act only while Redis stores this token.
func (l *Lease) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Fence returns the lease's fencing token, > 0. On one Redis that neither
// fails over nor restarts without persistence, each new holder of a resource
// gets a larger fence than every earlier holder. Pass it with every write to
// the protected resource and let the resource reject a fence older than the
// newest it accepted: that, not the lease, is what stops a holder that paused
// past its TTL.
func (l *Lease) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Context returns a context that is done once the lease is lost, is about to
// lapse without a confirmed renewal, reached its maximum hold, or was
// released. context.Cause tells which: ErrLeaseLost (wrapped with the reason)
// or ErrReleased. It carries the values of the acquire call's context. Do the
// protected work under this context, and check it between steps that cannot
// be undone.
func (l *Lease) Context() context.Context {
	if l == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(invalidf("nil Lease"))
		return ctx
	}
	return l.ctx
}

// Deadline returns the local deadline of the lease: the monotonic-clock
// moment at which its context ends unless a renewal is confirmed first. It is
// the send time of the last confirmed acquire or renew plus the local lifetime
// (TTL less the drift allowance and the safety margin).
func (l *Lease) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// start sets the first local deadline from the send time of the acquire
// request. It reports false if that deadline has already passed.
func (l *Lease) start(sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = sent.Add(l.lifetime)
	left := time.Until(l.deadline)
	if left <= 0 {
		l.endLocked(stateLapsed, l.lapseCause())
		return false
	}
	l.timer = time.AfterFunc(left, l.onDeadline)
	return true
}

// onDeadline runs when the local deadline timer fires.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateActive {
		return
	}
	if left := time.Until(l.deadline); left > 0 { // extended while this call waited for mu
		l.timer.Reset(left)
		return
	}
	l.endLocked(stateLapsed, l.lapseCause())
}

func (l *Lease) lapseCause() error {
	return fmt.Errorf("%w: %q: no renewal confirmed before the local deadline", ErrLeaseLost, l.resource)
}

// endLocked moves an active lease to its final state and ends its context.
func (l *Lease) endLocked(s leaseState, cause error) {
	if l.state != stateActive {
		return
	}
	l.state = s
	if l.timer != nil {
		l.timer.Stop()
	}
	l.cancel(cause)
	l.c.wd.unschedule(l)
}

// errorLocked is the error of an operation on a lease that has ended.
func (l *Lease) errorLocked() error {
	if l.state == stateReleased {
		return fmt.Errorf("redlease: %q: %w", l.resource, ErrReleased)
	}
	return context.Cause(l.ctx)
}

func (l *Lease) active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateActive
}

// renewed records the outcome of a renew request sent at sent: nil if the
// lease was extended (its local deadline is then sent + lifetime), an error
// matching ErrLeaseLost if Redis said it is not ours (the context is then
// ended), the lease's error if it had ended meanwhile, or the request error.
func (l *Lease) renewed(sent time.Time, ok bool, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.state != stateActive:
		return l.errorLocked()
	case err != nil:
		return requestError("renew", l.resource, err)
	case !ok:
		l.endLocked(stateLost, fmt.Errorf("%w: %q expired or was taken by another owner", ErrLeaseLost, l.resource))
		return l.errorLocked()
	}
	if d := sent.Add(l.lifetime); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d)) // fires at once if d already passed
	}
	return nil
}

// Refresh renews the lease to its full TTL, only while Redis still stores our
// owner token (compare-and-renew). On success the local deadline moves to the
// send time of this request plus the local lifetime. If the lease is no longer
// ours, Refresh returns an error matching ErrLeaseLost and ends the lease
// context. If the lease has already ended it returns that end's error without
// a round trip: a lost lease is never renewed. A request error (matching
// ErrOutcomeUnknown when the request may have been executed) leaves the lease
// as it was; the local deadline still applies.
func (l *Lease) Refresh(ctx context.Context) error {
	if l == nil {
		return invalidf("nil Lease")
	}
	l.mu.Lock()
	if l.state != stateActive {
		err := l.errorLocked()
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	sent := time.Now()
	n, err := refreshScript.Run(ctx, l.c.rdb, []string{l.key}, l.owner, l.ttlMS).Int64()
	return l.renewed(sent, n == 1, err)
}

// Release ends the lease: it ends the lease context with cause ErrReleased,
// stops the watchdog, and deletes the lease in Redis only if it is still ours
// (compare-and-delete). It never touches the fence counter.
//
// Release ignores the cancellation of ctx (it is often the lease's own
// context, ended by the time a deferred Release runs) but keeps its values,
// and is bounded by the release timeout instead.
//
// It returns nil if it deleted our lease, and an error matching ErrLeaseLost
// if the lease had expired or belonged to another owner by then: a sign that
// the TTL is too short for the work. A request error is returned as is (matching
// ErrOutcomeUnknown when the delete may have happened); the lease may still
// exist until its TTL, and Release may be called again to retry.
//
// Once a Release has reached a verdict (nil or ErrLeaseLost), later calls
// return the same verdict without a round trip, so an explicit Release and a
// deferred one can both be written.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return invalidf("nil Lease")
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.relDone {
		return l.relErr
	}
	l.mu.Lock()
	if l.state == stateLost { // Redis already said it is not ours
		l.relDone, l.relErr = true, l.errorLocked()
		l.mu.Unlock()
		return l.relErr
	}
	l.endLocked(stateReleased, ErrReleased)
	l.mu.Unlock()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.relTO)
	defer cancel()
	n, err := releaseScript.Run(rctx, l.c.rdb, []string{l.key}, l.owner).Int64()
	if err != nil {
		return requestError("release", l.resource, err)
	}
	l.relDone = true
	if n == 0 {
		l.relErr = fmt.Errorf("%w: %q had expired or was taken by another owner before release", ErrLeaseLost, l.resource)
	}
	return l.relErr
}
