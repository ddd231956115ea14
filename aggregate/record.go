// This file owns Record, the span as the inbox carries it to the consumer.

package aggregate

// MaxInlinePeerTags is how many peer tags a Record carries without allocating.
const MaxInlinePeerTags = 8

// Record is the copy of one finished, eligible span's fields that the inbox
// carries from a producer to the consumer: the label fields as the tracer
// gave them and the measurements. It is a plain value so that it travels by
// copy; peer tags live inline up to MaxInlinePeerTags, the rest in
// ExtraPeerTags.
type Record struct {
	// The label fields, first and in Field order, as in Key (see Field).
	Resource, Service, Name, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string

	HTTPStatusCode                         uint32
	Duration                               int64
	End                                    int64 // unix ns, picks the bucket (0: now); not read by Table
	Error, TopLevel, TraceRoot, Synthetics bool
	NumPeerTags                            uint8 // used entries of PeerTags
	PeerTags                               [MaxInlinePeerTags]string
	ExtraPeerTags                          []string
}

// SetPeerTags stores tags in the span, inline when they fit.
func (s *Record) SetPeerTags(tags []string) {
	s.ExtraPeerTags = nil
	if old := int(s.NumPeerTags); len(tags) < old {
		clear(s.PeerTags[len(tags):old]) // reused with fewer tags: none stale (see Reset)
	}
	n := copy(s.PeerTags[:], tags)
	s.NumPeerTags = uint8(n)
	if len(tags) > n {
		// Copied: the caller may reuse its slice once Publish returns.
		s.ExtraPeerTags = append([]string(nil), tags[n:]...)
	}
}

// Reset makes s the zero Record, writing only the fields that a span filled by
// assigning its fields and SetPeerTags can have set: the peer tags beyond
// NumPeerTags are zero already. The inbox clears its slots with it (see
// inbox.Ring.SetClear).
func (s *Record) Reset() {
	clear(s.PeerTags[:s.NumPeerTags])
	*s.labels() = [numLabels]string{}
	s.HTTPStatusCode, s.Duration, s.End, s.NumPeerTags = 0, 0, 0, 0
	s.Error, s.TopLevel, s.TraceRoot, s.Synthetics = false, false, false, false
	if s.ExtraPeerTags != nil {
		s.ExtraPeerTags = nil
	}
}

// flags packs the span's IsTraceRoot (low two bits) and Synthetics (bit 2),
// as the key bytes and the recent-span cache hold them.
func (s *Record) flags() uint8 {
	f := uint8(False)
	if s.TraceRoot {
		f = uint8(True)
	}
	if s.Synthetics {
		f |= 4
	}
	return f
}
