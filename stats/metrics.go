// This file holds the aggregator's own health as DogStatsD counts
// (MetricsClient), sent after each report.

package stats

import (
	"strings"

	"github.com/spanstats/spanstats/aggregate"
)

// MetricsClient is the part of a DogStatsD client the aggregator uses to
// report its own health; datadog-go's *statsd.Client satisfies it. It is
// called only from the sender goroutine, never on the Publish path.
type MetricsClient interface {
	// Count adds value to the counter name: each Health counter's growth
	// since the previous report. Its error is ignored.
	Count(name string, value int64, tags []string, rate float64) error
	// Gauge sets name to value: the groups the table holds, the spans
	// pending, whether the agent is off. Its error is ignored.
	Gauge(name string, value float64, tags []string, rate float64) error
}

// MetricsPrefix starts the name of every metric the aggregator emits.
const MetricsPrefix = "datadog.tracer.stats."

// metricName is prefix+name without the part the client already adds:
// a client whose namespace is "datadog.tracer." gets "stats.<name>", so the
// metric arrives as datadog.tracer.stats.<name>, never with the prefix twice.
// A namespace given without its trailing dot ("datadog.tracer") is the same
// one: DogStatsD clients (datadog-go's WithNamespace) add the dot.
func metricName(namespace, name string) string {
	full := MetricsPrefix + name
	if namespace != "" && !strings.HasSuffix(namespace, ".") {
		namespace += "."
	}
	if namespace != "" && strings.HasPrefix(full, namespace) {
		return full[len(namespace):]
	}
	return full
}

// emitter turns Health deltas into DogStatsD counts after each report.
type emitter struct {
	client    MetricsClient
	namespace string
	last      Health
}

func (m *emitter) emit(h Health) {
	if m == nil || m.client == nil {
		return
	}
	count := func(name string, now, before uint64, tags ...string) {
		if now > before {
			_ = m.client.Count(metricName(m.namespace, name), int64(now-before), tags, 1)
		}
	}
	l := &m.last
	count("spans.published", h.Published, l.Published)
	count("spans.counted", h.Counted, l.Counted)
	count("spans.ineligible", h.Ineligible, l.Ineligible)
	count("spans.dropped", h.InboxFull, l.InboxFull, "reason:inbox_full")
	count("spans.dropped", h.AfterStop, l.AfterStop, "reason:stopped")
	count("spans.dropped", h.AgentOffSpans, l.AgentOffSpans, "reason:agent_disabled")
	count("spans.dropped", h.AggregateDropped, l.AggregateDropped, "reason:aggregate")
	count("spans.dropped", h.StopUndrained, l.StopUndrained, "reason:stop_deadline")
	count("spans.overflowed", h.Overflowed, l.Overflowed)
	count("spans.collapsed", h.CollapsedSpans, l.CollapsedSpans)
	count("spans.cleared", h.Cleared, l.Cleared)
	count("entries.recycled", h.Recycled, l.Recycled)
	count("spans.late", h.LateSpans, l.LateSpans)
	count("clock.steps_back", h.ClockStepsBack, l.ClockStepsBack)
	count("peer_tags.cut", h.PeerTagsCut, l.PeerTagsCut)
	count("labels.truncated", h.LabelsTruncated, l.LabelsTruncated)
	for f := range aggregate.NumFields {
		count("collapsed", h.Collapsed[f], l.Collapsed[f], "field:"+f.String())
	}
	count("payloads.sent", h.PayloadsSent, l.PayloadsSent)
	count("payloads.failed", h.PayloadsFailed, l.PayloadsFailed)
	count("payloads.retried", h.PayloadsRetried, l.PayloadsRetried)
	count("payloads.retried_after_timeout", h.RetriesAfterTimeout, l.RetriesAfterTimeout)
	count("payloads.split", h.PayloadsSplit, l.PayloadsSplit)
	count("datagrams.waited", h.DatagramWaits, l.DatagramWaits)
	count("payloads.dropped", h.PayloadsDropped, l.PayloadsDropped)
	// The spans of those payloads: counted in an entry, then lost on the
	// way out, which spans.dropped (before the table) does not tell.
	count("spans.sent", h.SpansSent, l.SpansSent)
	count("spans.unsent", h.SpansUnsent, l.SpansUnsent)
	count("spans.unsent_after_timeout", h.UnsentAfterTimeout, l.UnsentAfterTimeout)
	count("bytes.sent", h.BytesSent, l.BytesSent)
	count("agent.switched_off", h.AgentOffTimes, l.AgentOffTimes)
	count("info.reads", h.InfoReads, l.InfoReads)
	count("info.failures", h.InfoFailures, l.InfoFailures)
	gauge := func(name string, v float64) { _ = m.client.Gauge(metricName(m.namespace, name), v, nil, 1) }
	gauge("entries", float64(h.Entries))
	gauge("spans.pending", float64(h.Pending))
	off := 0.0
	if h.AgentOff {
		off = 1
	}
	gauge("agent.off", off)
	m.last = h
}
