// This file owns Record, the span as the inbox carries it to the consumer.

package aggregate

// MaxInlinePeerTags is how many peer tags a Record carries without allocating.
const MaxInlinePeerTags = 8

// Record is the copy of one finished, eligible span's fields that the inbox
// carries from a producer to the consumer: the label fields as the tracer
// gave them and the measurements. It is a plain value so that it travels by
// copy; peer tags live inline up to MaxInlinePeerTags, the rest in
// ExtraPeerTags.
//
// A producer that found the span's key in Hints sets Labels instead of the
// key fields: then the key fields (labels, peer tags, HTTPStatusCode,
// TraceRoot, Synthetics) are those of *Labels and the Record's own stay
// zero, and it writes only the first cache line of its inbox slot.
type Record struct {
	// The measurements and Labels first: with the inbox slot's sequence
	// word they share the slot's first cache line (see recordPad).
	Labels                                 *Record // a Hints template, or nil
	Duration                               int64
	End                                    int64 // unix ns, picks the bucket (0: now); not read by Table
	Error, TopLevel, TraceRoot, Synthetics bool
	HTTPStatusCode                         uint32

	// The label fields, in Field order, as in Key (see Field).
	Resource, Service, Name, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string

	NumPeerTags   uint8 // used entries of PeerTags
	PeerTags      [MaxInlinePeerTags]string
	ExtraPeerTags []string

	// Pads an inbox slot (a sequence word and a Record) to six whole
	// cache lines, so that every slot's first line holds its measurements
	// (TestRecordFillsSlotLines).
	_ [recordPad]byte
}

// recordPad makes 8+unsafe.Sizeof(Record{}) a multiple of 64 on 64-bit
// platforms.
const recordPad = 40

// SetPeerTags stores tags in the span, inline when they fit.
func (s *Record) SetPeerTags(tags []string) {
	n := copy(s.PeerTags[:], tags)
	s.NumPeerTags = uint8(n)
	s.ExtraPeerTags = nil
	if len(tags) > n {
		// Copied: the caller may reuse its slice once Publish returns.
		s.ExtraPeerTags = append([]string(nil), tags[n:]...)
	}
}

// Reset makes s the zero Record, writing only the fields that a span filled by
// assigning its fields and SetPeerTags can have set: the peer tags beyond
// NumPeerTags are zero already, and a Record with Labels set has no key
// fields of its own, so its slot's other lines are not written at all. The
// inbox clears its slots with it (see inbox.Ring.SetClear).
func (s *Record) Reset() {
	if s.Labels != nil {
		s.Labels, s.Duration, s.End, s.Error, s.TopLevel = nil, 0, 0, false, false
		return
	}
	clear(s.PeerTags[:s.NumPeerTags])
	*s.labels() = [numLabels]string{}
	s.HTTPStatusCode, s.Duration, s.End, s.NumPeerTags = 0, 0, 0, 0
	s.Error, s.TopLevel, s.TraceRoot, s.Synthetics = false, false, false, false
	if s.ExtraPeerTags != nil {
		s.ExtraPeerTags = nil
	}
}

// keyOf is the Record holding s's key fields: s, or its Labels.
func (s *Record) keyOf() *Record {
	if s.Labels != nil {
		return s.Labels
	}
	return s
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
