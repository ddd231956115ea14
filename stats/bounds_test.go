// This file tests the bounds on what one span and one group hold: sums that
// saturate, labels cut at the agent's limits, and a group's heap.

package stats

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// onlyGroup decodes the single group the agent received.
func onlyGroup(t *testing.T, ag *statstest.Agent) *writer.Group {
	t.Helper()
	reqs := statstest.Accepted(ag.Requests())
	var groups []*writer.Group
	for _, r := range reqs {
		if r.Payload == nil {
			t.Fatalf("payload did not decode: %v", r.Err)
		}
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				groups = append(groups, &b.Groups[i])
			}
		}
	}
	if len(groups) != 1 {
		t.Fatalf("the agent received %d groups in %d requests, want 1", len(groups), len(reqs))
	}
	return groups[0]
}

// TestDurationSaturates: three spans of one key lasting math.MaxInt64 ns
// reach the agent as a group whose duration sum is saturated, not wrapped,
// and whose sketch, decoded by the writer's decoder, counts the three.
func TestDurationSaturates(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for range 3 {
		a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: math.MaxInt64, TopLevel: true})
	}
	stop(t, a)
	g := onlyGroup(t, ag)
	if g.Hits != 3 || g.TopLevelHits != 3 || g.Duration != math.MaxUint64 {
		t.Fatalf("hits %d, top %d, duration %d; want 3, 3, %d", g.Hits, g.TopLevelHits, g.Duration, uint64(math.MaxUint64))
	}
	if g.Ok == nil || g.Ok.Count() != g.Hits {
		t.Fatalf("ok sketch %v, want a count of %d", g.Ok, g.Hits)
	}
}

// TestLongResourceTruncated: a 1 MiB resource whose 3-byte rune straddles
// MaxResourceLen arrives cut before that rune — the agent's limit at a
// UTF-8 boundary — and groups with spans carrying the cut value itself:
// three hits in one group, one label truncated.
func TestLongResourceTruncated(t *testing.T) {
	prefix := strings.Repeat("a", MaxResourceLen-2)
	long := prefix + "€" + strings.Repeat("b", 1<<20) // € is bytes MaxResourceLen-2 … MaxResourceLen
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for _, r := range []string{long, prefix, prefix} {
		a.Publish(&Span{Service: "s", Name: "n", Resource: r, Duration: 5, TopLevel: true})
	}
	stop(t, a)
	g := onlyGroup(t, ag)
	if g.Resource != prefix || g.Hits != 3 {
		t.Fatalf("resource of %d bytes (valid UTF-8 %v), hits %d; want the %d bytes before the rune, 3 hits",
			len(g.Resource), utf8.ValidString(g.Resource), g.Hits, len(prefix))
	}
	if h := a.Health(); h.LabelsTruncated != 1 || h.Counted != 3 {
		t.Fatalf("LabelsTruncated %d, counted %d; want 1 and 3", h.LabelsTruncated, h.Counted)
	}
}

// TestEveryLabelTruncated: each label field and peer tag over its limit is
// cut to it at a rune boundary and counted once; values at the limit are
// kept as they are. A gRPC status code is no name and no number: it is
// dropped (CanonicalGRPCCode), not cut.
func TestEveryLabelTruncated(t *testing.T) {
	over := func(n int) string { return strings.Repeat("x", n-1) + "é" } // 2-byte rune straddles n
	s := Span{Service: over(MaxServiceLen), Name: over(MaxNameLen), Type: over(MaxTypeLen),
		Resource: over(MaxResourceLen), SpanKind: "client", HTTPMethod: over(MaxTagLen),
		HTTPEndpoint: over(MaxTagLen), GRPCStatusCode: over(MaxTagLen), ServiceSource: strings.Repeat("y", MaxTagLen),
		PeerTags: make([]string, aggregate.MaxInlinePeerTags+2), Duration: 1}
	for i := range s.PeerTags {
		s.PeerTags[i] = "k:" + over(MaxTagLen-2)
	}
	var r aggregate.Record
	_, cut := s.Snapshot(&r)
	if want := 6 + len(s.PeerTags); cut != want || r.GRPCStatusCode != "" {
		t.Fatalf("truncated %d labels, gRPC code %q; want %d, none", cut, r.GRPCStatusCode, want)
	}
	for _, c := range []struct {
		name string
		v    string
		max  int
	}{
		{"Service", r.Service, MaxServiceLen}, {"Name", r.Name, MaxNameLen}, {"Type", r.Type, MaxTypeLen},
		{"Resource", r.Resource, MaxResourceLen}, {"HTTPMethod", r.HTTPMethod, MaxTagLen},
		{"HTTPEndpoint", r.HTTPEndpoint, MaxTagLen},
		{"PeerTags[0]", r.PeerTags[0], MaxTagLen}, {"ExtraPeerTags[1]", r.ExtraPeerTags[1], MaxTagLen},
	} {
		if len(c.v) != c.max-1 || !utf8.ValidString(c.v) {
			t.Errorf("%s: %d bytes, valid %v; want %d (the limit less the cut rune's first byte)", c.name, len(c.v), utf8.ValidString(c.v), c.max-1)
		}
	}
	if r.ServiceSource != s.ServiceSource || r.SpanKind != "client" {
		t.Errorf("a value at its limit was changed: %q", r.ServiceSource)
	}
	// The two labels the span above holds at or under their limit (its kind
	// keeps the peer tags), each alone over it.
	for _, c := range []struct {
		name string
		s    Span
		v    func(*aggregate.Record) string
	}{
		{"SpanKind", Span{SpanKind: over(MaxTagLen)}, func(r *aggregate.Record) string { return r.SpanKind }},
		{"ServiceSource", Span{ServiceSource: over(MaxTagLen)}, func(r *aggregate.Record) string { return r.ServiceSource }},
	} {
		c.s.Service, c.s.Name, c.s.Duration = "s", "n", 1
		var r aggregate.Record
		if _, cut := c.s.Snapshot(&r); cut != 1 || len(c.v(&r)) != MaxTagLen-1 || !utf8.ValidString(c.v(&r)) {
			t.Errorf("%s over MaxTagLen: %d bytes, valid %v, %d labels truncated; want %d bytes (the limit less the cut rune's first byte), 1",
				c.name, len(c.v(&r)), utf8.ValidString(c.v(&r)), cut, MaxTagLen-1)
		}
	}
}

// TestTruncateAsTheAgent: a value over its limit is cut where the agent's
// TruncateUTF8 (v0.85.4) cuts it, so that it groups as the agent groups
// it: at the limit, less trailing bytes until the value ends in valid
// UTF-8, invalid bytes before a cut rune included. bench/peer's
// TestTruncationMatchesAgent compares with the agent's own function.
func TestTruncateAsTheAgent(t *testing.T) {
	for _, c := range []struct {
		v    string
		max  int
		want string
	}{
		{"abcd", 2, "ab"},
		{"abc", 2, "ab"},
		{"ab€c", 3, "ab"},         // € (3 bytes at 2) crosses the limit
		{"ab€", 5, "ab€"},         // not over: unchanged (not called)
		{"ab\x80\x80cd", 4, "ab"}, // the invalid bytes before the cut go too
		{"a\xe2\x82zz", 2, "a"},   // a sequence cut at the limit
		{"a€\x80z", 5, "a€"},      // a valid rune, then a stray byte
		{"GET /" + strings.Repeat("\x80", 5000), 5000, "GET /"},
		{strings.Repeat("\x80", 10), 5, ""},
	} {
		if len(c.v) <= c.max {
			continue
		}
		if got := truncateUTF8(c.v, c.max); got != c.want {
			t.Errorf("truncateUTF8(%q, %d) = %q (%d bytes), want %q", c.v[:min(len(c.v), 12)], c.max, got[:min(len(got), 12)], len(got), c.want)
		}
	}
}

// TestLongLabelsNotRetained: 64 distinct 1 MiB resources, dropped by the
// tracer once published, leave no more than their truncated values alive
// (a truncation by slicing would keep each whole, e.g. in the consumer's
// recent-span cache).
func TestLongLabelsNotRetained(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	base := liveHeap()
	for i := range 64 {
		r := fmt.Sprintf("%02d", i) + strings.Repeat("r", 1<<20)
		a.Publish(&Span{Service: "s", Name: "n", Resource: r, Duration: 5, TopLevel: true})
	}
	if err := flushWithin(a, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	grown := int64(liveHeap()) - int64(base)
	stop(t, a)
	if h := a.Health(); h.LabelsTruncated != 64 || h.SpansSent != 64 {
		t.Fatalf("truncated %d, sent %d; want 64 and 64", h.LabelsTruncated, h.SpansSent)
	}
	if grown > 8<<20 {
		t.Fatalf("live heap grew %.1f MiB after 64 MiB of resources were published and dropped; want under 8 MiB", float64(grown)/(1<<20))
	}
}

// maxGroupHeap is the most live heap one group holds (Config.MaxAggregates):
// labels at their length limits with MaxPeerTags peer tags (at MaxTagLen,
// or lists of addresses that quantizing makes about twice as long), in the
// key string and its decoded tag list, and both sketches at
// aggregate.MaxBins.
const maxGroupHeap = 52 << 10

// maxTableHeap is the most a table holds besides its groups: the recent-span
// caches and, without the agent's key list, the budgets of 64 peer-tag keys.
const maxTableHeap = 2 << 20

// TestGroupHeapWorstCase: groups built to be as large as Publish lets them
// be — every label at its limit, MaxPeerTags tags of MaxTagLen bytes, and
// four spans (ok and error, of 1 ns and math.MaxInt64 ns) stretching each
// sketch over MaxBins bins — hold no more than maxGroupHeap each, and
// their table no more than maxTableHeap besides.
func TestGroupHeapWorstCase(t *testing.T) {
	pad := func(p string, n int) string { return p + strings.Repeat("x", n-len(p)) }
	padded := make([]string, MaxPeerTags)
	for k := range padded {
		padded[k] = pad(fmt.Sprintf("k%02d:", k), MaxTagLen)
	}
	// Lists of short IPv4 addresses, each with a suffix, up to MaxTagLen:
	// the table quantizes each to blocked-ip-address and its suffix, and
	// the suffixes keep them apart, so the tag grows past MaxTagLen (the
	// agent quantizes so too, and cuts nothing).
	lists := make([]string, MaxPeerTags)
	for k := range lists {
		tag := fmt.Sprintf("k%02d:", k)
		for i := 0; ; i++ {
			entry := fmt.Sprintf("1.1.1.%d%c", i%250+1, 'a'+i%26)
			if i > 0 {
				entry = "," + entry
			}
			if len(tag)+len(entry) > MaxTagLen {
				break
			}
			tag += entry
		}
		lists[k] = tag
	}
	for _, tc := range []struct {
		name string
		tags []string
	}{{"padded", padded}, {"ip_lists", lists}} {
		t.Run(tc.name, func(t *testing.T) { groupHeap(t, tc.tags) })
	}
}

func groupHeap(t *testing.T, tags []string) {
	const groups = 256
	pad := func(p string, n int) string { return p + strings.Repeat("x", n-len(p)) }
	base := liveHeap()
	tb := aggregate.NewTable(groups)
	tb.SetLimits(aggregate.Limits{})
	var fixed int64
	for i := range groups {
		if i == 1 {
			fixed = int64(liveHeap()) - int64(base)
		}
		s := Span{Service: pad("s", MaxServiceLen), Name: pad("n", MaxNameLen), Type: pad("t", MaxTypeLen),
			Resource: pad(fmt.Sprint(i, "-"), MaxResourceLen), SpanKind: "client", HTTPMethod: pad("m", MaxTagLen),
			HTTPEndpoint: pad("e", MaxTagLen), ServiceSource: pad("x", MaxTagLen), GRPCStatusCode: "4294967295",
			PeerTags: tags}
		for _, d := range []int64{1, math.MaxInt64} {
			for _, isErr := range []bool{false, true} {
				s.Duration, s.Error = d, isErr
				var r aggregate.Record
				s.Snapshot(&r)
				tb.Add(&r)
			}
		}
	}
	grown := int64(liveHeap()) - int64(base)
	es := tb.Touched(nil)
	if len(es) != groups || tb.Overflowed() != 0 || tb.CollapsedSpans() != 0 {
		t.Fatalf("%d groups, %d overflowed, %d collapsed; want %d, 0, 0", len(es), tb.Overflowed(), tb.CollapsedSpans(), groups)
	}
	if e := es[0]; len(e.PeerTags) != MaxPeerTags || e.Ok.HeapBytes() != aggregate.MaxSketchBytes || e.Err.HeapBytes() != aggregate.MaxSketchBytes {
		t.Fatalf("a group of %d tags and sketches of %d and %d bytes: not the worst case", len(e.PeerTags), e.Ok.HeapBytes(), e.Err.HeapBytes())
	}
	per := (grown - fixed) / (groups - 1)
	t.Logf("peer tags of %d bytes, %d in the key: %d B with one group, then %d B a group", len(tags[0]), len(es[0].PeerTags[0]), fixed, per)
	if per > maxGroupHeap || fixed > maxTableHeap {
		t.Fatalf("the table took %d B with one group, then %d B a group; bounds %d and %d", fixed, per, maxTableHeap, maxGroupHeap)
	}
	runtime.KeepAlive(tb)
}
