// This file owns the attribute keys the mapping reads and their lookup over
// a span's attributes and its resource's, in the agent's precedence.

package otelstats

import (
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/spanstats/spanstats/internal/agentclient"
)

// attr names an attribute key the mapping reads.
type attr uint8

const (
	aServiceName attr = iota
	aOperationName
	aResourceName
	aSpanType
	aHTTPRequestMethod
	aHTTPMethod
	aURLTemplate
	aHTTPRoute
	aHTTPStatusCode
	aHTTPResponseStatusCode
	aMessagingOperation
	aMessagingDestination
	aMessagingDestinationName
	aMessagingSystem
	aRPCMethod
	aRPCService
	aRPCSystem
	aRPCSystemName
	aGraphQLOperationType
	aGraphQLOperationName
	aDBSystemName
	aDBSystem
	aDBStatement
	aDBQueryText
	aFaaSInvokedProvider
	aFaaSInvokedName
	aFaaSTrigger
	aNetworkProtocolName
	aRPCGRPCStatusCode
	aGRPCCode
	aRPCGRPCStatusCodeDot
	aGRPCStatusCode
	aRPCResponseStatusCode
	aDDMeasured
	aDDBaseService
	aPeerService
	firstPeerOnly // the peer-tag keys below are read for peer tags only
)

// keyNames are the attribute keys before firstPeerOnly, by attr.
var keyNames = [firstPeerOnly]string{
	"service.name", "operation.name", "resource.name", "span.type",
	"http.request.method", "http.method", "url.template", "http.route",
	"http.status_code", "http.response.status_code",
	"messaging.operation", "messaging.destination", "messaging.destination.name", "messaging.system",
	"rpc.method", "rpc.service", "rpc.system", "rpc.system.name",
	"graphql.operation.type", "graphql.operation.name",
	"db.system.name", "db.system", "db.statement", "db.query.text",
	"faas.invoked_provider", "faas.invoked_name", "faas.trigger", "network.protocol.name",
	"rpc.grpc.status_code", "grpc.code", "rpc.grpc.status.code", "grpc.status.code", "rpc.response.status_code",
	"_dd.measured", "_dd.base_service", "peer.service",
}

// DefaultPeerTagKeys are the attribute keys the agent (v0.85.4) reads as
// peer tags from OTLP spans: every source key of its peer-tag concepts,
// sorted. The tag is "key:value" with the attribute's own key.
var DefaultPeerTagKeys = slices.Clone(agentclient.DefaultPeerTags)

// keyIndex maps an attribute key to its attr; built per Processor because
// the peer-tag keys are an option.
type keyIndex struct {
	ids      map[string]attr
	peerKeys []string // peer-tag keys, by attr: peerIDs[i] is the attr of peerKeys[i]
	peerIDs  []attr
	n        int // attrs in use
}

func newKeyIndex(peerKeys []string) *keyIndex {
	k := &keyIndex{ids: make(map[string]attr, int(firstPeerOnly)+len(peerKeys))}
	for i, name := range keyNames {
		k.ids[name] = attr(i)
	}
	k.n = int(firstPeerOnly)
	// Each key once: the list then has at most maxAttrs keys, and a key's
	// index stays below peerTags' baseIndex.
	seen := make(map[string]bool, len(peerKeys))
	for _, name := range peerKeys {
		if seen[name] {
			continue
		}
		seen[name] = true
		id, ok := k.ids[name]
		if !ok {
			if k.n >= maxAttrs {
				continue // beyond the table; documented on WithPeerTagKeys
			}
			id = attr(k.n)
			k.ids[name] = id
			k.n++
		}
		k.peerKeys = append(k.peerKeys, name)
		k.peerIDs = append(k.peerIDs, id)
	}
	return k
}

// maxAttrs bounds the keys a view indexes, so a view fits on the stack.
const maxAttrs = 128

// view is one span's attributes indexed by attr: a position in the span's
// attribute slice (plus one; 0: absent), and the resource's values.
type view struct {
	span []attribute.KeyValue
	pos  [maxAttrs]uint16
	res  *resAttrs
}

// maxSpanAttrs is how many of a span's attributes index reads: positions
// are uint16 because a provider may lift the SDK's limit of 128. The agent
// reads every attribute: a span with more than this, its limit lifted,
// may differ (a status code set after them is not read).
const maxSpanAttrs = math.MaxUint16

// index fills v.pos from the span's attributes, up to maxSpanAttrs of them.
func (v *view) index(k *keyIndex, attrs []attribute.KeyValue, res *resAttrs) {
	v.span, v.res = attrs, res
	for i := range attrs[:min(len(attrs), maxSpanAttrs)] {
		if id, ok := k.ids[string(attrs[i].Key)]; ok {
			v.pos[id] = uint16(i + 1)
		}
	}
}

func (v *view) spanValue(a attr) (attribute.Value, bool) {
	if p := v.pos[a]; p != 0 {
		return v.span[p-1].Value, true
	}
	return attribute.Value{}, false
}

// str is the accessor's GetString: a non-empty string value of the span,
// else of the resource (values of other types do not count).
func (v *view) str(a attr) string {
	if x, ok := v.spanValue(a); ok && x.Type() == attribute.STRING && x.AsString() != "" {
		return x.AsString()
	}
	if x := v.res.vals[a]; x.Type() == attribute.STRING {
		return x.AsString()
	}
	return ""
}

// int is the accessor's GetInt64: an integer value of the span, else of the
// resource.
func (v *view) int(a attr) (int64, bool) {
	if x, ok := v.spanValue(a); ok && x.Type() == attribute.INT64 {
		return x.AsInt64(), true
	}
	if x := v.res.vals[a]; x.Type() == attribute.INT64 {
		return x.AsInt64(), true
	}
	return 0, false
}

// has reports whether the span or the resource has a value for a.
func (v *view) has(a attr) bool { return v.pos[a] != 0 || v.res.has[a] }

// any is the agent's GetOTelAttrFromEitherMap: the value of any type as a
// string, the span's when non-empty, else the resource's.
func (v *view) any(a attr, scratch []byte) ([]byte, bool) {
	if x, ok := v.spanValue(a); ok {
		if b := appendValue(scratch, x); len(b) > len(scratch) {
			return b, true
		}
	}
	if v.res.has[a] {
		x := v.res.vals[a]
		if b := appendValue(scratch, x); len(b) > len(scratch) {
			return b, true
		}
	}
	return scratch, false
}

// appendValue appends x as pdata's Value.AsString writes it, for the types
// an OTel attribute converts to (slices are written as the SDK emits them,
// which differs from pdata's JSON).
func appendValue(b []byte, x attribute.Value) []byte {
	switch x.Type() {
	case attribute.STRING:
		return append(b, x.AsString()...)
	case attribute.INT64:
		return strconv.AppendInt(b, x.AsInt64(), 10)
	case attribute.BOOL:
		return strconv.AppendBool(b, x.AsBool())
	case attribute.FLOAT64:
		return appendFloat(b, x.AsFloat64())
	case attribute.EMPTY:
		return b
	}
	return append(b, x.String()...)
}

// appendFloat appends f as pdata writes a double: JavaScript's number to
// string (shortest digits; exponent form below 1e-6 and from 1e21, the
// exponent without a leading zero), and NaN, Infinity, -Infinity.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if a := math.Abs(f); a == 0 || a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	b = strconv.AppendFloat(b, f, 'e', -1, 64)
	// Go writes at least two exponent digits: "1e-07" becomes "1e-7".
	if n := len(b); b[n-4] == 'e' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// resAttrs are a resource's values by attr, computed once per resource.
type resAttrs struct {
	res  *resource.Resource
	vals [maxAttrs]attribute.Value
	has  [maxAttrs]bool // vals[a] is set: a cheap test before the 48-byte value
}

// resCacheSlots is how many resources resCache holds: one Processor may be
// registered on several TracerProviders (one per service of a process), and
// a resource missing from the cache costs a resAttrs allocation per span.
const resCacheSlots = 8

// resCache holds the resources seen last, each indexed once.
type resCache struct {
	slots [resCacheSlots]atomic.Pointer[resAttrs]
	next  atomic.Uint32 // the slot the next new resource replaces
}

func (c *resCache) get(k *keyIndex, r *resource.Resource) *resAttrs {
	for i := range c.slots {
		if ra := c.slots[i].Load(); ra != nil && ra.res == r {
			return ra
		}
	}
	ra := &resAttrs{res: r}
	if r != nil {
		for it := r.Iter(); it.Next(); {
			kv := it.Attribute()
			if id, ok := k.ids[string(kv.Key)]; ok {
				ra.vals[id], ra.has[id] = kv.Value, true
			}
		}
	}
	c.slots[(c.next.Add(1)-1)%resCacheSlots].Store(ra)
	return ra
}
