// This file owns Hints: the key fields of recent spans, published by the
// consumer so that a producer can hand over a span whose strings it has
// seen as one cache line (a template pointer and the measurements) instead
// of a whole Record.

package aggregate

import "sync/atomic"

// hintSlots is the size of Hints: a template per slot, so Hints pins at
// most this many spans' strings of the tracer.
const hintSlots = 1024

// Hints maps the identity of a span's most variable strings (HintIndex) to
// a template: a Record holding only key fields, that of a span the Table
// recognised by the identity of its strings (its tracer reuses them). A
// producer whose span has the very same key fields as the template of its
// index (same string data, see same) sets Record.Labels to it instead of
// copying them. Templates are immutable once published; the Table decides
// which ones to publish (SetHints), producers only read. A template never
// goes stale: it holds key fields, not a place in the Table, so Clear,
// Rotate and recycling leave it valid.
type Hints struct {
	slots [hintSlots]atomic.Pointer[Record]
}

// HintIndex is the slot of Hints for a span with these key fields: the
// addresses of its label strings (in Field order) and of its last peer tag
// ("" if none), its HTTP status code and its flags (TraceRoot, Synthetics).
// Every key field goes in, so that the keys of one resource (its status
// codes, its root and child spans) do not share a slot.
func HintIndex(resource, service, name, typ, kind, method, endpoint, grpc, source, lastPeer string,
	status uint32, traceRoot, synthetics bool) uint {
	h := addr(resource)*0x9E3779B97F4A7C15 ^ addr(service)*0xC2B2AE3D27D4EB4F ^
		addr(name)*0x165667B19E3779F9 ^ addr(typ)*0x27D4EB2F165667C5 ^
		addr(kind)*0xFF51AFD7ED558CCD ^ addr(method)*0xC4CEB9FE1A85EC53 ^
		addr(endpoint)*0x85EBCA77C2B2AE63 ^ addr(grpc)*0x94D049BB133111EB ^
		addr(source)*0xBF58476D1CE4E5B9 ^ addr(lastPeer)*0x2545F4914F6CDD1D ^
		uint64(len(resource)) ^ uint64(status)<<32
	if traceRoot {
		h ^= 0x9E3779B97F4A7C15
	}
	if synthetics {
		h ^= 0xC2B2AE3D27D4EB4F
	}
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return uint(h>>40) % hintSlots
}

// Get returns the template at index i (from HintIndex), or nil.
func (h *Hints) Get(i uint) *Record { return h.slots[i%hintSlots].Load() }

// hintIndexOf is HintIndex of a template's strings.
func hintIndexOf(s *Record) uint {
	last := ""
	if s.NumPeerTags > 0 {
		last = s.PeerTags[s.NumPeerTags-1]
	}
	return HintIndex(s.Resource, s.Service, s.Name, s.Type, s.SpanKind, s.HTTPMethod, s.HTTPEndpoint,
		s.GRPCStatusCode, s.ServiceSource, last, s.HTTPStatusCode, s.TraceRoot, s.Synthetics)
}

// noTemplate marks an entry whose key the Hints' filter refused, so that
// its later spans do not ask again.
var noTemplate = new(Record)

// SetHints makes the Table publish in h the key fields of the spans that
// hit an entry with strings it has seen, when ok accepts them (the
// producer's own rules: a key it would not copy as it is must not be
// published). Call it before the first span; nil turns publishing off.
func (t *Table) SetHints(h *Hints, ok func(*Record) bool) { t.hints, t.hintOK = h, ok }

// offerHint publishes the key fields of s, a Record with its own, which
// counted in e, an entry it did not create. Each entry gets one template,
// made from the first such span (so spans whose keys never repeat cost
// nothing), and publishes it for spans with its very strings; a template
// already published costs a load of its Hints slot, which is then not
// written (no cache line moves).
func (t *Table) offerHint(s *Record, e *Entry) {
	tmpl := e.tmpl
	switch {
	case tmpl == noTemplate || e == t.overflow || s.ExtraPeerTags != nil:
		return
	case tmpl == nil:
		tmpl = templateOf(s)
		if !t.hintOK(tmpl) {
			e.tmpl = noTemplate
			return
		}
		e.tmpl = tmpl
	case !sameKeyFields(tmpl, s):
		return // strings built anew, or another span key of the entry
	}
	p := &t.hints.slots[hintIndexOf(tmpl)]
	if p.Load() != tmpl {
		p.Store(tmpl)
	}
}

// templateOf is a Record of s's key fields alone.
func templateOf(s *Record) *Record {
	r := &Record{HTTPStatusCode: s.HTTPStatusCode, TraceRoot: s.TraceRoot, Synthetics: s.Synthetics, NumPeerTags: s.NumPeerTags}
	*r.labels() = *s.labels()
	copy(r.PeerTags[:], s.PeerTags[:s.NumPeerTags])
	return r
}

// sameKeyFields reports whether a and b have the same key fields, the same
// string data.
func sameKeyFields(a, b *Record) bool {
	x, y := a.labels(), b.labels()
	if a.HTTPStatusCode != b.HTTPStatusCode || a.TraceRoot != b.TraceRoot || a.Synthetics != b.Synthetics ||
		a.NumPeerTags != b.NumPeerTags || b.ExtraPeerTags != nil {
		return false
	}
	for i := range x {
		if !same(x[i], y[i]) {
			return false
		}
	}
	for i := range a.NumPeerTags {
		if !same(a.PeerTags[i], b.PeerTags[i]) {
			return false
		}
	}
	return true
}
