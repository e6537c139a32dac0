package redlease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client takes leases on one Redis deployment. It is safe for concurrent use;
// create one per Redis deployment and share it. Its zero value is not usable;
// call New.
type Client struct {
	rdb         redis.UniversalClient
	cfg         config  // the defaults as given to New
	defaults    *config // cfg validated, shared by leases taken without options
	defaultsErr error   // why cfg is not valid; an acquire's options may fix it
	err         error   // set by New for a nil client; returned by every call
	wd          watchdog
	hub         *hub

	mu      sync.Mutex
	leases  map[*Lease]struct{} // the leases Redis may hold, for Close
	closed  atomic.Bool         // set under mu; read without it by acquire calls
	closeMu sync.Mutex          // serialises Close calls
}

// New returns a Client that takes leases through rdb, which may be a plain
// client (redis.NewClient), a Sentinel failover client
// (redis.NewFailoverClient) or a cluster client (redis.NewClusterClient).
// opts are the defaults of every lease; options given to an acquire call
// override them for that lease. New does no I/O; invalid options are reported
// by the first acquire call. A nil rdb makes every call return
// ErrInvalidArgument.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, cfg: defaultConfig(), leases: map[*Lease]struct{}{}}
	c.cfg.apply(opts)
	defaults := c.cfg
	if c.defaultsErr = defaults.validate(); c.defaultsErr == nil {
		c.defaults = &defaults
	}
	if isNil(rdb) {
		c.err = invalidf("nil Redis client")
		return c
	}
	c.wd.rdb = rdb
	c.hub = newHub(rdb)
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

// Close releases every lease of the Client that Redis may still hold (the
// active ones, and those whose context ended at the local deadline less than
// a TTL ago), as Release does but in pipelines; it ends the Client's
// background goroutines (the watchdog and the wake-up subscriptions) and
// waits for them. Acquire calls still waiting return ErrClientClosed, and so
// does every call after Close. It returns the errors of the releases, joined
// (the first ten, and how many more). Close does not close the Redis client.
//
// Like Release, Close ignores the cancellation of ctx (a shutdown's context
// is often canceled by then, and the leases are still worth releasing) but
// keeps its deadline: the releases are bounded by it and by the leases'
// release timeout. A deadline bounds a request that is already on the
// network only if the go-redis client was created with
// ContextTimeoutEnabled; otherwise its ReadTimeout and WriteTimeout do.
//
// Concurrent Close calls run one after the other; a lease that a Release of
// the caller's is releasing at that moment is left to it. A lease whose
// release got no answer (Close's error says which) may be released again
// with Release; Close does not try twice.
func (c *Client) Close(ctx context.Context) error {
	if c == nil || c.err != nil {
		return nil
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	c.mu.Lock()
	c.closed.Store(true)
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	var errs []error
	for from := 0; from < len(leases); from += maxBatch {
		errs = append(errs, c.releaseBatch(ctx, leases[from:min(from+maxBatch, len(leases))])...)
	}
	c.hub.close()
	c.wd.goroutines.Wait()
	const most = 10
	if len(errs) > most {
		errs = append(errs[:most], fmt.Errorf("redlease: %d more leases not released", len(errs)-most))
	}
	return errors.Join(errs...)
}

// releaseBatch releases leases as Release does, in one pipeline, bounded by
// the longest release timeout among them and by ctx's deadline.
func (c *Client) releaseBatch(ctx context.Context, leases []*Lease) []error {
	var (
		start   = time.Now()
		send    []*Lease
		timeout time.Duration
		errs    []error
	)
	for _, l := range leases {
		if !l.relMu.TryLock() { // a Release of the caller's is on its way
			continue
		}
		defer l.relMu.Unlock()
		switch {
		case l.relDone: // a Release of the caller's came first
		case !l.beginRelease():
			l.reportRelease(ctx, start, l.relErr)
			errs = append(errs, l.relErr)
		default:
			send = append(send, l)
			timeout = max(timeout, l.cfg.releaseTimeout)
		}
	}
	if len(send) == 0 {
		return errs
	}
	rctx, cancel := context.WithTimeout(detach(ctx), timeout)
	defer cancel()
	if deadline, ok := ctx.Deadline(); ok {
		var cancelAt context.CancelFunc
		rctx, cancelAt = context.WithDeadline(rctx, deadline)
		defer cancelAt()
	}
	args := func(i int) []any { return c.releaseArgs(&send[i].keys, &send[i].owner, "") }
	for i, cmd := range releaseScript.runAll(rctx, c.rdb, len(send), args, intReply) {
		n, err := cmd.(*redis.IntCmd).Result()
		if err := send[i].endRelease(ctx, start, n == 1, err); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// trackAll adds the leases of one acquire call to the set that Close
// releases, all or none: none once Close has begun, under the same lock as
// Close's list, so that a lease is either released by Close or never handed
// out.
func (c *Client) trackAll(leases []*Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	for _, l := range leases {
		c.leases[l] = struct{}{}
	}
	return true
}

// untrack removes a lease that Close need not release: released, lost, or
// past the time Redis could still hold it.
func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, l)
}

// leaseConfig merges the Client's defaults with opts and validates them and
// the resource names. Without opts, leases share the Client's validated
// defaults instead of each carrying a copy.
func (c *Client) leaseConfig(resources []string, opts []Option) (*config, error) {
	if c == nil {
		return nil, invalidf("nil Client")
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.closed.Load() {
		return nil, ErrClientClosed
	}
	if len(resources) == 0 {
		return nil, invalidf("no resource")
	}
	for i, r := range resources {
		if r == "" {
			return nil, invalidf("empty resource name")
		}
		if r[0] == '}' {
			// <prefix>{}...: an empty hash tag, so that on Redis Cluster the
			// resource's keys would fall in different slots.
			return nil, invalidf("resource name %q begins with '}'", r)
		}
		if slices.Contains(resources[:i], r) {
			return nil, invalidf("resource %q named twice", r)
		}
	}
	cfg := c.defaults
	if len(opts) > 0 || c.defaultsErr != nil {
		merged := c.cfg
		merged.apply(opts)
		if err := merged.validate(); err != nil {
			return nil, fmt.Errorf("redlease: %q: %w", resources[0], err)
		}
		cfg = &merged
	}
	if cfg.fair && len(resources) > 1 {
		return nil, invalidf("WithFair does not apply to several resources at once")
	}
	return cfg, nil
}

type leaseState uint8

const (
	stateActive    leaseState = iota
	stateLost                 // Redis said the lease is not ours
	stateLapsed               // no renewal confirmed before the local deadline, or max hold reached
	stateReleased             // Release was called
	stateDiscarded            // never handed out: its acquire call gave it back
)

// Lease is a lease held on one resource. Its methods are safe for concurrent
// use. A Lease must not be copied.
type Lease struct {
	c        *Client
	cfg      *config // shared; never modified
	resource string
	keys     resourceKeys
	owner    string
	fence    int64
	lifetime time.Duration
	interval time.Duration
	ctx      context.Context
	cancel   context.CancelCauseFunc

	mu        sync.Mutex
	state     leaseState
	acquired  time.Time // send time of the acquire request
	deadline  time.Time // local deadline, with a monotonic reading
	holdUntil time.Time // WithMaxHold's limit; zero if none
	timer     *time.Timer

	// Guarded by c.wd.mu.
	renewAt time.Time
	index   int  // in the watchdog's queue; -1 when not queued
	ended   bool // never queue again

	out bool // handed out by its acquire call; only then are observers told of it

	relMu    sync.Mutex // serialises Release
	relBegun bool       // Release was called
	quiet    bool       // not handed out when Release began: no event
	overran  bool       // the lease had ended before the first Release call
	relDone  bool       // a Release reached a verdict
	relErr   error      // that verdict
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

// newLease returns an active lease whose acquire request was just answered.
// Nobody else sees it until its acquire call has completed it (start, and
// its fence) and tracked it.
func (c *Client) newLease(ctx context.Context, cfg *config, resource string, keys *resourceKeys, owner string, fence int64) *Lease {
	l := &Lease{
		c:        c,
		cfg:      cfg,
		resource: resource,
		keys:     *keys,
		owner:    owner,
		fence:    fence,
		lifetime: cfg.lifetime(),
		interval: cfg.interval(),
		index:    -1,
	}
	l.ctx, l.cancel = context.WithCancelCause(detach(ctx))
	return l
}

// detach returns a context with the values of ctx but not its cancellation.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil { // never canceled: nothing to detach from
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// discard ends a lease that its acquire call does not hand out, without
// telling the observers of a loss: the caller never had it.
func (l *Lease) discard(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateLapsed { // while the acquire call was drawing its fence
		l.untrackLocked()
		return
	}
	l.endLocked(stateDiscarded, cause)
}

// handOut marks an active lease as handed out, from when on the observers
// hear of its end; it returns the cause of its end if it has already ended.
func (l *Lease) handOut() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateActive {
		return context.Cause(l.ctx)
	}
	l.out = true
	return nil
}

// takeBack undoes handOut for a lease that its acquire call gives back after
// all, because another of its leases had ended.
func (l *Lease) takeBack() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = false
}

// start sets the first local deadline from the send time of the acquire
// request. It reports false if that deadline has already passed.
func (l *Lease) start(sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired = sent
	if l.cfg.maxHold > 0 {
		l.holdUntil = sent.Add(l.cfg.maxHold)
	}
	l.deadline = l.capLocked(sent.Add(l.lifetime))
	left := time.Until(l.deadline)
	if left <= 0 {
		return false
	}
	l.timer = time.AfterFunc(left, l.onDeadline)
	return true
}

// onDeadline runs when the local deadline timer fires, and once more a TTL
// after the lease lapsed.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case stateActive:
		if left := time.Until(l.deadline); left > 0 { // extended while this call waited for mu
			l.timer.Reset(left)
			return
		}
		l.endLocked(stateLapsed, l.lapseCause())
	case stateLapsed:
		// Every renewal was sent before the lapse, so Redis has let the
		// lease expire by now: there is nothing left for Close to release.
		l.c.untrack(l)
	}
}

// capLocked limits a deadline to the maximum hold.
func (l *Lease) capLocked(d time.Time) time.Time {
	if !l.holdUntil.IsZero() && d.After(l.holdUntil) {
		return l.holdUntil
	}
	return d
}

// renewsUntil reports whether the watchdog should renew the lease at at: not
// at or after its maximum hold.
func (l *Lease) renewsUntil(at time.Time) bool {
	return l.holdUntil.IsZero() || at.Before(l.holdUntil)
}

func (l *Lease) lapseCause() error {
	if !l.holdUntil.IsZero() && !l.deadline.Before(l.holdUntil) {
		return fmt.Errorf("%w: %q held for %v", ErrMaxHold, l.resource, l.cfg.maxHold)
	}
	return fmt.Errorf("%w: %q: no renewal confirmed before the local deadline", ErrLeaseLost, l.resource)
}

// endLocked moves an active lease to its final state and ends its context.
func (l *Lease) endLocked(s leaseState, cause error) {
	if l.state != stateActive {
		return
	}
	l.state = s
	l.cancel(cause)
	l.c.wd.unschedule(l)
	if s == stateLapsed && l.timer != nil {
		// Ended locally, but Redis may hold the lease for up to a TTL more:
		// until then Close still releases it, so that a process that shuts
		// down does not leave the resource blocked.
		l.timer.Reset(l.cfg.ttl)
	} else {
		l.untrackLocked()
	}
	if (s == stateLost || s == stateLapsed) && l.out && len(l.cfg.observers) > 0 {
		now := time.Now()
		outcome := OutcomeLost
		if s == stateLapsed {
			outcome = OutcomeExpired
			if errors.Is(cause, ErrMaxHold) {
				outcome = OutcomeMaxHold
			}
		}
		l.cfg.observe(l.ctx, Event{Kind: EventLost, Outcome: outcome, Resource: l.resource, Owner: l.owner,
			Fence: l.fence, Start: now, End: now, Held: now.Sub(l.acquired), Err: cause})
	}
}

// untrackLocked stops the lease's timer and takes it out of the set that
// Close releases: nothing of it is left for Close to do.
func (l *Lease) untrackLocked() {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.c.untrack(l)
}

// extendLocked moves the local deadline to a renewal's send time plus the
// local lifetime, if that is later.
func (l *Lease) extendLocked(sent time.Time) {
	if d := l.capLocked(sent.Add(l.lifetime)); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d)) // fires at once if d already passed
	}
}

// errorLocked is the error of an operation on a lease that has ended.
func (l *Lease) errorLocked() error {
	if l.state == stateReleased {
		return fmt.Errorf("redlease: %q: %w", l.resource, ErrReleased)
	}
	return context.Cause(l.ctx)
}

// liveUntil returns the local deadline of an active lease, and false for a
// lease that has ended.
func (l *Lease) liveUntil() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.state == stateActive
}

// renewed records the outcome of a renew request sent at sent: nil if the
// lease was extended (its local deadline is then sent + lifetime), an error
// matching ErrLeaseLost if Redis said it is not ours (the context is then
// ended), the lease's error if it had ended meanwhile, or the request error.
func (l *Lease) renewed(sent time.Time, ok bool, err error) (rerr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cfg.observers) > 0 && l.state == stateActive {
		defer func() {
			l.cfg.observe(l.ctx, Event{Kind: EventRenew, Outcome: outcomeOf(rerr), Resource: l.resource, Owner: l.owner,
				Fence: l.fence, Start: sent, End: time.Now(), Err: rerr})
		}()
	}
	switch {
	case l.state != stateActive:
		return l.errorLocked()
	case err != nil:
		return requestError("renew", l.resource, err)
	case !ok:
		l.endLocked(stateLost, fmt.Errorf("%w: %q expired or was taken by another owner", ErrLeaseLost, l.resource))
		return l.errorLocked()
	}
	l.extendLocked(sent)
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
	sent := time.Now() // before the check, as in the watchdog
	l.mu.Lock()
	if l.state != stateActive {
		err := l.errorLocked()
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	ok, err := isOne(refreshScript.run(ctx, l.c.rdb, l.refreshArgs(), intReply))
	if err := l.renewed(sent, ok, err); err != nil {
		return err
	}
	// The watchdog may have given up on the lease (its renewals failed until
	// the deadline was near): it renews again from here.
	if next := sent.Add(l.interval); l.cfg.autoRenew && l.renewsUntil(next) {
		l.c.wd.schedule(l, next)
	}
	return nil
}

// refreshArgs is the refresh script's command for the lease (see
// script.command), for Refresh and the watchdog.
func (l *Lease) refreshArgs() []any {
	return []any{nil, nil, 1, &l.keys.lease, &l.owner, l.cfg.ttlArg}
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
// exist until its TTL, and Release may be called again to retry. A retry
// that finds an earlier attempt's delete done returns nil: Redis keeps the
// deleted lease under <prefix>{R}:released for the time it had left, until
// the next holder's release replaces it. A retry later than that returns
// ErrLeaseLost.
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
	var start time.Time // for the observers only
	if len(l.cfg.observers) > 0 {
		start = time.Now()
	}
	if !l.beginRelease() {
		l.reportRelease(ctx, start, l.relErr)
		return l.relErr
	}
	rctx, cancel := context.WithTimeout(detach(ctx), l.cfg.releaseTimeout)
	defer cancel()
	// The acquire script took the owner out of the queue when it granted the
	// lease: a holder is never queued.
	deleted, err := l.c.release(rctx, &l.keys, &l.owner, nil)
	return l.endRelease(ctx, start, deleted, err)
}

// beginRelease ends the lease locally for a Release (l.relMu held). It
// reports whether Redis is still to be asked; if not, relErr is the verdict.
func (l *Lease) beginRelease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.relBegun {
		l.relBegun, l.overran, l.quiet = true, l.state != stateActive, !l.out
	}
	switch l.state {
	case stateLost: // Redis already said it is not ours
		l.relDone, l.relErr = true, l.errorLocked()
		return false
	case stateLapsed: // Close need not release it any more
		l.untrackLocked()
	}
	l.endLocked(stateReleased, ErrReleased)
	return true
}

// endRelease records the outcome of a release request (l.relMu held) and
// reports it to the observers.
func (l *Lease) endRelease(ctx context.Context, start time.Time, deleted bool, err error) error {
	if err != nil {
		err = requestError("release", l.resource, err)
	} else {
		l.relDone = true
		if !deleted {
			l.relErr = fmt.Errorf("%w: %q had expired or was taken by another owner before release", ErrLeaseLost, l.resource)
		}
		err = l.relErr
	}
	l.reportRelease(ctx, start, err)
	return err
}

func (l *Lease) reportRelease(ctx context.Context, start time.Time, err error) {
	if len(l.cfg.observers) == 0 || l.quiet {
		return
	}
	now := time.Now()
	l.cfg.observe(ctx, Event{Kind: EventRelease, Outcome: outcomeOf(err), Resource: l.resource,
		Owner: l.owner, Fence: l.fence, Start: start, End: now, Held: now.Sub(l.acquired),
		Overran: l.overran, Err: err})
}
