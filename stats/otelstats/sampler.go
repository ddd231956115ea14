// This file holds RecordDropped, the sampler wrapper that records the
// spans a sampler drops, so the Processor counts them.

package otelstats

import sdktrace "go.opentelemetry.io/otel/sdk/trace"

// RecordDropped wraps a sampler so that a span it would drop is recorded
// instead (sdktrace.RecordOnly): the span reaches the span processors, so
// the Processor counts it, but it is not sampled, so exporters (the batch
// and simple span processors export sampled spans only) never see it.
// Sampled spans are unchanged. It panics if s is nil: here, not at the
// first span's Start in whichever goroutine starts it.
//
//	sdktrace.WithSampler(otelstats.RecordDropped(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))))
func RecordDropped(s sdktrace.Sampler) sdktrace.Sampler {
	if s == nil {
		panic("otelstats: RecordDropped with a nil sampler")
	}
	return recordDropped{s}
}

type recordDropped struct{ s sdktrace.Sampler }

func (r recordDropped) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := r.s.ShouldSample(p)
	if res.Decision == sdktrace.Drop {
		res.Decision = sdktrace.RecordOnly
	}
	return res
}

func (r recordDropped) Description() string { return "RecordDropped{" + r.s.Description() + "}" }
