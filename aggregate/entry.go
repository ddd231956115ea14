package aggregate

import "unsafe"

// BlockedValue replaces a label that cannot be kept: over its cardinality
// budget, or folded into the overflow entry at the table cap. It is the
// sentinel the Datadog agent and tracers already use.
const BlockedValue = "tracer_blocked_value"

// MaxInlinePeerTags is how many peer tags a Record carries without allocating.
const MaxInlinePeerTags = 8

// Trilean is the agent's three-valued boolean (IsTraceRoot on the wire).
type Trilean int32

// Trilean values, as the agent numbers them.
const (
	NotSet Trilean = 0
	True   Trilean = 1
	False  Trilean = 2
)

// Record is the raw input of one finished, eligible span: the label fields as
// the tracer gave them and the measurements. It is a plain value so that it can
// travel through the inbox by copy; peer tags live inline up to
// MaxInlinePeerTags, the rest in ExtraPeerTags.
type Record struct {
	Service, Name, Resource, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string
	HTTPStatusCode                           uint32
	Duration                                 int64
	Error, TopLevel, TraceRoot, Synthetics   bool
	NumPeerTags                              uint8 // used entries of PeerTags
	PeerTags                                 [MaxInlinePeerTags]string
	ExtraPeerTags                            []string
}

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
// NumPeerTags are zero already. The inbox clears its slots with it (see
// inbox.Ring.SetClear).
func (s *Record) Reset() {
	clear(s.PeerTags[:s.NumPeerTags])
	s.Service, s.Name, s.Resource, s.Type, s.SpanKind = "", "", "", "", ""
	s.HTTPMethod, s.HTTPEndpoint, s.GRPCStatusCode, s.ServiceSource = "", "", "", ""
	s.HTTPStatusCode, s.Duration, s.NumPeerTags = 0, 0, 0
	s.Error, s.TopLevel, s.TraceRoot, s.Synthetics = false, false, false, false
	if s.ExtraPeerTags != nil {
		s.ExtraPeerTags = nil
	}
}

// Key is the label set of a group: every field the agent groups by.
type Key struct {
	Service, Name, Resource, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string
	HTTPStatusCode                           uint32
	Synthetics                               bool
	IsTraceRoot                              Trilean
	PeerTags                                 []string // sorted, without duplicates
}

// Entry is one group's values for the current interval.
type Entry struct {
	Key
	Hits, Errors, TopLevelHits uint64
	Duration                   uint64 // sum of span durations, ns
	// Ok and Err are the latency sketches of ok and error spans; each stays
	// nil until its first span so an entry without errors pays nothing for Err.
	// Once allocated a sketch is kept (emptied) across Rotate and recycling,
	// so a reader must test Count, not nil, for "no values".
	Ok, Err *Sketch

	key   string // encoded key (see Table.encodeKey); Key's strings alias it
	hash  uint64
	epoch uint32 // interval of the last hit; reported entries have epoch == table epoch
	gen   uint32 // bumped when the entry takes a new key (recycling)
}

// record adds one span's measurements.
func (e *Entry) record(d int64, isErr, topLevel bool) {
	i, zero := bin(float64(d))
	e.recordBin(d, i, zero, isErr, topLevel)
}

// recordBin is record with the sketch bin of d already found (see bin).
func (e *Entry) recordBin(d int64, i int, zero, isErr, topLevel bool) {
	e.Hits++
	e.Duration += uint64(d)
	if topLevel {
		e.TopLevelHits++
	}
	sk := &e.Ok
	if isErr {
		e.Errors++
		sk = &e.Err
	}
	if *sk == nil {
		*sk = new(Sketch)
	}
	if zero {
		(*sk).AddZeros(1)
	} else {
		(*sk).AddIndex(i, 1)
	}
}

// sketch is the sketch a span's latency goes to (nil until its first).
func (e *Entry) sketch(isErr bool) *Sketch {
	if isErr {
		return e.Err
	}
	return e.Ok
}

// Merge adds another group's values (decoded from a payload) to e.
func (e *Entry) Merge(o *Entry) {
	e.Hits += o.Hits
	e.Errors += o.Errors
	e.TopLevelHits += o.TopLevelHits
	e.Duration += o.Duration
	if o.Ok != nil && o.Ok.Count() > 0 {
		if e.Ok == nil {
			e.Ok = new(Sketch)
		}
		e.Ok.Merge(o.Ok)
	}
	if o.Err != nil && o.Err.Count() > 0 {
		if e.Err == nil {
			e.Err = new(Sketch)
		}
		e.Err.Merge(o.Err)
	}
}

// reset zeroes the values and keeps the sketches' memory for reuse.
func (e *Entry) reset() {
	e.Hits, e.Errors, e.TopLevelHits, e.Duration = 0, 0, 0, 0
	if e.Ok != nil {
		e.Ok.Reset()
	}
	if e.Err != nil {
		e.Err.Reset()
	}
}

// touchFields loads the addresses of the span's most variable strings and
// folds them together; touch loads their bytes. See Table.AddBatch.
func touchFields(s *Record) uintptr {
	return uintptr(unsafe.Pointer(unsafe.StringData(s.Resource))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.Service))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.Name))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.PeerTags[0]))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.PeerTags[2])))
}

// touch: see touchFields.
func touch(s *Record) byte {
	x := edge(s.Resource) ^ edge(s.Service) ^ edge(s.Name) ^ edge(s.HTTPEndpoint)
	for i := range min(int(s.NumPeerTags), len(s.PeerTags)) {
		x ^= edge(s.PeerTags[i])
	}
	return x
}

// edge is the first and last byte of v folded together (0 if empty).
func edge(v string) byte {
	if n := len(v); n > 0 {
		return v[0] ^ v[n-1]
	}
	return 0
}
