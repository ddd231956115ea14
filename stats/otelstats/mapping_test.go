// This file tests the mapping of an ended OTel span to a stats.Span as the
// agent maps an OTLP span: its labels, top-level and parent services, peer
// tags and attributes past the SDK's limit.

package otelstats

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

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

// TestResourceSurvivesAgentReobfuscation: the agent obfuscates sql and
// redis resources again on receipt. An output that pass would change (a
// pipeline's "GET SET" becomes "GET"; the error text is itself
// unparsable) is sent as the first raw resource that gave it, shared by
// the spans that follow; an output the pass keeps is sent as it is.
func TestResourceSurvivesAgentReobfuscation(t *testing.T) {
	p := newProcessor(nil)
	resource := func(typ, stmt string) string {
		db := map[string]string{"redis": "redis", "sql": "postgresql"}[typ]
		got := mapOne(t, p, svcRes, spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system", db), attribute.String("db.statement", stmt)}})
		if got.Type != typ {
			t.Fatalf("%q: type %q, want %q", stmt, got.Type, typ)
		}
		return got.Resource
	}
	for _, tc := range []struct {
		typ, first, second, agentKeys string
		sentRaw                       bool
	}{
		{"redis", "GET a\nSET b c", "GET x\nSET y z", "GET SET", true},
		{"sql", "SELECT ' FROM", "UPDATE ' x", textNonParsable, true},
		// Parsable, yet the pass makes "SELECT ?" of "SELECT ?, ?".
		{"sql", "SELECT 1 AS a, 2 AS b FROM t", "SELECT 3 AS a, 4 AS b FROM t", "SELECT ?, ? FROM t", true},
		{"sql", "SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = 2", "SELECT * FROM t WHERE a = ?", false},
		{"redis", "GET a", "GET b", "GET", false},
	} {
		a, b := resource(tc.typ, tc.first), resource(tc.typ, tc.second)
		if a != b {
			t.Errorf("%s %q and %q: resources %q and %q, want one shared", tc.typ, tc.first, tc.second, a, b)
		}
		if want := map[bool]string{true: tc.first, false: tc.agentKeys}[tc.sentRaw]; a != want {
			t.Errorf("%s %q: resource %q, want %q", tc.typ, tc.first, a, want)
		}
		if got := p.obfuscateAs(obfClass(tc.typ), a); got != tc.agentKeys {
			t.Errorf("%s %q: the agent's pass on receipt keys %q, want %q", tc.typ, tc.first, got, tc.agentKeys)
		}
	}
}

func obfClass(typ string) byte {
	if typ == "redis" {
		return obfRedis
	}
	return obfSQL
}

// TestLongNonIdempotentSQLSharesOneRaw: obfuscation lengthens "c,c" to
// "c, c", so a 4.6 KB query (within the 5000-byte cut) gives a 6.9 KB output
// past the cut; the spans of one agent group (ids differing past the cut)
// still share the first raw resource, which the agent's pass keys as its
// OTLP path would.
func TestLongNonIdempotentSQLSharesOneRaw(t *testing.T) {
	p := newProcessor(nil)
	cols := strings.Repeat("c,", 2300) + "c"
	query := func(id int) string {
		return "SELECT 1 AS one, 2 AS two, " + cols + " FROM t WHERE id = " + strconv.Itoa(id)
	}
	out := p.obfuscateAs(obfSQL, query(1))
	if len(query(1)) > resourceKeyLen-1 || len(out) <= resourceKeyLen || p.obfuscateAs(obfSQL, out) == out {
		t.Fatalf("query %d bytes, output %d: not the case under test", len(query(1)), len(out))
	}
	var got []string
	for id := range 3 {
		sp := mapOne(t, p, svcRes, spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system", "postgresql"), attribute.String("db.statement", query(id+1))}})
		got = append(got, sp.Resource)
	}
	if got[0] != query(1) || got[1] != got[0] || got[2] != got[0] {
		t.Fatalf("resources of %d, %d, %d bytes (shared: %v %v), want the first raw query for all three",
			len(got[0]), len(got[1]), len(got[2]), got[1] == got[0], got[2] == got[0])
	}
	if p.obfuscateAs(obfSQL, got[0]) != out {
		t.Fatal("the agent's pass on the sent resource does not give the OTLP path's output")
	}
}

// TestLongSQLOutputKeysAsAgentOTLP: a statement within the 5000-byte cut
// whose obfuscation is longer ("a,b" gives "a, b") is cut after
// obfuscation by the agent's OTLP path, and before the agent's pass on
// receipt by Publish; wherever the cut lands, even after a space that
// pass drops, the agent keys the sent resource as its OTLP path keys the
// statement.
func TestLongSQLOutputKeysAsAgentOTLP(t *testing.T) {
	p := newProcessor(nil)
	cut := func(s string) string { return normalize.TruncateUTF8(s, stats.MaxResourceLen) }
	// Offsets up to the longest pattern's output move the cut over each of
	// its bytes.
	const offsets = 16
	const tail = "z FROM t"
	for _, pattern := range []string{"a,b", "f(x),", "x::int,", "a=1,"} {
		cutAtSpace := 0
		for off := range offsets {
			raw := "SELECT " + strings.Repeat("w", off) + ","
			raw += strings.Repeat(pattern, (stats.MaxResourceLen-len(raw)-len(tail))/len(pattern)) + tail
			out := p.obfuscateAs(obfSQL, raw)
			if len(out) <= stats.MaxResourceLen {
				t.Fatalf("%q offset %d: output of %d bytes, not past the cut", pattern, off, len(out))
			}
			otlp := cut(out)
			if strings.HasSuffix(otlp, " ") {
				cutAtSpace++
			}
			sp := mapOne(t, p, svcRes, spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
				attribute.String("db.system", "postgresql"), attribute.String("db.statement", raw)}})
			if len(sp.Resource) > stats.MaxResourceLen {
				t.Errorf("%q offset %d: resource of %d bytes, past the cut", pattern, off, len(sp.Resource))
			}
			if got := cut(p.obfuscateAs(obfSQL, cut(sp.Resource))); got != otlp {
				t.Errorf("%q offset %d: the agent keys the sent resource as ...%q, its OTLP path ...%q",
					pattern, off, got[max(len(got)-20, 0):], otlp[len(otlp)-20:])
			}
		}
		if cutAtSpace == 0 {
			t.Errorf("%q: no offset cut the output after a space; the case under test is missing", pattern)
		}
	}
}

// TestLongResourceNoAlloc: a repeated resource longer than the scratch
// buffer (an ORM's 600-byte statement) is keyed in a pooled buffer, and
// one past the 5000-byte cut (a 1 MiB route) is not copied before it is
// cut: neither allocates per span.
func TestLongResourceNoAlloc(t *testing.T) {
	if raceOn {
		t.Skip("sync.Pool drops buffers at random under -race")
	}
	p := newProcessor(nil)
	stmt := "SELECT " + strings.Repeat("a_column, ", 60) + "z FROM t WHERE id = 1"
	for _, tc := range []struct {
		row     string
		spec    spanSpec
		wantLen int
	}{
		{"sql 600 bytes", spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system", "postgresql"), attribute.String("db.statement", stmt)}}, len(p.obfuscateAs(obfSQL, stmt))},
		{"http route 1 MiB", spanSpec{name: "r", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			attribute.String("http.request.method", "GET"), attribute.String("http.route", strings.Repeat("/x", 1<<19))}}, resourceKeyLen - 1},
	} {
		t.Run(tc.row, func(t *testing.T) {
			s := endSpans(t, svcRes, tc.spec)[0]
			var sp stats.Span
			var b [scratchSize]byte
			p.fill(&sp, s, b[:])
			if len(sp.Resource) != tc.wantLen {
				t.Fatalf("resource of %d bytes, want %d", len(sp.Resource), tc.wantLen)
			}
			if allocs := testing.AllocsPerRun(50, func() { p.fill(&sp, s, b[:]) }); allocs != 0 {
				t.Fatalf("%v allocations per span of a repeated route, want 0", allocs)
			}
		})
	}
}

// TestRecordDroppedNil: a nil sampler is refused where it is given, not
// at the first span's Start in an application goroutine.
func TestRecordDroppedNil(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "RecordDropped with a nil sampler") {
			t.Fatalf("recovered %v, want RecordDropped's own panic", r)
		}
	}()
	RecordDropped(nil)
}

// TestTopLevelBySpanKindProducerConsumer: with
// WithTopLevelBySpanKind a consumer span is top-level and a producer span
// measured, as its doc (and the agent's
// enable_otlp_compute_top_level_by_span_kind) says.
func TestTopLevelBySpanKindProducerConsumer(t *testing.T) {
	p := newProcessor(nil, WithTopLevelBySpanKind())
	prod := mapOne(t, p, svcRes, spanSpec{name: "p", kind: trace.SpanKindProducer, local: true})
	cons := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindConsumer, local: true})
	if prod.TopLevel || !prod.Measured || !cons.TopLevel || cons.Measured {
		t.Fatalf("producer top %v measured %v; consumer top %v measured %v; want false true, true false",
			prod.TopLevel, prod.Measured, cons.TopLevel, cons.Measured)
	}
}

// TestHTTPStatusAtUint32Max: a status code at uint32's maximum is in
// range and kept; only one past it maps to 0.
func TestHTTPStatusAtUint32Max(t *testing.T) {
	p := newProcessor(nil)
	for _, tc := range []struct {
		n    int64
		want uint32
	}{{1<<32 - 1, 1<<32 - 1}, {1 << 32, 0}} {
		sp := mapOne(t, p, svcRes, spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{attribute.Int64("http.response.status_code", tc.n)}})
		if sp.HTTPStatusCode != tc.want {
			t.Errorf("status %d maps to %d, want %d", tc.n, sp.HTTPStatusCode, tc.want)
		}
	}
}
