package stats

import (
	"math"

	"github.com/spanstats/spanstats/aggregate"
)

// Span carries the raw fields of one finished span. Strings are used as
// given; Publish copies what it needs and does not retain the Span or its
// PeerTags slice. The strings themselves are read later by the consumer
// goroutine, so they must be ordinary immutable Go strings — not unsafe
// views of a buffer the tracer reuses. Passing the same string values span
// after span (constants, interned route templates) is the fast path: the
// aggregator recognises them by address without reading their bytes.
type Span struct {
	Service, Name, Resource, Type string
	// SpanKind is "server", "client", "producer", "consumer", "internal" or
	// empty; compared case-insensitively.
	SpanKind       string
	HTTPStatusCode uint32
	HTTPMethod     string
	HTTPEndpoint   string
	GRPCStatusCode string
	// ServiceSource says where the service name came from (wire key srv_src).
	ServiceSource string
	// PeerTags are "key:value" pairs; kept only for client, producer and
	// consumer spans, as a set (order does not matter).
	PeerTags []string
	// Start is the span's start (unix ns); Duration its length (ns). Spans
	// with Duration <= 0 are not counted. A span is counted in the bucket
	// of its end, Start+Duration, as the agent does; Start 0 means it ended
	// when the aggregator reads it. The previous bucket stays open for a
	// tenth of the interval after its end, so a span published just after
	// a boundary still lands in it; a span that ended earlier than every
	// open bucket is counted in the oldest one (Health.LateSpans), one
	// that ends after the current bucket in the current one.
	Start, Duration int64
	// Error marks an error span; TopLevel a service entry span; Measured a
	// span the tracer asked to measure; TraceRoot a span without a parent;
	// Synthetics a span from Datadog Synthetics.
	Error, TopLevel, Measured, TraceRoot, Synthetics bool
}

// kindIs reports whether kind equals want (lower case) ignoring ASCII case,
// as the agent's strings.ToLower comparison does for these names.
func kindIs(kind, want string) bool {
	if len(kind) != len(want) {
		return false
	}
	for i := 0; i < len(kind); i++ {
		c := kind[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// Eligible reports whether the span is counted: top-level, measured, or of
// kind server, client, producer or consumer; and with a positive duration.
// These are the agent's and dd-trace-java's rules.
func (s *Span) Eligible() bool {
	if s.Duration <= 0 {
		return false
	}
	if s.TopLevel || s.Measured {
		return true
	}
	switch k := s.SpanKind; len(k) { // one length check rules out most kinds
	case 6:
		return kindIs(k, "server") || kindIs(k, "client")
	case 8:
		return kindIs(k, "producer") || kindIs(k, "consumer")
	}
	return false
}

// keepsPeerTags reports whether peer tags belong in the span's key.
func keepsPeerTags(kind string) bool {
	switch len(kind) {
	case 6:
		return kindIs(kind, "client")
	case 8:
		return kindIs(kind, "producer") || kindIs(kind, "consumer")
	}
	return false
}

// MaxPeerTags is the most peer tags of one span that are looked at: the
// agent aggregates on a list of a few dozen keys (its /info peer_tags), so
// more cannot all be kept, and they must not make one span cost without
// bound. The rest are cut and counted (Health.PeerTagsCut).
const MaxPeerTags = 64

// spanEnd is the Record.End of a span: 0 for Start 0 ("now"), else
// Start+Duration kept at or above 1 (an end before 1970 is late, not "now")
// and saturated (an overflow is the far future, not the distant past).
// Duration is positive: only eligible spans get here.
func spanEnd(start, duration int64) int64 {
	if start == 0 {
		return 0
	}
	end := start + duration
	if end < start {
		return math.MaxInt64
	}
	return max(end, 1)
}

// snapshot copies the span's key fields and measurements into the inbox
// record, and returns how many peer tags it cut (over MaxPeerTags).
func (s *Span) snapshot(r *aggregate.Record) (cut int) {
	r.Service, r.Name, r.Resource, r.Type = s.Service, s.Name, s.Resource, s.Type
	r.SpanKind = s.SpanKind
	r.HTTPMethod, r.HTTPEndpoint, r.GRPCStatusCode = s.HTTPMethod, s.HTTPEndpoint, s.GRPCStatusCode
	r.ServiceSource = s.ServiceSource
	r.HTTPStatusCode = s.HTTPStatusCode
	r.Duration = s.Duration
	r.End = spanEnd(s.Start, s.Duration)
	r.Error, r.TopLevel, r.TraceRoot, r.Synthetics = s.Error, s.TopLevel, s.TraceRoot, s.Synthetics
	if len(s.PeerTags) > 0 && keepsPeerTags(s.SpanKind) {
		tags := s.PeerTags
		if len(tags) > MaxPeerTags {
			cut, tags = len(tags)-MaxPeerTags, tags[:MaxPeerTags]
		}
		// r is a claimed slot, zeroed by the consumer: unlike SetPeerTags,
		// leave the fields that stay zero unwritten, so their cache line
		// (the slot's last) need not move to this core and back.
		n := copy(r.PeerTags[:], tags)
		r.NumPeerTags = uint8(n)
		if len(tags) > n {
			r.ExtraPeerTags = append([]string(nil), tags[n:]...)
		}
	}
	return cut
}
