// This file is a randomized differential test: the same random spans go to
// the SDK (stats.Aggregator → fake agent → the agent's own msgp decoder) and
// to the agent's SpanConcentrator driven as dd-trace-go drives it, and the
// two sets of groups must be equal on the full label key.

package peer

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"
	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// semKey is a group's full label key as both sides put it on the wire.
type semKey struct {
	Service, Name, Resource, Type, SpanKind string
	HTTPStatusCode                          uint32
	Synthetics                              bool
	IsTraceRoot                             pb.Trilean
	PeerTags                                string // sorted, "\x00"-joined
	HTTPMethod, HTTPEndpoint, GRPC, SrvSrc  string
	DBType, AdditionalTags                  string
}

func (k semKey) String() string {
	q := func(s string) string {
		if len(s) > 40 {
			return strconv.Quote(s[:20]) + fmt.Sprintf("…(%dB)…", len(s)) + strconv.Quote(s[len(s)-12:])
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf("svc=%s name=%s res=%s type=%s kind=%s http=%d synth=%v root=%d peers=%s method=%s endpoint=%s grpc=%s srvsrc=%s",
		q(k.Service), q(k.Name), q(k.Resource), q(k.Type), q(k.SpanKind), k.HTTPStatusCode, k.Synthetics, k.IsTraceRoot,
		q(strings.ReplaceAll(k.PeerTags, "\x00", ",")), q(k.HTTPMethod), q(k.HTTPEndpoint), q(k.GRPC), q(k.SrvSrc))
}

// semGroup is a group's counts and sketches, summed over buckets.
type semGroup struct {
	Hits, Errors, TopLevelHits uint64
	Duration                   uint64
	Ok, Err                    *ddsketch.DDSketch
}

func newSemSketch() *ddsketch.DDSketch {
	s, err := ddsketch.LogCollapsingLowestDenseDDSketch(0.01, 2048)
	if err != nil {
		panic(err)
	}
	return s
}

func decodeSemSketch(t *testing.T, b []byte) *ddsketch.DDSketch {
	if len(b) == 0 {
		return newSemSketch()
	}
	var m sketchpb.DDSketch
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("sketch: %v", err)
	}
	s, err := ddsketch.FromProto(&m)
	if err != nil {
		t.Fatalf("sketch: %v", err)
	}
	return s
}

// addSemGroup adds one decoded wire group under key k (norm, when set,
// rewrites the key first).
func addSemGroup(t *testing.T, m map[semKey]*semGroup, g *pb.ClientGroupedStats, norm func(*semKey)) {
	peers := slices.Clone(g.PeerTags)
	sort.Strings(peers)
	k := semKey{g.Service, g.Name, g.Resource, g.Type, g.SpanKind, g.HTTPStatusCode, g.Synthetics, g.IsTraceRoot,
		strings.Join(peers, "\x00"), g.HTTPMethod, g.HTTPEndpoint, g.GRPCStatusCode, g.ServiceSource,
		g.DBType, strings.Join(g.AdditionalMetricTags, "\x00")}
	if norm != nil {
		norm(&k)
	}
	e := m[k]
	if e == nil {
		e = &semGroup{Ok: newSemSketch(), Err: newSemSketch()}
		m[k] = e
	}
	e.Hits += g.Hits
	e.Errors += g.Errors
	e.TopLevelHits += g.TopLevelHits
	if e.Duration += g.Duration; e.Duration < g.Duration {
		e.Duration = math.MaxUint64 // saturate, as the SDK does
	}
	if err := e.Ok.MergeWith(decodeSemSketch(t, g.OkSummary)); err != nil {
		t.Fatal(err)
	}
	if err := e.Err.MergeWith(decodeSemSketch(t, g.ErrorSummary)); err != nil {
		t.Fatal(err)
	}
}

// semSpan is one random span: the SDK's fields and the trace's origin.
type semSpan struct {
	s      stats.Span
	origin string
}

func pick[T any](r *rand.Rand, vs []T) T { return vs[r.IntN(len(vs))] }

// The label space, edge cases included: empty, over the agent's length
// limits (100 for service/name/type, 5000 for resource, and the SDK's 200
// for tag-like labels) with runes straddling the limit, invalid UTF-8, odd
// case, and pairs that differ only past a limit (they must merge).
var (
	semServices = []string{"web", "users-api", "", "Web Front", "svc\xff\xfe", "ünïcödé-svc",
		strings.Repeat("s", 100) + "a", strings.Repeat("s", 100) + "b", strings.Repeat("s", 99) + "é-tail", strings.Repeat("s", 98) + "\xe2\x82"}
	semNames     = []string{"http.request", "grpc.server", "", "db.query", "op\x80", strings.Repeat("n", 101), strings.Repeat("n", 98) + "€"}
	semResources = []string{"GET /users/{id}", "", "SELECT * FROM t WHERE id = ?", "res\xc3", strings.Repeat("r", 4999) + "€x",
		strings.Repeat("r", 6000), strings.Repeat("r", 5000) + "other-tail", "POST /pay"}
	semTypes = []string{"", "web", "http", "sql", "queue", strings.Repeat("t", 101) + "x", "typ\xff"}
	semKinds = []string{"server", "client", "producer", "consumer", "internal", "", "SERVER", "Client", "PRODUCER", "Internal",
		"weird", strings.Repeat("k", 250),
		// Kinds the agent's strings.ToLower (Unicode) makes a counted kind:
		// U+0130 (İ) lowers to "i"; U+212A (Kelvin) to "k", and U+017F (ſ)
		// is already lower case, so neither gives one.
		"cl\u0130ent", "\u0130nternal", "\u0130NTERNAL", "\u017Ferver", "clien\u212A"}
	semStatus   = []uint32{0, 0, 200, 201, 404, 500, 599, 600, 999, 65535, math.MaxUint32}
	semMethods  = []string{"", "", "GET", "POST", "get", "BREW", strings.Repeat("M", 250)}
	semEndpoint = []string{"", "", "/users/{id}", "/orders", "/é\xff", "/" + strings.Repeat("e", 300), "/" + strings.Repeat("e", 300) + "x"}
	// gRPC status codes in the forms the agent reads (parseGRPCStatusString):
	// numbers, enum names in any case, with or without underscores, the
	// "StatusCode." prefix, both spellings of CANCELLED, and junk.
	semGRPC = []string{"", "", "", "0", "5", "05", "14", "OK", "NOT_FOUND", "NotFound", "notfound", "StatusCode.NOT_FOUND",
		"StatusCode.5", "CANCELLED", "Canceled", "DeadlineExceeded", "DEADLINE_EXCEEDED", "bogus", "-1", "99", "4294967296",
		// The agent upper-cases with strings.ToUpper (Unicode): U+0131 (ı)
		// and U+017F (ſ) become "I" and "S"; U+212A (Kelvin) stays itself,
		// so it spells no "K"; "+5" and "StatusCode.05" are not numbers.
		"\u0131nternal", "alreadyexi\u017Fts", "UN\u212ANOWN", "un\u212Anown", "+5", "StatusCode.05", "statuscode.5"}
	semSrvSrc = []string{"", "", "opt.version", "m", strings.Repeat("v", 250)}
	// semPeers: for each peer-tag key (the agent's list, and one it does not
	// have), the values a span may carry; "" is an empty value. Host values
	// cover the forms the agent's IP quantization tells apart; "," has a
	// value the agent keeps that quantizes to none.
	semPeers = []struct {
		key    string
		values []string
	}{
		{"peer.service", []string{"users-db", "Billing API", ""}},
		{"db.instance", []string{"main", "0"}},
		{"out.host", []string{"db.internal", "10.1.2.3", "10.1.2.3:5432", "[2001:db8::1]:443", "::ffff:1.2.3.4",
			"fe80::1%eth0", "127.0.0.1", "ip-10-1-2-3.ec2.internal", "http://10.0.0.1:80/x", " ", ","}},
		{"db.cassandra.contact.points", []string{"10.0.0.1,10.0.0.2,10.0.0.1", "10.0.0.1, 10.0.0.2", "a,a,b", ",,", semIPList}},
		{"_dd.base_service", []string{"web-base", ""}},
		{"db.system", []string{"postgresql"}},
		{"peer.hostname", []string{"h1", "ünï\xff"}},
		{"rpc.service", []string{strings.Repeat("x", 300)}},
		{"not.a.peer.key", []string{"x"}},
	}
	// semIPList is a list of addresses longer than stats.MaxTagLen that the
	// agent quantizes to a short value: cut before it is quantized, it would
	// end in a partial address.
	semIPList    = strings.Repeat("10.123.45.67:9042,10.123.45.68:9042,", 8) + "cass.internal"
	semDurations = []int64{0, 1, 2, -1, 999, 1 << 40, math.MaxInt64 / 2, math.MaxInt64}
)

// randomSemSpans returns n random spans ending around now: each takes its
// labels from one of n/10 random label sets (so groups hold several spans
// and their counts and sketches are compared, not just their keys) and
// draws its own measurements: duration, end, error, top-level/measured.
func randomSemSpans(r *rand.Rand, n int, now int64) []semSpan {
	labels := make([]semSpan, max(1, n/10))
	for i := range labels {
		s := stats.Span{
			Service: pick(r, semServices), Name: pick(r, semNames), Resource: pick(r, semResources),
			Type: pick(r, semTypes), SpanKind: pick(r, semKinds), HTTPStatusCode: pick(r, semStatus),
			HTTPMethod: pick(r, semMethods), HTTPEndpoint: pick(r, semEndpoint), GRPCStatusCode: pick(r, semGRPC),
			ServiceSource: pick(r, semSrvSrc), TraceRoot: r.IntN(3) == 0,
		}
		for _, p := range semPeers {
			if r.IntN(3) == 0 {
				s.PeerTags = append(s.PeerTags, p.key+":"+pick(r, p.values))
			}
		}
		origin := pick(r, []string{"", "", "rum", "lambda"})
		if r.IntN(7) == 0 {
			s.Synthetics = true
			origin = pick(r, []string{"synthetics", "synthetics-browser"})
		}
		labels[i] = semSpan{s: s, origin: origin}
	}
	out := make([]semSpan, n)
	for i := range out {
		sp := labels[r.IntN(len(labels))]
		s := &sp.s
		s.Error = r.IntN(4) == 0
		switch r.IntN(4) { // top-level, measured, both, neither
		case 0:
			s.TopLevel = true
		case 1:
			s.Measured = true
		case 2:
			s.TopLevel, s.Measured = true, true
		}
		if r.IntN(10) == 0 {
			s.Duration = pick(r, semDurations)
		} else {
			s.Duration = 1 + int64(math.Exp(r.Float64()*21)) // 1 ns .. ~1.3 s, log-uniform
		}
		// Several ends within a bucket or two: now, 1 ms, 3 s and 7 s ago.
		end := now - pick(r, []int64{0, 1e6, 3e9, 7e9})
		s.Start = end - s.Duration
		if r.IntN(50) == 0 {
			s.Start = now // with a huge duration the end overflows
		}
		out[i] = sp
	}
	return out
}

// semMeta is the meta map a dd-trace-go span with these fields carries
// (metaOf, plus the origin); semMetrics its metrics.
func semMeta(sp semSpan) map[string]string {
	m := metaOf(&sp.s)
	delete(m, "_dd.origin")
	if sp.origin != "" {
		m["_dd.origin"] = sp.origin
	}
	return m
}

func semMetrics(s *stats.Span) map[string]float64 {
	m := map[string]float64{}
	if s.TopLevel {
		m["_top_level"] = 1
	}
	if s.Measured {
		m["_dd.measured"] = 1
	}
	return m
}

// documentedSDKCut applies to an agent key the SDK's documented cut of
// tag-like labels and peer tags to stats.MaxTagLen (stats/span.go): the
// agent's SpanConcentrator keeps them whole.
func documentedSDKCut(cut *int) func(*semKey) {
	return func(k *semKey) {
		for _, v := range []*string{&k.SpanKind, &k.HTTPMethod, &k.HTTPEndpoint, &k.GRPC, &k.SrvSrc} {
			if len(*v) > stats.MaxTagLen {
				*v = normalize.TruncateUTF8(*v, stats.MaxTagLen)
				*cut++
			}
		}
		if k.PeerTags != "" {
			tags := strings.Split(k.PeerTags, "\x00")
			for i, t := range tags {
				if len(t) > stats.MaxTagLen {
					tags[i] = normalize.TruncateUTF8(t, stats.MaxTagLen)
					*cut++
				}
			}
			sort.Strings(tags)
			k.PeerTags = strings.Join(slices.Compact(tags), "\x00")
		}
	}
}

// TestRandomSpansMatchAgent: a few thousand random spans over the label
// space and its edge cases give, group by group on the full label key, the
// same hits, errors, top-level hits, duration and sketches from the SDK as
// from the agent's SpanConcentrator (v0.85.4).
//
// Set up so that only semantics are compared: cardinality budgets and caps
// are off on both sides (the SDK's per-field budgets are a documented
// design of their own), and the concentrator has obfuscation enabled as
// dd-trace-go sets it for an agent that advertises an obfuscation version,
// which turns on its length caps (service/name/type 100, resource 5000).
//
// Documented differences, skipped explicitly and counted:
//   - a span with Duration <= 0 is not counted by the SDK (DESIGN §4); the
//     agent counts it. Such spans are not given to the agent; the SDK must
//     count them as Ineligible.
//   - the SDK cuts span kind, HTTP method and endpoint, gRPC code, service
//     source and each peer tag to stats.MaxTagLen bytes; the concentrator
//     does not. The expected keys get the same cut (documentedSDKCut).
//
// Tolerated, not skipped: the agent sums durations in float64 (a group's
// Duration may differ by its rounding, or be garbage past 2^64 where the SDK
// saturates). Sketches must match bin for bin: both sides cut each duration
// to ten significant bits before it goes in.
//
// It caught, and now holds, the SDK to the agent's canonical gRPC codes
// ("NOT_FOUND" → "5", junk → ""), its quantized IP addresses in peer-tag
// values, its dropping of peer tags without a value, and its sketch bins.
//
// SEMANTICS_SEED=n picks another seed; SEMANTICS_SPANS=n another count.
func TestRandomSpansMatchAgent(t *testing.T) {
	seed, n := uint64(12), 4000
	if v, err := strconv.ParseUint(os.Getenv("SEMANTICS_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("SEMANTICS_SPANS")); err == nil && v > 0 {
		n = v
	}
	t.Logf("seed %d, %d spans", seed, n)
	now := time.Now()
	spans := randomSemSpans(rand.New(rand.NewPCG(seed, 0x5e3a)), n, now.UnixNano())

	// (b) The agent, as dd-trace-go drives it.
	sc := agentstats.NewSpanConcentrator(&agentstats.SpanConcentratorConfig{
		ComputeStatsBySpanKind: true, BucketInterval: peerBucketInterval.Nanoseconds(),
	}, now.Add(-time.Minute))
	sc.SetObfuscationEnabled(true, false)
	keys := agentPeerTagKeys()
	var eligible, skippedDuration uint64
	for i, sp := range spans {
		s := &sp.s
		ss, ok := sc.NewStatSpanWithConfig(spanConfig(s, s.Start, semMeta(sp), semMetrics(s), keys))
		if s.Duration <= 0 {
			if ok {
				skippedDuration++ // documented: the SDK does not count it
			}
			continue
		}
		if ok != s.Eligible() {
			t.Errorf("span %d (kind %q, top %v, measured %v): agent eligible %v, SDK %v", i, s.SpanKind, s.TopLevel, s.Measured, ok, s.Eligible())
		}
		if !ok {
			continue
		}
		eligible++
		sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "test"}, "", nil, sp.origin)
	}
	cut := 0
	want := map[semKey]*semGroup{}
	for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				addSemGroup(t, want, g, documentedSDKCut(&cut))
			}
		}
	}

	// (a) The SDK, through the fake agent, decoded by the agent's own code.
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{
		AgentURL: agent.URL(), Env: "test", Service: "web",
		PeerTagKeys:   keys,
		MaxAggregates: stats.MaxMaxAggregates,
		CardinalityLimits: aggregate.Limits{Resource: -1, Service: -1, Operation: -1, Type: -1, SpanKind: -1,
			HTTPMethod: -1, HTTPEndpoint: -1, GRPCStatusCode: -1, ServiceSource: -1, PeerTag: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	for i := range spans {
		for !agg.Publish(&spans[i].s) {
			time.Sleep(time.Microsecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h := agg.Health()
	if h.Counted != eligible || h.Overflowed != 0 || h.CollapsedSpans != 0 || h.AggregateDropped != 0 {
		t.Errorf("SDK health: counted %d (agent counted %d), overflowed %d, collapsed %d, dropped %d",
			h.Counted, eligible, h.Overflowed, h.CollapsedSpans, h.AggregateDropped)
	}
	got := map[semKey]*semGroup{}
	for _, r := range statstest.Accepted(agent.Requests()) {
		var p pb.ClientStatsPayload
		if rest, err := p.UnmarshalMsg(r.Body); err != nil || len(rest) != 0 {
			t.Fatalf("the agent's decoder rejects the SDK's payload: %v (%d bytes left)", err, len(rest))
		}
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				addSemGroup(t, got, g, nil)
			}
		}
	}

	// Compare, and summarize mismatches by the fields that differ.
	var gotHits uint64
	for _, g := range got {
		gotHits += g.Hits
	}
	if gotHits != eligible {
		t.Errorf("SDK reported %d hits, the agent %d", gotHits, eligible)
	}
	const shown = 3
	shownMissing, shownExtra := 0, 0
	var missing, extra []semKey
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sortKeys := func(ks []semKey) {
		sort.Slice(ks, func(i, j int) bool { return ks[i].String() < ks[j].String() })
	}
	sortKeys(missing)
	sortKeys(extra)
	for _, k := range missing {
		if shownMissing < shown {
			t.Errorf("agent group missing from the SDK's (%d hits):\n  %v", want[k].Hits, k)
			shownMissing++
		}
	}
	for _, k := range extra {
		if shownExtra < shown {
			t.Errorf("SDK group the agent does not have (%d hits):\n  %v", got[k].Hits, k)
			shownExtra++
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Errorf("%d agent groups missing from the SDK, %d SDK groups not in the agent's (of %d / %d)", len(missing), len(extra), len(want), len(got))
		for _, c := range classifyKeyDiffs(missing, extra) {
			t.Errorf("  mismatch class %-20s %4d groups, e.g. agent %s / SDK %s", c.fields, c.n, c.agent, c.sdk)
		}
	}
	countMismatch, durMismatch, sketchMismatch, binsDiffer := 0, 0, 0, 0
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		if g.Hits != w.Hits || g.Errors != w.Errors || g.TopLevelHits != w.TopLevelHits {
			if countMismatch++; countMismatch <= shown {
				t.Errorf("counts differ for %v:\n  agent hits %d errors %d top %d\n  SDK   hits %d errors %d top %d",
					k, w.Hits, w.Errors, w.TopLevelHits, g.Hits, g.Errors, g.TopLevelHits)
			}
		}
		if g.Duration != w.Duration && !agentFloatSum(w.Duration, g.Duration, w.Hits) {
			if durMismatch++; durMismatch <= shown {
				t.Errorf("duration differs for %v:\n  agent %d\n  SDK   %d", k, w.Duration, g.Duration)
			}
		}
		for _, pair := range []struct {
			name   string
			ws, gs *ddsketch.DDSketch
		}{{"ok", w.Ok, g.Ok}, {"error", w.Err, g.Err}} {
			if msg := compareSketches(pair.ws, pair.gs); msg != "" {
				if sketchMismatch++; sketchMismatch <= shown {
					t.Errorf("%s sketch differs for %v: %s", pair.name, k, msg)
				}
			} else if !sameBins(pair.ws, pair.gs) {
				binsDiffer++
			}
		}
	}
	if countMismatch+durMismatch+sketchMismatch+binsDiffer > 0 {
		t.Errorf("of %d common groups: %d differ in counts, %d in duration, %d in sketches, %d sketches in their bins",
			len(want)-len(missing), countMismatch, durMismatch, sketchMismatch, binsDiffer)
	}
	t.Logf("%d groups from %d eligible spans; documented differences skipped: %d spans with Duration <= 0 the agent would count, %d agent labels cut to MaxTagLen",
		len(want), eligible, skippedDuration, cut)
}

// compareSketches returns "" when the sketches hold the same number of
// values (and of zeros) and their quantiles agree within twice the relative
// accuracy plus the agent's 10-bit mantissa truncation of each value.
func compareSketches(w, g *ddsketch.DDSketch) string {
	if w.GetCount() != g.GetCount() || w.GetZeroCount() != g.GetZeroCount() {
		return fmt.Sprintf("count agent %v (zeros %v), SDK %v (zeros %v)", w.GetCount(), w.GetZeroCount(), g.GetCount(), g.GetZeroCount())
	}
	if w.IsEmpty() {
		return ""
	}
	const tol = 2*0.01 + 1.0/1024
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
		wv, err1 := w.GetValueAtQuantile(q)
		gv, err2 := g.GetValueAtQuantile(q)
		if err1 != nil || err2 != nil {
			return fmt.Sprintf("p%v: %v / %v", q*100, err1, err2)
		}
		if math.Abs(wv-gv) > tol*math.Max(math.Abs(wv), math.Abs(gv)) {
			return fmt.Sprintf("p%v agent %.6g, SDK %.6g", q*100, wv, gv)
		}
	}
	return ""
}

// sameBins reports whether the sketches have the same count in every bin.
func sameBins(w, g *ddsketch.DDSketch) bool {
	a, b := map[int]float64{}, map[int]float64{}
	w.GetPositiveValueStore().ForEach(func(i int, c float64) bool { a[i] += c; return false })
	g.GetPositiveValueStore().ForEach(func(i int, c float64) bool { b[i] += c; return false })
	if len(a) != len(b) {
		return false
	}
	for i, c := range a {
		if b[i] != c {
			return false
		}
	}
	return true
}

// agentFloatSum reports whether the agent's duration w differs from the
// SDK's exact (saturating) sum g only as the agent's float64 sum of n
// durations can (statsraw.go groupedStats.duration, exported with round):
// by at most half an ulp of the sum per addition, or, at or past 2^64,
// by anything: its float-to-uint64 conversion is then undefined (the SDK
// saturates, DESIGN §5 "durations saturate").
func agentFloatSum(w, g, n uint64) bool {
	if g == math.MaxUint64 {
		return true // the SDK saturated (documented); the agent's float was >= 2^64
	}
	hi := math.Max(float64(w), float64(g))
	ulp := math.Nextafter(hi, math.Inf(1)) - hi
	diff := math.Abs(float64(int64(w - g))) // two's complement distance
	return diff <= float64(n)*ulp
}

// keyField is one label field of semKey, by name.
type keyField struct {
	name string
	get  func(*semKey) string
	set  func(*semKey)
}

var semKeyFields = []keyField{
	{"Service", func(k *semKey) string { return k.Service }, func(k *semKey) { k.Service = "" }},
	{"Name", func(k *semKey) string { return k.Name }, func(k *semKey) { k.Name = "" }},
	{"Resource", func(k *semKey) string { return k.Resource }, func(k *semKey) { k.Resource = "" }},
	{"Type", func(k *semKey) string { return k.Type }, func(k *semKey) { k.Type = "" }},
	{"SpanKind", func(k *semKey) string { return k.SpanKind }, func(k *semKey) { k.SpanKind = "" }},
	{"HTTPStatusCode", func(k *semKey) string { return strconv.Itoa(int(k.HTTPStatusCode)) }, func(k *semKey) { k.HTTPStatusCode = 0 }},
	{"Synthetics", func(k *semKey) string { return strconv.FormatBool(k.Synthetics) }, func(k *semKey) { k.Synthetics = false }},
	{"IsTraceRoot", func(k *semKey) string { return k.IsTraceRoot.String() }, func(k *semKey) { k.IsTraceRoot = 0 }},
	{"PeerTags", func(k *semKey) string { return strings.ReplaceAll(k.PeerTags, "\x00", ",") }, func(k *semKey) { k.PeerTags = "" }},
	{"HTTPMethod", func(k *semKey) string { return k.HTTPMethod }, func(k *semKey) { k.HTTPMethod = "" }},
	{"HTTPEndpoint", func(k *semKey) string { return k.HTTPEndpoint }, func(k *semKey) { k.HTTPEndpoint = "" }},
	{"GRPCStatusCode", func(k *semKey) string { return k.GRPC }, func(k *semKey) { k.GRPC = "" }},
	{"ServiceSource", func(k *semKey) string { return k.SrvSrc }, func(k *semKey) { k.SrvSrc = "" }},
}

type keyDiffClass struct {
	fields     string
	n          int
	agent, sdk string
}

// classifyKeyDiffs pairs each agent key the SDK lacks with an SDK key the
// agent lacks that equals it but for one or two fields, and counts the
// pairs by those fields, with one example of their values.
func classifyKeyDiffs(missing, extra []semKey) []keyDiffClass {
	classes := map[string]*keyDiffClass{}
	used := map[semKey]bool{}
	done := map[semKey]bool{}
	blank := func(k semKey, fs []keyField) semKey {
		for _, f := range fs {
			f.set(&k)
		}
		return k
	}
	var subsets [][]keyField
	for i := range semKeyFields {
		subsets = append(subsets, []keyField{semKeyFields[i]})
	}
	for i := range semKeyFields {
		for j := i + 1; j < len(semKeyFields); j++ {
			subsets = append(subsets, []keyField{semKeyFields[i], semKeyFields[j]})
		}
	}
	for _, fs := range subsets {
		idx := map[semKey][]semKey{}
		for _, e := range extra {
			if !used[e] {
				b := blank(e, fs)
				idx[b] = append(idx[b], e)
			}
		}
		for _, m := range missing {
			if done[m] {
				continue
			}
			b := blank(m, fs)
			cands := idx[b]
			for len(cands) > 0 && used[cands[0]] {
				cands = cands[1:]
			}
			if len(cands) == 0 {
				continue
			}
			e := cands[0]
			used[e], done[m] = true, true
			var names []string
			var av, sv []string
			for _, f := range fs {
				names = append(names, f.name)
				a, g := f.get(&m), f.get(&e)
				if f.name == "PeerTags" { // only the tags that differ
					as, gs := strings.Split(a, ","), strings.Split(g, ",")
					a = strings.Join(slices.DeleteFunc(slices.Clone(as), func(t string) bool { return slices.Contains(gs, t) }), ",")
					g = strings.Join(slices.DeleteFunc(slices.Clone(gs), func(t string) bool { return slices.Contains(as, t) }), ",")
				}
				av = append(av, strconv.Quote(trimSem(a)))
				sv = append(sv, strconv.Quote(trimSem(g)))
			}
			name := strings.Join(names, "+")
			c := classes[name]
			if c == nil {
				c = &keyDiffClass{fields: name, agent: strings.Join(av, " "), sdk: strings.Join(sv, " ")}
				classes[name] = c
			}
			c.n++
		}
	}
	unpaired := 0
	for _, m := range missing {
		if !done[m] {
			unpaired++
		}
	}
	var out []keyDiffClass
	for _, c := range classes {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].fields < out[j].fields })
	if unpaired > 0 {
		out = append(out, keyDiffClass{fields: "(3+ fields)", n: unpaired})
	}
	return out
}

func trimSem(s string) string {
	if len(s) > 70 {
		return s[:30] + "…" + s[len(s)-30:]
	}
	return s
}
