// Package otelstats computes Datadog client-side stats for spans traced with
// the OpenTelemetry SDK: its Processor, an sdktrace.SpanProcessor, maps each
// span that ends to a stats.Span and publishes it to a stats.Aggregator.
//
// The mapping is the one the Datadog agent (v0.85.4) applies to OTLP spans
// before it computes stats, so moving stats from the agent into the process
// keeps the same groups: service from service.name (the span's attribute,
// then the resource's, else "otlpresourcenoservicename"), operation name,
// resource, span type, HTTP and gRPC status codes and span kind by the
// agent's OTLP rules over both the old and the current semantic-convention
// attribute names, names normalized as the agent normalizes them, SQL and
// Redis resources obfuscated as the agent obfuscates them (where the
// agent's second pass over received stats would change the result, cut to
// stats.MaxResourceLen as it is sent, the first raw resource seen that this
// pass turns into it is sent instead,
// literals included, as a tracer sends it in the span, for the agent to
// obfuscate before it leaves the host: a Redis pipeline, an unparsable
// query, and parsable queries whose obfuscated form the pass changes
// again, as "SELECT ?, ?" to "SELECT ?" for "SELECT 1 AS a, 2 AS b"),
// and peer tags
// from the agent's default keys. Top-level follows the agent's default,
// ComputeTopLevel (a root span, one with a remote parent, a local parent
// of another TracerProvider or one not recorded, which the sampler dropped
// (under RecordDropped such a parent is recorded and counted, top-level
// itself, so its child is not) — a parent known by
// its context alone, trace.ContextWithSpanContext, is taken as one of the
// same TracerProvider when sampled, as one dropped when not — or one whose own
// service.name gives it another service than its local parent's: the
// parent's own service.name when it had one at its start, read and kept
// as WithSpanServiceNames says, else the resource's; WithTopLevelBySpanKind
// for the by-kind rule); a span is
// measured when its integer attribute _dd.measured is 1, and an error when
// its status is Error. As in the agent's OTLP path,
// HTTP method and endpoint are not part of the group. bench/peer checks the
// mapping against the agent's own functions.
//
// Which of the agent's conversions: the one followed and checked is its
// stats-only conversion (transform.OtelSpanToDDSpanMinimal), for every
// field but top-level, which follows the receiver's ComputeTopLevel on the
// converted spans (above): the stats-only path's GetTopLevelOTelSpans reads
// the child's own attributes for its parent's service too, so a span whose
// own service.name differs from its parent's is not top-level there. The agent's
// OTLP receiver converts with the full one (OtelSpanToDDSpan), which copies
// every attribute into the span's tags and metrics before the concentrator
// reads them, and there known cases differ: a span's server.address is the
// peer tag http.server_name (HTTP attributes are renamed as they are
// copied); integer and floating-point span attributes are metrics, never
// peer tags, where this package formats them; a floating-point _dd.measured,
// HTTP or gRPC status code counts; _dd.top_level or _top_level of 1 makes a
// span top-level; and top-level is computed per export request, so a span
// exported without its parent (sdktrace.WithSyncer, or a parent in another
// batch) is top-level there.
//
// The agent computes stats of the OTLP spans it receives unless told they
// are computed: give the TracerProvider's resource the attribute
// _dd.stats_computed=true (or have the exporter send the header
// Datadog-Client-Computed-Stats: true), or every span is counted twice.
//
// Which spans are counted: a span processor sees only the spans the sampler
// records. With the default sampler (ParentBased(AlwaysSample)) every span
// is counted. With a sampler that drops spans, wrap it in RecordDropped:
// dropped spans are then recorded, counted here, and still not exported.
// Spans that a remote parent marked as not sampled are dropped by
// ParentBased too; RecordDropped counts those as well. The agent, which
// sees only sampled spans, weights each by its trace's sampling
// probability (a _sample_rate attribute, or the W3C tracestate's ot=th:
// threshold) to estimate the spans dropped upstream; this package counts
// each span it is given once. With RecordDropped that is every span, and
// the two agree in expectation; without it, and with a probability
// sampler upstream, the agent's estimate counts spans this package never
// sees. A span whose end is
// not after its start is not counted (the SDK counts positive durations
// only, as dd-trace-java does), where the agent's OTLP path counts it with
// a duration of 0: spans given an end at or before their start (equal
// timestamps, as imported ones may be, or an explicit end timestamp
// earlier than the start, which the OTel SDK does not clamp) differ; they
// are counted in Health.Ineligible.
//
// Concurrency: a Processor is safe for concurrent use; OnEnd runs on the
// goroutine that ends the span, never blocks, and on a repeated route
// allocates nothing of its own (BenchmarkOnEnd), unless a span's service,
// operation name or peer-tag values are longer than 4 KiB, a peer tag is
// cut at 200 bytes, or a peer-tag attribute holds a slice (written as the
// SDK's String writes it): one allocation.
//
// Design: OnEnd indexes the span's attributes once by key, reads the
// resource's from a cache kept per resource, and follows the agent's
// lookups over that index. Every string it builds (resources, operation
// names, normalized services and tag values, peer-tag sets, obfuscated
// queries) goes through a bounded, lock-free memo, so a route seen before
// costs lookups and returns the same string values, which is also the
// aggregator's fast path.
package otelstats
