// This file tests RecordDropped: the spans a wrapped sampler drops are
// recorded, so the Processor counts them.

package otelstats

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

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
