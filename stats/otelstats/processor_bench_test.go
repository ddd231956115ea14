// This file holds the Processor's benchmarks: OnEnd on ended spans of
// repeated and distinct routes, and OnStart.

package otelstats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// BenchmarkOnEnd measures OnEnd on spans already ended (so only the
// processor's work and Publish are timed), with a running Aggregator.
// repeated-*: one route over and over (an internal span: no peer tag to
// find but _dd.base_service), the budget's case (≤ 1 µs, ≤ 1
// allocation per span); distinct-routes: 10 000 SQL queries of distinct
// shapes, more than the memos hold.
func BenchmarkOnEnd(b *testing.B) {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), InboxSize: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	agg.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = agg.Stop(ctx)
	}()
	p := NewProcessor(agg)
	res := append([]attribute.KeyValue{attribute.String("deployment.environment.name", "prod"),
		attribute.String("telemetry.sdk.language", "go")}, svcRes...)
	for _, bc := range []struct {
		name  string
		specs []spanSpec
	}{
		{"repeated-http-server", []spanSpec{{name: "GET /users/{id}", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			attribute.String("http.request.method", "GET"), attribute.String("http.route", "/users/{id}"), attribute.Int("http.response.status_code", 200),
			attribute.String("url.path", "/users/42"), attribute.String("client.address", "10.0.0.1"), attribute.String("user_agent.original", "curl")}}}},
		{"repeated-sql-client", []spanSpec{{name: "SELECT shop.users", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", "SELECT * FROM users WHERE id = $1"),
			attribute.String("db.namespace", "shop"), attribute.String("server.address", "db.internal"), attribute.Int("server.port", 5432)}}}},
		{"repeated-internal", []spanSpec{{name: "compute tax", kind: trace.SpanKindInternal, local: true, attrs: []attribute.KeyValue{
			attribute.String("code.function", "tax"), attribute.Int("items", 3)}}}},
		{"distinct-routes", distinctSQL(10000)},
	} {
		spans := endSpans(b, res, bc.specs...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p.OnEnd(spans[i])
				if i++; i == len(spans) {
					i = 0
				}
			}
		})
	}
}

func distinctSQL(n int) []spanSpec {
	specs := make([]spanSpec, n)
	for i := range specs {
		specs[i] = spanSpec{name: "q", kind: trace.SpanKindClient, attrs: []attribute.KeyValue{
			attribute.String("db.system", "mysql"), attribute.String("db.statement", fmt.Sprintf("SELECT c%d FROM t%d WHERE id = %d", i, i, i))}}
	}
	return specs
}

var _ sdktrace.SpanProcessor = (*recorder)(nil)

// BenchmarkOnStart measures OnStart on a starting HTTP server span of ten
// attributes with a local parent: before any span had its own service.name
// (unread: the default until one has) and once its attributes are read for
// one (read, or WithSpanServiceNames).
func BenchmarkOnStart(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("bench")
	ctx, parent := tr.Start(context.Background(), "parent")
	defer parent.End()
	attrs := make([]attribute.KeyValue, 10)
	for i := range attrs {
		attrs[i] = attribute.String(fmt.Sprintf("http.attr%d", i), "value")
	}
	_, s := tr.Start(ctx, "GET /x", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	defer s.End()
	rw := s.(sdktrace.ReadWriteSpan)
	for _, read := range []bool{false, true} {
		name := "unread"
		if read {
			name = "read"
		}
		b.Run(name, func(b *testing.B) {
			p := newProcessor(nil)
			p.spanServices.Store(read)
			b.ReportAllocs()
			for b.Loop() {
				p.OnStart(ctx, rw)
			}
		})
	}
}
