package redleaseotel

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/redlease/redlease"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness is an observer wired to in-memory metrics and spans, and a
// redlease Client on miniredis that reports to it.
type harness struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	locks  *redlease.Client
	obs    redlease.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	events *recorder
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, mr: miniredis.RunT(t), reader: sdkmetric.NewManualReader(),
		spans: tracetest.NewInMemoryExporter(), events: &recorder{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = h.tp.Shutdown(context.Background())
	})
	obs, err := NewObserver(append([]Option{WithMeterProvider(mp), WithTracerProvider(h.tp)}, opts...)...)
	require.NoError(t, err)
	h.obs = obs
	rdb := redis.NewClient(&redis.Options{Addr: h.mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h.locks = redlease.New(rdb, redlease.WithObserver(obs), redlease.WithObserver(h.events))
	t.Cleanup(func() { _ = h.locks.Close(context.Background()) })
	return h
}

// metrics returns every data point as "name{outcome}" -> value: the count
// of a histogram, the sum of a counter. It fails the test if a data point
// has an attribute other than the outcome and allowed.
func (h *harness) metrics(allowed ...attribute.Key) map[string]float64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(h.t, h.reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	check := func(name string, set attribute.Set) string {
		for _, kv := range set.ToSlice() {
			if kv.Key != OutcomeKey && !contains(allowed, kv.Key) {
				h.t.Errorf("%s has attribute %s: metric attributes must stay bounded", name, kv.Key)
			}
		}
		v, _ := set.Value(OutcomeKey)
		return name + "{" + v.AsString() + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(h.t, ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[check(m.Name, p.Attributes)] += float64(p.Count)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[check(m.Name, p.Attributes)] += float64(p.Value)
				}
			default:
				h.t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func contains(keys []attribute.Key, k attribute.Key) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// span returns the one ended span named name, and forgets all spans.
func (h *harness) span(name string) tracetest.SpanStub {
	h.t.Helper()
	defer h.spans.Reset()
	var found []tracetest.SpanStub
	for _, s := range h.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(h.t, found, 1, "spans named %s", name)
	return found[0]
}

type recorder struct {
	mu     sync.Mutex
	events []redlease.Event
}

func (r *recorder) Observe(_ context.Context, e redlease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// waitLost waits until the loss of resource was observed: a lease context
// ends just before its EventLost is sent.
func (r *recorder) waitLost(t *testing.T, resource string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Kind == redlease.EventLost && e.Resource == resource {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no EventLost of %q", resource)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recorder) last() redlease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[len(r.events)-1]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestMetricsAndSpansOfALeaseLife(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()

	// Acquired, under a parent span.
	pctx, parent := h.tp.Tracer("test").Start(ctx, "job")
	l, err := h.locks.TryAcquire(pctx, "billing:7", redlease.WithAutoRenew(false), redlease.WithTTL(time.Minute))
	require.NoError(t, err)
	parent.End()
	acq := h.events.last()
	s := h.span("redlease.acquire")
	require.Equal(t, parent.SpanContext().SpanID(), s.Parent.SpanID())
	require.Equal(t, acq.Start, s.StartTime, "created after the fact, with the event's times")
	require.Equal(t, acq.End, s.EndTime)
	a := attrs(s)
	require.Equal(t, "billing:7", a[ResourceKey].AsString())
	require.Equal(t, l.Fence(), a[FenceKey].AsInt64())
	require.Equal(t, "ok", a[OutcomeKey].AsString())
	require.Equal(t, codes.Unset, s.Status.Code)

	// Busy, and a wait that ran out: contention, not errors.
	_, err = h.locks.TryAcquire(ctx, "billing:7")
	require.ErrorIs(t, err, redlease.ErrNotAcquired)
	require.Equal(t, codes.Unset, h.span("redlease.acquire").Status.Code)
	// Long enough for the first attempt's reply on a loaded machine: a wait
	// cut before Redis answered it is an unknown outcome, not a timeout.
	_, err = h.locks.Acquire(ctx, "billing:7", redlease.WithMaxWait(500*time.Millisecond))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	h.spans.Reset()

	// Renewed, then lost: Redis no longer has it.
	require.NoError(t, l.Refresh(ctx))
	h.mr.Del("redlease:{billing:7}:lease")
	require.ErrorIs(t, l.Refresh(ctx), redlease.ErrLeaseLost)
	// Released after the loss: an overrun, whose hold time was recorded at the loss.
	require.ErrorIs(t, l.Release(ctx), redlease.ErrLeaseLost)
	s = h.span("redlease.release")
	require.Equal(t, codes.Error, s.Status.Code)
	require.True(t, attrs(s)["redlease.overran"].AsBool())

	// A clean life.
	l, err = h.locks.TryAcquire(ctx, "billing:8", redlease.WithAutoRenew(false))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.Equal(t, codes.Unset, h.span("redlease.release").Status.Code)

	// Expired locally (no renewal), and cut by the maximum hold.
	l, err = h.locks.TryAcquire(ctx, "billing:9", redlease.WithAutoRenew(false), redlease.WithTTL(500*time.Millisecond))
	require.NoError(t, err)
	h.events.waitLost(t, "billing:9")
	require.ErrorIs(t, context.Cause(l.Context()), redlease.ErrLeaseLost)
	l2, err := h.locks.TryAcquire(ctx, "billing:10", redlease.WithTTL(time.Second), redlease.WithMaxHold(300*time.Millisecond))
	require.NoError(t, err)
	h.events.waitLost(t, "billing:10")
	require.ErrorIs(t, context.Cause(l2.Context()), redlease.ErrMaxHold)
	h.spans.Reset()

	require.Equal(t, map[string]float64{
		"redlease.acquire.duration{ok}":      4,
		"redlease.acquire.duration{busy}":    1,
		"redlease.acquire.duration{timeout}": 1,
		"redlease.renewals{ok}":              1,
		"redlease.renewals{lost}":            1,
		"redlease.losses{lost}":              1,
		"redlease.losses{expired}":           1,
		"redlease.losses{max_hold}":          1,
		"redlease.hold.duration{lost}":       1, // once per lease: not again at its release
		"redlease.hold.duration{expired}":    1,
		"redlease.hold.duration{max_hold}":   1,
		"redlease.hold.duration{ok}":         1,
		"redlease.releases{lost}":            1,
		"redlease.releases{ok}":              1,
		"redlease.overruns{}":                1,
	}, h.metrics())
}

func TestRedisErrorsAreErrorsAndStaleFencesAreCounted(t *testing.T) {
	h := newHarness(t, WithAttributes(attribute.String("pool", "billing")))
	ctx := t.Context()
	h.mr.SetError("LOADING Redis is loading the dataset in memory")
	_, err := h.locks.TryAcquire(ctx, "r")
	require.Error(t, err)
	s := h.span("redlease.acquire")
	require.Equal(t, codes.Error, s.Status.Code)
	require.Contains(t, s.Status.Description, "LOADING")
	require.Equal(t, "billing", attrs(s)["pool"].AsString())
	h.mr.SetError("")

	// Guards report stale fences as events; one is sent here by hand.
	pctx, parent := h.tp.Tracer("test").Start(ctx, "write")
	now := time.Now()
	h.obs.Observe(pctx, redlease.Event{Kind: redlease.EventStaleFence, Outcome: redlease.OutcomeStale,
		Resource: "r", Fence: 3, Start: now, End: now, Err: errors.New("stale fence 3")})
	parent.End()
	s = h.span("write")
	require.Len(t, s.Events, 1)
	require.Equal(t, "redlease.stale_fence", s.Events[0].Name)

	require.Equal(t, map[string]float64{
		"redlease.acquire.duration{error}": 1,
		"redlease.fence.rejections{}":      1,
	}, h.metrics("pool"))
}

func TestBreaksAreCountedByOutcome(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	l, err := h.locks.TryAcquire(ctx, "billing:7", redlease.WithAutoRenew(false))
	require.NoError(t, err)
	_, removed, err := h.locks.Break(ctx, "billing:7", l.Fence())
	require.NoError(t, err)
	require.True(t, removed)
	_, removed, err = h.locks.Break(ctx, "billing:7", 0)
	require.NoError(t, err)
	require.False(t, removed)
	h.mr.SetError("LOADING Redis is loading the dataset in memory")
	_, _, err = h.locks.Break(ctx, "billing:7", 0)
	require.Error(t, err)
	h.mr.SetError("")

	m := h.metrics()
	require.Equal(t, 1.0, m["redlease.breaks{ok}"])
	require.Equal(t, 1.0, m["redlease.breaks{lost}"])
	require.Equal(t, 1.0, m["redlease.breaks{error}"])
}

func TestDefaultsToGlobalProviders(t *testing.T) {
	obs, err := NewObserver(nil)
	require.NoError(t, err)
	obs.Observe(t.Context(), redlease.Event{Kind: redlease.EventAcquire, Outcome: redlease.OutcomeOK,
		Start: time.Now(), End: time.Now()}) // the no-op globals: nothing to see, nothing to break
}
