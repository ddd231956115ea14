// This file owns the producer's side of aggregate.Hints: a span whose key
// fields are a template's strings, the very same ones, goes into the inbox
// as the template's pointer and its measurements, one cache line instead
// of six (BenchmarkHandoff: record against compact).

package stats

import (
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
)

// hint returns the template of h whose key fields are s's own, the same
// string data and values, or nil. It reads no string's bytes.
func (s *Span) hint(h *aggregate.Hints) *aggregate.Record {
	last := ""
	if n := len(s.PeerTags); n > 0 {
		last = s.PeerTags[n-1]
	}
	t := h.Get(aggregate.HintIndex(s.Resource, s.Service, s.Name, s.Type, s.SpanKind, s.HTTPMethod, s.HTTPEndpoint,
		s.GRPCStatusCode, s.ServiceSource, last, s.HTTPStatusCode, s.TraceRoot, s.Synthetics))
	if t == nil || len(s.PeerTags) != int(t.NumPeerTags) || s.HTTPStatusCode != t.HTTPStatusCode ||
		s.TraceRoot != t.TraceRoot || s.Synthetics != t.Synthetics ||
		!same(s.Resource, t.Resource) || !same(s.Service, t.Service) || !same(s.Name, t.Name) ||
		!same(s.Type, t.Type) || !same(s.SpanKind, t.SpanKind) || !same(s.HTTPMethod, t.HTTPMethod) ||
		!same(s.HTTPEndpoint, t.HTTPEndpoint) || !same(s.GRPCStatusCode, t.GRPCStatusCode) ||
		!same(s.ServiceSource, t.ServiceSource) {
		return nil
	}
	for i, p := range s.PeerTags {
		if !same(p, t.PeerTags[i]) {
			return nil
		}
	}
	return t
}

// same reports whether a and b are the same string data (Go strings are
// immutable, so the same contents), or both empty.
func same(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b))
}

// Hintable is the filter for templates to give aggregate.Table.SetHints
// with the Hints that SnapshotWith reads: it accepts a key that Snapshot,
// given a span with exactly these fields, copies unchanged, so that a span
// matching the template has the template's key, as Snapshot would have
// written it.
func Hintable(r *aggregate.Record) bool { return hintable(r) }

// hintable is the Table's filter for templates: a key that snapshot, given
// a span with exactly these fields, copies unchanged. Then a span that
// matches the template (hint) has the template's key, as snapshot would
// have written it: no label over its limit, a canonical gRPC code, and
// peer tags only where the span's kind keeps them, each within its limit.
func hintable(r *aggregate.Record) bool {
	if max(len(r.Service)-MaxServiceLen, len(r.Name)-MaxNameLen, len(r.Type)-MaxTypeLen, len(r.Resource)-MaxResourceLen) > 0 ||
		max(len(r.SpanKind), len(r.HTTPMethod), len(r.HTTPEndpoint), len(r.ServiceSource)) > MaxTagLen {
		return false
	}
	if r.GRPCStatusCode != "" && CanonicalGRPCCode(r.GRPCStatusCode) != r.GRPCStatusCode {
		return false
	}
	if r.NumPeerTags == 0 {
		return true
	}
	if !keepsPeerTags(r.SpanKind) || int(r.NumPeerTags) > MaxPeerTags || r.ExtraPeerTags != nil {
		return false
	}
	for _, p := range r.PeerTags[:r.NumPeerTags] {
		if len(p) > MaxTagLen {
			return false
		}
	}
	return true
}
