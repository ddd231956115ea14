package aggregate

import "strings"

// Field names a label field with a cardinality budget.
type Field int

// The fields with a budget, in Limits order.
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

var fieldNames = [NumFields]string{"resource", "service", "operation", "type", "span_kind",
	"http_method", "http_endpoint", "grpc_status_code", "service_source", "peer_tags"}

func (f Field) String() string {
	if f < 0 || f >= NumFields {
		return "unknown"
	}
	return fieldNames[f]
}

// Limits are the per-interval cardinality budgets: how many distinct values
// of each field an interval keeps before further values become
// BlockedValue. Zero selects the default; a negative value means unlimited.
type Limits struct {
	Resource, Service, Operation, Type, SpanKind int
	HTTPMethod, HTTPEndpoint, GRPCStatusCode     int
	ServiceSource                                int
	// PeerTag is the budget of each peer-tag key (peer.hostname, db.instance,
	// ...), counted separately per key.
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

func (l Limits) get(f Field) int {
	return [NumFields]int{l.Resource, l.Service, l.Operation, l.Type, l.SpanKind,
		l.HTTPMethod, l.HTTPEndpoint, l.GRPCStatusCode, l.ServiceSource, l.PeerTag}[f]
}

// withDefaults resolves zeros to DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	fix := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fix(&l.Resource, d.Resource)
	fix(&l.Service, d.Service)
	fix(&l.Operation, d.Operation)
	fix(&l.Type, d.Type)
	fix(&l.SpanKind, d.SpanKind)
	fix(&l.HTTPMethod, d.HTTPMethod)
	fix(&l.HTTPEndpoint, d.HTTPEndpoint)
	fix(&l.GRPCStatusCode, d.GRPCStatusCode)
	fix(&l.ServiceSource, d.ServiceSource)
	fix(&l.PeerTag, d.PeerTag)
	return l
}

// maxPeerTagKeys bounds the peer-tag keys tracked when the agent gave no
// list: each key has its own budget, so the keys need one too.
const maxPeerTagKeys = 64

// valueSet is the budget of one field. Values admitted in earlier intervals
// stay in seen, so an interval re-admitting them allocates nothing.
type valueSet struct {
	limit   int // < 0: unlimited
	seen    map[string]*uint32
	epoch   uint32 // interval that n counts
	n       int    // values admitted in epoch
	blocked string // the replacement value
}

func newValueSet(limit int, blocked string) *valueSet {
	return &valueSet{limit: limit, seen: make(map[string]*uint32), blocked: blocked}
}

// admit reports whether v is within budget in interval epoch, admitting it
// if there is room.
func (s *valueSet) admit(v string, epoch uint32) bool {
	if s.limit < 0 {
		return true
	}
	if s.epoch != epoch {
		s.epoch, s.n = epoch, 0
		// Remembered values are what saves allocations; beyond a few
		// intervals' worth they are just memory.
		if len(s.seen) > 4*s.limit+64 {
			clear(s.seen)
		}
	}
	if p, ok := s.seen[v]; ok {
		if *p == epoch {
			return true
		}
		if s.n >= s.limit {
			return false
		}
		*p = epoch // the map keeps its own copy of v: nothing to allocate
		s.n++
		return true
	}
	if s.n >= s.limit {
		return false
	}
	e := epoch
	s.seen[strings.Clone(v)] = &e
	s.n++
	return true
}

// budgets holds the value sets of a Table.
type budgets struct {
	fields  [FieldPeerTags]*valueSet
	peer    map[string]*valueSet // per peer-tag key
	limits  Limits
	blocked *valueSet // stands in for keys beyond maxPeerTagKeys
}

func newBudgets(l Limits) *budgets {
	b := &budgets{limits: l, peer: map[string]*valueSet{}}
	for f := range FieldPeerTags {
		b.fields[f] = newValueSet(l.get(f), BlockedValue)
	}
	b.blocked = &valueSet{limit: 0, seen: map[string]*uint32{}, blocked: BlockedValue}
	return b
}

// peerSet returns the budget of a peer tag's key, creating it while there
// are fewer than maxPeerTagKeys.
func (b *budgets) peerSet(tag string) *valueSet {
	k := tag
	if i := strings.IndexByte(tag, ':'); i >= 0 {
		k = tag[:i]
	}
	if s, ok := b.peer[k]; ok {
		return s
	}
	if len(b.peer) >= maxPeerTagKeys {
		return b.blocked
	}
	k = strings.Clone(k)
	s := newValueSet(b.limits.PeerTag, k+":"+BlockedValue)
	b.peer[k] = s
	return s
}

// admit checks every budgeted field of s (and its peer tags) in interval
// epoch. When all are within budget it returns nil. Otherwise it returns a
// copy of s in t.collapsedSpan with the over-budget values replaced, and
// counts each collapse.
func (t *Table) admit(s *Span, peers []string) *Span {
	b := t.budgets
	ep := t.epoch
	var c *Span
	field := func(f Field, v string) {
		if b.fields[f].admit(v, ep) {
			return
		}
		if c == nil {
			c = &t.collapsedSpan
			*c = *s
		}
		t.collapsed[f]++
		*fieldOf(c, f) = BlockedValue
	}
	field(FieldResource, s.Resource)
	field(FieldService, s.Service)
	field(FieldOperation, s.Name)
	field(FieldType, s.Type)
	field(FieldSpanKind, s.SpanKind)
	field(FieldHTTPMethod, s.HTTPMethod)
	field(FieldHTTPEndpoint, s.HTTPEndpoint)
	field(FieldGRPCStatusCode, s.GRPCStatusCode)
	field(FieldServiceSource, s.ServiceSource)
	for i, p := range peers {
		vs := b.peerSet(p)
		if vs.admit(p, ep) {
			continue
		}
		if c == nil {
			c = &t.collapsedSpan
			*c = *s
		}
		t.collapsed[FieldPeerTags]++
		peers[i] = vs.blocked
	}
	if c != nil {
		t.collapsedSpans++
	}
	return c
}

func fieldOf(s *Span, f Field) *string {
	switch f {
	case FieldResource:
		return &s.Resource
	case FieldService:
		return &s.Service
	case FieldOperation:
		return &s.Name
	case FieldType:
		return &s.Type
	case FieldSpanKind:
		return &s.SpanKind
	case FieldHTTPMethod:
		return &s.HTTPMethod
	case FieldHTTPEndpoint:
		return &s.HTTPEndpoint
	case FieldGRPCStatusCode:
		return &s.GRPCStatusCode
	case FieldServiceSource:
		return &s.ServiceSource
	}
	panic("BUG: aggregate: fieldOf " + f.String())
}

// SetLimits turns on per-interval cardinality budgets (zero fields take
// DefaultLimits). A Table without SetLimits keeps every value.
func (t *Table) SetLimits(l Limits) {
	t.budgets = newBudgets(l.withDefaults())
}

// SetPeerTagKeys keeps only peer tags whose key is in keys (the agent's
// peer_tags list, or the tracer's own). A nil keys keeps every key.
func (t *Table) SetPeerTagKeys(keys []string) {
	if keys == nil {
		t.peerKeys = nil
		return
	}
	t.peerKeys = make(map[string]struct{}, len(keys))
	for _, k := range keys {
		t.peerKeys[k] = struct{}{}
	}
}

// Collapsed is the number of values of field f replaced by BlockedValue.
func (t *Table) Collapsed(f Field) uint64 { return t.collapsed[f] }

// CollapsedSpans is the number of spans with at least one collapsed field.
func (t *Table) CollapsedSpans() uint64 { return t.collapsedSpans }
