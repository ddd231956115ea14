// This file tests the Processor's own methods (end to end into an
// Aggregator, ForceFlush, local parents of another provider, concurrent
// starts, service marks in a busy process) and holds TestMain and the span
// helpers the package's tests share.

package otelstats

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

func TestMain(m *testing.M) {
	testenv.Clear() // the developer's DD_*, OTEL_* and SPANSTATS_* settings are not the tests'
	goleak.VerifyTestMain(m)
}

// recorder keeps the spans that end.
type recorder struct{ spans []sdktrace.ReadOnlySpan }

func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan)                   { r.spans = append(r.spans, s) }
func (r *recorder) Shutdown(context.Context) error                  { return nil }
func (r *recorder) ForceFlush(context.Context) error                { return nil }

// spanSpec describes one span to end.
type spanSpec struct {
	name   string
	kind   trace.SpanKind
	attrs  []attribute.KeyValue
	remote bool // under a remote parent
	local  bool // under a local parent (started first, ended after)
	err    bool
}

// endSpans ends the spans of specs under a provider with resource attributes
// res and returns them as the processor sees them.
func endSpans(t testing.TB, res []attribute.KeyValue, specs ...spanSpec) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := &recorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewWithAttributes("", res...)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	var out []sdktrace.ReadOnlySpan
	for _, sp := range specs {
		ctx := context.Background()
		if sp.remote {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true}))
		}
		var parent trace.Span
		if sp.local {
			ctx, parent = tr.Start(ctx, "parent")
		}
		start := time.Now()
		_, s := tr.Start(ctx, sp.name, trace.WithSpanKind(sp.kind), trace.WithAttributes(sp.attrs...), trace.WithTimestamp(start))
		if sp.err {
			s.SetStatus(codes.Error, "boom")
		}
		s.End(trace.WithTimestamp(start.Add(3 * time.Millisecond)))
		out = append(out, rec.spans[len(rec.spans)-1])
		if parent != nil {
			parent.End()
		}
	}
	return out
}

func mapOne(t *testing.T, p *Processor, res []attribute.KeyValue, spec spanSpec) stats.Span {
	t.Helper()
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, endSpans(t, res, spec)[0], b[:])
	return sp
}

var svcRes = []attribute.KeyValue{attribute.String("service.name", "checkout")}

// startOnly passes a Processor the starts of spans only.
type startOnly struct {
	recorder
	p *Processor
}

func (s *startOnly) OnStart(ctx context.Context, rw sdktrace.ReadWriteSpan) { s.p.OnStart(ctx, rw) }

// TestLocalParentOfAnotherProvider: a span whose local parent was started
// by another TracerProvider (another resource, so another export: the
// agent finds the parent outside the child's chunk) is top-level, as
// ComputeTopLevel makes it; a child of the parent's own provider is not.
func TestLocalParentOfAnotherProvider(t *testing.T) {
	p := newProcessor(nil)
	provider := func(svc string) (*sdktrace.TracerProvider, *startOnly) {
		so := &startOnly{p: p}
		return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(so),
			sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", svc)))), so
	}
	front, frontRec := provider("front")
	back, backRec := provider("back")
	defer func() { _ = front.Shutdown(context.Background()); _ = back.Shutdown(context.Background()) }()
	ctx, parent := front.Tracer("t").Start(context.Background(), "handle")
	_, same := front.Tracer("t").Start(ctx, "step")
	_, other := back.Tracer("t").Start(ctx, "work")
	same.End()
	other.End()
	parent.End()
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, backRec.spans[0], b[:])
	if sp.Service != "back" || !sp.TopLevel || sp.TraceRoot {
		t.Fatalf("child under the other provider's span: service %q top-level %v root %v; want back, true, false", sp.Service, sp.TopLevel, sp.TraceRoot)
	}
	p.fill(&sp, frontRec.spans[0], b[:])
	if sp.Service != "front" || sp.TopLevel {
		t.Fatalf("child under its own provider's span: service %q top-level %v; want front, false", sp.Service, sp.TopLevel)
	}
}

// TestResourcesAlternate: spans of several TracerProviders sharing one
// Processor map to their own resource's service, and once each resource
// has been seen, ending their spans in turn allocates nothing.
func TestResourcesAlternate(t *testing.T) {
	p := newProcessor(nil)
	spec := spanSpec{name: "work", kind: trace.SpanKindInternal, local: true}
	services := []string{"cart", "billing", "search"}
	var spans []sdktrace.ReadOnlySpan
	for _, svc := range services {
		spans = append(spans, endSpans(t, []attribute.KeyValue{attribute.String("service.name", svc)}, spec)[0])
	}
	var sp stats.Span
	var b [scratchSize]byte
	for round := range 2 {
		for i, s := range spans {
			if p.fill(&sp, s, b[:]); sp.Service != services[i] {
				t.Fatalf("round %d: service %q, want %q", round, sp.Service, services[i])
			}
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, s := range spans {
			p.fill(&sp, s, b[:])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of 3 resources, want 0", allocs)
	}
}

// startedAgg starts a fake agent (closed at the test's end) and an
// Aggregator sending to it, started; the test stops it.
func startedAgg(t *testing.T) (*statstest.Agent, *stats.Aggregator) {
	t.Helper()
	agent := statstest.New()
	t.Cleanup(agent.Close)
	agg, err := stats.New(stats.Config{AgentURL: agent.URL()})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	return agent, agg
}

// TestProcessorEndToEnd: spans ended under a TracerProvider with a sampler
// that drops everything (wrapped in RecordDropped) reach the fake agent as
// groups, with their counts.
func TestProcessorEndToEnd(t *testing.T) {
	agent, agg := startedAgg(t)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(RecordDropped(sdktrace.NeverSample())),
		sdktrace.WithResource(resource.NewWithAttributes("", svcRes...)),
		sdktrace.WithSpanProcessor(NewProcessor(agg)))
	tr := tp.Tracer("t")
	for i := range 5 {
		_, s := tr.Start(context.Background(), "GET /a", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", "GET"), attribute.String("http.route", "/a")))
		if i == 0 {
			s.SetStatus(codes.Error, "x")
		}
		s.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := agg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	got, hits := statstest.Sum(agent.Requests())
	g := got[statstest.GroupKey{Service: "checkout", Name: "http.server.request", Resource: "GET /a", Type: "web", SpanKind: "server"}]
	if hits != 5 || g == nil || g.Hits != 5 || g.Errors != 1 || g.TopLevelHits != 5 {
		t.Fatalf("hits %d, group %+v; want 5 hits, 1 error, 5 top-level in one group", hits, g)
	}
}

// flushCounter is a processor that counts its ForceFlush calls.
type flushCounter struct{ n atomic.Int32 }

func (f *flushCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *flushCounter) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (f *flushCounter) Shutdown(context.Context) error                  { return nil }
func (f *flushCounter) ForceFlush(context.Context) error                { f.n.Add(1); return nil }

// TestForceFlushLeavesTimeForTheNext: registered before the trace
// exporter's processor, with an agent answering 503 to stats (the report
// retried for seconds), ForceFlush under a 1 s deadline still reaches the
// exporter's processor, within the deadline; without a deadline it waits
// for the outcome and returns the agent's error.
func TestForceFlushLeavesTimeForTheNext(t *testing.T) {
	agent := statstest.New()
	defer agent.Close()
	agent.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.URL.Path != "/v0.6/stats" {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), MaxRetries: 3, RetryBackoff: 500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	exp := &flushCounter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewProcessor(agg)), sdktrace.WithSpanProcessor(exp))
	end := func() {
		_, s := tp.Tracer("t").Start(context.Background(), "op", trace.WithSpanKind(trace.SpanKindServer))
		s.End()
	}
	end()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	start := time.Now()
	err = tp.ForceFlush(ctx)
	took := time.Since(start)
	cancel()
	if err != nil || exp.n.Load() != 1 || took > 900*time.Millisecond {
		t.Fatalf("ForceFlush under 1 s: %v after %v, the next processor flushed %d times; want nil, 1, about 0.5 s", err, took, exp.n.Load())
	}
	end()
	if err := NewProcessor(agg).ForceFlush(context.Background()); err == nil {
		t.Fatal("ForceFlush without a deadline returned nil with the agent answering 503")
	}
	// Stopped first, with the agent still answering 503: the provider's
	// Shutdown then has nothing to flush, and no error.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = agg.Stop(sctx)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after the Aggregator stopped: %v, want nil", err)
	}
}

// TestShutdownFlushes: the provider's Shutdown flushes the Aggregator (a
// processor's Shutdown includes ForceFlush's effects), so the agent holds
// the span when it returns, before the Aggregator is stopped; the
// Aggregator keeps running.
func TestShutdownFlushes(t *testing.T) {
	agent, agg := startedAgg(t)
	defer agg.Stop(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewProcessor(agg)))
	_, s := tp.Tracer("t").Start(context.Background(), "op", trace.WithSpanKind(trace.SpanKindServer))
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, hits := statstest.Sum(agent.Requests()); hits != 1 {
		t.Fatalf("the agent holds %d hits once the provider's Shutdown returned, want 1", hits)
	}
	if err := agg.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after the provider's Shutdown: %v, want the Aggregator still running", err)
	}
	// An Aggregator never started has nothing a Shutdown could flush.
	idle, err := stats.New(stats.Config{AgentURL: agent.URL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := NewProcessor(idle).Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown with an Aggregator never started: %v, want nil", err)
	}
}

// TestLocalParentOfAnotherProviderSameResource: two TracerProviders built
// without WithResource share resource.Default()'s one *Resource, yet each
// exports its own spans, so the agent still finds the parent outside the
// child's chunk and makes the child top-level.
func TestLocalParentOfAnotherProviderSameResource(t *testing.T) {
	p := newProcessor(nil)
	frontRec, backRec := &startOnly{p: p}, &startOnly{p: p}
	front := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(frontRec))
	back := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(backRec))
	defer func() { _ = front.Shutdown(context.Background()); _ = back.Shutdown(context.Background()) }()
	ctx, parent := front.Tracer("t").Start(context.Background(), "handle")
	_, other := back.Tracer("t").Start(ctx, "work")
	other.End()
	parent.End()
	if backRec.spans[0].Resource() != frontRec.spans[0].Resource() {
		t.Fatal("the providers do not share a resource: the test shows nothing")
	}
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, backRec.spans[0], b[:])
	if !sp.TopLevel || sp.TraceRoot {
		t.Fatalf("child under another provider's span of the same resource: top-level %v root %v; want true, false", sp.TopLevel, sp.TraceRoot)
	}
}

// TestNewProcessorNilAggregator: a nil Aggregator is refused at once,
// saying so, rather than by a nil dereference inside every span's End
// in the application's goroutines.
func TestNewProcessorNilAggregator(t *testing.T) {
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "nil *stats.Aggregator") {
			t.Fatalf("NewProcessor(nil) panicked with %v, want a message naming the nil *stats.Aggregator", r)
		}
	}()
	NewProcessor(nil)
	t.Fatal("NewProcessor(nil) returned")
}

// dropNamed drops the spans named name and samples every other span, as a
// sampler filtering spans by name (not parent-based) does.
type dropNamed struct{ name string }

func (d dropNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == d.name {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (d dropNamed) Description() string { return "dropNamed" }

// middlewareHandler starts a "middleware" span and its child "handler"
// (a client span) under sampler, through a Processor, and returns the
// Processor with what was recorded, in the order the spans ended.
func middlewareHandler(t *testing.T, sampler sdktrace.Sampler) (*Processor, []sdktrace.ReadOnlySpan) {
	p := newProcessor(nil)
	rec := &startOnly{p: p}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "shop"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	ctx, mw := tr.Start(context.Background(), "middleware")
	_, h := tr.Start(ctx, "handler", trace.WithSpanKind(trace.SpanKindClient))
	h.End()
	mw.End()
	return p, rec.spans
}

// TestParentNotRecorded: a span whose local parent the sampler dropped is
// exported without it, so the agent's ComputeTopLevel finds the parent
// outside the chunk and makes the span top-level.
func TestParentNotRecorded(t *testing.T) {
	p, spans := middlewareHandler(t, dropNamed{"middleware"})
	if len(spans) != 1 {
		t.Fatalf("%d spans recorded; want the handler's alone", len(spans))
	}
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, spans[0], b[:])
	if !sp.TopLevel || sp.TraceRoot {
		t.Fatalf("child of a dropped local parent: top-level %v root %v; want true, false", sp.TopLevel, sp.TraceRoot)
	}
}

// TestParentRecordedDropped: under RecordDropped the parent the sampler
// dropped is recorded and counted here, top-level itself, so its child is
// not: one top-level span per entry into the service, as dd-trace-go,
// whose top-level does not depend on sampling. Only a parent never
// recorded (TestParentNotRecorded) leaves its child top-level.
func TestParentRecordedDropped(t *testing.T) {
	p, spans := middlewareHandler(t, RecordDropped(dropNamed{"middleware"}))
	if len(spans) != 2 || !spans[0].SpanContext().IsSampled() || spans[1].SpanContext().IsSampled() {
		t.Fatalf("%d spans recorded; want the sampled handler, then the middleware recorded unsampled", len(spans))
	}
	var top []bool
	for _, s := range spans {
		var sp stats.Span
		var b [scratchSize]byte
		p.fill(&sp, s, b[:])
		top = append(top, sp.TopLevel)
	}
	if !slices.Equal(top, []bool{false, true}) {
		t.Fatalf("top-level of handler, middleware: %v; want [false true]", top)
	}
}

// TestDetachedParent: a span started under a sampled parent's context
// alone (trace.ContextWithSpanContext, to outlive the request's
// cancellation) has that parent in its export, as any child has: not
// top-level under a parent of its service, where a parent the sampler
// dropped (TestParentNotRecorded) leaves it top-level; and the parent's
// own service.name still decides.
func TestDetachedParent(t *testing.T) {
	p := newProcessor(nil, WithSpanServiceNames())
	rec := &startOnly{p: p}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "shop"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	ctx, h := tr.Start(context.Background(), "handler", trace.WithSpanKind(trace.SpanKindServer))
	detached := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx))
	_, c := tr.Start(detached, "GET", trace.WithSpanKind(trace.SpanKindClient))
	c.End()
	_, w := tr.Start(detached, "async work")
	w.End()
	h.End()
	octx, o := tr.Start(context.Background(), "other", trace.WithAttributes(attribute.String("service.name", "worker")))
	_, oc := tr.Start(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(octx)), "GET", trace.WithSpanKind(trace.SpanKindClient))
	oc.End()
	o.End()
	// Detached work that starts after its parent has ended, and been
	// mapped (OnEnd), still compares with the parent's own service.
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, rec.spans[len(rec.spans)-1], b[:]) // "other"
	_, late := tr.Start(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(octx)), "late", trace.WithSpanKind(trace.SpanKindClient))
	late.End()
	want := map[string]bool{"GET": false, "async work": false, "handler": true, "other": true, "late": true}
	if len(rec.spans) != 6 {
		t.Fatalf("%d spans recorded, want 6", len(rec.spans))
	}
	for i, s := range rec.spans {
		var sp stats.Span
		var b [scratchSize]byte
		p.fill(&sp, s, b[:])
		top, ok := want[s.Name()]
		if i == 3 { // the client span under "other", whose service.name is worker
			top, ok = true, true
		}
		if !ok || sp.TopLevel != top {
			t.Errorf("span %d %q: top-level %v, want %v", i, s.Name(), sp.TopLevel, top)
		}
	}
}

// fillOnEnd passes a Processor each span's start, and maps each span as it
// ends (as OnEnd does, without an Aggregator), keeping the last mapped.
type fillOnEnd struct {
	p    *Processor
	last stats.Span
}

func (f *fillOnEnd) OnStart(ctx context.Context, rw sdktrace.ReadWriteSpan) { f.p.OnStart(ctx, rw) }
func (f *fillOnEnd) OnEnd(s sdktrace.ReadOnlySpan) {
	var b [scratchSize]byte
	f.p.fill(&f.last, s, b[:])
}
func (f *fillOnEnd) Shutdown(context.Context) error   { return nil }
func (f *fillOnEnd) ForceFlush(context.Context) error { return nil }

// TestServiceMarksOutliveOtherSpans: in a busy process, many spans with
// their own service.name start and end while a request runs; neither the
// request's own service.name nor, for a long-lived child, its parent's is
// lost to them, so children of the request's service are not top-level.
// Once every span has ended no live mark is left.
func TestServiceMarksOutliveOtherSpans(t *testing.T) {
	// Many times markSlots: marks left in their slots after their spans
	// ended would replace the request's almost surely.
	const others = 5 * markSlots
	p := newProcessor(nil, WithSpanServiceNames())
	f := &fillOnEnd{p: p}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f),
		sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "shop"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	billing := trace.WithAttributes(attribute.String("service.name", "billing"))
	busy := func() {
		for range others {
			ctx, o := tr.Start(context.Background(), "other", trace.WithSpanKind(trace.SpanKindServer), billing)
			_, c := tr.Start(ctx, "other step", billing)
			c.End()
			o.End()
		}
	}
	ctx, req := tr.Start(context.Background(), "request", trace.WithSpanKind(trace.SpanKindServer), billing)
	_, long := tr.Start(ctx, "long step", billing) // its parent's service is marked at its start
	busy()
	_, late := tr.Start(ctx, "late step", billing) // reads the parent's service at its start
	late.End()
	if f.last.Service != "billing" || f.last.TopLevel {
		t.Errorf("child started after %d other spans: service %q top-level %v; want billing, false", 2*others, f.last.Service, f.last.TopLevel)
	}
	long.End()
	if f.last.Service != "billing" || f.last.TopLevel {
		t.Errorf("child ended after %d other spans: service %q top-level %v; want billing, false", 2*others, f.last.Service, f.last.TopLevel)
	}
	req.End()
	if n := liveMarks(&p.owners.live) + liveMarks(&p.parents); n != 0 {
		t.Errorf("%d marks left once every span ended, want 0", n)
	}
}

func liveMarks(c *serviceMarks) (n int) {
	for i := range c.slots {
		if c.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// startsOnly passes a Processor the starts of spans only, and keeps none.
type startsOnly struct{ startOnly }

func (*startsOnly) OnEnd(sdktrace.ReadOnlySpan) {}

// TestConcurrentChildStarts: children started at once under one parent
// that is being changed read no attribute of it (under -race).
func TestConcurrentChildStarts(t *testing.T) {
	p := newProcessor(nil)
	p.spanServices.Store(true) // as after a span with its own service.name
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&startsOnly{startOnly{p: p}}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	ctx, parent := tr.Start(context.Background(), "p", trace.WithAttributes(attribute.String("service.name", "w"), attribute.String("a", "b")))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, c := tr.Start(ctx, "c")
				parent.SetAttributes(attribute.Int("x", i))
				c.End()
			}
		}()
	}
	wg.Wait()
	parent.End()
}

// countingSpan counts the calls of Attributes (each builds a map in the SDK).
type countingSpan struct {
	sdktrace.ReadWriteSpan
	calls int
}

func (c *countingSpan) Attributes() []attribute.KeyValue {
	c.calls++
	return c.ReadWriteSpan.Attributes()
}

// TestOnStartReadsNoAttributesUntilNeeded: OnStart leaves a starting span's
// attributes unread until a span has ended with its own service.name, and
// reads them from then on.
func TestOnStartReadsNoAttributesUntilNeeded(t *testing.T) {
	p := newProcessor(nil)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, s := tp.Tracer("t").Start(context.Background(), "x", trace.WithAttributes(attribute.String("a", "b")))
	c := &countingSpan{ReadWriteSpan: s.(sdktrace.ReadWriteSpan)}
	p.OnStart(context.Background(), c)
	if c.calls != 0 {
		t.Fatalf("OnStart read the attributes %d times before any span had its own service.name", c.calls)
	}
	_, own := tp.Tracer("t").Start(context.Background(), "y", trace.WithAttributes(attribute.String("service.name", "w")))
	own.End()
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, own.(sdktrace.ReadOnlySpan), b[:])
	p.OnStart(context.Background(), c)
	if c.calls != 1 {
		t.Fatalf("OnStart read the attributes %d times after a span with its own service.name, want 1", c.calls)
	}
	s.End()
}

// topCounter passes a Processor the spans of its providers and counts
// those it maps top-level, publishing none.
type topCounter struct {
	p        *Processor
	top, all atomic.Int64
}

func (f *topCounter) OnStart(ctx context.Context, rw sdktrace.ReadWriteSpan) { f.p.OnStart(ctx, rw) }
func (f *topCounter) OnEnd(s sdktrace.ReadOnlySpan) {
	var sp stats.Span
	var b [scratchSize]byte
	f.p.fill(&sp, s, b[:])
	f.all.Add(1)
	if sp.TopLevel {
		f.top.Add(1)
	}
}
func (f *topCounter) Shutdown(context.Context) error   { return nil }
func (f *topCounter) ForceFlush(context.Context) error { return nil }

// TestCrossingsOfManySpansAtOnce: 500 spans running at once under a local
// parent of another TracerProvider are each top-level, as the agent makes
// them (their parent is in another export): a crossing mark takes a free
// slot of its window rather than replacing the one at its ID. The IDs come
// from a fixed seed under which about 30 of them share a slot, so the run
// is the same every time (random ones can fill a window now and then).
func TestCrossingsOfManySpansAtOnce(t *testing.T) {
	p := newProcessor(nil)
	f := &topCounter{p: p}
	ids := &seededIDs{rng: rand.New(rand.NewPCG(1, 2))}
	a := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f), sdktrace.WithIDGenerator(ids))
	b := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f), sdktrace.WithIDGenerator(ids))
	defer func() { _ = a.Shutdown(context.Background()); _ = b.Shutdown(context.Background()) }()
	ctx, parent := a.Tracer("t").Start(context.Background(), "handler")
	const n = 500
	spans := make([]trace.Span, n)
	for i := range spans {
		_, spans[i] = b.Tracer("t").Start(ctx, "work")
	}
	for _, s := range spans {
		s.End()
	}
	parent.End()
	if top := f.top.Load() - 1; top != n { // the parent is a root
		t.Errorf("%d of %d spans under another provider's parent top-level, want all", top, n)
	}
	for i := range p.crossed.slots {
		if p.crossed.slots[i].Load() != 0 {
			t.Fatalf("a crossing mark left in slot %d once every span ended", i)
		}
	}
}

// seededIDs is an sdktrace.IDGenerator drawing from a fixed stream, so that
// a test's span IDs (and which mark slots they share) are the same on every
// run.
type seededIDs struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (g *seededIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], g.rng.Uint64()|1)
	binary.BigEndian.PutUint64(tid[8:], g.rng.Uint64())
	return tid, g.span()
}

func (g *seededIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.span()
}

func (g *seededIDs) span() trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], g.rng.Uint64()|1) // never 0
	return sid
}
