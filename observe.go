package redlease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redlease/redlease/internal/shared"
)

// Observer receives the events of leases, for logs, metrics and traces
// (WithObserver, WithLogger; the module github.com/redlease/redlease/otel
// records them with OpenTelemetry). Observe is called synchronously, on the
// goroutine that made the event happen: the acquiring or releasing caller,
// the watchdog, or a lease's deadline timer. No lock of redlease's is held
// then, so an observer may call any method of the Lease and the Client (a
// Refresh from an observer of EventRenew makes another EventRenew: guard
// against recursion). Events of one lease can arrive concurrently from
// these goroutines. Observe should be quick: while it runs, the watchdog's
// batch it reports on waits, and so does the caller.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says what happened.
type EventKind uint8

// The kinds of events.
const (
	// EventAcquire ends an acquire call (TryAcquire, Acquire, or one lease of
	// AcquireAll). Start is when the call began; Outcome says how it ended.
	EventAcquire EventKind = iota + 1
	// EventRenew is one renewal, by the watchdog or Refresh, or
	// Client.Resume taking up a lease (which renews it).
	EventRenew
	// EventLost is a lease context ending without Release: Outcome is
	// OutcomeLost (Redis said it is not ours), OutcomeExpired (no renewal
	// confirmed before the local deadline) or OutcomeMaxHold.
	EventLost
	// EventRelease ends a Release call. Overran says the lease had already
	// been lost or had lapsed while its holder still ran.
	EventRelease
	// EventStaleFence is a write rejected by a fencing guard.
	EventStaleFence
	// EventBreak ends a Client.Break call, an operator's forced release.
	// Outcome is OutcomeOK when a lease was removed, OutcomeLost when there
	// was none to remove (no lease, or one with another fence than asked
	// for), or the outcome of the Redis error. Owner and Fence are those of
	// the lease Break found, removed or not.
	EventBreak
	// EventOutage is an Acquire wait whose attempt got no answer from Redis
	// (it could not be reached, or its reply was lost) after Redis had
	// answered, or at its first attempt: the wait rides the outage out,
	// retrying with backoff. One per outage and wait, not per retry; Err is
	// the first attempt's error, Start when it failed.
	EventOutage
	// EventRecovered is an Acquire wait that got an answer from Redis again
	// after an EventOutage. Start is when the outage began, End when it
	// ended.
	EventRecovered
)

var kindNames = [...]string{"", "acquire", "renew", "lost", "release", "stale_fence", "break", "outage", "recovered"}

func (k EventKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Outcome is how an operation ended. The outcomes are kept apart because
// they call for different actions: busy is contention, timeout is waiting
// too long, lost is a holder that went stale, unknown and error are Redis
// trouble.
type Outcome uint8

// The outcomes.
const (
	OutcomeOK       Outcome = iota + 1 // acquired, renewed, released, broken
	OutcomeBusy                        // held by another owner (TryAcquire)
	OutcomeTimeout                     // ctx or the wait limit ended first
	OutcomeLost                        // the lease was not ours (any more); Break found none to remove
	OutcomeExpired                     // no renewal confirmed before the local deadline
	OutcomeMaxHold                     // the maximum hold time ran out
	OutcomeUnknown                     // the reply was lost (ErrOutcomeUnknown)
	OutcomeError                       // Redis refused, or could not be reached, or bad input
	OutcomeStale                       // a fencing guard rejected a write
	OutcomeHandover                    // an election's term was handed over (Election.Handover)
)

var outcomeNames = [...]string{"", "ok", "busy", "timeout", "lost", "expired", "max_hold", "unknown", "error", "stale", "handover"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "invalid"
}

// Event describes one operation on a lease. Resource and Owner are for logs
// and traces; never use them as metric labels (unbounded cardinality).
type Event struct {
	Kind     EventKind
	Outcome  Outcome
	Resource string
	Owner    string // the lease's owner token; "" if none was taken
	Fence    int64  // the lease's fence; 0 if none was taken
	Start    time.Time
	End      time.Time
	Held     time.Duration // EventLost, EventRelease: since the lease was acquired
	Overran  bool          // EventRelease: the lease ended before Release was called
	Err      error
}

// WithObserver adds an observer of the leases' events. Observers given to
// New and to an acquire call all see that lease's events.
func WithObserver(o Observer) LeaseOption {
	return forLease(func(c *config) {
		if o != nil {
			c.observers = append(c.observers[:len(c.observers):len(c.observers)], o)
		}
	})
}

// WithLogger logs the leases' events to l as structured records: acquire
// (waited, fence), renew failures, loss (why), release (held for, result),
// stale fences, breaks, and a wait's Redis outage and recovery. Each record
// has the resource, the fence and an 8-character owner prefix, never a
// payload. Successes are logged at Debug, failures to renew and recoveries at
// Info, losses, failed releases, stale fences, outages and every Break at
// Warn.
func WithLogger(l *slog.Logger) LeaseOption {
	if l == nil {
		return nil
	}
	return WithObserver(LogObserver(l))
}

// LogObserver returns the Observer that WithLogger adds: it logs events to l
// as WithLogger says. The guards of package fencing take it too.
func LogObserver(l *slog.Logger) Observer { return logObserver{l} }

type logObserver struct{ l *slog.Logger }

func (o logObserver) Observe(ctx context.Context, e Event) {
	level := slog.LevelDebug
	switch {
	case e.Kind == EventLost, e.Kind == EventStaleFence, e.Kind == EventBreak, e.Kind == EventOutage,
		e.Kind == EventRelease && e.Outcome != OutcomeOK, e.Overran:
		level = slog.LevelWarn
	case e.Kind == EventRenew && e.Outcome != OutcomeOK, e.Kind == EventRecovered:
		level = slog.LevelInfo
	}
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("resource", shared.Cut(e.Resource)),
		slog.String("result", e.Outcome.String()),
	}
	if e.Fence > 0 {
		attrs = append(attrs, slog.Int64("fence", e.Fence))
	}
	if e.Owner != "" {
		attrs = append(attrs, slog.String("owner", e.Owner[:min(8, len(e.Owner))]))
	}
	switch e.Kind {
	case EventAcquire:
		attrs = append(attrs, slog.Duration("waited", e.End.Sub(e.Start)))
	case EventRelease, EventLost:
		attrs = append(attrs, slog.Duration("held", e.Held))
	case EventRecovered:
		attrs = append(attrs, slog.Duration("down", e.End.Sub(e.Start)))
	}
	if e.Overran {
		attrs = append(attrs, slog.Bool("overran", true))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "redlease "+e.Kind.String(), attrs...)
}

// observe sends e to the configured observers.
func (c *config) observe(ctx context.Context, e Event) {
	for _, o := range c.observers {
		o.Observe(ctx, e)
	}
}

// pending is an event to send to cfg's observers once the locks held when it
// happened have been released (see Observer). The zero pending sends
// nothing.
type pending struct {
	cfg *config
	ctx context.Context // if set, the context the event belongs to (a lease's)
	e   Event
}

// emit sends the event, with p.ctx or, if that is not set, ctx.
func (p pending) emit(ctx context.Context) {
	if p.cfg == nil {
		return
	}
	if p.ctx != nil {
		ctx = p.ctx
	}
	p.cfg.observe(ctx, p.e)
}

// outcomeOf classifies the error of an operation.
func outcomeOf(err error) Outcome {
	var busy *BusyError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &busy):
		return OutcomeBusy
	case errors.Is(err, ErrOutcomeUnknown):
		return OutcomeUnknown
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return OutcomeTimeout
	case errors.Is(err, ErrMaxHold):
		return OutcomeMaxHold
	case errors.Is(err, ErrHandover):
		return OutcomeHandover
	case errors.Is(err, ErrLeaseLost):
		return OutcomeLost
	}
	return OutcomeError
}
