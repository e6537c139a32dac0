package redlease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/driver"
	"github.com/redlease/redlease/internal/clock"
	"github.com/redlease/redlease/internal/shared"
	"github.com/redlease/redlease/internal/wire"
)

// Client takes leases on one Redis deployment. It is safe for concurrent use;
// create one per Redis deployment and share it. Its zero value is not usable;
// call New.
type Client struct {
	conn        *wire.Conn
	cfg         config  // the defaults as given to New
	defaults    *config // cfg validated, shared by leases taken without options
	defaultsErr error   // why cfg is not valid; an acquire's options may fix it
	err         error   // set by New for a nil client; returned by every call
	wd          watchdog
	hub         *hub
	clk         clock.Clock // the time of the leases' deadlines and renewals

	mu      sync.Mutex
	leases  map[*Lease]struct{}      // the leases Redis may hold, for Close
	held    map[breakWatch]heldCount // how many of them each break channel tells (broken.go)
	closed  atomic.Bool              // set under mu; read without it by acquire calls
	closeMu sync.Mutex               // serialises Close calls
	// onBreak as a func value, made once: a method value passed on allocates
	// each time, and a Client holding one lease at a time watches its break
	// channel again at every acquire.
	breakHandler func(payload string)

	// The give-up releases and the abandoned requests (see
	// Client.background and Client.spawn): Close waits for them.
	bg       sync.WaitGroup
	bgClosed bool          // under mu: Close is waiting for bg, or has
	closing  chan struct{} // closed when Close begins: the late undos stop waiting (undoLate)
}

// NewWithDriver returns a Client that takes leases through d, a Redis
// client library's implementation of package driver's interface (the
// modules rueidislease and valkeylease call it). It is New for any client;
// under heavier load than New's, its concurrent calls share round trips
// (WithCombinedRequests). A nil d makes every call return
// ErrInvalidArgument.
func NewWithDriver(d driver.Driver, opts ...Option) *Client {
	c := newClient(opts)
	if shared.IsNil(d) {
		c.err = invalidf("nil driver")
		return c
	}
	c.start(d, combineDriver)
	return c
}

// newClient returns a Client with the defaults of opts, and no driver yet.
func newClient(opts []Option) *Client {
	c := &Client{cfg: defaultConfig(), leases: map[*Lease]struct{}{}, held: map[breakWatch]heldCount{},
		closing: make(chan struct{})}
	c.breakHandler = c.onBreak
	applyAll(&c.cfg, opts)
	c.clk = c.cfg.clk
	defaults := c.cfg
	if c.defaultsErr = defaults.validate(); c.defaultsErr == nil {
		c.defaults = &defaults
	}
	return c
}

// How many requests a Client has in flight before its calls queue to share
// round trips (WithCombinedRequests), measured with 8 and 64 goroutines on
// distinct keys on this repository's 2-core machines (docs/PERFORMANCE.md).
// A queued call waits for a request in flight to return, so a low number
// caps how many requests run at once: it pays where system calls are dear
// (on one machine 4 did better than 1 or 2 at 8 goroutines) and costs
// where they are cheap (on another, 4 lost a fifth of the pairs/s at 8
// goroutines that 8 keeps, and both did alike at 64). go-redis sends each
// request on a connection of its own. rueidis and valkey-go pipeline
// concurrent requests on one connection by themselves, flushing each that
// finds none queued: combining after 4 cost a quarter of their pairs/s at 8
// goroutines; after 16 it leaves 8 alone, and at 64 it gained a fifth on
// the first machine and cost a tenth on the second.
const (
	combineGoRedis = 8
	combineDriver  = 16
)

// start puts the Client on d.
func (c *Client) start(d driver.Driver, combineAfter int) {
	if c.cfg.uncombined {
		combineAfter = 0
	}
	c.conn = wire.NewConn(d, combineAfter)
	c.wd.conn, c.wd.clk = c.conn, c.clk
	c.hub = newHub(c.conn, c.clk)
}

// Close releases every lease of the Client that Redis may still hold (the
// active ones, and those whose context ended at the local deadline less than
// a TTL ago), as Release does but in pipelines; it ends the Client's
// background goroutines (the watchdog, the wake-up subscriptions, the
// releases of acquire calls that gave up) and waits for them. Acquire calls
// still waiting return ErrClientClosed, and so does every call after Close.
// It returns the errors of the releases, joined (the first ten, and how many
// more). Close does not close the Redis client.
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
	events, err := c.close(ctx)
	for i := range events { // after closeMu: an observer may call the Client, Close too
		events[i].emit(ctx)
	}
	return err
}

// close is Close, up to the release events, which it returns.
func (c *Client) close(ctx context.Context) ([]pending, error) {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	c.mu.Lock()
	select {
	case <-c.closing: // an earlier Close
	default:
		close(c.closing)
	}
	c.closed.Store(true)
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	var (
		errs   []error
		events []pending
	)
	for from := 0; from < len(leases); from += driver.MaxBatch {
		evs, es := c.releaseBatch(ctx, leases[from:min(from+driver.MaxBatch, len(leases))])
		events, errs = append(events, evs...), append(errs, es...)
	}
	c.mu.Lock()
	c.bgClosed = true // no more bg.Add: Wait may not race with one
	c.mu.Unlock()
	c.waitBackground(ctx)
	c.hub.close(ctx)
	c.wd.stop()
	c.wd.goroutines.Wait()
	const most = 10
	if len(errs) > most {
		errs = append(errs[:most], errorf("%d more leases not released", len(errs)-most))
	}
	return events, errors.Join(errs...)
}

// releaseBatch releases leases as Release does, in one pipeline, bounded by
// the longest release timeout among them and by ctx's deadline. It returns
// the release events, for the caller to emit once it holds no lock.
func (c *Client) releaseBatch(ctx context.Context, leases []*Lease) ([]pending, []error) {
	var (
		start   = c.clk.Now()
		locked  []*Lease
		send    []*Lease
		timeout time.Duration
		errs    []error
		events  []pending
	)
	for _, l := range leases {
		if !l.relMu.TryLock() { // a Release of the caller's is on its way
			continue
		}
		locked = append(locked, l)
		switch {
		case l.relDone: // a Release of the caller's came first
		case !l.beginRelease():
			events = append(events, l.releaseEvent(start, l.relErr))
			errs = append(errs, l.relErr)
		default:
			send = append(send, l)
			timeout = max(timeout, l.cfg.releaseTimeout)
		}
	}
	if len(send) > 0 {
		rctx, cancel := context.WithTimeout(detach(ctx), timeout)
		if deadline, ok := ctx.Deadline(); ok {
			var cancelAt context.CancelFunc
			rctx, cancelAt = context.WithDeadline(rctx, deadline)
			defer cancelAt()
		}
		calls := func(i int) wire.Call { return send[i].releaseCall("") }
		for i, r := range c.conn.RunMany(rctx, len(send), calls) {
			deleted, err := wire.Done(r)
			ev, err := send[i].endRelease(start, deleted, err)
			if err != nil {
				errs = append(errs, err)
			}
			events = append(events, ev)
		}
		cancel()
	}
	for _, l := range locked {
		l.relMu.Unlock()
	}
	return events, errs
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
		if _, ok := c.leases[l]; !ok {
			c.leases[l] = struct{}{}
			c.holdLocked(l)
		}
	}
	return true
}

// untrack removes a lease that Close need not release: released, lost, or
// past the time Redis could still hold it.
func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.leases[l]; ok {
		delete(c.leases, l)
		c.unholdLocked(l)
	}
}

// background runs f on a goroutine of the Client's, for the releases of
// acquire calls that gave up: the call returns without waiting for them.
// f's context has ctx's values and ends after timeout; f is best effort, and
// a lease's TTL cleans up after it. Once Close has begun to wait for such
// goroutines, f runs on the caller's instead (an acquire that raced with
// Close).
func (c *Client) background(ctx context.Context, timeout time.Duration, f func(ctx context.Context)) {
	run := func() {
		rctx, cancel := context.WithTimeout(detach(ctx), timeout)
		defer cancel()
		f(rctx)
	}
	if !c.spawn(run) {
		run()
	}
}

// spawn runs f on a goroutine that Close waits for. It reports false, and
// does not run f, once Close has begun to wait for them.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
	return true
}

// waitBackground waits for the goroutines of spawn, or until ctx's deadline
// (not its cancellation: see Close). Those still running then end by
// themselves, once their requests return.
func (c *Client) waitBackground(ctx context.Context) { wait(ctx, &c.bg) }

// leaseConfig merges the Client's defaults with opts and validates them and
// the resource names. Without opts, leases share the Client's validated
// defaults instead of each carrying a copy.
func (c *Client) leaseConfig(resources []string, opts []Option) (*config, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		return nil, invalidf("no resource")
	}
	for i, r := range resources {
		if err := validResource(r); err != nil {
			return nil, err
		}
		if slices.Contains(resources[:i], r) {
			return nil, invalidf("resource %s named twice", quote(r))
		}
	}
	cfg := c.defaults
	if len(opts) > 0 || c.defaultsErr != nil {
		merged := c.cfg
		applyAll(&merged, opts)
		if err := merged.validate(); err != nil {
			return nil, errorf("%s: %w", quote(resources[0]), err)
		}
		cfg = &merged
	}
	if cfg.fair && len(resources) > 1 {
		return nil, invalidf("WithFair does not apply to several resources at once")
	}
	return cfg, nil
}

// usable returns the error of every call on c, if there is one: a nil
// Client, a nil Redis client, or Close.
func (c *Client) usable() error {
	switch {
	case c == nil:
		return invalidf("nil Client")
	case c.err != nil:
		return c.err
	case c.closed.Load():
		return ErrClientClosed
	}
	return nil
}

// MaxResourceName is the longest resource name, in bytes. Every guard of
// package fencing takes every name a lease takes.
const MaxResourceName = shared.MaxName

// validResource refuses a resource name that is empty, over
// MaxResourceName bytes, holds a NUL byte or is not valid UTF-8 (neither
// travels in an HTTP header or a command's arguments), or whose keys cannot
// share a Cluster hash slot (see internal/wire/keys.go).
func validResource(r string) error {
	if problem := shared.NameProblem(r, MaxResourceName); problem != "" {
		return invalidf("%s", problem)
	}
	switch {
	case r[0] == '}':
		// <prefix>{}...: an empty hash tag, so that on Redis Cluster the
		// resource's keys would fall in different slots.
		return invalidf("resource name %s begins with '}'", quote(r))
	}
	return nil
}

// quiet reports whether nothing is due at the Client's clock's now: no
// renewal due or on its way, no active lease past its local deadline (its
// timer has yet to end it), and no acquire call at work other than asleep
// on the clock. redleasetest waits for it between steps of its fake clock.
func (c *Client) quiet() bool {
	if c == nil || c.err != nil {
		return true
	}
	if c.hub.calls.Load() != c.hub.asleep.Load() {
		return false
	}
	if !c.wd.quiet() {
		return false
	}
	now := c.clk.Now()
	c.mu.Lock()
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	for _, l := range leases {
		if d, active := l.liveUntil(); active && !d.After(now) {
			return false
		}
	}
	return true
}
