// This file tests a span's snapshot into an inbox record: eligibility, the
// peer tags kept by kind and cut, and that Publish keeps no reference to
// the span; and benchmarks eligibility.

package stats

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
)

func TestEligibility(t *testing.T) {
	for _, tc := range []struct {
		s    Span
		want bool
	}{
		{Span{Duration: 1, TopLevel: true}, true},
		{Span{Duration: 1, Measured: true}, true},
		{Span{Duration: 1, SpanKind: "Server"}, true},
		{Span{Duration: 1, SpanKind: "PRODUCER"}, true},
		{Span{Duration: 1, SpanKind: "internal"}, false},
		{Span{Duration: 1}, false},
		{Span{Duration: 0, TopLevel: true}, false},
		{Span{Duration: -5, SpanKind: "client"}, false},
		// The agent lowers kinds with strings.ToLower: İ (U+0130) is "i".
		{Span{Duration: 1, SpanKind: "cl\u0130ent"}, true},
		{Span{Duration: 1, SpanKind: "CL\u0130ENT"}, true},
		{Span{Duration: 1, SpanKind: "\u0130nternal"}, false},
		{Span{Duration: 1, SpanKind: "cl\u0131ent"}, false}, // ı lowers to itself
		{Span{Duration: 1, SpanKind: "\u017Ferver"}, false}, // ſ lowers to itself
		{Span{Duration: 1, SpanKind: "cl\xc4ent"}, false},
	} {
		if got := tc.s.Eligible(); got != tc.want {
			t.Errorf("%+v: Eligible = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestUnicodeKindDoesNotAllocate(t *testing.T) {
	s := &Span{Duration: 1, SpanKind: "cl\u0130ent"}
	if n := testing.AllocsPerRun(100, func() { _ = s.Eligible() }); n != 0 {
		t.Fatalf("Eligible allocates %v times for kind %q", n, s.SpanKind)
	}
}

func TestPeerTagsOnlyForClientKinds(t *testing.T) {
	var r aggregate.Record
	(&Span{SpanKind: "server", PeerTags: []string{"a:b"}}).snapshot(&r)
	if r.NumPeerTags != 0 {
		t.Fatal("server span kept peer tags")
	}
	(&Span{SpanKind: "Client", PeerTags: []string{"a:b", "c:d"}}).snapshot(&r)
	if r.NumPeerTags != 2 || r.PeerTags[1] != "c:d" || r.ExtraPeerTags != nil {
		t.Fatalf("client span peer tags = %v + %v", r.PeerTags[:r.NumPeerTags], r.ExtraPeerTags)
	}
	// More tags than fit inline: the rest are copied, not aliased.
	tags := make([]string, aggregate.MaxInlinePeerTags+2)
	for i := range tags {
		tags[i] = fmt.Sprintf("k%d:v", i)
	}
	r = aggregate.Record{} // a claimed slot is zeroed
	(&Span{SpanKind: "producer", PeerTags: tags}).snapshot(&r)
	extra := tags[aggregate.MaxInlinePeerTags:]
	if int(r.NumPeerTags) != aggregate.MaxInlinePeerTags || len(r.ExtraPeerTags) != 2 ||
		r.ExtraPeerTags[0] != extra[0] || r.ExtraPeerTags[1] != extra[1] || &r.ExtraPeerTags[0] == &extra[0] {
		t.Fatalf("%d inline tags and extra %v, want %d and a copy of %v", r.NumPeerTags, r.ExtraPeerTags, aggregate.MaxInlinePeerTags, extra)
	}
}

// TestBaseServicePeerTag: of an internal span or one without kind, the
// one peer tag kept is the first "_dd.base_service:" with a value, as the
// agent keeps it; a server span keeps none, a client span all.
func TestBaseServicePeerTag(t *testing.T) {
	tags := []string{"peer.service:db", "_dd.base_service:", "_dd.base_service:web", "_dd.base_service:other"}
	for _, tc := range []struct {
		kind string
		tags []string
		want []string
	}{
		{"internal", tags, []string{"_dd.base_service:web"}},
		{"Internal", tags, []string{"_dd.base_service:web"}},
		{"", tags, []string{"_dd.base_service:web"}},
		{"internal", tags[:2], nil},
		{"server", tags, nil},
		{"consumer", tags, tags},
	} {
		var r aggregate.Record
		(&Span{SpanKind: tc.kind, PeerTags: tc.tags}).snapshot(&r)
		if got := r.PeerTags[:r.NumPeerTags]; len(got) != len(tc.want) || len(got) > 0 && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("kind %q, tags %q: kept %q, want %q", tc.kind, tc.tags, got, tc.want)
		}
	}
}

// TestBaseServiceTagPastTheCap: of an internal span, as of a client one,
// only the first MaxPeerTags peer tags are looked at, so that a span's
// tags cost Publish a bounded search; the rest are counted as cut. A tag
// whose key alone is past MaxTagLen is cut to its key's first bytes.
func TestBaseServiceTagPastTheCap(t *testing.T) {
	tags := make([]string, MaxPeerTags, MaxPeerTags+1)
	for i := range tags {
		tags[i] = fmt.Sprintf("peer.tag%d:v", i)
	}
	var r aggregate.Record
	if cut := (&Span{SpanKind: "internal", PeerTags: append(tags, "_dd.base_service:web")}).snapshot(&r); cut.peerTags != 1 || r.NumPeerTags != 0 {
		t.Errorf("base service tag after %d others: cut %d, kept %q; want 1 cut, none kept", MaxPeerTags, cut.peerTags, r.PeerTags[:r.NumPeerTags])
	}
	r = aggregate.Record{}
	// A server span keeps none, and looks at none: nothing counts as cut.
	if cut := (&Span{SpanKind: "server", PeerTags: append(tags, "_dd.base_service:web")}).snapshot(&r); cut.peerTags != 0 || r.NumPeerTags != 0 {
		t.Errorf("server span of %d tags: cut %d, kept %d; want 0, 0", MaxPeerTags+1, cut.peerTags, r.NumPeerTags)
	}
	tags[MaxPeerTags-1] = "_dd.base_service:web"
	if cut := (&Span{PeerTags: tags}).snapshot(&r); cut.peerTags != 0 || r.NumPeerTags != 1 || r.PeerTags[0] != "_dd.base_service:web" {
		t.Errorf("base service tag last of %d: cut %d, kept %q", MaxPeerTags, cut.peerTags, r.PeerTags[:r.NumPeerTags])
	}
	long := []string{strings.Repeat("k", MaxTagLen+100) + ":10.0.0.1"}
	if n := truncatePeerTags(long); n != 1 || long[0] != strings.Repeat("k", MaxTagLen) {
		t.Errorf("a key past MaxTagLen: %d cut, %d bytes %q...", n, len(long[0]), long[0][:min(len(long[0]), 8)])
	}
}

// TestPeerTagsAreCapped: a span with 10 000 peer tags keeps MaxPeerTags of
// them, costs Publish a bounded copy, and the cut is counted; the span is
// counted once.
func TestPeerTagsAreCapped(t *testing.T) {
	tags := make([]string, 10_000)
	for i := range tags {
		tags[i] = fmt.Sprintf("peer.tag%d:v", i)
	}
	var r aggregate.Record
	if cut, _ := (&Span{SpanKind: "client", PeerTags: tags}).Snapshot(&r); cut != len(tags)-MaxPeerTags {
		t.Fatalf("cut %d, want %d", cut, len(tags)-MaxPeerTags)
	}
	if n := int(r.NumPeerTags) + len(r.ExtraPeerTags); n != MaxPeerTags {
		t.Fatalf("record holds %d tags, want %d", n, MaxPeerTags)
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	// Not started yet: AllocsPerRun counts the whole process's allocations,
	// and a sender failing to reach the agent meanwhile allocates too. The
	// inbox holds the 101 spans until Start.
	sp := &Span{Service: "s", Name: "op", SpanKind: "client", Duration: 1, PeerTags: tags}
	if allocs := testing.AllocsPerRun(100, func() { a.Publish(sp) }); allocs > 1 {
		t.Errorf("Publish of a span with 10 000 tags: %v allocations, want at most the one copy of the capped rest", allocs)
	}
	a.Start()
	stop(t, a)
	h := a.Health()
	if h.PeerTagsCut != h.Published*uint64(len(tags)-MaxPeerTags) || h.Counted+h.InboxFull != h.Published {
		t.Fatalf("published %d, cut %d tags, counted %d + inbox full %d", h.Published, h.PeerTagsCut, h.Counted, h.InboxFull)
	}
}

// TestLongPeerTagQuantizedBeforeCut: a peer tag over MaxTagLen has the IP
// addresses of its value quantized before it is cut, as the agent quantizes
// the whole value: cut first, a list of addresses ends in a partial one the
// table cannot recognise, and the group differs from the agent's.
func TestLongPeerTagQuantizedBeforeCut(t *testing.T) {
	list := "db.cassandra.contact.points:" + strings.Repeat("10.123.45.67:9042,10.123.45.68:9042,", 8) + "cass.internal"
	want := "db.cassandra.contact.points:" + aggregate.QuantizeIPs(list[len("db.cassandra.contact.points:"):])
	long := "out.host:" + strings.Repeat("h", MaxTagLen) + ",10.1.2.3"
	for _, tc := range []struct {
		tag, want string
		cut       int
	}{
		{list, want, 0}, // short once quantized: nothing to cut
		{long, long[:MaxTagLen], 1},
	} {
		var r aggregate.Record
		_, cut := (&Span{SpanKind: "client", PeerTags: []string{tc.tag}}).Snapshot(&r)
		tb := aggregate.NewTable(0)
		tb.Add(&r)
		e := tb.Touched(nil)[0]
		if len(e.PeerTags) != 1 || e.PeerTags[0] != tc.want {
			t.Errorf("%.40q...: keyed %q, want %q", tc.tag, e.PeerTags, tc.want)
		}
		if cut != tc.cut {
			t.Errorf("%.40q...: %d labels cut, want %d", tc.tag, cut, tc.cut)
		}
	}
}

// TestSnapshotIntoReusedSlot: the inbox clears a released slot with
// Record.Reset, which writes only what a producer can have set, and snapshot
// leaves the fields that stay zero unwritten. A slot that held a
// span with every field set and peer tags inline and beyond, released and
// claimed again, must hold exactly what snapshot writes into a zero Record.
func TestSnapshotIntoReusedSlot(t *testing.T) {
	tags := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("peer%d:v", i)
		}
		return s
	}
	full := Span{
		Service: "svc", Name: "op", Resource: "GET /x", Type: "web", SpanKind: "client",
		HTTPMethod: "GET", HTTPEndpoint: "/x", GRPCStatusCode: "2", ServiceSource: "m",
		HTTPStatusCode: 500, Start: 1e18, Duration: 7, Error: true, TopLevel: true,
		TraceRoot: true, Synthetics: true, PeerTags: tags(aggregate.MaxInlinePeerTags + 3),
	}
	ring := newInbox(1)
	for _, next := range []Span{
		{Name: "bare", Duration: 1},
		{Service: "s", SpanKind: "server", PeerTags: tags(2), Duration: 2},
		{Service: "s", SpanKind: "client", PeerTags: tags(1), Duration: 3},
		{Service: "s", SpanKind: "producer", PeerTags: tags(aggregate.MaxInlinePeerTags + 1), Duration: 4},
		full,
	} {
		for _, s := range []*Span{&full, &next} {
			c, ok := ring.Claim()
			if !ok {
				t.Fatal("claim on an empty inbox failed")
			}
			s.snapshot(c.Value())
			c.Commit()
			if s == &full {
				ring.Release(ring.Ready(1))
			}
		}
		var want aggregate.Record
		next.snapshot(&want)
		if got := *ring.At(0); !reflect.DeepEqual(got, want) {
			t.Errorf("%s/%s: reused slot holds\n%+v\nwant\n%+v", next.Name, next.SpanKind, got, want)
		}
		ring.Release(ring.Ready(1))
	}
}

// asciiKindIs is the byte-by-byte comparison kindWord replaces: kind
// equals want (lower case) ignoring ASCII case.
func asciiKindIs(kind, want string) bool {
	if len(kind) != len(want) {
		return false
	}
	for i := 0; i < len(kind); i++ {
		c := kind[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// TestKindWordMatchesByteCompare: for every case variant of the four
// counted kinds, and every string one byte away from one (each position,
// all 256 values), and the other lengths around them, Eligible and
// keepsPeerTags decide as the byte-by-byte ASCII comparison does.
func TestKindWordMatchesByteCompare(t *testing.T) {
	kinds := []string{"server", "client", "producer", "consumer"}
	var cases []string
	for _, k := range kinds {
		for mask := range 1 << len(k) { // every case variant
			b := []byte(k)
			for i := range b {
				if mask&(1<<i) != 0 {
					b[i] -= 'a' - 'A'
				}
			}
			cases = append(cases, string(b))
		}
		for i := range len(k) { // every byte at every position
			for c := range 256 {
				b := []byte(k)
				b[i] = byte(c)
				cases = append(cases, string(b))
			}
		}
		cases = append(cases, k[:len(k)-1], k+"s", "", "internal", "SERVERS", "Client\x00")
	}
	checked := 0
	for _, k := range cases {
		wantEligible := false
		for _, want := range kinds {
			wantEligible = wantEligible || asciiKindIs(k, want)
		}
		wantPeers := asciiKindIs(k, "client") || asciiKindIs(k, "producer") || asciiKindIs(k, "consumer")
		s := Span{SpanKind: k, Duration: 1}
		if got := s.Eligible(); got != wantEligible {
			t.Errorf("Eligible(kind %q) = %v, want %v", k, got, wantEligible)
		}
		if got := keepsPeerTags(k); got != wantPeers {
			t.Errorf("keepsPeerTags(%q) = %v, want %v", k, got, wantPeers)
		}
		checked++
	}
	if checked < 4*256*6 {
		t.Fatalf("checked only %d kinds", checked)
	}
}

// BenchmarkEligible decides eligibility for spans that are not top-level,
// of the kinds a tracer mixes (each kind from a literal, as tracers do).
func BenchmarkEligible(b *testing.B) {
	kinds := []string{"client", "server", "internal", "producer", "client", "consumer", "", "CLIENT"}
	spans := make([]Span, 64)
	for i := range spans {
		spans[i] = Span{SpanKind: kinds[(i*5)%len(kinds)], Duration: 1}
	}
	n := 0
	for i := 0; b.Loop(); i++ {
		if spans[i%len(spans)].Eligible() {
			n++
		}
	}
	sinkBool = n > 0
}

// TestPublishDoesNotRetainTheSpan: DESIGN §4, Publish does not retain the
// pointer. A tracer reuses its span (and its PeerTags array) the moment
// Publish returns; the group reported is the span as it was published.
func TestPublishDoesNotRetainTheSpan(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	a, err := New(Config{AgentURL: ag.URL(), PeerTagKeys: []string{"peer.service", "db.instance"}})
	if err != nil {
		t.Fatal(err)
	}
	tags := []string{"peer.service:db", "db.instance:users"}
	sp := &Span{Service: "web", Name: "pg.query", Resource: "SELECT ?", Type: "sql", SpanKind: "client",
		HTTPStatusCode: 200, HTTPMethod: "GET", HTTPEndpoint: "/u", GRPCStatusCode: "0", ServiceSource: "m",
		PeerTags: tags, Duration: 100, Error: true, TopLevel: true, TraceRoot: true}
	if !a.Publish(sp) { // not started: the inbox holds it until Start
		t.Fatal("Publish = false")
	}
	*sp = Span{Service: "other", Name: "other", Resource: "other", Type: "other", SpanKind: "producer",
		HTTPStatusCode: 500, HTTPMethod: "PUT", HTTPEndpoint: "/o", GRPCStatusCode: "2", ServiceSource: "o",
		PeerTags: tags, Duration: 7}
	tags[0], tags[1] = "peer.service:other", "db.instance:other"
	a.Start()
	stop(t, a)
	got, hits := statstest.SumExact(ag.Requests())
	want := statstest.ExactKey{
		GroupKey:   statstest.GroupKey{Service: "web", Name: "pg.query", Resource: "SELECT ?", Type: "sql", SpanKind: "client", HTTPStatusCode: 200},
		HTTPMethod: "GET", HTTPEndpoint: "/u", GRPCStatusCode: "0", ServiceSource: "m", IsTraceRoot: aggregate.True,
		PeerTags: statstest.PeerTagsKey("peer.service:db", "db.instance:users"),
	}
	g := got[want]
	if hits != 1 || len(got) != 1 || g == nil || g.Hits != 1 || g.Errors != 1 || g.TopLevelHits != 1 || g.Duration != 100 {
		t.Fatalf("groups %v (%d hits), want only %+v with 1 hit, 1 error, 1 top-level, 100 ns", got, hits, want)
	}
}

// TestStableCut: a cut peer tag whose last entry the table's quantization
// would rewrite or drop goes without it, and without a value (which the
// table drops) when that entry is its only one; a stable cut is returned
// as it is, its string data unchanged.
func TestStableCut(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"out.host:a,b,10.1.2.34", "out.host:a,b"},
		{"out.host:a,hh,a", "out.host:a,hh"},
		{"out.host:1.2.3.4", "out.host:"},
		{"out.host:a,blocked-ip-address", "out.host:a,blocked-ip-address"},
		{"out.host:a,b", "out.host:a,b"},
		{"bare", "bare"},
	} {
		if got := stableCut(tc.in); got != tc.want {
			t.Errorf("stableCut(%q) = %q, want %q", tc.in, got, tc.want)
		} else if got == tc.in && unsafe.StringData(got) != unsafe.StringData(tc.in) {
			t.Errorf("stableCut(%q) copied a stable cut", tc.in)
		}
	}
}

// TestLongIPListReadInPartIsCounted: a peer tag holding a list of IP
// addresses longer than Publish reads (4*MaxTagLen bytes) that quantizes
// short loses its unread entries (here a host name the agent would keep):
// counted in LabelsTruncated, not left out silently.
func TestLongIPListReadInPartIsCounted(t *testing.T) {
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "10.0.%d.%d:9092,", i/200, i%200+1)
	}
	b.WriteString("kafka-extra.internal:9092")
	tag := "messaging.kafka.bootstrap.servers:" + b.String()
	var r aggregate.Record
	_, cut := (&Span{SpanKind: "producer", PeerTags: []string{tag}, Duration: 1}).Snapshot(&r)
	if want := "messaging.kafka.bootstrap.servers:" + aggregate.BlockedIP + ":9092"; r.PeerTags[0] != want || cut != 1 {
		t.Fatalf("%d-byte list keyed %q, %d labels cut; want %q, 1", len(tag), r.PeerTags[0], cut, want)
	}
	// Read whole (under 4*MaxTagLen bytes), the same list is exact and no
	// cut: Publish leaves it as it is, and the table keys it quantized.
	short := "messaging.kafka.bootstrap.servers:" + strings.Repeat("10.0.0.1:9092,", 30) + "kafka-extra.internal:9092"
	r = aggregate.Record{}
	if _, cut := (&Span{SpanKind: "producer", PeerTags: []string{short}, Duration: 1}).Snapshot(&r); cut != 0 || r.PeerTags[0] != short {
		t.Fatalf("%d-byte list queued as %q, %d labels cut; want it as it is, 0", len(short), r.PeerTags[0], cut)
	}
	tb := aggregate.NewTable(0)
	tb.Add(&r)
	if e := tb.Touched(nil); len(e) != 1 || !slices.Equal(e[0].PeerTags, []string{"messaging.kafka.bootstrap.servers:" + aggregate.BlockedIP + ":9092,kafka-extra.internal:9092"}) {
		t.Fatalf("the table keys the list as %q", e[0].PeerTags)
	}
}

// TestLongPeerTagsAllocateOnceAtMost: a peer tag over MaxTagLen costs
// Publish no allocation when it quantizes short read whole (the table
// quantizes it again), and one when it is cut, IP addresses quantized or
// not, as the Publish doc promises of a label over its limit (a list of
// more than 16 distinct entries before the cut costs the set that drops
// repeats besides: about an allocation per entry).
func TestLongPeerTagsAllocateOnceAtMost(t *testing.T) {
	var brokers, hosts strings.Builder
	for i := range 60 {
		fmt.Fprintf(&brokers, "10.0.%d.%d:9092,", i/200, i%200+1)
	}
	for i := range 12 {
		fmt.Fprintf(&hosts, "10.1.2.3,host-with-a-longer-name-%02d,", i)
	}
	for _, tc := range []struct {
		name, tag string
		allocs    float64
	}{
		{"a repeated address, read whole", "peer.hostname:" + strings.Repeat("10.1.2.3,", 41), 0},
		{"a value without addresses", "peer.hostname:" + strings.Repeat("h", 1000), 1},
		{"60 brokers by address, read in part", "messaging.kafka.bootstrap.servers:" + brokers.String(), 1},
		{"an address among host names, cut", "out.host:" + hosts.String(), 1},
		// The entry that crosses the limit quantized whole: 800 bytes built.
		{"an address and a long suffix, cut", "k:10.1.2.3" + strings.Repeat("y", 780), 1},
	} {
		s := Span{SpanKind: "client", PeerTags: []string{tc.tag}, Duration: 1}
		if got := testing.AllocsPerRun(100, func() {
			var r aggregate.Record
			s.Snapshot(&r)
		}); got != tc.allocs {
			t.Errorf("%s (%d bytes): %v allocations per Snapshot, want %v", tc.name, len(tc.tag), got, tc.allocs)
		}
	}
}

// TestCutPeerTagsAreStable: a peer tag Publish cuts is one the table's
// quantization leaves as it is (no partial address it would rewrite, no
// repeat it would drop at the end), on random lists of addresses, ports,
// schemes, host names and repeats: the cut checks its last entry only.
func TestCutPeerTagsAreStable(t *testing.T) {
	pieces := []string{"10.1.2.3", "10.1.2.345", "10.1.2.3:80", "host-a", "host-b", "http://10.0.0.1", "ip-10-0-0-1",
		"fe80::1", "[::1]:80", "127.0.0.1", "a", "", "10.1.2.34", "db.internal:5432", "10.1.2.3"}
	rng := rand.New(rand.NewPCG(7, 9))
	cut := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString([]string{"out.host:", "peer.hostname:", "messaging.kafka.bootstrap.servers:"}[rng.IntN(3)])
		for n := 20 + rng.IntN(120); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
			if rng.IntN(8) > 0 {
				b.WriteString(",")
			}
		}
		tags := []string{b.String()}
		if truncatePeerTags(tags) == 0 {
			continue
		}
		cut++
		v := tags[0][strings.IndexByte(tags[0], ':')+1:]
		if q := aggregate.QuantizeIPs(v); q != v || len(tags[0]) > MaxTagLen {
			t.Fatalf("%q cut to %q (%d bytes), which the table quantizes to %q", b.String(), tags[0], len(tags[0]), q)
		}
	}
	if cut < 1000 {
		t.Fatalf("only %d of 20000 tags cut: the test means little", cut)
	}
}
