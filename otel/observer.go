// Package redleaseotel records the events of redlease leases as
// OpenTelemetry metrics and spans.
//
//	obs, err := redleaseotel.NewObserver() // the global MeterProvider and TracerProvider
//	if err != nil {
//		return err
//	}
//	locks := redlease.New(rdb, redlease.WithObserver(obs))
//
// # Metrics
//
// Every metric has at most one attribute of its own, redlease.outcome, whose
// values are the few redlease.Outcome names (ok, busy, timeout, lost,
// expired, max_hold, unknown, error, stale). Resource names and owner tokens
// are never metric attributes: their number has no bound, and each value
// would be a time series of its own. Constant attributes (WithAttributes)
// are added as given.
//
//	redlease.acquire.duration  histogram, s   how long acquire calls took (waited), by outcome:
//	                                          ok, busy, timeout, unknown, error
//	redlease.hold.duration     histogram, s   how long leases were held, recorded once per lease when it
//	                                          ends: by Release (ok; lost, unknown or error if the release
//	                                          failed) or by loss (lost, expired, max_hold)
//	redlease.renewals          counter        renewals by outcome; every outcome but ok is a failure
//	redlease.losses            counter        lease contexts that ended without Release, by cause:
//	                                          lost, expired, max_hold
//	redlease.overruns          counter        leases released after they had already ended: the holder
//	                                          ran past its lease
//	redlease.releases          counter        Release calls by outcome (ok, lost, unknown, error)
//	redlease.fence.rejections  counter        writes a fencing guard rejected (EventStaleFence)
//	redlease.breaks            counter        operators' forced releases (Client.Break, EventBreak) by
//	                                          outcome: ok (a lease was removed), lost (none to remove),
//	                                          unknown, error
//
// # Spans
//
// An acquire call and a Release call each become a span (redlease.acquire,
// redlease.release), created when the event arrives with the event's start
// and end times, as a child of the span in the call's context. They carry
// the resource name, the fence and the outcome. Their status is Error for
// the outcomes lost, unknown and error; busy and timeout are contention, not
// failures, and show in the outcome attribute only. A fencing rejection is
// an event (redlease.stale_fence) on the span of the context it came with.
package redleaseotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlease/redlease"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redlease/redlease/otel"

// Attribute keys.
const (
	// OutcomeKey is the one attribute of the metrics, and a span attribute.
	OutcomeKey = attribute.Key("redlease.outcome")
	// ResourceKey and FenceKey are span attributes only.
	ResourceKey = attribute.Key("redlease.resource")
	FenceKey    = attribute.Key("redlease.fence")
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	mp    metric.MeterProvider
	tp    trace.TracerProvider
	attrs []attribute.KeyValue
}

// WithMeterProvider sets the MeterProvider. Default: otel.GetMeterProvider()
// at the time NewObserver is called.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the TracerProvider. Default:
// otel.GetTracerProvider() at the time NewObserver is called.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithAttributes adds constant attributes to every metric and span, such as
// the name of a job pool. Keep their values few: each combination is a time
// series.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// Bucket boundaries, in seconds: waits from 1 ms to 10 min, holds from
// 10 ms to 4 h.
var (
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	holdBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400}
)

// observer records events; see the package documentation.
type observer struct {
	tracer     trace.Tracer
	attrs      []attribute.KeyValue
	acquire    metric.Float64Histogram
	hold       metric.Float64Histogram
	renewals   metric.Int64Counter
	losses     metric.Int64Counter
	overruns   metric.Int64Counter
	releases   metric.Int64Counter
	rejections metric.Int64Counter
	breaks     metric.Int64Counter
	outcomes   []metric.MeasurementOption // by redlease.Outcome; outcome attribute plus constants
	plain      metric.MeasurementOption   // constants only
}

var _ redlease.Observer = (*observer)(nil)

// NewObserver returns an Observer that records lease events as metrics and
// spans (see the package documentation). Give it to redlease.New or an
// acquire call with redlease.WithObserver. It fails only if an instrument
// cannot be created.
func NewObserver(opts ...Option) (redlease.Observer, error) {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	meter := c.mp.Meter(ScopeName)
	o := &observer{tracer: c.tp.Tracer(ScopeName), attrs: c.attrs}
	var errs [8]error
	o.acquire, errs[0] = meter.Float64Histogram("redlease.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("How long acquire calls took, waiting included, by outcome."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	o.hold, errs[1] = meter.Float64Histogram("redlease.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held, from acquire to release or loss."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	o.renewals, errs[2] = meter.Int64Counter("redlease.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals by outcome; every outcome but ok is a failure."))
	o.losses, errs[3] = meter.Int64Counter("redlease.losses", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases whose context ended without Release: lost, expired or max_hold."))
	o.overruns, errs[4] = meter.Int64Counter("redlease.overruns", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases released after they had ended: the holder ran past its lease."))
	o.releases, errs[5] = meter.Int64Counter("redlease.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Release calls by outcome."))
	o.rejections, errs[6] = meter.Int64Counter("redlease.fence.rejections", metric.WithUnit("{write}"),
		metric.WithDescription("Writes rejected by a fencing guard because their fence was stale."))
	o.breaks, errs[7] = meter.Int64Counter("redlease.breaks", metric.WithUnit("{break}"),
		metric.WithDescription("Forced releases by an operator (Client.Break) by outcome; ok removed a lease."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("redleaseotel: %w", err)
		}
	}
	o.plain = metric.WithAttributeSet(attribute.NewSet(c.attrs...))
	for out := redlease.Outcome(0); out <= redlease.OutcomeHandover; out++ {
		set := attribute.NewSet(append(c.attrs[:len(c.attrs):len(c.attrs)], OutcomeKey.String(out.String()))...)
		o.outcomes = append(o.outcomes, metric.WithAttributeSet(set))
	}
	return o, nil
}

// outcome returns the measurement option for an outcome.
func (o *observer) outcome(out redlease.Outcome) metric.MeasurementOption {
	if int(out) < len(o.outcomes) {
		return o.outcomes[out]
	}
	// An outcome newer than this package: still one of few values.
	return metric.WithAttributeSet(attribute.NewSet(append(o.attrs[:len(o.attrs):len(o.attrs)],
		OutcomeKey.String(out.String()))...))
}

// Observe records e. It does not block: instruments aggregate in memory, and
// spans go to the TracerProvider's span processors.
func (o *observer) Observe(ctx context.Context, e redlease.Event) {
	switch e.Kind {
	case redlease.EventAcquire:
		o.acquire.Record(ctx, e.End.Sub(e.Start).Seconds(), o.outcome(e.Outcome))
		o.span(ctx, "redlease.acquire", e)
	case redlease.EventRenew:
		o.renewals.Add(ctx, 1, o.outcome(e.Outcome))
	case redlease.EventLost:
		o.losses.Add(ctx, 1, o.outcome(e.Outcome))
		o.hold.Record(ctx, e.Held.Seconds(), o.outcome(e.Outcome))
	case redlease.EventRelease:
		o.releases.Add(ctx, 1, o.outcome(e.Outcome))
		if e.Overran {
			o.overruns.Add(ctx, 1, o.plain) // its hold time was recorded at the loss
		} else {
			o.hold.Record(ctx, e.Held.Seconds(), o.outcome(e.Outcome))
		}
		o.span(ctx, "redlease.release", e)
	case redlease.EventStaleFence:
		o.rejections.Add(ctx, 1, o.plain)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("redlease.stale_fence", trace.WithTimestamp(e.End),
				trace.WithAttributes(ResourceKey.String(e.Resource), FenceKey.Int64(e.Fence)))
		}
	case redlease.EventBreak:
		o.breaks.Add(ctx, 1, o.outcome(e.Outcome))
	}
}

// span records an operation that has already ended as a span.
func (o *observer) span(ctx context.Context, name string, e redlease.Event) {
	attrs := make([]attribute.KeyValue, 0, len(o.attrs)+5)
	attrs = append(attrs, o.attrs...)
	attrs = append(attrs, ResourceKey.String(e.Resource), OutcomeKey.String(e.Outcome.String()))
	if e.Fence > 0 {
		attrs = append(attrs, FenceKey.Int64(e.Fence))
	}
	if e.Kind == redlease.EventRelease {
		attrs = append(attrs, attribute.Float64("redlease.held_seconds", e.Held.Seconds()),
			attribute.Bool("redlease.overran", e.Overran))
	}
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(e.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	switch e.Outcome {
	case redlease.OutcomeLost, redlease.OutcomeUnknown, redlease.OutcomeError:
		msg := e.Outcome.String()
		if e.Err != nil {
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(e.End))
}
