// This file holds the payload encoder: Header, Bucket and the msgpack
// ClientStatsPayload written from them (AppendPayload), with the sizes it
// plans by (HeaderSize, a bound; GroupSize, exact).

package writer

import (
	"math"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// Header holds the payload-level fields of a ClientStatsPayload.
type Header struct {
	Hostname, Env, Version, Lang, TracerVersion, RuntimeID, Service, ContainerID string
	Tags                                                                         []string
	GitCommitSha, ImageTag, ProcessTags, AgentAggregation                        string
	ProcessTagsHash, Sequence                                                    uint64
}

// Bucket is one time bucket of a payload: the interval [Start, Start+Duration)
// in unix nanoseconds and the groups aggregated in it. Nil groups are skipped.
type Bucket struct {
	Start, Duration uint64
	AgentTimeShift  int64
	Groups          []*aggregate.Entry
}

// AlignStart returns the start of the interval of length d that holds t,
// aligned on the Unix epoch as the agent aligns its buckets (start - start %
// size). time.Time.Truncate aligns on Go's zero time instead, which agrees
// with the epoch only for lengths that divide a day: the SDK's buckets, the
// relay's windows and its forwarding boundaries all use this one.
//
// It shifts Truncate by the epoch's offset rather than taking t.UnixNano()
// modulo d: UnixNano is undefined past 2262, and a clock that far off
// (a bad RTC) must still get a start at or before t, or a consumer waiting
// for the next boundary would wait forever.
func AlignStart(t time.Time, d time.Duration) time.Time {
	epoch := time.Unix(0, 0)
	off := epoch.Sub(epoch.Truncate(d)) // the epoch's offset on Truncate's grid, in [0, d)
	return t.Add(-off).Truncate(d).Add(off)
}

// Map keys: msgpack fixstr prefix (0xa0 | length) followed by the agent's key,
// exactly as the agent's msgp code writes and matches them.
const (
	// ClientStatsPayload
	kHostname         = "\xa8Hostname"
	kEnv              = "\xa3Env"
	kVersion          = "\xa7Version"
	kStats            = "\xa5Stats"
	kLang             = "\xa4Lang"
	kTracerVersion    = "\xadTracerVersion"
	kRuntimeID        = "\xa9RuntimeID"
	kSequence         = "\xa8Sequence"
	kAgentAggregation = "\xb0AgentAggregation"
	kService          = "\xa7Service"
	kContainerID      = "\xabContainerID"
	kTags             = "\xa4Tags"
	kGitCommitSha     = "\xacGitCommitSha"
	kImageTag         = "\xa8ImageTag"
	kProcessTagsHash  = "\xafProcessTagsHash"
	kProcessTags      = "\xabProcessTags"

	// ClientStatsBucket (and kStats)
	kStart          = "\xa5Start"
	kDuration       = "\xa8Duration"
	kAgentTimeShift = "\xaeAgentTimeShift"

	// ClientGroupedStats (and kService, kDuration)
	kName                   = "\xa4Name"
	kResource               = "\xa8Resource"
	kHTTPStatusCode         = "\xaeHTTPStatusCode"
	kType                   = "\xa4Type"
	kDBType                 = "\xa6DBType"
	kHits                   = "\xa4Hits"
	kErrors                 = "\xa6Errors"
	kOkSummary              = "\xa9OkSummary"
	kErrorSummary           = "\xacErrorSummary"
	kSynthetics             = "\xaaSynthetics"
	kTopLevelHits           = "\xacTopLevelHits"
	kSpanKind               = "\xa8SpanKind"
	kPeerTags               = "\xa8PeerTags"
	kIsTraceRoot            = "\xabIsTraceRoot"
	kGRPCStatusCode         = "\xaeGRPCStatusCode"
	kHTTPMethod             = "\xaaHTTPMethod"
	kHTTPEndpoint           = "\xacHTTPEndpoint"
	kServiceSource          = "\xa7srv_src"
	kSpanDerivedPrimaryTags = "\xb6SpanDerivedPrimaryTags"
	kAdditionalMetricTags   = "\xb4AdditionalMetricTags"
)

// Number of keys of each map; every key is always written (the agent's own
// MarshalMsg leaves out a nil Stats array), so the maps have a fixed size.
const (
	payloadFields = 16
	bucketFields  = 4
	groupFields   = 22
)

// Fixed parts of the sizes: map header and keys; for the header and bucket
// bounds the largest encoding of every value and of every string or array
// header, for groups the encodings that never vary (GroupSize counts the rest).
const (
	map16Size = 3 // 0xde + uint16: 16 and 22 keys do not fit a fixmap

	payloadFixedSize = map16Size +
		len(kHostname) + len(kEnv) + len(kVersion) + len(kStats) + len(kLang) +
		len(kTracerVersion) + len(kRuntimeID) + len(kSequence) + len(kAgentAggregation) +
		len(kService) + len(kContainerID) + len(kTags) + len(kGitCommitSha) +
		len(kImageTag) + len(kProcessTagsHash) + len(kProcessTags) +
		12*msgp.StringPrefixSize + 2*msgp.Uint64Size + 2*msgp.ArrayHeaderSize

	bucketHeaderSize = 1 + len(kStart) + len(kDuration) + len(kStats) + len(kAgentTimeShift) +
		2*msgp.Uint64Size + msgp.ArrayHeaderSize + msgp.Int64Size

	groupFixedSize = map16Size +
		len(kService) + len(kName) + len(kResource) + len(kHTTPStatusCode) + len(kType) +
		len(kDBType) + len(kHits) + len(kErrors) + len(kDuration) + len(kOkSummary) +
		len(kErrorSummary) + len(kSynthetics) + len(kTopLevelHits) + len(kSpanKind) +
		len(kPeerTags) + len(kIsTraceRoot) + len(kGRPCStatusCode) + len(kHTTPMethod) +
		len(kHTTPEndpoint) + len(kServiceSource) + len(kSpanDerivedPrimaryTags) +
		len(kAdditionalMetricTags) +
		1 + msgp.BoolSize + // DBType's empty fixstr, Synthetics
		2 // SpanDerivedPrimaryTags and AdditionalMetricTags: empty fixarrays
)

var emptyHeader Header

// HeaderSize is an upper bound of the bytes AppendPayload writes for h plus
// one bucket's own fields: a payload of one bucket whose groups have sizes
// g1…gn is at most HeaderSize(h) + g1 + … + gn bytes. A nil h is an empty
// header.
func HeaderSize(h *Header) int {
	if h == nil {
		h = &emptyHeader
	}
	n := payloadFixedSize + bucketHeaderSize +
		len(h.Hostname) + len(h.Env) + len(h.Version) + len(h.Lang) +
		len(h.TracerVersion) + len(h.RuntimeID) + len(h.AgentAggregation) +
		len(h.Service) + len(h.ContainerID) + len(h.GitCommitSha) + len(h.ImageTag) +
		len(h.ProcessTags)
	for _, t := range h.Tags {
		n += msgp.StringPrefixSize + len(t)
	}
	return n
}

// GroupSize is the exact number of bytes AppendGroup writes for e, cheap
// enough to call per entry when splitting payloads at a size limit: the
// strings' lengths and msgpack headers, the integers' encodings and the
// exact sketch sizes; nothing is encoded. Exact, not a bound, so that
// datagrams toward a relay fill their limit. A nil e is 0.
func GroupSize(e *aggregate.Entry) int {
	if e == nil {
		return 0
	}
	k := &e.Key
	return groupFixedSize +
		strSize(k.Service) + strSize(k.Name) + strSize(k.Resource) + strSize(k.Type) +
		strSize(k.SpanKind) + strSize(k.GRPCStatusCode) + strSize(k.HTTPMethod) +
		strSize(k.HTTPEndpoint) + strSize(k.ServiceSource) +
		uintSize(uint64(k.HTTPStatusCode)) + uintSize(e.Hits) + uintSize(e.Errors) +
		uintSize(e.Duration) + uintSize(e.TopLevelHits) +
		binSize(SketchSize(e.Ok)) + binSize(SketchSize(e.Err)) + arraySize(k.PeerTags) +
		trileanSize(k.IsTraceRoot)
}

// strSize is the size of s as a msgpack string: a fixstr below 32 bytes,
// else a str8/16/32, whose headers are as long as a bin's.
func strSize(s string) int {
	if len(s) < 32 {
		return 1 + len(s)
	}
	return binSize(len(s))
}

// binSize is the size of a msgpack bin (or str8/16/32) of n bytes.
func binSize(n int) int {
	switch {
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

// arraySize is the size of ss as a msgpack array of strings.
func arraySize(ss []string) int {
	n := 5 // array32
	switch {
	case len(ss) < 16:
		n = 1 // fixarray
	case len(ss) <= math.MaxUint16:
		n = 3
	}
	for _, s := range ss {
		n += strSize(s)
	}
	return n
}

// trileanSize is the size of msgp.AppendInt32's encoding of t (0–2 from
// the SDK; a decoded group's may be any int32).
func trileanSize(t aggregate.Trilean) int {
	switch {
	case t >= -32 && t <= math.MaxInt8:
		return 1 // fixint
	case t >= math.MinInt8 && t < 0:
		return 2
	case t >= math.MinInt16 && t <= math.MaxInt16:
		return 3
	default:
		return 5
	}
}

// uintSize is the size of msgp.AppendUint64's encoding of u (the smallest).
func uintSize(u uint64) int {
	switch {
	case u < 1<<7:
		return 1 // positive fixint
	case u <= math.MaxUint8:
		return 2
	case u <= math.MaxUint16:
		return 3
	case u <= math.MaxUint32:
		return 5
	default:
		return 9
	}
}

// payloadSize is an upper bound of AppendPayload's output.
func payloadSize(h *Header, buckets []Bucket) int {
	n := HeaderSize(h) - bucketHeaderSize
	for i := range buckets {
		n += bucketHeaderSize
		for _, e := range buckets[i].Groups {
			n += GroupSize(e)
		}
	}
	return n
}

// AppendPayload appends one complete msgpack ClientStatsPayload with the
// header h (nil: empty) and the buckets, every key of every map written in
// the agent's order. It grows b at most once, to the bound of HeaderSize and
// GroupSize, so into a buffer with that much spare capacity it does not
// allocate.
func AppendPayload(b []byte, h *Header, buckets []Bucket) []byte {
	if h == nil {
		h = &emptyHeader
	}
	b = grow(b, payloadSize(h, buckets))
	src := entryBuckets(buckets)
	return appendPayload(b, h, src, cut{}, cut{len(buckets), 0}, true)
}

// cut is a position in the groups of a payload: group j of bucket i.
type cut struct{ i, j int }

// appendPayload appends a payload of the header h and the groups of src
// from cut from up to (not including) cut to. With empty set it writes
// every bucket of the range, also those without groups; without, only
// those with groups in it.
func appendPayload[S groupSource](b []byte, h *Header, src S, from, to cut, empty bool) []byte {
	buckets := 0
	for i := from.i; i <= min(to.i, src.buckets()-1); i++ {
		if empty || present(src, i, from, to) > 0 {
			buckets++
		}
	}
	b = msgp.AppendMapHeader(b, payloadFields)
	b = appendStr(b, kHostname, h.Hostname)
	b = appendStr(b, kEnv, h.Env)
	b = appendStr(b, kVersion, h.Version)
	b = append(b, kStats...)
	b = msgp.AppendArrayHeader(b, uint32(buckets))
	for i := from.i; i <= min(to.i, src.buckets()-1); i++ {
		n := present(src, i, from, to)
		if n == 0 && !empty {
			continue
		}
		start, duration, shift := src.head(i)
		b = msgp.AppendMapHeader(b, bucketFields)
		b = append(b, kStart...)
		b = msgp.AppendUint64(b, start)
		b = append(b, kDuration...)
		b = msgp.AppendUint64(b, duration)
		b = append(b, kStats...)
		b = msgp.AppendArrayHeader(b, uint32(n))
		j0, j1 := groupRange(src, i, from, to)
		for j := j0; j < j1; j++ {
			if e, g := src.group(i, j); e != nil {
				b = appendGroup(b, e, g)
			}
		}
		b = append(b, kAgentTimeShift...)
		b = msgp.AppendInt64(b, shift)
	}
	b = appendStr(b, kLang, h.Lang)
	b = appendStr(b, kTracerVersion, h.TracerVersion)
	b = appendStr(b, kRuntimeID, h.RuntimeID)
	b = append(b, kSequence...)
	b = msgp.AppendUint64(b, h.Sequence)
	b = appendStr(b, kAgentAggregation, h.AgentAggregation)
	b = appendStr(b, kService, h.Service)
	b = appendStr(b, kContainerID, h.ContainerID)
	b = appendStrs(b, kTags, h.Tags)
	b = appendStr(b, kGitCommitSha, h.GitCommitSha)
	b = appendStr(b, kImageTag, h.ImageTag)
	b = append(b, kProcessTagsHash...)
	b = msgp.AppendUint64(b, h.ProcessTagsHash)
	b = appendStr(b, kProcessTags, h.ProcessTags)
	return b
}

// AppendGroup appends e as one msgpack ClientGroupedStats map with all 22
// keys: DBType is empty, SpanDerivedPrimaryTags and AdditionalMetricTags are
// empty arrays (the SDK never sets them), a nil PeerTags is an empty array,
// and the summaries are bin fields holding AppendSketch's bytes (an empty
// DDSketch for a nil sketch).
func AppendGroup(b []byte, e *aggregate.Entry) []byte { return appendGroup(b, e, nil) }

// appendGroup appends e, with the fields the SDK never sets from g if not
// nil.
func appendGroup(b []byte, e *aggregate.Entry, g *Group) []byte {
	var dbType string
	var derived, additional []string
	if g != nil {
		dbType, derived, additional = g.DBType, g.SpanDerivedPrimaryTags, g.AdditionalMetricTags
	}
	k := &e.Key
	b = msgp.AppendMapHeader(b, groupFields)
	b = appendStr(b, kService, k.Service)
	b = appendStr(b, kName, k.Name)
	b = appendStr(b, kResource, k.Resource)
	b = append(b, kHTTPStatusCode...)
	b = msgp.AppendUint32(b, k.HTTPStatusCode)
	b = appendStr(b, kType, k.Type)
	b = appendStr(b, kDBType, dbType)
	b = append(b, kHits...)
	b = msgp.AppendUint64(b, e.Hits)
	b = append(b, kErrors...)
	b = msgp.AppendUint64(b, e.Errors)
	b = append(b, kDuration...)
	b = msgp.AppendUint64(b, e.Duration)
	b = append(b, kOkSummary...)
	if g != nil && g.Wire != nil { // decoded with WireSketches: e's are nil
		b = appendWire(b, &g.Wire.Ok)
		b = append(b, kErrorSummary...)
		b = appendWire(b, &g.Wire.Err)
	} else {
		b = appendSummary(b, e.Ok)
		b = append(b, kErrorSummary...)
		b = appendSummary(b, e.Err)
	}
	b = append(b, kSynthetics...)
	b = msgp.AppendBool(b, k.Synthetics)
	b = append(b, kTopLevelHits...)
	b = msgp.AppendUint64(b, e.TopLevelHits)
	b = appendStr(b, kSpanKind, k.SpanKind)
	b = appendStrs(b, kPeerTags, k.PeerTags)
	b = append(b, kIsTraceRoot...)
	b = msgp.AppendInt32(b, int32(k.IsTraceRoot))
	b = appendStr(b, kGRPCStatusCode, k.GRPCStatusCode)
	b = appendStr(b, kHTTPMethod, k.HTTPMethod)
	b = appendStr(b, kHTTPEndpoint, k.HTTPEndpoint)
	b = appendStr(b, kServiceSource, k.ServiceSource)
	b = appendStrs(b, kSpanDerivedPrimaryTags, derived)
	b = appendStrs(b, kAdditionalMetricTags, additional)
	return b
}

// appendSummary appends s as a msgpack bin holding its DDSketch bytes, written
// in place after the bin header.
func appendSummary(b []byte, s *aggregate.Sketch) []byte {
	var l sketchLayout
	l.plan(s)
	b = msgp.AppendBytesHeader(b, uint32(l.size()))
	return l.append(b)
}

// appendWire appends w as a msgpack bin holding its validated DDSketch
// bytes as they came, or an empty DDSketch for an empty summary.
func appendWire(b []byte, w *WireSketch) []byte {
	if w.count == 0 {
		return appendSummary(b, nil)
	}
	return msgp.AppendBytes(b, w.b)
}

// grow returns b with room for n more bytes, in one allocation when it has
// to grow (slices.Grow takes two under the race detector), at least
// doubling the capacity so that repeated appends stay amortised.
func grow(b []byte, n int) []byte {
	if n <= cap(b)-len(b) {
		return b
	}
	nb := make([]byte, len(b), max(len(b)+n, 2*cap(b)))
	copy(nb, b)
	return nb
}

func appendStr(b []byte, key, v string) []byte {
	b = append(b, key...)
	return msgp.AppendString(b, v)
}

func appendStrs(b []byte, key string, vs []string) []byte {
	b = append(b, key...)
	b = msgp.AppendArrayHeader(b, uint32(len(vs)))
	for _, v := range vs {
		b = msgp.AppendString(b, v)
	}
	return b
}
