// This file owns Entry, one group's key and values, and Key, its label set.

package aggregate

import "math/bits"

// Trilean is the agent's three-valued boolean (IsTraceRoot on the wire).
type Trilean int32

// Trilean values, as the agent numbers them.
const (
	NotSet Trilean = 0
	True   Trilean = 1
	False  Trilean = 2
)

// Key is the label set of a group: every field the agent groups by.
type Key struct {
	Resource, Service, Name, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string

	HTTPStatusCode uint32
	Synthetics     bool
	IsTraceRoot    Trilean
	PeerTags       []string // sorted, without duplicates
}

// Entry is one group's values for the current interval.
type Entry struct {
	Key
	Hits, Errors, TopLevelHits uint64
	Duration                   uint64 // sum of span durations, ns
	// Ok and Err are the latency sketches of ok and error spans. A table's
	// entry has both from its creation, empty, each allocating its bins at
	// its first span (an entry without errors pays nothing for Err's bins);
	// a decoded entry's is nil when the payload had none. A sketch is kept
	// (emptied) across Rotate and recycling, so a reader must test Count,
	// not nil, for "no values".
	Ok, Err *Sketch

	key   string // encoded key (see Table.encodeKey); Key's strings alias it
	hash  uint64
	epoch uint32 // interval of the last hit; reported entries have epoch == table epoch
	gen   uint32 // bumped when the entry takes a new key (recycling)
}

// record adds one span's measurements.
func (e *Entry) record(d int64, isErr, topLevel bool) {
	i, zero := bin(durationValue(d))
	e.recordBin(d, i, zero, isErr, topLevel)
}

// recordBin is record with the sketch bin of d already found (see bin).
func (e *Entry) recordBin(d int64, i int, zero, isErr, topLevel bool) {
	e.Hits = satAdd64(e.Hits, 1)
	e.Duration = satAdd64(e.Duration, uint64(max(d, 0))) // Publish passes d > 0; a Table user may not
	if topLevel {
		e.TopLevelHits = satAdd64(e.TopLevelHits, 1)
	}
	sk := &e.Ok
	if isErr {
		e.Errors = satAdd64(e.Errors, 1)
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

// sketch is the sketch a span's latency goes to (nil, outside a table,
// until its first).
func (e *Entry) sketch(isErr bool) *Sketch {
	if isErr {
		return e.Err
	}
	return e.Ok
}

// Merge adds another group's values (decoded from a payload) to e.
func (e *Entry) Merge(o *Entry) {
	e.Hits = satAdd64(e.Hits, o.Hits)
	e.Errors = satAdd64(e.Errors, o.Errors)
	e.TopLevelHits = satAdd64(e.TopLevelHits, o.TopLevelHits)
	e.Duration = satAdd64(e.Duration, o.Duration)
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

// satAdd64 is a + b saturating at math.MaxUint64: three spans of
// math.MaxInt64 ns must not wrap a group's sum to a small number.
func satAdd64(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	return s | -carry // all ones on overflow, without a branch
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
