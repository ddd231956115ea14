// This file tests the payload encoder: round trips through the decoder,
// the exact bytes against a golden payload, the sizes it plans by, its
// allocations, and AlignStart.

package writer

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
	"github.com/tinylib/msgp/msgp"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/aggregate"
)

var testHeader = Header{
	Hostname: "host-1", Env: "prod", Version: "1.2.3", Lang: "go", TracerVersion: "v1.70.0",
	RuntimeID: "3f1c9a4e-8d2b-4c1e-9b7a-0e5d6f7a8b9c", Service: "web", ContainerID: "cid-42",
	Tags: []string{"region:eu", "az:b"}, GitCommitSha: "abc123", ImageTag: "v7",
	ProcessTags: "entrypoint.name:web", AgentAggregation: "distributions",
	ProcessTagsHash: 0xfeedfacecafebeef, Sequence: 7,
}

// tableEntries aggregates spans through an aggregate.Table, as the SDK does,
// and returns the touched entries: a table of cap 8 fed 11 keys, so the
// overflow entry is there too, with peer tags beyond the inline ones, errors,
// top-level and zero-duration spans, and long strings.
func tableEntries(t testing.TB) []*aggregate.Entry {
	t.Helper()
	tab := aggregate.NewTable(8)
	r := rand.New(rand.NewPCG(11, 12))
	kinds := []string{"server", "client", "producer", "consumer", "internal"}
	for k := range 11 {
		for i := range 40 + 10*k {
			s := aggregate.Record{
				Service: "svc", Name: "http.request", Resource: fmt.Sprintf("GET /users/%d", k),
				Type: "web", SpanKind: kinds[k%len(kinds)], HTTPMethod: "GET",
				HTTPEndpoint: "/users/{id}", GRPCStatusCode: "", ServiceSource: "opt.service",
				HTTPStatusCode: uint32(200 + k), Duration: int64(logUniform(r, 50e3, 2e9)),
				Error: i%7 == 3, TopLevel: i%2 == 0, TraceRoot: k%2 == 0, Synthetics: k == 4,
			}
			switch k {
			case 1:
				s.SetPeerTags([]string{"peer.service:db", "db.instance:users", "peer.hostname:h1"})
			case 2:
				tags := make([]string, 11) // beyond MaxInlinePeerTags
				for j := range tags {
					tags[j] = fmt.Sprintf("tag%02d:v", j)
				}
				s.SetPeerTags(tags)
			case 3:
				s.Resource = strings.Repeat("SELECT * FROM t WHERE x = ? ", 20) // str16
				s.GRPCStatusCode = "14"
			case 5:
				s.Duration = 0 // zero bucket of the sketch
			}
			tab.Add(&s)
		}
	}
	entries := tab.Touched(nil)
	if len(entries) != 9 || entries[8].Service != aggregate.BlockedValue {
		t.Fatalf("expected 8 entries and the overflow entry, got %d", len(entries))
	}
	return entries
}

// checkGroup compares a decoded group with the entry it was encoded from.
func checkGroup(t *testing.T, where string, g *Group, e *aggregate.Entry) {
	t.Helper()
	wk, gk := e.Key, g.Key
	if len(wk.PeerTags) == 0 {
		wk.PeerTags = nil
	}
	wk.PeerTags, gk.PeerTags = nil, nil
	if !reflect.DeepEqual(gk, wk) {
		t.Errorf("%s: key\n got %+v\nwant %+v", where, gk, wk)
	}
	if !slices.Equal(g.PeerTags, e.PeerTags) {
		t.Errorf("%s: peer tags %q, want %q", where, g.PeerTags, e.PeerTags)
	}
	if g.Hits != e.Hits || g.Errors != e.Errors || g.TopLevelHits != e.TopLevelHits || g.Duration != e.Duration {
		t.Errorf("%s: hits/errors/top/duration %d/%d/%d/%d, want %d/%d/%d/%d", where,
			g.Hits, g.Errors, g.TopLevelHits, g.Duration, e.Hits, e.Errors, e.TopLevelHits, e.Duration)
	}
	if !sameSketch(g.Ok, e.Ok) || !sameSketch(g.Err, e.Err) {
		t.Errorf("%s: sketches differ", where)
	}
	if (g.Ok != nil && g.Ok.Count() == 0) || (g.Err != nil && g.Err.Count() == 0) {
		t.Errorf("%s: an empty summary decoded as a non-nil sketch", where)
	}
	if g.DBType != "" || g.SpanDerivedPrimaryTags != nil || g.AdditionalMetricTags != nil {
		t.Errorf("%s: fields the SDK never sets are set: %q %q %q", where, g.DBType, g.SpanDerivedPrimaryTags, g.AdditionalMetricTags)
	}
}

func TestRoundTripTable(t *testing.T) {
	entries := tableEntries(t)
	var withErr, withZeros int
	for _, e := range entries {
		if e.Err != nil && e.Err.Count() > 0 {
			withErr++
		}
		if e.Ok != nil && e.Ok.ZeroCount() > 0 {
			withZeros++
		}
	}
	if withErr == 0 || withZeros == 0 {
		t.Fatal("test data lacks error sketches or zero counts")
	}
	buckets := []Bucket{{Start: 1_700_000_000_000_000_000, Duration: 10e9, AgentTimeShift: -3, Groups: entries}}
	b := AppendPayload(nil, &testHeader, buckets)
	p, err := DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	if !equalHeader(p.Header, testHeader) {
		t.Errorf("header\n got %+v\nwant %+v", p.Header, testHeader)
	}
	if len(p.Buckets) != 1 {
		t.Fatalf("%d buckets, want 1", len(p.Buckets))
	}
	bk := p.Buckets[0]
	if bk.Start != buckets[0].Start || bk.Duration != buckets[0].Duration || bk.AgentTimeShift != -3 {
		t.Errorf("bucket %d/%d/%d", bk.Start, bk.Duration, bk.AgentTimeShift)
	}
	if len(bk.Groups) != len(entries) {
		t.Fatalf("%d groups, want %d", len(bk.Groups), len(entries))
	}
	for i, e := range entries {
		checkGroup(t, fmt.Sprintf("group %d", i), &bk.Groups[i], e)
	}
}

func equalHeader(a, b Header) bool {
	ta, tb := a.Tags, b.Tags
	a.Tags, b.Tags = nil, nil
	return reflect.DeepEqual(a, b) && slices.Equal(ta, tb)
}

func TestRoundTripBuckets(t *testing.T) {
	entries := tableEntries(t)
	buckets := []Bucket{
		{Start: 10, Duration: 20, AgentTimeShift: 1 << 40, Groups: entries[:3]},
		{Start: 1 << 63, Duration: 1<<64 - 1, Groups: nil},
		{Start: 30, Duration: 40, AgentTimeShift: -1 << 62, Groups: []*aggregate.Entry{nil, entries[3], nil, entries[8]}},
	}
	p, err := DecodePayload(AppendPayload(nil, nil, buckets))
	if err != nil {
		t.Fatal(err)
	}
	if !equalHeader(p.Header, Header{}) {
		t.Errorf("nil header decoded as %+v", p.Header)
	}
	if len(p.Buckets) != 3 {
		t.Fatalf("%d buckets, want 3", len(p.Buckets))
	}
	for i, want := range buckets {
		got := p.Buckets[i]
		if got.Start != want.Start || got.Duration != want.Duration || got.AgentTimeShift != want.AgentTimeShift {
			t.Errorf("bucket %d: %d/%d/%d, want %d/%d/%d", i, got.Start, got.Duration, got.AgentTimeShift,
				want.Start, want.Duration, want.AgentTimeShift)
		}
		var nonNil []*aggregate.Entry
		for _, e := range want.Groups {
			if e != nil {
				nonNil = append(nonNil, e)
			}
		}
		if len(got.Groups) != len(nonNil) {
			t.Fatalf("bucket %d: %d groups, want %d (nil entries skipped)", i, len(got.Groups), len(nonNil))
		}
		for j, e := range nonNil {
			checkGroup(t, fmt.Sprintf("bucket %d group %d", i, j), &got.Groups[j], e)
		}
	}
}

// goldenEntry has no sketch values: both summaries are the empty DDSketch.
var goldenEntry = aggregate.Entry{
	Key: aggregate.Key{
		Service: "svc", Name: "op", Resource: "GET /", Type: "web", SpanKind: "server",
		HTTPMethod: "GET", HTTPEndpoint: "/", GRPCStatusCode: "", ServiceSource: "m",
		HTTPStatusCode: 200, Synthetics: true, IsTraceRoot: aggregate.False,
		PeerTags: nil,
	},
	Hits: 3, Errors: 1, TopLevelHits: 2, Duration: 4500,
}

// TestGoldenPayload checks the exact bytes of a tiny payload against bytes
// assembled independently with msgp's generic primitives, in the order of
// the agent's MarshalMsg, and the empty summary against protobuf-go's own
// encoding of a DDSketch holding only the mapping.
func TestGoldenPayload(t *testing.T) {
	emptyPB, err := proto.MarshalOptions{Deterministic: true}.Marshal(&sketchpb.DDSketch{
		Mapping: &sketchpb.IndexMapping{Gamma: (1 + 0.01) / (1 - 0.01), IndexOffset: 0, Interpolation: sketchpb.IndexMapping_NONE},
	})
	if err != nil {
		t.Fatal(err)
	}
	str := func(b []byte, k, v string) []byte { return msgp.AppendString(msgp.AppendString(b, k), v) }
	u64 := func(b []byte, k string, v uint64) []byte { return msgp.AppendUint64(msgp.AppendString(b, k), v) }
	arr := func(b []byte, k string, vs ...string) []byte {
		b = msgp.AppendArrayHeader(msgp.AppendString(b, k), uint32(len(vs)))
		for _, v := range vs {
			b = msgp.AppendString(b, v)
		}
		return b
	}
	var g []byte
	g = msgp.AppendMapHeader(g, 22)
	g = str(g, "Service", "svc")
	g = str(g, "Name", "op")
	g = str(g, "Resource", "GET /")
	g = msgp.AppendUint32(msgp.AppendString(g, "HTTPStatusCode"), 200)
	g = str(g, "Type", "web")
	g = str(g, "DBType", "")
	g = u64(g, "Hits", 3)
	g = u64(g, "Errors", 1)
	g = u64(g, "Duration", 4500)
	g = msgp.AppendBytes(msgp.AppendString(g, "OkSummary"), emptyPB)
	g = msgp.AppendBytes(msgp.AppendString(g, "ErrorSummary"), emptyPB)
	g = msgp.AppendBool(msgp.AppendString(g, "Synthetics"), true)
	g = u64(g, "TopLevelHits", 2)
	g = str(g, "SpanKind", "server")
	g = arr(g, "PeerTags")
	g = msgp.AppendInt32(msgp.AppendString(g, "IsTraceRoot"), 2)
	g = str(g, "GRPCStatusCode", "")
	g = str(g, "HTTPMethod", "GET")
	g = str(g, "HTTPEndpoint", "/")
	g = str(g, "srv_src", "m")
	g = arr(g, "SpanDerivedPrimaryTags")
	g = arr(g, "AdditionalMetricTags")

	var want []byte
	want = msgp.AppendMapHeader(want, 16)
	want = str(want, "Hostname", "h")
	want = str(want, "Env", "prod")
	want = str(want, "Version", "1.0")
	want = msgp.AppendArrayHeader(msgp.AppendString(want, "Stats"), 1)
	want = msgp.AppendMapHeader(want, 4)
	want = u64(want, "Start", 1_700_000_000_000_000_000)
	want = u64(want, "Duration", 10_000_000_000)
	want = msgp.AppendArrayHeader(msgp.AppendString(want, "Stats"), 1)
	want = append(want, g...)
	want = msgp.AppendInt64(msgp.AppendString(want, "AgentTimeShift"), 0)
	want = str(want, "Lang", "go")
	want = str(want, "TracerVersion", "0.1")
	want = str(want, "RuntimeID", "rid")
	want = u64(want, "Sequence", 1)
	want = str(want, "AgentAggregation", "")
	want = str(want, "Service", "svc")
	want = str(want, "ContainerID", "")
	want = arr(want, "Tags", "a:b")
	want = str(want, "GitCommitSha", "")
	want = str(want, "ImageTag", "")
	want = u64(want, "ProcessTagsHash", 0)
	want = str(want, "ProcessTags", "")

	h := Header{Hostname: "h", Env: "prod", Version: "1.0", Lang: "go", TracerVersion: "0.1",
		RuntimeID: "rid", Service: "svc", Tags: []string{"a:b"}, Sequence: 1}
	e := goldenEntry
	got := AppendPayload(nil, &h, []Bucket{{Start: 1_700_000_000_000_000_000, Duration: 10_000_000_000, Groups: []*aggregate.Entry{&e}}})
	if !bytes.Equal(got, want) {
		t.Fatalf("payload bytes differ\n got % x\nwant % x", got, want)
	}
	if grp := AppendGroup(nil, &e); !bytes.Equal(grp, g) {
		t.Errorf("AppendGroup bytes differ\n got % x\nwant % x", grp, g)
	}

	// Spelled out: the points the agent is strict about.
	after := func(key string) byte {
		i := bytes.Index(got, append([]byte{byte(0xa0 | len(key))}, key...))
		if i < 0 {
			t.Fatalf("key %q missing", key)
		}
		return got[i+1+len(key)]
	}
	if c := after("srv_src"); c != 0xa1 {
		t.Errorf(`srv_src value starts with %#x, want fixstr 0xa1 ("m")`, c)
	}
	if bytes.Contains(got, []byte("ServiceSource")) {
		t.Error(`the key must be "srv_src", not "ServiceSource"`)
	}
	if c := after("OkSummary"); c != 0xc4 {
		t.Errorf("OkSummary value starts with %#x, want bin8 0xc4", c)
	}
	if c := after("ErrorSummary"); c != 0xc4 {
		t.Errorf("ErrorSummary value starts with %#x, want bin8 0xc4", c)
	}
	if c := after("IsTraceRoot"); c != 0x02 {
		t.Errorf("IsTraceRoot value is %#x, want the integer 2 (positive fixint 0x02)", c)
	}
	if c := after("HTTPStatusCode"); c != 0xcc {
		t.Errorf("HTTPStatusCode value starts with %#x, want uint8 0xcc", c)
	}
	if c := after("Synthetics"); c != 0xc3 {
		t.Errorf("Synthetics value is %#x, want true 0xc3", c)
	}
	if c := after("PeerTags"); c != 0x90 {
		t.Errorf("nil PeerTags encoded as %#x, want an empty array 0x90", c)
	}
}

// The key constants must be msgpack strings of the agent's exact key names.
func TestKeyConstants(t *testing.T) {
	keys := map[string]string{
		kHostname: "Hostname", kEnv: "Env", kVersion: "Version", kStats: "Stats", kLang: "Lang",
		kTracerVersion: "TracerVersion", kRuntimeID: "RuntimeID", kSequence: "Sequence",
		kAgentAggregation: "AgentAggregation", kService: "Service", kContainerID: "ContainerID",
		kTags: "Tags", kGitCommitSha: "GitCommitSha", kImageTag: "ImageTag",
		kProcessTagsHash: "ProcessTagsHash", kProcessTags: "ProcessTags", kStart: "Start",
		kDuration: "Duration", kAgentTimeShift: "AgentTimeShift", kName: "Name", kResource: "Resource",
		kHTTPStatusCode: "HTTPStatusCode", kType: "Type", kDBType: "DBType", kHits: "Hits",
		kErrors: "Errors", kOkSummary: "OkSummary", kErrorSummary: "ErrorSummary",
		kSynthetics: "Synthetics", kTopLevelHits: "TopLevelHits", kSpanKind: "SpanKind",
		kPeerTags: "PeerTags", kIsTraceRoot: "IsTraceRoot", kGRPCStatusCode: "GRPCStatusCode",
		kHTTPMethod: "HTTPMethod", kHTTPEndpoint: "HTTPEndpoint", kServiceSource: "srv_src",
		kSpanDerivedPrimaryTags: "SpanDerivedPrimaryTags", kAdditionalMetricTags: "AdditionalMetricTags",
	}
	for k, name := range keys {
		if want := string(msgp.AppendString(nil, name)); k != want {
			t.Errorf("key for %s is %q, want %q", name, k, want)
		}
	}
}

func TestSizesAreUpperBounds(t *testing.T) {
	entries := tableEntries(t)
	for i, e := range entries {
		if n, bound := len(AppendGroup(nil, e)), GroupSize(e); n > bound {
			t.Errorf("entry %d: AppendGroup wrote %d bytes, GroupSize %d", i, n, bound)
		}
	}
	long := testHeader
	long.Tags = append(slices.Clone(long.Tags), strings.Repeat("t", 300), strings.Repeat("u", 70000))
	long.Hostname = strings.Repeat("h", 40)
	for _, h := range []*Header{nil, {}, &testHeader, &long} {
		// One bucket: the documented bound HeaderSize + sum of GroupSize.
		bound := HeaderSize(h)
		for _, e := range entries {
			bound += GroupSize(e)
		}
		if n := len(AppendPayload(nil, h, []Bucket{{Start: 1 << 62, Duration: 1 << 62, AgentTimeShift: -1 << 62, Groups: entries}})); n > bound {
			t.Errorf("payload of %d bytes, bound %d", n, bound)
		}
		if n := len(AppendPayload(nil, h, nil)); n > HeaderSize(h) {
			t.Errorf("empty payload of %d bytes, HeaderSize %d", n, HeaderSize(h))
		}
	}
	if GroupSize(nil) != 0 {
		t.Error("GroupSize(nil) != 0")
	}
}

// AppendPayload appends: what the buffer held stays.
func TestAppendPayloadAppends(t *testing.T) {
	entries := tableEntries(t)
	b := AppendPayload([]byte{0x01, 0x02}, &testHeader, []Bucket{{Groups: entries}})
	if b[0] != 0x01 || b[1] != 0x02 {
		t.Fatal("existing bytes overwritten")
	}
	if _, err := DecodePayload(b[2:]); err != nil {
		t.Fatal(err)
	}
}

// benchEntries returns n entries with ok and error sketches of perSketch
// realistic durations each (log-uniform 50µs–2s), aggregated by a Table.
func benchEntries(tb testing.TB, n, perSketch int) []*aggregate.Entry {
	tb.Helper()
	tab := aggregate.NewTable(n)
	r := rand.New(rand.NewPCG(5, 6))
	for k := range n {
		s := aggregate.Record{
			Service: "checkout", Name: "http.request", Resource: fmt.Sprintf("GET /api/v2/items/%d", k),
			Type: "web", SpanKind: "server", HTTPMethod: "GET", HTTPEndpoint: "/api/v2/items/{id}",
			HTTPStatusCode: 200, TopLevel: true, TraceRoot: k%3 == 0,
		}
		for i := range 2 * perSketch {
			s.Error = i%2 == 1
			s.Duration = int64(logUniform(r, 50e3, 2e9))
			tab.Add(&s)
		}
	}
	entries := tab.Touched(make([]*aggregate.Entry, 0, n))
	if len(entries) != n {
		tb.Fatalf("%d entries, want %d", len(entries), n)
	}
	return entries
}

func TestAppendPayloadAllocs(t *testing.T) {
	entries := benchEntries(t, 2048, 100)
	buckets := []Bucket{{Start: 1, Duration: 10e9, Groups: entries}}
	h := testHeader
	buf := make([]byte, 0, payloadSize(&h, buckets))
	if n := testing.AllocsPerRun(10, func() { buf = AppendPayload(buf[:0], &h, buckets) }); n != 0 {
		t.Errorf("AppendPayload of 2048 entries into a sized buffer: %v allocs, want 0", n)
	}
	// Into a nil buffer it grows once, to the computed bound.
	if n := testing.AllocsPerRun(5, func() { _ = AppendPayload(nil, &h, buckets) }); n != 1 {
		t.Errorf("AppendPayload into a nil buffer: %v allocs, want 1", n)
	}
	if _, err := DecodePayload(buf); err != nil {
		t.Fatal(err)
	}
}

// TestAlignStart: the start of t's interval on the epoch, t itself when it
// is one, and the floor (not toward zero) before the epoch.
func TestAlignStart(t *testing.T) {
	for _, tc := range []struct {
		t    int64 // unix ns
		d    time.Duration
		want int64
	}{
		{1_800_000_000_000_000_000, 10 * time.Second, 1_800_000_000_000_000_000},
		{1_800_000_009_999_999_999, 10 * time.Second, 1_800_000_000_000_000_000},
		{1_800_000_000_000_000_000, 7 * time.Second, 1_799_999_999_000_000_000},
		{-1, time.Second, -1_000_000_000},
		{0, time.Hour, 0},
	} {
		if got := AlignStart(time.Unix(0, tc.t), tc.d).UnixNano(); got != tc.want {
			t.Errorf("AlignStart(%d, %v) = %d, want %d", tc.t, tc.d, got, tc.want)
		}
	}
	// Past 2262, where UnixNano is undefined: still a start within d before t.
	for _, d := range []time.Duration{time.Second, 7 * time.Second, 10 * time.Second} {
		far := time.Date(2300, 1, 1, 0, 0, 3, 0, time.UTC)
		if got := AlignStart(far, d); got.After(far) || !got.Add(d).After(far) {
			t.Errorf("AlignStart(%v, %v) = %v, want within %v before it", far, d, got, d)
		}
	}
}

// GroupSize is exact, so that datagrams fill their limit: every string,
// integer, bin and array across each of its msgpack encoding boundaries.
func TestGroupSizeIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	lens := []int{0, 1, 31, 32, 255, 256, 65535, 65536}
	uints := []uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxUint64}
	roots := []aggregate.Trilean{0, 1, 2, 127, 128, 32767, 32768, -1, -32, -33, -128, -129, -32768, -32769}
	str := func() string { return strings.Repeat("s", lens[r.IntN(len(lens))]) }
	tags := func() []string {
		ss := make([]string, []int{0, 1, 15, 16, 17}[r.IntN(5)])
		for i := range ss {
			ss[i] = str()
		}
		return ss
	}
	sketch := func() *aggregate.Sketch {
		n := []int{-1, 0, 1, 3, 40, 400}[r.IntN(6)]
		if n < 0 {
			return nil
		}
		s := &aggregate.Sketch{}
		for range n {
			s.Add(logUniform(r, 1e3, 1e12))
		}
		return s
	}
	for i := range 2000 {
		e := &aggregate.Entry{
			Key: aggregate.Key{
				Service: str(), Name: str(), Resource: str(), Type: str(), SpanKind: str(),
				GRPCStatusCode: str(), HTTPMethod: str(), HTTPEndpoint: str(), ServiceSource: str(),
				HTTPStatusCode: uint32(uints[r.IntN(6)]), IsTraceRoot: roots[r.IntN(len(roots))],
				Synthetics: r.IntN(2) == 0, PeerTags: tags(),
			},
			Hits: uints[r.IntN(len(uints))], Errors: uints[r.IntN(len(uints))],
			TopLevelHits: uints[r.IntN(len(uints))], Duration: uints[r.IntN(len(uints))],
			Ok: sketch(), Err: sketch(),
		}
		if n, size := len(AppendGroup(nil, e)), GroupSize(e); n != size {
			t.Fatalf("entry %d (%+v): AppendGroup wrote %d bytes, GroupSize says %d", i, e.Key, n, size)
		}
		g := Group{Entry: *e, DBType: str(), SpanDerivedPrimaryTags: tags(), AdditionalMetricTags: tags()}
		if n, size := len(g.Append(nil)), g.Size(); n != size {
			t.Fatalf("group %d: Append wrote %d bytes, Size says %d", i, n, size)
		}
	}
}
