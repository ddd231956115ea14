// This file tests the whole package: the mapping of ended spans, top-level
// and parent services, the memo, RecordDropped, the Config read from the
// resource and the Processor's own methods; and holds the span helpers.

package otelstats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
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

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// TestMapping: each row's span maps to the group fields the agent's OTLP
// rules give it (bench/peer checks the same rows against the agent's code).
func TestMapping(t *testing.T) {
	p := newProcessor(nil)
	for _, tc := range []struct {
		row  string
		res  []attribute.KeyValue
		spec spanSpec
		want stats.Span
	}{
		{"http server, current names", svcRes, spanSpec{name: "GET /users/{id}", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			attribute.String("http.request.method", "GET"), attribute.String("http.route", "/users/{id}"), attribute.Int("http.response.status_code", 404)}},
			stats.Span{Service: "checkout", Name: "http.server.request", Resource: "GET /users/{id}", Type: "web", SpanKind: "server", HTTPStatusCode: 404, TopLevel: true, TraceRoot: true}},
		{"http server, old names, status as string", svcRes, spanSpec{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			attribute.String("http.method", "POST"), attribute.String("http.route", "/pay"), attribute.String("http.status_code", "201")}},
			stats.Span{Service: "checkout", Name: "http.server.request", Resource: "POST /pay", Type: "web", SpanKind: "server", HTTPStatusCode: 201, TopLevel: true, TraceRoot: true}},
		{"http client under a local parent", svcRes, spanSpec{name: "x", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("http.request.method", "_OTHER"), attribute.String("url.template", "/v1/items"), attribute.String("server.address", "10.1.2.3")}},
			stats.Span{Service: "checkout", Name: "http.client.request", Resource: "HTTP /v1/items", Type: "http", SpanKind: "client",
				PeerTags: []string{"server.address:blocked-ip-address"}}},
		{"postgres, statement obfuscated", svcRes, spanSpec{name: "SELECT", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system", "postgresql"), attribute.String("db.statement", "SELECT * FROM users WHERE id = 42"), attribute.String("db.name", "shop")}},
			stats.Span{Service: "checkout", Name: "postgresql.query", Resource: "SELECT * FROM users WHERE id = ?", Type: "sql", SpanKind: "client",
				PeerTags: []string{"db.name:shop", "db.system:postgresql"}}},
		{"redis, current names, quantized", svcRes, spanSpec{name: "GET", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system.name", "redis"), attribute.String("db.query.text", "GET session:123")}},
			stats.Span{Service: "checkout", Name: "redis.query", Resource: "GET", Type: "redis", SpanKind: "client",
				PeerTags: []string{"db.system.name:redis"}}},
		{"kafka consumer under a remote parent", svcRes, spanSpec{name: "orders receive", kind: trace.SpanKindConsumer, remote: true, attrs: []attribute.KeyValue{
			attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation", "receive"), attribute.String("messaging.destination.name", "orders")}},
			stats.Span{Service: "checkout", Name: "kafka.receive", Resource: "receive orders", Type: "custom", SpanKind: "consumer", TopLevel: true,
				PeerTags: []string{"messaging.destination.name:orders", "messaging.system:kafka"}}},
		{"grpc server with status", svcRes, spanSpec{name: "x", kind: trace.SpanKindServer, err: true, attrs: []attribute.KeyValue{
			attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", "shop.Cart"), attribute.String("rpc.method", "Add"),
			attribute.Int("rpc.grpc.status_code", 5)}},
			stats.Span{Service: "checkout", Name: "grpc.server.request", Resource: "Add shop.Cart", Type: "web", SpanKind: "server", GRPCStatusCode: "5",
				TopLevel: true, TraceRoot: true, Error: true}},
		{"internal, span service wins, measured", svcRes, spanSpec{name: "compute Tax", kind: trace.SpanKindInternal, local: true, attrs: []attribute.KeyValue{
			attribute.String("service.name", "Tax Engine"), attribute.Int("_dd.measured", 1)}},
			// Its local parent is under the resource's service: top-level,
			// as the agent's ComputeTopLevel finds it.
			stats.Span{Service: "tax_engine", Name: "Internal", Resource: "compute Tax", Type: "custom", SpanKind: "internal", Measured: true, TopLevel: true}},
		{"internal, span service the resource's once normalized", svcRes, spanSpec{name: "compute Tax", kind: trace.SpanKindInternal, local: true, attrs: []attribute.KeyValue{
			attribute.String("service.name", "Checkout"), attribute.Int("_dd.measured", 1)}},
			stats.Span{Service: "checkout", Name: "Internal", Resource: "compute Tax", Type: "custom", SpanKind: "internal", Measured: true}},
		{"empty span name: the agent's normalizer gives the operation name", svcRes, spanSpec{name: "", kind: trace.SpanKindServer},
			stats.Span{Service: "checkout", Name: "server.request", Resource: "server.request", Type: "web", SpanKind: "server", TopLevel: true, TraceRoot: true}},
		{"no service anywhere", nil, spanSpec{name: "work", kind: trace.SpanKindInternal},
			stats.Span{Service: "otlpresourcenoservicename", Name: "Internal", Resource: "work", Type: "custom", SpanKind: "internal", TopLevel: true, TraceRoot: true}},
	} {
		t.Run(tc.row, func(t *testing.T) {
			got := mapOne(t, p, tc.res, tc.spec)
			if got.Duration != int64(3*time.Millisecond) || got.Start == 0 {
				t.Errorf("start %d duration %d, want the span's", got.Start, got.Duration)
			}
			got.Start, got.Duration = 0, 0
			if !slices.Equal(got.PeerTags, tc.want.PeerTags) {
				t.Errorf("peer tags %q, want %q", got.PeerTags, tc.want.PeerTags)
			}
			got.PeerTags, tc.want.PeerTags = nil, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestTopLevelBySpanKind: with the option, server and consumer spans are
// top-level under a local parent, and client spans measured.
func TestTopLevelBySpanKind(t *testing.T) {
	p := newProcessor(nil, WithTopLevelBySpanKind())
	srv := mapOne(t, p, svcRes, spanSpec{name: "s", kind: trace.SpanKindServer, local: true})
	cli := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindClient, local: true})
	in := mapOne(t, p, svcRes, spanSpec{name: "i", kind: trace.SpanKindInternal, remote: true})
	if !srv.TopLevel || cli.TopLevel || !cli.Measured || in.TopLevel {
		t.Fatalf("server top %v; client top %v measured %v; internal under remote parent top %v", srv.TopLevel, cli.TopLevel, cli.Measured, in.TopLevel)
	}
}

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

// TestAttributesPast255: with the SDK's attribute limit lifted, the ones
// set after the 255th still map, as the agent reads them all.
func TestAttributesPast255(t *testing.T) {
	rec := &recorder{}
	limits := sdktrace.NewSpanLimits()
	limits.AttributeCountLimit = -1
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithResource(resource.NewWithAttributes("", svcRes...)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, s := tp.Tracer("t").Start(context.Background(), "x", trace.WithSpanKind(trace.SpanKindServer))
	for i := range 300 {
		s.SetAttributes(attribute.Int("pad."+strconv.Itoa(i), i))
	}
	s.SetAttributes(attribute.String("http.request.method", "GET"), attribute.Int("http.response.status_code", 503))
	s.End()
	var sp stats.Span
	var b [scratchSize]byte
	newProcessor(nil).fill(&sp, rec.spans[0], b[:])
	if sp.Name != "http.server.request" || sp.Resource != "GET" || sp.HTTPStatusCode != 503 {
		t.Fatalf("name %q resource %q status %d; want http.server.request, GET, 503", sp.Name, sp.Resource, sp.HTTPStatusCode)
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

// TestMemoReturnsSameStrings: a repeated route yields the very same string
// values (the aggregator's fast path), and an obfuscated query is computed
// once.
func TestMemoReturnsSameStrings(t *testing.T) {
	p := newProcessor(nil)
	spec := spanSpec{name: "q", kind: trace.SpanKindClient, attrs: []attribute.KeyValue{
		attribute.String("db.system", "mysql"), attribute.String("db.statement", "SELECT a FROM t WHERE b = 'x'"), attribute.String("db.name", "d")}}
	a, b := mapOne(t, p, svcRes, spec), mapOne(t, p, svcRes, spec)
	if a.Resource != "SELECT a FROM t WHERE b = ?" || b.Resource != a.Resource {
		t.Fatalf("resources %q %q", a.Resource, b.Resource)
	}
	if !sameString(a.Resource, b.Resource) || !sameString(a.Name, b.Name) || &a.PeerTags[0] != &b.PeerTags[0] {
		t.Fatal("a repeated route built new strings")
	}
}

// TestMemoLongKeys: a long attribute value (the SDK does not bound them)
// maps as any other, but is not kept in a memo: 4096 of them would
// otherwise hold gigabytes.
func TestMemoLongKeys(t *testing.T) {
	p := newProcessor(nil)
	long := strings.Repeat("h", 1<<20)
	sp := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
		attribute.String("service.name", "S"+long), attribute.String("out.host", long)}})
	if sp.Service != "s"+long[:99] || !slices.Equal(sp.PeerTags, []string{"out.host:" + long}) {
		t.Fatalf("service of %d bytes, peer tags of %d; want the service cut to 100 and the value whole", len(sp.Service), len(sp.PeerTags))
	}
	for name, m := range map[string]*memo{"services": p.services, "names": p.names, "resources": p.resources, "peers": p.peers} {
		if n := memoBytes(m); n > 64<<10 {
			t.Errorf("%s memo holds %d bytes after one span", name, n)
		}
	}
}

func memoBytes(m *memo) (n int) {
	for i := range m.slots {
		if e := m.slots[i].Load(); e != nil {
			n += len(e.key) + len(e.val)
			for _, t := range e.tags {
				n += len(t)
			}
		}
	}
	return n
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafeData(a) == unsafeData(b))
}

// TestRecordDropped: a dropped span becomes record-only (processors see
// it, exporters do not); a sampled one stays sampled.
func TestRecordDropped(t *testing.T) {
	s := RecordDropped(sdktrace.NeverSample())
	if r := s.ShouldSample(sdktrace.SamplingParameters{TraceID: trace.TraceID{1}}); r.Decision != sdktrace.RecordOnly {
		t.Fatalf("NeverSample wrapped: %v, want RecordOnly", r.Decision)
	}
	if r := RecordDropped(sdktrace.AlwaysSample()).ShouldSample(sdktrace.SamplingParameters{TraceID: trace.TraceID{1}}); r.Decision != sdktrace.RecordAndSample {
		t.Fatalf("AlwaysSample wrapped: %v", r.Decision)
	}
	if d := s.Description(); d != "RecordDropped{AlwaysOffSampler}" {
		t.Fatalf("Description %q", d)
	}
}

// TestProcessorEndToEnd: spans ended under a TracerProvider with a sampler
// that drops everything (wrapped in RecordDropped) reach the fake agent as
// groups, with their counts.
func TestProcessorEndToEnd(t *testing.T) {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL()})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
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

// TestPeerTagValuesOfAnyByte: a peer attribute's value may hold any byte
// (it can come from outside input): a NUL in it neither panics on the
// goroutine that ends the span nor splits it into forged tags, and two
// spans whose values differ only after the NUL keep their own tags.
func TestPeerTagValuesOfAnyByte(t *testing.T) {
	p := newProcessor(nil)
	client := func(addr, db string) spanSpec {
		return spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system", "postgresql"), attribute.String("server.address", addr), attribute.String("db.name", db)}}
	}
	for _, c := range []struct{ addr, db string }{
		{"db\x00xyzzy", "shop"},
		{"db\x00\x05\x00", "shop"},
		{"db", "shop\x00\x01\x00\x00\x00\x00x"},
		{"db\x00", "shop"},
	} {
		got := mapOne(t, p, svcRes, client(c.addr, c.db))
		want := []string{"db.name:" + c.db, "db.system:postgresql", "server.address:" + c.addr}
		if !slices.Equal(got.PeerTags, want) {
			t.Errorf("peer tags %q, want %q", got.PeerTags, want)
		}
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
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = agg.Stop(sctx)
}

// TestPeerTagKeysDeduplicated: WithPeerTagKeys reads each key once, so a
// long list of repeats neither grows the key list nor lets a key's index
// reach the one an internal span's _dd.base_service uses in the memo.
func TestPeerTagKeysDeduplicated(t *testing.T) {
	keys := make([]string, 0xffff+1)
	for i := range keys {
		keys[i] = "db.instance"
	}
	keys[0xffff] = "peer.service"
	p := newProcessor(nil, WithPeerTagKeys(keys...))
	if len(p.keys.peerKeys) != 2 {
		t.Fatalf("%d peer keys kept, want 2", len(p.keys.peerKeys))
	}
	got := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindClient, local: true,
		attrs: []attribute.KeyValue{attribute.String("peer.service", "billing")}})
	if want := []string{"peer.service:billing"}; !slices.Equal(got.PeerTags, want) {
		t.Fatalf("peer tags %q, want %q", got.PeerTags, want)
	}
}

// TestAppendFloat: doubles are written as pdata's Value.AsString writes
// them (JavaScript's number to string), so a float peer tag keys the same
// group as the agent's.
func TestAppendFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{0, "0"}, {2.5, "2.5"}, {-3, "-3"}, {123456.789, "123456.789"},
		{1e-6, "0.000001"}, {1e20, "100000000000000000000"},
		{1e-7, "1e-7"}, {-1.5e-7, "-1.5e-7"}, {1e21, "1e+21"}, {1e100, "1e+100"}, {1e-100, "1e-100"},
		{math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	} {
		if got := string(appendFloat([]byte("x="), tc.f)); got != "x="+tc.want {
			t.Errorf("appendFloat(%g) = %q, want %q", tc.f, got, "x="+tc.want)
		}
	}
}

// TestConfigFromResource: env and version come from the resource as the
// agent reads them (the current env key first, normalized); what the
// Config sets stays.
func TestConfigFromResource(t *testing.T) {
	res := resource.NewWithAttributes("", attribute.String("deployment.environment", "old"),
		attribute.String("deployment.environment.name", "Prod EU"), attribute.String("service.version", "2.0.1"))
	if c := ConfigFromResource(stats.Config{}, res); c.Env != "prod_eu" || c.Version != "2.0.1" {
		t.Errorf("from the resource: env %q version %q, want prod_eu, 2.0.1", c.Env, c.Version)
	}
	if c := ConfigFromResource(stats.Config{Env: "staging"}, res); c.Env != "staging" || c.Version != "2.0.1" {
		t.Errorf("Config's env kept: env %q version %q", c.Env, c.Version)
	}
	old := resource.NewWithAttributes("", attribute.String("deployment.environment", "qa"), attribute.Int("service.version", 3))
	if c := ConfigFromResource(stats.Config{}, old); c.Env != "qa" || c.Version != "" {
		t.Errorf("older key, non-string version: env %q version %q, want qa and none", c.Env, c.Version)
	}
	if c := ConfigFromResource(stats.Config{Env: "x"}, nil); c.Env != "x" {
		t.Errorf("nil resource changed the Config: %+v", c)
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

// TestRepeatedRouteAllocatesNothing: once a route was seen, mapping it again
// allocates nothing, whatever case its values come in: the agent's
// lower-casing (NormalizeTagValue) of the parts of an operation name and
// of db.system is remembered, not redone per span.
func TestRepeatedRouteAllocatesNothing(t *testing.T) {
	p := newProcessor(nil)
	str := attribute.String
	for _, tc := range []struct {
		row  string
		spec spanSpec
		name string
	}{
		{"aws sdk client", spanSpec{name: "S3.GetObject", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("rpc.system", "aws-api"), str("rpc.service", "S3"), str("rpc.method", "GetObject")}}, "aws.s3.request"},
		{"messaging consumer", spanSpec{name: "jobs process", kind: trace.SpanKindConsumer, remote: true, attrs: []attribute.KeyValue{
			str("messaging.system", "AmazonSQS"), str("messaging.operation", "Process"), str("messaging.destination.name", "jobs")}}, "amazonsqs.process"},
		{"database client", spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("db.system", "PostgreSQL"), str("db.statement", "SELECT 1")}}, "postgresql.query"},
		{"operation.name attribute", spanSpec{name: "w", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			str("operation.name", "Worker.Run")}}, "worker.run"},
	} {
		t.Run(tc.row, func(t *testing.T) {
			s := endSpans(t, svcRes, tc.spec)[0]
			var sp stats.Span
			var b [scratchSize]byte
			if p.fill(&sp, s, b[:]); sp.Name != tc.name {
				t.Fatalf("name %q, want %q", sp.Name, tc.name)
			}
			if allocs := testing.AllocsPerRun(100, func() { p.fill(&sp, s, b[:]) }); allocs != 0 {
				t.Fatalf("%v allocations per span of a repeated route, want 0", allocs)
			}
		})
	}
}

// TestConfigFromResourceContainerID: the agent files the OTLP spans, and the
// stats it computes of them, under the resource's container.id (normalized
// as a tag value) and tags them from that container; the stats computed
// here are filed the same way only when they carry the same ID.
func TestConfigFromResourceContainerID(t *testing.T) {
	const id = "3f6c1a2b9d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	res := resource.NewWithAttributes("", attribute.String("container.id", id))
	if c := ConfigFromResource(stats.Config{}, res); c.ContainerID != id {
		t.Errorf("container id %q, want the resource's %q", c.ContainerID, id)
	}
	if c := ConfigFromResource(stats.Config{}, resource.NewWithAttributes("", attribute.String("container.id", "ABC 1"))); c.ContainerID != "abc_1" {
		t.Errorf("container id %q, want abc_1, normalized as the agent normalizes it", c.ContainerID)
	}
	if c := ConfigFromResource(stats.Config{ContainerID: "mine"}, res); c.ContainerID != "mine" {
		t.Errorf("Config's container id replaced: %q", c.ContainerID)
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

// TestParentServiceOverride: ComputeTopLevel compares a span's service with
// its parent's, and a parent's own service.name overrides the resource's,
// once a span with its own service.name has ended (OnStart reads no
// attribute before: see Processor.spanServices). Before that, a local
// parent is taken to be under the resource's service.
func TestParentServiceOverride(t *testing.T) {
	for _, opted := range []bool{false, true} {
		t.Run(fmt.Sprint("WithSpanServiceNames=", opted), func(t *testing.T) { parentServiceOverride(t, opted) })
	}
}

func parentServiceOverride(t *testing.T, opted bool) {
	var opts []Option
	if opted {
		opts = append(opts, WithSpanServiceNames())
	}
	p := newProcessor(nil, opts...)
	rec := &startOnly{p: p}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "shop"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	trace3 := func() (plainSpan, sameSpan sdktrace.ReadOnlySpan) {
		n := len(rec.spans)
		ctx, parent := tr.Start(context.Background(), "job", trace.WithAttributes(attribute.String("service.name", "Worker")))
		_, plain := tr.Start(ctx, "call", trace.WithSpanKind(trace.SpanKindClient))
		_, same := tr.Start(ctx, "step", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("service.name", "worker")))
		plain.End()
		same.End()
		parent.End()
		return rec.spans[n], rec.spans[n+1]
	}
	var sp stats.Span
	var b [scratchSize]byte
	check := func(when string, plain, same sdktrace.ReadOnlySpan, plainTop, sameTop bool) {
		t.Helper()
		p.fill(&sp, plain, b[:])
		if sp.Service != "shop" || sp.TopLevel != plainTop {
			t.Errorf("%s: child of the resource's service under a worker parent: service %q top-level %v; want shop, %v", when, sp.Service, sp.TopLevel, plainTop)
		}
		p.fill(&sp, same, b[:])
		if sp.Service != "worker" || sp.TopLevel != sameTop {
			t.Errorf("%s: child of the parent's own service: service %q top-level %v; want worker, %v", when, sp.Service, sp.TopLevel, sameTop)
		}
	}
	plain, same := trace3()
	if opted {
		check("first, opted in", plain, same, true, false)
	} else {
		if p.spanServices.Load() {
			t.Fatal("starts read before any span ended with its own service.name")
		}
		check("before", plain, same, false, true) // as under the resource's service
	}
	plain, same = trace3()
	if !p.spanServices.Load() {
		t.Fatal("a span with its own service.name was filled, yet starts are not read")
	}
	check("after", plain, same, true, false)
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

// TestParentNotRecorded: a span whose local parent the sampler dropped is
// exported without it, so the agent's ComputeTopLevel finds the parent
// outside the chunk and makes the span top-level.
func TestParentNotRecorded(t *testing.T) {
	p := newProcessor(nil)
	rec := &startOnly{p: p}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(dropNamed{"middleware"}),
		sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "shop"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	ctx, mw := tr.Start(context.Background(), "middleware")
	_, h := tr.Start(ctx, "handler", trace.WithSpanKind(trace.SpanKindClient))
	h.End()
	mw.End()
	if len(rec.spans) != 1 {
		t.Fatalf("%d spans recorded; want the handler's alone", len(rec.spans))
	}
	var sp stats.Span
	var b [scratchSize]byte
	p.fill(&sp, rec.spans[0], b[:])
	if !sp.TopLevel || sp.TraceRoot {
		t.Fatalf("child of a dropped local parent: top-level %v root %v; want true, false", sp.TopLevel, sp.TraceRoot)
	}
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
