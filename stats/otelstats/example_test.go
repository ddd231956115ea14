// This file holds the example of a TracerProvider wired to the stats
// Processor, with RecordDropped around its sampler.

package otelstats_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/otelstats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// A TracerProvider wired to the stats processor. RecordDropped makes the
// spans the ratio sampler drops reach the processor, so stats count every
// span while only a tenth are exported.
func Example() {
	agent := statstest.New() // a real agent listens on http://localhost:8126
	defer agent.Close()
	res := resource.NewWithAttributes("", attribute.String("service.name", "web"),
		attribute.String("deployment.environment.name", "prod"), attribute.String("service.version", "1.2.3"),
		// The agent does not compute stats of the exported spans again.
		attribute.Bool("_dd.stats_computed", true))
	// Env and version from the resource, as the agent files the spans.
	agg, err := stats.New(otelstats.ConfigFromResource(stats.Config{AgentURL: agent.URL()}, res))
	if err != nil {
		panic(err)
	}
	agg.Start()

	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(otelstats.RecordDropped(sdktrace.TraceIDRatioBased(0.1))),
		// sdktrace.WithBatcher(exporter): exports the sampled spans only;
		// the stats processor after it (ForceFlush flushes them in order)
		sdktrace.WithSpanProcessor(otelstats.NewProcessor(agg)),
	)
	tracer := tp.Tracer("example")
	for range 20 {
		_, span := tracer.Start(context.Background(), "GET /users/{id}", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", "GET"), attribute.String("http.route", "/users/{id}"),
				attribute.Int("http.response.status_code", 200)))
		span.End()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx) // first the provider, so every span has ended
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	p := agent.Requests()[0].Payload
	// Summed over buckets: a bucket boundary may fall among the 20 spans.
	groups, _ := statstest.Sum(agent.Requests())
	for k, t := range groups {
		fmt.Printf("env=%s version=%s: %s %s %s %s %d hits=%d\n", p.Env, p.Version, k.Service, k.Name, k.Resource, k.SpanKind, k.HTTPStatusCode, t.Hits)
	}
	// Output:
	// env=prod version=1.2.3: web http.server.request GET /users/{id} server 200 hits=20
}
