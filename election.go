package redlease

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/redlease/redlease/internal/clock"
)

// Election elects one leader at a time among the campaigners for a name:
// the cron runner, the shard owner, the singleton worker. A term is a lease
// on the name: Campaign waits until it gets one, the watchdog holds it, its
// context ends when leadership is lost, and Resign (or the term's Release)
// resigns. Every term has its own fence, larger than every earlier term's,
// for the leader to pass with its writes. Run is the whole loop: campaign,
// lead, resign, campaign again.
//
// It follows etcd's concurrency.Election, on a Redis lease: leadership is
// only as safe as the lease (see the package documentation), so a leader
// that writes to shared state must fence those writes.
//
// An Election value is one campaigner: it remembers its current term, the
// lease that its last successful Campaign returned, for Term, Resign, Run
// and Healthy. Its methods are safe for concurrent use; give each
// campaigner, in one process or many, an Election of its own.
type Election struct {
	c    *Client
	name string
	opts []WaitOption

	mu      sync.Mutex
	term    *Lease // the last successful Campaign's, until resigned
	value   string // what that Campaign campaigned with, for Run
	valued  bool   // a Campaign has succeeded: value is set
	running bool   // a Run is under way
}

// NewElection returns the election for name on c. opts apply to each
// campaign's lease.
func NewElection(c *Client, name string, opts ...WaitOption) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Leader describes the current term.
type Leader struct {
	Value     string        // what the leader campaigned with
	Owner     string        // the term's owner token
	Fence     int64         // the term's fence
	Remaining time.Duration // how long the term's lease had left
}

// Campaign waits until this caller is elected or ctx ends, and returns the
// term's lease, which the Election remembers as its current term (Term).
// value (a host name, an address; at most MaxHolder bytes) is published for
// Leader: it is the term's lease's holder description, written in the same
// step that takes the lease, so it exists exactly as long as the term does
// and Leader never shows one term's value for another. Followers can use it
// to find the leader. Watch lease.Context() for the end of the term; call
// Resign (or lease.Release) to resign. Campaign waits, keeps its deadline
// and fails as Acquire does. As with every lease, being returned a term does
// not mean it still holds an instant later: watch its context, and fence
// writes.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if e == nil {
		return nil, invalidf("nil Election")
	}
	opts := append(e.opts[:len(e.opts):len(e.opts)], WithHolder(value), asTerm)
	l, err := e.c.Acquire(ctx, e.name, opts...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.term, e.value, e.valued = l, value, true
	e.mu.Unlock()
	e.announce(ctx, l)
	return l, nil
}

// Leader returns the current term, or ErrNoLeader. It reads the term's
// lease in one script, so its value and its owner belong together.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if e == nil {
		return Leader{}, invalidf("nil Election")
	}
	cfg, err := e.c.leaseConfig([]string{e.name}, options(e.opts)) // the prefix may be the election's
	if err != nil {
		return Leader{}, err
	}
	sts, err := e.c.inspect(ctx, cfg, []string{e.name})
	if err != nil {
		return Leader{}, err
	}
	st := sts[0]
	if !st.Held || st.Fence == 0 {
		return Leader{}, ErrNoLeader
	}
	return Leader{Value: st.Holder, Owner: st.Owner, Fence: st.Fence, Remaining: st.Remaining}, nil
}

// Term returns this Election's current term: the lease that its last
// successful Campaign returned (within Run, the term that lead runs in),
// until it is resigned; nil if there is none. It reads no Redis. The term
// may have ended since: watch its Context, and pass its Fence with every
// write that a stale leader must not make.
func (e *Election) Term() *Lease {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// Resign ends this Election's current term (Term): it releases the term's
// lease as Lease.Release does, compare-and-delete, so that another
// campaigner can be elected at once; the term's context ends with cause
// ErrReleased. Like Release, it ignores the cancellation of ctx and is
// bounded by the release timeout.
//
// It returns nil when it resigned the term, and nil when there is no term
// to resign (no successful Campaign, or the term was resigned already):
// resigning twice is not an error. It returns an error matching
// ErrLeaseLost if the term had been lost before (it expired, or another
// owner took it): leadership had ended before Resign, and a write made
// after that instant was safe only if fenced. Either way the term is
// forgotten. A request error (matching ErrOutcomeUnknown when the delete
// may have happened) keeps the term, so that Resign may be called again;
// if it is not, the term lapses in Redis at the end of its TTL.
//
// Within Run, Resign ends the current term only: lead's context ends, and
// Run campaigns again once lead returns. End Run's context to stop it.
func (e *Election) Resign(ctx context.Context) error {
	if e == nil {
		return invalidf("nil Election")
	}
	term := e.Term()
	if term == nil {
		return nil
	}
	err := term.Release(ctx)
	if err == nil || errors.Is(err, ErrLeaseLost) { // a verdict: nothing left to retry
		e.forget(term)
	}
	return err
}

// forget clears the current term if it is still term: a Campaign may have
// replaced it meanwhile.
func (e *Election) forget(term *Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == term {
		e.term = nil
	}
}

// Run leads whenever it is elected, until ctx ends. It campaigns as
// Campaign does, calls lead with a context that ends when the term ends
// (lost, lapsed, resigned, at its maximum hold) or when ctx ends, resigns
// the term once lead returns (or panics, and the panic goes on up), and
// campaigns again. It is client-go's leader-election loop, on a lease, for
// two uses in the main:
//
//   - A cron runner: lead runs the schedule, say a time.Ticker, until its
//     context ends. One process of many runs the jobs; when the leader
//     dies, another is elected once the term's lease expires, within a TTL
//     (at once if the leader resigned).
//   - A singleton worker: lead takes work from a queue until its context
//     ends, and may return nil to step down between items; Run then
//     resigns and campaigns again.
//
// lead reads its term with Term: pass Term().Fence() with every write that
// a stale leader must not make. lead's context ends when the term is lost,
// but a process that paused may write before it looks (see the package
// documentation).
//
// Run campaigns with the value of this Election's last successful Campaign,
// or, if there was none, with the holder description of its lease options
// (WithHolder; by default DefaultHolder(): host name and process id). If
// the Election holds a live term when Run starts (a Campaign not yet
// resigned), Run leads that term first. While Run runs, its terms are the
// Election's: use Term and Resign, not Campaign.
//
// A lead that returns nil is done with its term: Run resigns and campaigns
// again at once, so it may well be elected again before the other
// campaigners are (with WithFair in the Election's options they go first).
// A lead that returns its context's error (ctx.Err() or context.Cause(ctx),
// wrapped or not) once its context has ended counts as returning nil. Any
// other error from lead ends Run: Run resigns and returns that error as is.
// Run does not campaign again until lead returns: a lead that ignores its
// context holds Run up, and works on without a term, which only fenced
// writes make safe.
//
// Run returns when ctx ends, after resigning, with an error that matches
// ctx.Err() (and ctx's cause, if it has one); when lead returns an error of
// its own; and when a campaign fails for good, with ErrInvalidArgument or
// ErrClientClosed (Client.Close also ends the current term). Campaigns that
// fail otherwise (Redis unreachable for longer than WithMaxOutage, a
// WithMaxWait that ran out, the name held by another kind of lease) are
// retried after a backoff that grows to half a second, so a Redis that is
// down does not make Run spin. A resignation that fails is not retried: the
// term lapses in Redis at the end of its TTL, and the observers hear of it
// (EventRelease). One Election runs one Run at a time; a second call
// while one runs returns ErrInvalidArgument.
func (e *Election) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	switch {
	case e == nil:
		return invalidf("nil Election")
	case lead == nil:
		return invalidf("election %s: nil lead function", quote(e.name))
	case !e.begin():
		return invalidf("election %s: Run is already running on this Election", quote(e.name))
	}
	defer e.end()
	opts := e.runOptions()
	retry := backoff{min: minBackoff, max: maxBackoff}
	var timer clock.Timer // the backoff's, on the Client's clock so that a test kit's clock moves it
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return e.ended(ctx)
		}
		term := e.Term()
		if term != nil && term.Context().Err() != nil {
			e.leave(ctx, term) // it may still be ours in Redis: free the name before campaigning for it
			term = nil
		}
		if term == nil {
			l, err := e.c.Acquire(ctx, e.name, opts...)
			switch {
			case err == nil:
				e.mu.Lock()
				e.term = l
				e.mu.Unlock()
				e.announce(ctx, l)
				term, retry.n = l, 0
			case ctx.Err() != nil:
				return e.ended(ctx)
			case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrClientClosed):
				return err
			default:
				d := retry.next()
				if timer == nil {
					timer = e.c.clk.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C():
				case <-ctx.Done():
				}
				timer.Stop() // done with this firing (a fake clock counts it until then)
				continue
			}
		}
		if err := e.leadTerm(ctx, term, lead); err != nil {
			return err
		}
	}
}

// leadTerm runs lead in term and resigns the term after it, even if lead
// panics. It returns lead's own error, Run's once ctx has ended, or nil to
// campaign again.
func (e *Election) leadTerm(ctx context.Context, term *Lease, lead func(ctx context.Context) error) error {
	lctx, cancel := context.WithCancelCause(term.Context())
	defer cancel(nil)
	defer e.leave(ctx, term) // even after a panic: a term that nobody leads must not be renewed
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	err := lead(lctx)
	// Judged before the resignation ends lctx: an error that wraps
	// context.Canceled from a term still live is lead's own.
	over := lctx.Err() != nil
	own := err != nil && !(over && (errors.Is(err, lctx.Err()) || errors.Is(err, context.Cause(lctx))))
	switch {
	case own:
		return err
	case ctx.Err() != nil:
		return e.ended(ctx)
	}
	return nil
}

// leave resigns term for Run, which does not retry a failed release (the
// observers hear of it; the TTL ends the term) and campaigns on.
func (e *Election) leave(ctx context.Context, term *Lease) {
	_ = term.Release(ctx) // ErrLeaseLost: the term ended before; nothing to do
	e.forget(term)
}

// runOptions are the lease options of Run's campaigns.
func (e *Election) runOptions() []WaitOption {
	e.mu.Lock()
	defer e.mu.Unlock()
	opts := append(e.opts[:len(e.opts):len(e.opts)], asTerm)
	if e.valued {
		opts = append(opts, WithHolder(e.value))
	}
	return opts
}

// begin marks a Run as under way, and reports false if one already was.
func (e *Election) begin() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		return false
	}
	e.running = true
	return true
}

func (e *Election) end() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = false
}

// ended is Run's error once ctx has ended: it matches ctx.Err(), and ctx's
// cause when that is another error.
func (e *Election) ended(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return errorf("election %s: %w", quote(e.name), err)
	}
	return errorf("election %s: %w: %w", quote(e.name), err, cause)
}

// Healthy is a liveness check. It returns nil unless this Election
// believes it leads (its current term, Term, is active) while that term's
// renewal is overdue by more than maxLate. A renewal is due a renew
// interval (WithRenewInterval, by default TTL/3) after the send time of the
// last confirmed acquire or renew; one that is overdue means that Redis has
// not confirmed the term for a while (it cannot be reached, or this process
// is starved or paused), and that the term may be about to end. Then
// Healthy returns an error matching ErrUnhealthy that names the election
// and says how late the renewal is. A follower is healthy, and so is a
// leader whose term has ended: it no longer believes it leads.
//
// Its limits: it reads the Client's clock and the term's state, never
// Redis, so it sees only what the watchdog has heard. The term ends anyway
// at its local deadline, the local lifetime (about 0.89 TTL by default)
// after the last confirmation: a maxLate at or above the lifetime less the
// renew interval (about 0.56 TTL by default) never reports anything. With
// WithAutoRenew(false), Healthy expects the holder's own Refresh calls a
// renew interval apart. A negative maxLate is ErrInvalidArgument.
func (e *Election) Healthy(maxLate time.Duration) error {
	switch {
	case e == nil:
		return invalidf("nil Election")
	case maxLate < 0:
		return invalidf("election %s: negative lateness %v", quote(e.name), maxLate)
	}
	term := e.Term()
	if term == nil {
		return nil
	}
	confirmed, active := term.lastConfirmed()
	if !active {
		return nil
	}
	if late := e.c.clk.Now().Sub(confirmed.Add(term.timing().interval())); late > maxLate {
		return errorf("%w: %s: this process leads, but the renewal of its term is %v overdue (at most %v allowed)",
			ErrUnhealthy, quote(e.name), late, maxLate)
	}
	return nil
}

// HealthHandler returns an HTTP handler for a liveness probe, as client-go's
// HealthzAdaptor is: it answers 200 "ok" while Healthy(maxLate) returns
// nil, and 503 Service Unavailable with Healthy's error otherwise.
func (e *Election) HealthHandler(maxLate time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := e.Healthy(maxLate); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
}
