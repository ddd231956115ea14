// This file holds Span, what a tracer publishes, and its snapshot into an
// inbox record: eligibility, peer tags kept by kind, labels cut at the
// agent's limits.

package stats

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/casefold"
)

// Span carries the raw fields of one finished span. Strings are used as
// given; Publish copies what it needs and does not retain the Span or its
// PeerTags slice. The strings themselves are read later by the consumer
// goroutine, so they must be ordinary immutable Go strings — not unsafe
// views of a buffer the tracer reuses. Passing the same string values span
// after span (constants, interned route templates) is the fast path: the
// aggregator recognises them by address without reading their bytes.
type Span struct {
	// Service, Name (the operation, e.g. "http.request"), Resource (e.g.
	// "GET /users/{id}") and Type (e.g. "web", "db") are grouped by as the
	// tracer set them, cut to MaxServiceLen, MaxNameLen, MaxResourceLen and
	// MaxTypeLen. The agent obfuscates the resource of a "sql", "cassandra",
	// "redis" or "valkey" span on receipt, after this cut; from a trace it
	// obfuscates first, so such a resource over MaxResourceLen (a long IN
	// list) may group otherwise there.
	Service, Name, Resource, Type string
	// SpanKind is "server", "client", "producer", "consumer", "internal" or
	// empty; compared case-insensitively.
	SpanKind string
	// HTTPStatusCode is the response's status code, 0 for a span that is
	// not an HTTP request. Grouped by as given, as dd-trace-go's
	// concentrator does; the agent's normalizer drops a http.status_code
	// tag outside 100–599 before it counts a trace, so pass 0 for those to
	// get its group.
	HTTPStatusCode uint32
	// HTTPMethod and HTTPEndpoint (the route template, e.g. "/users/{id}",
	// from http.route or http.endpoint) are grouped by as the agent groups
	// them; empty where the span has none.
	HTTPMethod   string
	HTTPEndpoint string
	// GRPCStatusCode is grouped by as the agent groups it: its number
	// (CanonicalGRPCCode: "NOT_FOUND" is "5"; an unknown value is "").
	GRPCStatusCode string
	// ServiceSource says where the service name came from (wire key srv_src).
	ServiceSource string
	// PeerTags are "key:value" pairs; kept only for client, producer and
	// consumer spans, as a set (order does not matter). Of an internal span
	// or one without kind, only "_dd.base_service:<service>" is kept (with
	// a value): the agent's one peer tag for a span whose service was
	// overridden, naming the service it would otherwise have had. Values
	// are grouped by as given, IP addresses quantized; the agent's
	// normalizer also normalizes peer.service and _dd.base_service values
	// (normalize.NormalizePeerService: lower case, "_" for other
	// characters, 100 bytes) before it counts a trace, so pass them
	// normalized to get its groups. A PeerTagJoiner builds them from key
	// and value without an allocation per span; the slice is not retained,
	// so a buffer the caller reuses will do.
	PeerTags []string
	// Start is the span's start (unix ns); Duration its length (ns). Spans
	// with Duration <= 0 are not counted (the agent counts them as 0 long:
	// see Eligible). A span is counted in the bucket
	// of its end, Start+Duration, as the agent does; Start 0 means it ended
	// when the aggregator reads it. The previous bucket stays open for a
	// tenth of the interval (at most 1 s) after its end, so a span published just after
	// a boundary still lands in it; a span that ended in no open bucket
	// before the current one (earlier than all of them, or in the gap a
	// paused process leaves between the previous bucket and the current
	// one, realigned on the clock) is counted in the oldest one
	// (Health.LateSpans), one that ends after the current bucket in the
	// current one.
	Start, Duration int64
	// Error marks an error span; TopLevel a service entry span; Measured a
	// span the tracer asked to measure; TraceRoot a span without a parent;
	// Synthetics a span from Datadog Synthetics.
	Error, TopLevel, Measured, TraceRoot, Synthetics bool
}

// The kinds a span is counted for, each as its bytes in one little-endian
// word (see kindWord).
var (
	kindServer   = kindWord("server")
	kindClient   = kindWord("client")
	kindProducer = kindWord("producer")
	kindConsumer = kindWord("consumer")
	kindInternal = kindWord("internal")
)

// kindWord returns a kind of 6 or 8 bytes as one little-endian word with
// 0x20 set in every byte (0 for any other length). For a lower-case ASCII
// letter w, c|0x20 == w holds only for c == w and its upper case, so two
// words are equal exactly when the kinds are equal ignoring ASCII case, as
// the agent's strings.ToLower comparison finds for these names: one
// comparison per kind instead of a loop over its bytes (BenchmarkEligible).
// Other lengths go to lowerKindWord.
func kindWord(k string) uint64 {
	switch len(k) {
	case 6:
		return (uint64(k[0]) | uint64(k[1])<<8 | uint64(k[2])<<16 | uint64(k[3])<<24 |
			uint64(k[4])<<32 | uint64(k[5])<<40) | 0x202020202020
	case 8:
		return (uint64(k[0]) | uint64(k[1])<<8 | uint64(k[2])<<16 | uint64(k[3])<<24 |
			uint64(k[4])<<32 | uint64(k[5])<<40 | uint64(k[6])<<48 | uint64(k[7])<<56) | 0x2020202020202020
	}
	if len(k) > 6 && len(k) <= 4*8 {
		return lowerKindWord(k)
	}
	return 0
}

// lowerKindWord is kindWord of strings.ToLower(k), the kind the agent
// compares, for a k of another length than 6 or 8: ToLower makes "i" of
// U+0130 (İ) and "k" of U+212A (the Kelvin sign), so "clİent" is a client
// span to the agent. Off kindWord's path for the usual kinds.
func lowerKindWord(k string) uint64 {
	for _, name := range [...]string{"server", "client", "producer", "consumer", "internal"} {
		if casefold.Is(k, name, unicode.ToLower) {
			return kindWord(name)
		}
	}
	return 0
}

// Eligible reports whether the span is counted: top-level, measured, or of
// kind server, client, producer or consumer; and with a positive duration.
// These are dd-trace-java's rules, and the agent's but for the duration:
// its concentrator counts a span of duration 0 (its normalizer makes a
// negative one 0), which is not counted here: this SDK's rule asks for a
// positive duration, and counts the others in Health.Ineligible.
func (s *Span) Eligible() bool {
	if s.Duration <= 0 {
		return false
	}
	if s.TopLevel || s.Measured {
		return true
	}
	switch kindWord(s.SpanKind) {
	case kindServer, kindClient, kindProducer, kindConsumer:
		return true
	}
	return false
}

// keepsPeerTags reports whether peer tags belong in the span's key.
func keepsPeerTags(kind string) bool {
	switch kindWord(kind) {
	case kindClient, kindProducer, kindConsumer:
		return true
	}
	return false
}

// baseServicePrefix starts the one peer tag kept of an internal span or
// one without kind, as the agent's peerTagKeysToAggregateForSpan does.
const baseServicePrefix = "_dd.base_service:"

// keepsBaseService reports whether a span of kind keeps its base service
// tag as its one peer tag: an internal span, or one without kind.
func keepsBaseService(kind string) bool { return kind == "" || kindWord(kind) == kindInternal }

// baseServiceTag returns the first "_dd.base_service:" tag with a value
// among tags, and whether there is one.
func baseServiceTag(tags []string) (string, bool) {
	for _, t := range tags {
		if len(t) > len(baseServicePrefix) && strings.HasPrefix(t, baseServicePrefix) {
			return t, true
		}
	}
	return "", false
}

// MaxPeerTags is the most peer tags of one span that are looked at: the
// agent aggregates on a list of a few dozen keys (its /info peer_tags), so
// more cannot all be kept, and they must not make one span cost without
// bound. The rest are cut and counted (Health.PeerTagsCut).
const MaxPeerTags = 64

// Label length limits: the Datadog agent's, so that a group here is the
// group the agent would form, and one span's labels cost bounded memory.
// Longer values are cut at a UTF-8 boundary at or below the limit, in
// Publish, and counted (Health.LabelsTruncated).
const (
	// MaxServiceLen, MaxNameLen and MaxTypeLen are the agent's limits for a
	// span's service, operation name and type (traceutil.MaxServiceLen,
	// MaxNameLen; agent.MaxTypeLen).
	MaxServiceLen = 100
	MaxNameLen    = 100
	MaxTypeLen    = 100
	// MaxResourceLen is the agent's limit for a resource
	// (traceutil.MaxResourceLen, applied to client stats groups too).
	MaxResourceLen = 5000
	// MaxTagLen bounds the labels that become tags of the stats metrics —
	// span kind, HTTP method and endpoint, gRPC status code, service source
	// — and each "key:value" peer tag, in bytes: the SDK's own bound (the
	// agent does not cut these labels of client stats), the 200 characters
	// Datadog keeps of a tag for an ASCII one, so a non-ASCII label is cut
	// sooner than the backend would. A peer tag's IP addresses are
	// quantized before the cut, as the agent quantizes the whole value
	// (reading at most 4 times what MaxTagLen leaves after the key and its
	// colon: aggregate.QuantizeTagTo);
	// a tag kept whole is quantized by the table, so a list of short
	// addresses can come out about twice as long as this.
	MaxTagLen = 200
)

// cuts is what snapshot left out of a span, for Health.
type cuts struct {
	peerTags int // tags beyond MaxPeerTags
	labels   int // label values cut to their length limit
}

// spanEnd is the Record.End of a span: 0 for Start 0 ("now"), else
// Start+Duration kept at or above 1 (an end before 1970 is late, not "now")
// and saturated (an overflow is the far future, not the distant past).
// Duration is positive: only eligible spans get here.
func spanEnd(start, duration int64) int64 {
	if start == 0 {
		return 0
	}
	end := start + duration
	if end < start {
		return math.MaxInt64
	}
	return max(end, 1)
}

// Snapshot writes into r what Publish queues in the inbox for s: its key
// fields and measurements, its end, the peer tags of a client, producer or
// consumer span up to MaxPeerTags (of an internal span, its base service
// tag among the first MaxPeerTags), and each label cut to its limit. r must
// be zero, as a claimed inbox slot is: fields that stay zero are not
// written. It returns how many peer tags it left out and how many labels it
// cut (Health.PeerTagsCut, Health.LabelsTruncated). It is for feeding an
// aggregate.Table of one's own the records Publish would; s should be
// Eligible, as every span Publish queues is.
func (s *Span) Snapshot(r *aggregate.Record) (peerTagsCut, labelsCut int) {
	cut := s.snapshot(r)
	return cut.peerTags, cut.labels
}

// snapshot is Snapshot with the cuts as one value, which Publish compares
// with zero before it counts them.
func (s *Span) snapshot(r *aggregate.Record) (cut cuts) {
	r.Service, r.Name, r.Resource, r.Type = s.Service, s.Name, s.Resource, s.Type
	r.SpanKind = s.SpanKind
	r.HTTPMethod, r.HTTPEndpoint = s.HTTPMethod, s.HTTPEndpoint
	if s.GRPCStatusCode != "" {
		r.GRPCStatusCode = CanonicalGRPCCode(s.GRPCStatusCode)
	}
	r.ServiceSource = s.ServiceSource
	r.HTTPStatusCode = s.HTTPStatusCode
	r.Duration = s.Duration
	r.End = spanEnd(s.Start, s.Duration)
	r.Error, r.TopLevel, r.TraceRoot, r.Synthetics = s.Error, s.TopLevel, s.TraceRoot, s.Synthetics
	// max compiles to conditional moves: two branches, not nine.
	if max(len(s.Service)-MaxServiceLen, len(s.Name)-MaxNameLen, len(s.Type)-MaxTypeLen, len(s.Resource)-MaxResourceLen) > 0 ||
		max(len(s.SpanKind), len(s.HTTPMethod), len(s.HTTPEndpoint), len(s.ServiceSource)) > MaxTagLen {
		cut.labels = truncateLabels(r)
	}
	switch {
	case len(s.PeerTags) == 0:
	case keepsPeerTags(s.SpanKind):
		tags := s.PeerTags
		if len(tags) > MaxPeerTags {
			cut.peerTags, tags = len(tags)-MaxPeerTags, tags[:MaxPeerTags]
		}
		// r is a claimed slot, zeroed by the consumer: unlike SetPeerTags,
		// leave the fields that stay zero unwritten, so their cache line
		// (the slot's last) need not move to this core and back.
		n := copy(r.PeerTags[:], tags)
		r.NumPeerTags = uint8(n)
		cut.labels += truncatePeerTags(r.PeerTags[:n])
		if len(tags) > n {
			r.ExtraPeerTags = append([]string(nil), tags[n:]...)
			cut.labels += truncatePeerTags(r.ExtraPeerTags)
		}
	case keepsBaseService(s.SpanKind):
		tags := s.PeerTags
		if len(tags) > MaxPeerTags { // looked at as a client span's are
			cut.peerTags, tags = len(tags)-MaxPeerTags, tags[:MaxPeerTags]
		}
		if t, ok := baseServiceTag(tags); ok {
			r.PeerTags[0], r.NumPeerTags = t, 1
			cut.labels += truncatePeerTags(r.PeerTags[:1])
		}
	}
	return cut
}

// truncateLabels cuts r's label values to their limits and returns how
// many it cut.
func truncateLabels(r *aggregate.Record) (n int) {
	for _, f := range [...]struct {
		v   *string
		max int
	}{
		{&r.Service, MaxServiceLen}, {&r.Name, MaxNameLen}, {&r.Type, MaxTypeLen},
		{&r.Resource, MaxResourceLen}, {&r.SpanKind, MaxTagLen}, {&r.HTTPMethod, MaxTagLen},
		{&r.HTTPEndpoint, MaxTagLen}, {&r.ServiceSource, MaxTagLen},
	} {
		if len(*f.v) > f.max {
			*f.v = truncateUTF8(*f.v, f.max)
			n++
		}
	}
	return n
}

// truncatePeerTags cuts each "key:value" tag of vs to MaxTagLen bytes and
// returns how many it cut, counting a list QuantizeTagTo read only in
// part though it came out short. A value's IP addresses are quantized first, as the
// table would: the agent quantizes the whole value, and a list cut first
// would end in a partial address that no longer quantizes.
func truncatePeerTags(vs []string) (n int) {
	for i, v := range vs {
		if len(v) <= MaxTagLen {
			continue
		}
		// A colon past the cut leaves no value in the cut tag: the search
		// stops there, so that a long tag without one costs no more.
		whole, built := true, false
		if c := strings.IndexByte(v[:MaxTagLen], ':'); c >= 0 {
			q, w, fits := aggregate.QuantizeTagTo(v, c, MaxTagLen-c-1)
			if fits {
				// Read whole, and short once quantized: the table
				// quantizes the tag so again, so it goes as it is,
				// not copied (TestLongPeerTagsAllocateOnceAtMost).
				continue
			}
			whole, built = w, unsafe.StringData(q) != unsafe.StringData(v)
			v = q
		}
		switch {
		case len(v) > MaxTagLen:
			// A tag QuantizeTagTo built is this call's own: cut, not
			// copied again; a slice of the tracer's is copied (truncateUTF8).
			if built {
				v = stableCut(cutUTF8(v, MaxTagLen))
			} else {
				v = stableCut(truncateUTF8(v, MaxTagLen))
			}
			n++
		case !whole:
			// A list longer than QuantizeTagTo reads that quantized
			// short: its unread entries are left out, a cut too.
			n++
		}
		vs[i] = v
	}
	return n
}

// stableCut returns the cut tag v as the table keys it. The table quantizes
// a peer tag's value again, and a cut may end in a partial entry that reads
// otherwise ("10.1.2.34" of "10.1.2.345") or repeats an earlier one, which
// the table would rewrite (past MaxTagLen) or drop: such a last entry is
// left out. The entries before it are whole, quantized and distinct already
// (v is a cut of what QuantizeTagTo returned), so only the last is checked,
// without allocating.
func stableCut(v string) string {
	c := strings.IndexByte(v, ':')
	if c < 0 {
		return v
	}
	val := v[c+1:]
	if aggregate.LastEntryKept(val) {
		return v
	}
	j := strings.LastIndexByte(val, ',')
	if j < 0 { // its one entry: the tag goes without a value, which the table drops
		return v[:c+1]
	}
	return v[:c+1+j]
}

// truncateUTF8 cuts v (len(v) > max) to what the agent's TruncateUTF8
// (v0.85.4) keeps, so that values too long group as the agent groups them:
// the first max bytes, less trailing bytes until the value ends in valid
// UTF-8 of one to four bytes (a rune cut at the limit goes, and invalid
// bytes just before it too). It is a copy: a slice of v would keep all of v
// alive in the inbox and in the consumer's recent-span cache, which holds
// label strings by identity.
func truncateUTF8(v string, max int) string { return strings.Clone(cutUTF8(v, max)) }

// cutUTF8 is truncateUTF8 without the copy: a slice of v.
func cutUTF8(v string, max int) string {
	s := v[:max]
	for len(s) > 0 && !endsValid(s) {
		s = s[:len(s)-1]
	}
	return s
}

// endsValid reports whether s ends in valid UTF-8 of one to four bytes.
func endsValid(s string) bool {
	if s[len(s)-1] < utf8.RuneSelf {
		return true
	}
	for k := 2; k <= min(utf8.UTFMax, len(s)); k++ {
		if utf8.ValidString(s[len(s)-k:]) {
			return true
		}
	}
	return false
}
