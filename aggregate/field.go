// This file owns the label fields: Field, the one ordered list of them, and
// Limits, the budget of each.

package aggregate

import "unsafe"

// BlockedValue replaces a label that cannot be kept: over its cardinality
// budget, or folded into the overflow entry at the table cap. It is the
// sentinel the Datadog agent and tracers already use.
const BlockedValue = "tracer_blocked_value"

// Field names a label field with a cardinality budget.
type Field int

// The fields with a budget. This is the one list of the label fields:
// Record, Key and Limits declare theirs first and in this order, so code
// indexes them by Field (see labels) instead of naming each
// (TestFieldLayout checks the declarations).
const (
	FieldResource Field = iota
	FieldService
	FieldOperation
	FieldType
	FieldSpanKind
	FieldHTTPMethod
	FieldHTTPEndpoint
	FieldGRPCStatusCode
	FieldServiceSource
	FieldPeerTags // one budget per peer-tag key
	NumFields
)

// numLabels is the number of string label fields: every Field before
// FieldPeerTags.
const numLabels = int(FieldPeerTags)

var fieldNames = [NumFields]string{"resource", "service", "operation", "type", "span_kind",
	"http_method", "http_endpoint", "grpc_status_code", "service_source", "peer_tags"}

// String is the field's name ("resource", "peer_tags", ...), or "unknown"
// for a value that is not a Field.
func (f Field) String() string {
	if f < 0 || f >= NumFields {
		return "unknown"
	}
	return fieldNames[f]
}

// labels is s's label strings indexed by Field: Record declares them first,
// in Field order.
func (s *Record) labels() *[numLabels]string { return (*[numLabels]string)(unsafe.Pointer(s)) }

// labels is k's label strings indexed by Field: Key declares them first, in
// Field order.
func (k *Key) labels() *[numLabels]string { return (*[numLabels]string)(unsafe.Pointer(k)) }

// Limits are the per-interval cardinality budgets: how many distinct values
// of each field an interval keeps before further values become
// BlockedValue. Zero selects the default; a negative value means unlimited;
// a value above MaxLimit is MaxLimit. The fields are in Field order; Get and
// Set reach them by Field.
type Limits struct {
	Resource, Service, Operation, Type, SpanKind int
	HTTPMethod, HTTPEndpoint, GRPCStatusCode     int
	ServiceSource                                int
	// PeerTag is the budget of each peer-tag key (peer.hostname, db.instance,
	// ...), counted separately per key: a value over it becomes
	// key:BlockedValue. When the agent gave no list of peer-tag keys, an
	// interval tracks at most 64 keys, whatever PeerTag says; a tag of any
	// further key becomes a bare BlockedValue, its key dropped too, so that
	// junk keys cannot multiply the groups either.
	PeerTag int
}

// DefaultLimits are dd-trace-java's budgets: large enough for a healthy
// service, small enough that a value with a UUID in it cannot grow the
// table or the payload without bound.
func DefaultLimits() Limits {
	return Limits{
		Resource: 1024, Service: 32, Operation: 64, Type: 16, SpanKind: 8,
		HTTPMethod: 16, HTTPEndpoint: 512, GRPCStatusCode: 24, ServiceSource: 16,
		PeerTag: 512,
	}
}

// Get is the budget of field f (PeerTag for FieldPeerTags).
func (l Limits) Get(f Field) int { return l.byField()[f] }

// Set sets the budget of field f (PeerTag for FieldPeerTags) to n.
func (l *Limits) Set(f Field, n int) { l.byField()[f] = n }

func (l *Limits) byField() *[NumFields]int { return (*[NumFields]int)(unsafe.Pointer(l)) }

// MaxLimit is the largest budget a field can have: a budget's value set is
// allocated up front in proportion to it.
const MaxLimit = 1 << 16

// withDefaults resolves zeros to DefaultLimits and caps the rest at MaxLimit.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for f, v := range l.byField() {
		switch {
		case v == 0:
			l.Set(Field(f), d.Get(Field(f)))
		case v > MaxLimit:
			l.Set(Field(f), MaxLimit)
		}
	}
	return l
}
