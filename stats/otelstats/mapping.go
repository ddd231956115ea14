// This file maps one finished OTel span to a stats.Span as the Datadog agent
// (v0.85.4, pkg/trace/transform and pkg/trace/semantics) maps an OTLP span
// before it computes stats: the function each part follows is named on it.

package otelstats

import (
	"encoding/binary"
	"strconv"
	"strings"
	"sync"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

// defaultService is the agent's DefaultOTLPServiceName.
const defaultService = "otlpresourcenoservicename"

// textNonParsable replaces a SQL resource the obfuscator cannot parse, as
// the agent does.
const textNonParsable = "Non-parsable SQL query"

// scratchSize is the stack buffer the mapping builds strings in; longer
// ones spill to the heap, which only costs an allocation.
const scratchSize = 512

// fill sets sp from s. b is scratch space.
func (p *Processor) fill(sp *stats.Span, s sdktrace.ReadOnlySpan, b []byte) {
	var v view
	v.index(p.keys, s.Attributes(), p.res.get(p.keys, s.Resource()))
	kind := s.SpanKind()
	if v.pos[aServiceName] != 0 && !p.topLevelByKind && !p.spanServices.Load() {
		if x, _ := v.spanValue(aServiceName); x.Type() == attribute.STRING && x.AsString() != "" {
			p.spanServices.Store(true)
		}
	}

	sp.Service = p.service(&v)
	sp.Name = p.operationName(&v, kind, b[:0])
	sp.Type = p.spanType(&v, kind)
	spanName := s.Name()
	if spanName == "" {
		// The only way to an empty resource; the agent's normalizer, which
		// runs before obfuscation and stats, gives it the operation name.
		spanName = sp.Name
	}
	sp.Resource = p.resource(&v, kind, sp.Type, spanName, b[:0])
	sp.SpanKind = kindName(kind)
	sp.HTTPStatusCode = httpStatusCode(&v)
	sp.GRPCStatusCode = grpcStatusCode(&v)
	switch kind {
	case trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer:
		sp.PeerTags = p.peerTags(&v, b[:0], false)
	case trace.SpanKindServer:
	default:
		// Internal or kindless: _dd.base_service alone, the agent's one
		// peer tag of a span whose service was overridden.
		sp.PeerTags = p.peerTags(&v, b[:0], true)
	}

	parent := s.Parent()
	sp.TraceRoot = !parent.SpanID().IsValid()
	if p.topLevelByKind {
		sp.TopLevel = sp.TraceRoot || kind == trace.SpanKindServer || kind == trace.SpanKindConsumer
	} else {
		// ComputeTopLevel, as the agent runs it on the OTLP spans it
		// receives: a root, a parent elsewhere (remote, or of another
		// TracerProvider: OnStart marked it), or a parent under another
		// service. A local parent of the same provider is under its own
		// service.name (OnStart marked it), else the resource's; so is the
		// span, unless its own service.name overrides.
		id := s.SpanContext().SpanID()
		if p.spanServices.Load() {
			p.owners.end(id)
		}
		sp.TopLevel = sp.TraceRoot || parent.IsRemote() || p.crossed.take(id)
		if !sp.TopLevel {
			if svc, ok := p.parents.take(id); ok {
				sp.TopLevel = sp.Service != svc
			} else {
				sp.TopLevel = p.overridesService(&v, sp.Service)
			}
		}
	}
	if m, ok := v.int(aDDMeasured); ok && m == 1 {
		sp.Measured = true
	} else if p.topLevelByKind && (kind == trace.SpanKindClient || kind == trace.SpanKindProducer) {
		sp.Measured = true
	}
	sp.Error = s.Status().Code == codes.Error
	start, end := s.StartTime().UnixNano(), s.EndTime().UnixNano()
	sp.Start, sp.Duration = start, max(end-start, 0)
}

// service follows GetOTelService (normalized).
func (p *Processor) service(v *view) string {
	svc := v.str(aServiceName)
	if svc == "" {
		svc = defaultService
	}
	return p.normalizeService(svc)
}

// normalizeService is normalize.NormalizeService(s, ""), remembered.
func (p *Processor) normalizeService(s string) string {
	return p.services.strS(s, func(s string) string {
		n, _ := normalize.NormalizeService(s, "")
		if len(n) < len(s) {
			// A cut of s would keep all of s alive in the service marks
			// and the aggregator's groups.
			n = strings.Clone(n)
		}
		return n
	})
}

// overridesService reports whether the span's own service.name makes its
// service (svc) another than the resource's (normalized, else the default).
func (p *Processor) overridesService(v *view, svc string) bool {
	if x, ok := v.spanValue(aServiceName); !ok || x.Type() != attribute.STRING || x.AsString() == "" {
		return false
	}
	res := defaultService
	if x := v.res.vals[aServiceName]; x.Type() == attribute.STRING && x.AsString() != "" {
		res = x.AsString()
	}
	return svc != p.normalizeService(res)
}

// tagValue is the agent's lookupString with normalization.
func (p *Processor) tagValue(v *view, a attr) string { return p.normalizeTag(v.str(a)) }

// normalizeTag is normalize.NormalizeTagValue(s), remembered: a value not
// already in lower case would otherwise cost an allocation per span.
func (p *Processor) normalizeTag(s string) string {
	if s == "" {
		return ""
	}
	return p.tags.strS(s, normalize.NormalizeTagValue)
}

// dbSystem is the concept db.system: db.system.name, then db.system.
func dbSystem(v *view) string { return firstStr(v, aDBSystemName, aDBSystem) }

// httpMethod is the concept http.method: http.request.method, then
// http.method.
func httpMethod(v *view) string { return firstStr(v, aHTTPRequestMethod, aHTTPMethod) }

func firstStr(v *view, as ...attr) string {
	for _, a := range as {
		if s := v.str(a); s != "" {
			return s
		}
	}
	return ""
}

// operationName follows GetOTelOperationNameV2, then NormalizeName as the
// conversion does.
func (p *Processor) operationName(v *view, kind trace.SpanKind, b []byte) string {
	b = p.appendOperationName(b, v, kind)
	return p.names.str(b, func(s string) string {
		n, _ := normalize.NormalizeName(s)
		return n
	})
}

func (p *Processor) appendOperationName(b []byte, v *view, kind trace.SpanKind) []byte {
	if n := p.tagValue(v, aOperationName); n != "" {
		return append(b, n...)
	}
	isClient, isServer := kind == trace.SpanKindClient, kind == trace.SpanKindServer
	if httpMethod(v) != "" {
		if isServer {
			return append(b, "http.server.request"...)
		}
		if isClient {
			return append(b, "http.client.request"...)
		}
	}
	if db := p.normalizeTag(dbSystem(v)); db != "" && isClient { // normalized, then tested
		return append(append(b, db...), ".query"...)
	}
	if sys, op := p.tagValue(v, aMessagingSystem), p.tagValue(v, aMessagingOperation); sys != "" && op != "" {
		switch kind {
		case trace.SpanKindClient, trace.SpanKindServer, trace.SpanKindConsumer, trace.SpanKindProducer:
			return append(append(append(b, sys...), '.'), op...)
		}
	}
	rpc := p.tagValue(v, aRPCSystem)
	if rpc == "aws-api" && isClient {
		if svc := p.tagValue(v, aRPCService); svc != "" {
			return append(append(append(b, "aws."...), svc...), ".request"...)
		}
		return append(b, "aws.client.request"...)
	}
	if rpc != "" && isClient {
		return append(append(b, rpc...), ".client.request"...)
	}
	if rpc != "" && isServer {
		return append(append(b, rpc...), ".server.request"...)
	}
	if prov, name := p.tagValue(v, aFaaSInvokedProvider), p.tagValue(v, aFaaSInvokedName); prov != "" && name != "" && isClient {
		return append(append(append(append(b, prov...), '.'), name...), ".invoke"...)
	}
	if trig := p.tagValue(v, aFaaSTrigger); trig != "" && isServer {
		return append(append(b, trig...), ".invoke"...)
	}
	if p.tagValue(v, aGraphQLOperationType) != "" {
		return append(b, "graphql.server.request"...)
	}
	proto := p.tagValue(v, aNetworkProtocolName)
	switch {
	case isServer && proto != "":
		return append(append(b, proto...), ".server.request"...)
	case isServer:
		return append(b, "server.request"...)
	case isClient && proto != "":
		return append(append(b, proto...), ".client.request"...)
	case isClient:
		return append(b, "client.request"...)
	}
	return append(b, pdataKindName(kind)...)
}

// pdataKindName is ptrace.SpanKind.String for kinds other than client and
// server, unspecified as internal.
func pdataKindName(k trace.SpanKind) string {
	switch k {
	case trace.SpanKindProducer:
		return "Producer"
	case trace.SpanKindConsumer:
		return "Consumer"
	case trace.SpanKindServer:
		return "Server"
	case trace.SpanKindClient:
		return "Client"
	}
	return "Internal"
}

// kindName is OTelSpanKindName: the span.kind the agent keys stats by.
func kindName(k trace.SpanKind) string {
	switch k {
	case trace.SpanKindInternal:
		return "internal"
	case trace.SpanKindServer:
		return "server"
	case trace.SpanKindClient:
		return "client"
	case trace.SpanKindProducer:
		return "producer"
	case trace.SpanKindConsumer:
		return "consumer"
	}
	return "unspecified"
}

// spanType follows GetOTelSpanType.
func (p *Processor) spanType(v *view, kind trace.SpanKind) string {
	if t := v.str(aSpanType); t != "" {
		return t
	}
	switch kind {
	case trace.SpanKindServer:
		return "web"
	case trace.SpanKindClient:
		db := p.normalizeTag(dbSystem(v)) // normalized, then tested
		if db == "" {
			return "http"
		}
		if t, ok := dbTypes[db]; ok {
			return t
		}
		return "db"
	}
	return "custom"
}

// resourceKeyLen is the longest resource memo key: the class byte and the
// resource, cut as GetOTelResourceV2 cuts it.
const resourceKeyLen = 1 + normalize.MaxResourceLen

// Obfuscation classes, the first byte of a resource memo key.
const (
	obfNone  = 'n'
	obfSQL   = 's'
	obfRedis = 'r'
)

// resource follows GetOTelResourceV2, then the obfuscation the agent
// applies to a span's resource by its type before it computes stats
// (SQL for sql and cassandra, quantization for redis and valkey).
// The memo key is built cut, never longer than resourceKeyLen, in b or,
// for a resource longer than b holds, in a pooled buffer: a repeated long
// statement or route costs no allocation (TestLongResourceNoAlloc).
func (p *Processor) resource(v *view, kind trace.SpanKind, typ, spanName string, b []byte) string {
	class := byte(obfNone)
	switch typ {
	case "sql", "cassandra":
		class = obfSQL
	case "redis", "valkey":
		class = obfRedis
	}
	head, word := resourceParts(v, kind, spanName)
	n := 1 + len(head)
	if word != "" {
		n += 1 + len(word)
	}
	var long *[resourceKeyLen]byte
	if min(n, resourceKeyLen) > cap(b) {
		long = keyBufs.Get().(*[resourceKeyLen]byte)
		b = long[:0]
	}
	b = append(b, class)
	b = appendCut(b, head)
	if word != "" {
		b = appendCut(appendCut(b, " "), word)
	}
	r := p.resources.str(b, p.obfuscate)
	if long != nil {
		keyBufs.Put(long)
	}
	return r
}

// keyBufs holds the buffers of resource memo keys too long for the scratch.
var keyBufs = sync.Pool{New: func() any { return new([resourceKeyLen]byte) }}

// appendCut appends as much of s as keeps b within resourceKeyLen, as
// GetOTelResourceV2 cuts the resource at normalize.MaxResourceLen bytes.
func appendCut(b []byte, s string) []byte {
	return append(b, s[:min(len(s), max(resourceKeyLen-len(b), 0))]...)
}

// obfuscate computes a resource from its memo key: what the agent's OTLP
// path makes of it, or, where the agent's second pass on receipt would
// change that, a raw resource the second pass turns into it.
func (p *Processor) obfuscate(key string) string {
	res := key[1:]
	if key[0] == obfNone || res == "" {
		return res
	}
	// The agent's OTLP path cuts the output to MaxResourceLen, and so does
	// Publish before the agent's pass on receipt reads it. Obfuscation
	// lengthens "a,b" to "a, b", so a raw resource within the cut can give
	// an output past it.
	out := p.obfuscateAs(key[0], res)
	if len(out) > normalize.MaxResourceLen {
		out = strings.Clone(normalize.TruncateUTF8(out, normalize.MaxResourceLen))
	}
	// The agent obfuscates the resources of these types again when it
	// receives stats (no Datadog-Obfuscation-Version header is sent, nor can
	// one travel through the relay), and that pass is not idempotent for
	// every output: it re-quantizes a pipeline's "GET SET" to "GET", makes
	// "Non - parsable SQL query" of its own error text, and drops the space
	// a cut output ends in. Such an output is sent as the first raw
	// resource seen to give it, so every span of the group still shares
	// one string and the agent keys what its OTLP path would
	// (TestOTelGroupsMatchAgent in bench/peer).
	if p.obfuscateAs(key[0], out) == out {
		return out
	}
	return p.firstRaw.strS(string(key[0])+out, func(string) string { return res })
}

// obfuscateAs obfuscates res as the agent does a span's resource of the
// class's types.
func (p *Processor) obfuscateAs(class byte, res string) string {
	if class == obfRedis {
		return p.obf.QuantizeRedisString(res)
	}
	oq, err := p.obf.ObfuscateSQLStringForDBMS(res, "")
	if err != nil {
		return textNonParsable
	}
	return oq.Query
}

// resourceParts is GetOTelResourceV2's resource before it is cut: head,
// then " "+word when word is not empty.
func resourceParts(v *view, kind trace.SpanKind, spanName string) (head, word string) {
	if r := v.str(aResourceName); r != "" {
		return r, ""
	}
	if m := httpMethod(v); m != "" {
		if m == "_OTHER" {
			m = "HTTP"
		}
		switch kind {
		case trace.SpanKindClient:
			return m, v.str(aURLTemplate)
		case trace.SpanKindServer:
			return m, v.str(aHTTPRoute)
		}
		return m, ""
	}
	if op := v.str(aMessagingOperation); op != "" {
		return op, firstStr(v, aMessagingDestination, aMessagingDestinationName)
	}
	if m := v.str(aRPCMethod); m != "" {
		return m, v.str(aRPCService)
	}
	if t := v.str(aGraphQLOperationType); t != "" {
		return t, v.str(aGraphQLOperationName)
	}
	if dbSystem(v) != "" {
		if st := firstStr(v, aDBStatement, aDBQueryText); st != "" {
			return st, ""
		}
	}
	return spanName, ""
}

// httpStatusCode is the concept http.status_code read as an integer
// (http.status_code, then http.response.status_code; integers, then
// strings that parse), 0 when absent or out of uint32's range.
func httpStatusCode(v *view) uint32 {
	for _, a := range [...]attr{aHTTPStatusCode, aHTTPResponseStatusCode} {
		if n, ok := v.int(a); ok {
			return toStatus(n)
		}
		if n, ok := parseInt(v.str(a)); ok {
			return toStatus(n)
		}
	}
	return 0
}

func toStatus(n int64) uint32 {
	if n < 0 || n > 1<<32-1 {
		return 0
	}
	return uint32(n)
}

// parseInt parses s as the registry's LookupInt64 does: an integer, or a
// float with an integral value.
func parseInt(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && float64(int64(f)) == f {
		return int64(f), true
	}
	return 0, false
}

// grpcStatusCode is the concept rpc.grpc.status_code as the conversion
// reads it, then parsed to the numeric code as the concentrator does ("" if
// unknown).
func grpcStatusCode(v *view) string {
	for _, a := range [...]attr{aRPCGRPCStatusCode, aGRPCCode, aRPCGRPCStatusCodeDot, aGRPCStatusCode} {
		if s := v.str(a); s != "" {
			return parseGRPC(s)
		}
		if n, ok := v.int(a); ok {
			return parseGRPC(smallInt(n))
		}
	}
	// rpc.response.status_code counts for gRPC only: rpc.system.name is
	// grpc, or (without rpc.system.name) rpc.system is.
	if sysName := v.str(aRPCSystemName); sysName == "grpc" || sysName == "" && v.str(aRPCSystem) == "grpc" {
		if s := v.str(aRPCResponseStatusCode); s != "" {
			return parseGRPC(s)
		}
		if n, ok := v.int(aRPCResponseStatusCode); ok {
			return parseGRPC(smallInt(n))
		}
	}
	return ""
}

// smallInt is n in decimal, without allocating for the gRPC codes 0..16.
func smallInt(n int64) string {
	if n >= 0 && n <= 16 {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}

var smallInts = func() (c [17]string) {
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

// parseGRPC follows the concentrator's parseGRPCStatusString, as Publish
// does (stats.CanonicalGRPCCode); a small code costs no allocation.
func parseGRPC(s string) string { return stats.CanonicalGRPCCode(s) }

// peerHeader is what precedes each value in peerTags' memo key.
const peerHeader = 6

// baseIndex stands for _dd.base_service in the memo key of an internal
// span's peer tags: no index of the configured keys.
const (
	baseIndex      = 0xffff
	baseServiceKey = "_dd.base_service"
)

var baseIDs = [1]attr{aDDBaseService}

// peerTags follows the conversion's peer-tag lookup (span, then resource,
// any type as a string; peer.service and _dd.base_service normalized) and
// the concentrator's (IP addresses quantized). With baseOnly, the one
// key is _dd.base_service, as the agent's for an internal span, and as
// its, none when no peer tag is aggregated. The result is shared and must
// not be modified.
func (p *Processor) peerTags(v *view, b []byte, baseOnly bool) []string {
	// The memo key: per tag found, the key's index (2 bytes; baseIndex for
	// baseOnly's), the value's length (4 bytes) and the value.
	// Length-prefixed, not delimited: a value may hold any byte.
	found := false
	ids := p.keys.peerIDs
	if baseOnly {
		if len(ids) == 0 || !v.has(aDDBaseService) {
			return nil
		}
		ids = baseIDs[:]
	}
	for i, id := range ids {
		if !v.has(id) {
			continue
		}
		if baseOnly {
			i = baseIndex
		}
		mark := len(b)
		b = append(b, byte(i), byte(i>>8), 0, 0, 0, 0)
		var ok bool
		if b, ok = v.any(id, b); ok {
			binary.LittleEndian.PutUint32(b[mark+2:], uint32(len(b)-mark-peerHeader))
			found = true
		} else {
			b = b[:mark]
		}
	}
	if !found {
		return nil
	}
	if e := p.peers.get(b); e != nil {
		return e.tags
	}
	key := string(b)
	var tags []string
	for rest := key; rest != ""; {
		i := int(rest[0]) | int(rest[1])<<8
		n := int(rest[2]) | int(rest[3])<<8 | int(rest[4])<<16 | int(rest[5])<<24
		val := rest[peerHeader : peerHeader+n]
		rest = rest[peerHeader+n:]
		k := baseServiceKey
		if i != baseIndex {
			k = p.keys.peerKeys[i]
		}
		if k == "peer.service" || k == "_dd.base_service" {
			if val, _ = normalize.NormalizePeerService(val); val == "" {
				continue
			}
		}
		tags = append(tags, k+":"+obfuscate.QuantizePeerIPAddresses(val))
	}
	return p.peers.put(&memoEntry{key: key, tags: tags}).tags
}
