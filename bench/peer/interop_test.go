// This file tests the payload both ways with the agent's own code: the
// SDK's bodies decode in the agent into what was published, and the
// agent's payloads and sketches decode in package writer; and holds the
// package's TestMain.

package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"github.com/tinylib/msgp/msgp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/writer"
)

func TestMain(m *testing.M) {
	testenv.Clear() // the developer's DD_*, OTEL_* and SPANSTATS_* settings are not the tests'
	goleak.VerifyTestMain(m)
}

// The agent's sketch parameters (pkg/trace/stats): 1 % relative accuracy,
// collapsing-lowest dense stores of 2048 bins. γ = 1.01/0.99.
const (
	agentAccuracy = 0.01
	agentMaxBins  = 2048
	agentGamma    = 1.0202020202020202
)

// quantiles compared between decoded and reference sketches.
var quantiles = []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1}

// statsRecorder is a stand-in agent: it keeps the raw body and headers of
// every POST /v0.6/stats and answers 200, leaving all decoding to the test.
type statsRecorder struct {
	srv *httptest.Server

	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	other   []string // any other request: the SDK should send none
}

// interopPeerTags are a default agent's keys that the interop workload's
// peer tags use.
var interopPeerTags = []string{"db.instance", "db.system", "grpc.host", "messaging.destination", "messaging.system",
	"out.host", "peer.hostname", "peer.service"}

// newStatsRecorder starts a recorder whose /info lists peerTags as its
// peer_tags (interopPeerTags when none are given).
func newStatsRecorder(t *testing.T, peerTags ...string) *statsRecorder {
	r := &statsRecorder{}
	if peerTags == nil {
		peerTags = interopPeerTags
	}
	info, err := json.Marshal(map[string]any{"version": "7.99.0-interop",
		"endpoints": []string{"/v0.4/traces", "/v0.6/stats", "/info"}, "peer_tags": peerTags})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && req.URL.Path == "/info" {
			// The SDK reads /info and reports only to an agent that lists
			// the stats endpoint; its peer_tags list holds every key the
			// test's peer tags use (an answer without a list would keep
			// none, as the agent does).
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(info)
			return
		}
		if req.Method != http.MethodPost || req.URL.Path != "/v0.6/stats" {
			r.mu.Lock()
			r.other = append(r.other, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
			http.NotFound(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "OK\n")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *statsRecorder) snapshot() (bodies [][]byte, headers []http.Header, other []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies), slices.Clone(r.headers), slices.Clone(r.other)
}

// groupKey is every field the agent groups by (aggregate.Key's), in the agent's
// types; PeerTags is the sorted set joined with "\n".
type groupKey struct {
	Service, Name, Resource, Type, SpanKind  string
	HTTPMethod, HTTPEndpoint, GRPCStatusCode string
	ServiceSource                            string
	HTTPStatusCode                           uint32
	Synthetics                               bool
	IsTraceRoot                              pb.Trilean
	PeerTags                                 string
}

func peerSet(tags []string) string {
	s := slices.Clone(tags)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), "\n")
}

// expectedKey is the group an eligible span must land in, written from the
// contract rather than from the SDK's code: strings as given but the gRPC
// code, canonical (stats.CanonicalGRPCCode, which TestRandomSpansMatchAgent
// holds to the agent's), peer tags only for client, producer
// and consumer spans (kind compared case-insensitively), with a value, IP
// addresses quantized by the agent's own obfuscator.
func expectedKey(s *stats.Span) groupKey {
	k := groupKey{
		Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type, SpanKind: s.SpanKind,
		HTTPMethod: s.HTTPMethod, HTTPEndpoint: s.HTTPEndpoint, GRPCStatusCode: stats.CanonicalGRPCCode(s.GRPCStatusCode),
		ServiceSource: s.ServiceSource, HTTPStatusCode: s.HTTPStatusCode, Synthetics: s.Synthetics,
		IsTraceRoot: pb.Trilean_FALSE,
	}
	if s.TraceRoot {
		k.IsTraceRoot = pb.Trilean_TRUE
	}
	switch strings.ToLower(s.SpanKind) {
	case "client", "producer", "consumer":
		var tags []string
		for _, t := range s.PeerTags {
			if key, v, _ := strings.Cut(t, ":"); v != "" {
				tags = append(tags, key+":"+obfuscate.QuantizePeerIPAddresses(v))
			}
		}
		k.PeerTags = peerSet(tags)
	}
	return k
}

func agentGroupKey(g *pb.ClientGroupedStats) groupKey {
	return groupKey{
		Service: g.Service, Name: g.Name, Resource: g.Resource, Type: g.Type, SpanKind: g.SpanKind,
		HTTPMethod: g.HTTPMethod, HTTPEndpoint: g.HTTPEndpoint, GRPCStatusCode: g.GRPCStatusCode,
		ServiceSource: g.ServiceSource, HTTPStatusCode: g.HTTPStatusCode, Synthetics: g.Synthetics,
		IsTraceRoot: g.IsTraceRoot, PeerTags: peerSet(g.PeerTags),
	}
}

// tally is what the test expects of one group, summed over the run.
type tally struct {
	hits, errors, topLevel, duration uint64
	ok, errs                         []float64 // durations (ns) of ok and error spans
}

func (t *tally) add(o *tally) {
	t.hits += o.hits
	t.errors += o.errors
	t.topLevel += o.topLevel
	t.duration += o.duration
	t.ok = append(t.ok, o.ok...)
	t.errs = append(t.errs, o.errs...)
}

// spanTemplate is the keyed part of a span; each published span adds the
// unkeyed part (error, duration, top-level, peer tag order).
type spanTemplate struct {
	stats.Span
	topLevelRate float64
	errorRate    float64 // 0 and 1 make groups whose error or ok sketch is empty
}

// workloadTemplates builds a deterministic set of span shapes over several
// services, resources and all four counted span kinds, plus shapes that are
// eligible only through TopLevel/Measured and shapes that never are.
// The distinct keys (a few hundred) stay well under every cardinality budget
// and the table cap, so every group must arrive with its labels intact.
func workloadTemplates() []spanTemplate {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	services := []string{"web", "api", "billing", "auth", "search", "checkout"}
	peerProfiles := [][]string{
		{"peer.service:users-db", "db.instance:users", "peer.hostname:pg-1"},
		{"peer.service:cache", "peer.hostname:redis-3"},
		{"db.system:postgresql", "db.instance:orders", "out.host:10.0.0.7"},
		{"grpc.host:ledger.internal", "peer.service:ledger"},
		{"messaging.system:kafka", "messaging.destination:orders", "peer.service:kafka"},
		{"messaging.system:sqs", "messaging.destination:refunds"},
	}
	var ts []spanTemplate
	for i := 0; i < 420; i++ {
		t := spanTemplate{errorRate: 0.2}
		s := &t.Span
		s.Service = services[rng.IntN(len(services))]
		s.ServiceSource = pick("", "", "", "opt.integration", "redis", "opt.split_by_tag")
		s.Synthetics = rng.IntN(20) == 0
		s.TraceRoot = rng.IntN(3) == 0
		switch r := rng.IntN(100); {
		case r < 35: // HTTP server
			s.SpanKind = pick("server", "server", "server", "SERVER")
			s.Name, s.Type = "http.request", "web"
			s.HTTPMethod = pick("GET", "POST", "PUT", "DELETE")
			s.HTTPEndpoint = pick("/users/{id}", "/orders", "/orders/{id}/items", "/health", "/search")
			s.Resource = s.HTTPMethod + " " + s.HTTPEndpoint
			s.HTTPStatusCode = []uint32{200, 201, 204, 301, 404, 429, 500, 503}[rng.IntN(8)]
			switch {
			case s.HTTPEndpoint == "/health":
				t.errorRate = 0
			case s.HTTPStatusCode >= 500:
				t.errorRate = 1
			case s.HTTPStatusCode < 400:
				t.errorRate = 0.05
			}
			t.topLevelRate = 0.9
			if rng.IntN(4) == 0 { // peer tags on a server span are not kept
				s.PeerTags = peerProfiles[rng.IntN(len(peerProfiles))]
			}
		case r < 45: // gRPC server
			s.SpanKind = "server"
			s.Name, s.Type = "grpc.server", "rpc"
			s.Resource = pick("/ledger.Ledger/Post", "/auth.Auth/Check", "/search.Search/Query")
			s.GRPCStatusCode = pick("0", "0", "5", "14", "DEADLINE_EXCEEDED")
			t.topLevelRate = 0.8
		case r < 75: // clients
			s.SpanKind = pick("client", "client", "client", "Client")
			prof := rng.IntN(4)
			switch prof {
			case 0, 2:
				s.Name, s.Type = "postgres.query", "sql"
				s.Resource = pick("SELECT * FROM users WHERE id = ?", "INSERT INTO orders VALUES ( ? )", "UPDATE orders SET state = ?")
			case 1:
				s.Name, s.Type = "redis.command", "redis"
				s.Resource = pick("GET", "SET", "HGETALL", "EXPIRE")
			case 3:
				s.Name, s.Type = "grpc.client", "rpc"
				s.Resource = "/ledger.Ledger/Post"
				s.GRPCStatusCode = pick("0", "14")
			}
			tags := peerProfiles[prof]
			s.PeerTags = tags[:2+rng.IntN(len(tags)-1)] // 2 or 3 tags
			if rng.IntN(3) == 0 {
				s.Name, s.Type = "http.client", "http"
				s.HTTPMethod = pick("GET", "POST")
				s.HTTPStatusCode = []uint32{200, 404, 502}[rng.IntN(3)]
				s.Resource = s.HTTPMethod
			}
			t.topLevelRate = 0.05
		case r < 85: // producers
			s.SpanKind = "producer"
			s.Name, s.Type = "kafka.produce", "queue"
			s.Resource = pick("Produce Topic orders", "Produce Topic refunds")
			tags := peerProfiles[4+rng.IntN(2)]
			s.PeerTags = tags[:2+rng.IntN(len(tags)-1)]
		case r < 93: // consumers
			s.SpanKind = "consumer"
			s.Name, s.Type = "kafka.consume", "queue"
			s.Resource = pick("Consume Topic orders", "Consume Topic refunds")
			tags := peerProfiles[4+rng.IntN(2)]
			s.PeerTags = tags[:2+rng.IntN(len(tags)-1)]
			t.topLevelRate = 0.7
		default: // internal: counted only when top-level or measured
			s.SpanKind = pick("internal", "")
			s.Name, s.Type = "worker.run", "custom"
			s.Resource = pick("batch", "cleanup", "reindex")
			s.PeerTags = peerProfiles[rng.IntN(len(peerProfiles))] // never kept
			s.Measured = rng.IntN(2) == 0
			t.topLevelRate = 0.5 // with Measured false, half of these are not counted
		}
		ts = append(ts, t)
	}
	return ts
}

// logUniform returns a duration between 1 µs and 10 s, log-uniformly.
func logUniform(rng *rand.Rand) int64 {
	const lo, hi = 1e3, 1e10
	return int64(math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo))))
}

// producer is one publishing goroutine's state, kept across phases: its
// random source and what it expects.
type producer struct {
	id         uint64
	rng        *rand.Rand
	want       map[groupKey]*tally
	accepted   uint64 // eligible spans Publish took
	ineligible uint64
	rejected   uint64 // Publish returned false (inbox full; retried)
	span       stats.Span
	peers      []string
}

func newProducer(id uint64) *producer {
	return &producer{id: id, rng: rand.New(rand.NewPCG(id, id*7+1)), want: map[groupKey]*tally{}, peers: make([]string, 0, 8)}
}

// run publishes n spans built from the templates, reusing one Span and one
// peer-tag slice (Publish must not retain them), and tallies what it expects.
func (p *producer) run(agg *stats.Aggregator, ts []spanTemplate, n int) error {
	rng, s := p.rng, &p.span
	for range n {
		t := &ts[rng.IntN(len(ts))]
		*s = t.Span
		p.peers = append(p.peers[:0], t.PeerTags...)
		rng.Shuffle(len(p.peers), func(a, b int) { p.peers[a], p.peers[b] = p.peers[b], p.peers[a] })
		s.PeerTags = p.peers
		s.Start = time.Now().UnixNano()
		s.Duration = logUniform(rng)
		if rng.IntN(50) == 0 { // not counted: no duration
			s.Duration = -rng.Int64N(2)
		}
		s.Error = rng.Float64() < t.errorRate
		s.TopLevel = rng.Float64() < t.topLevelRate
		eligible := s.Eligible()
		for tries := 0; !agg.Publish(s); tries++ {
			p.rejected++
			if tries > 1_000_000 {
				return fmt.Errorf("producer %d: Publish kept returning false", p.id)
			}
			runtime.Gosched()
		}
		// Scribble over the caller-owned data: the aggregator copied it.
		for j := range p.peers {
			p.peers[j] = "scribbled:" + p.peers[j]
		}
		if !eligible {
			p.ineligible++
			continue
		}
		p.accepted++
		s.PeerTags = t.PeerTags
		k := expectedKey(s)
		tl := p.want[k]
		if tl == nil {
			tl = &tally{}
			p.want[k] = tl
		}
		tl.hits++
		tl.duration += uint64(s.Duration)
		if s.TopLevel {
			tl.topLevel++
		}
		if s.Error {
			tl.errors++
			tl.errs = append(tl.errs, concentratorValue(s.Duration))
		} else {
			tl.ok = append(tl.ok, concentratorValue(s.Duration))
		}
	}
	return nil
}

// decodedGroup is a group summed over every payload that carried its key.
type decodedGroup struct {
	hits, errors, topLevel, duration uint64
	ok, errs                         *ddsketch.DDSketch
	seen                             int // number of payloads that carried it
}

// decodeSummary decodes an OkSummary/ErrorSummary the way the agent does
// (protobuf DDSketch, then sketches-go FromProto) and checks the mapping is
// the agent's, so that the agent can merge it without re-mapping.
func decodeSummary(b []byte) (*ddsketch.DDSketch, error) {
	var sp sketchpb.DDSketch
	if err := proto.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("proto.Unmarshal: %w", err)
	}
	m := sp.GetMapping()
	if m == nil {
		return nil, fmt.Errorf("no index mapping (%d bytes)", len(b))
	}
	if math.Abs(m.Gamma-agentGamma) > 1e-9 || m.IndexOffset != 0 || m.Interpolation != sketchpb.IndexMapping_NONE {
		return nil, fmt.Errorf("mapping gamma %.12f offset %v interpolation %v, want %.12f 0 NONE",
			m.Gamma, m.IndexOffset, m.Interpolation, agentGamma)
	}
	if ns := sp.GetNegativeValues(); ns != nil && (len(ns.BinCounts) > 0 || slices.ContainsFunc(ns.ContiguousBinCounts, func(c float64) bool { return c != 0 })) {
		return nil, fmt.Errorf("negative values in a latency sketch")
	}
	sk, err := ddsketch.FromProto(&sp)
	if err != nil {
		return nil, fmt.Errorf("ddsketch.FromProto: %w", err)
	}
	return sk, nil
}

// concentratorValue is what the agent's concentrator adds to a sketch for
// a span of d ns: the float cut to ten significant bits (statsraw,
// nsTimestampToFloat), which the SDK does as well.
func concentratorValue(d int64) float64 {
	return math.Float64frombits(math.Float64bits(float64(d)) &^ (1<<43 - 1))
}

// referenceSketch is the agent's own sketch fed the given values.
func referenceSketch(t *testing.T, values []float64) *ddsketch.DDSketch {
	t.Helper()
	sk, err := ddsketch.LogCollapsingLowestDenseDDSketch(agentAccuracy, agentMaxBins)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := sk.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	return sk
}

// bins returns the sketch's positive store as index → count.
func bins(sk *ddsketch.DDSketch) map[int]float64 {
	m := map[int]float64{}
	sk.GetPositiveValueStore().ForEach(func(i int, c float64) bool {
		if c != 0 {
			m[i] = c
		}
		return false
	})
	return m
}

// sameSketch reports how got differs from want (same values, same bins).
func sameSketch(got, want *ddsketch.DDSketch) error {
	if got.GetCount() != want.GetCount() || got.GetZeroCount() != want.GetZeroCount() {
		return fmt.Errorf("count %v (zeros %v), want %v (zeros %v)", got.GetCount(), got.GetZeroCount(), want.GetCount(), want.GetZeroCount())
	}
	if gb, wb := bins(got), bins(want); !mapsEqual(gb, wb) {
		return fmt.Errorf("bins differ: %d bins, want %d", len(gb), len(wb))
	}
	if want.IsEmpty() {
		return nil
	}
	for _, q := range quantiles {
		g, err1 := got.GetValueAtQuantile(q)
		w, err2 := want.GetValueAtQuantile(q)
		if err1 != nil || err2 != nil || g != w {
			return fmt.Errorf("p%v = %v (%v), want %v (%v)", q*100, g, err1, w, err2)
		}
	}
	return nil
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSDKPayloadsDecodeWithAgent runs the real SDK against a loopback server
// and decodes every body it sent with the agent's msgp decoder: nothing may
// fail, nothing may be left over, and every group must carry exactly the
// hits, errors, top-level hits, durations and latency sketches of the spans
// Publish accepted, with its labels (peer tags, trace root, srv_src) intact.
func TestSDKPayloadsDecodeWithAgent(t *testing.T) {
	const (
		producers   = 8
		perProducer = 12_000
		interval    = 10 * time.Second
	)
	rec := newStatsRecorder(t)
	cfg := stats.Config{
		AgentURL: rec.srv.URL, Env: "interop", Service: "web", Version: "1.2.3", Hostname: "peer-host",
		RuntimeID: "0b5e1c1e-7c1d-4a8e-9d3c-1f2e3d4c5b6a", TracerVersion: "v0.0.1-peer",
		ContainerID: "cid-42", Tags: []string{"team:apm", "region:eu"}, GitCommitSha: "abc123",
		ImageTag: "v7", ProcessTags: "entrypoint.name:web", BucketInterval: interval,
		InboxSize: 1 << 14,
	}
	agg, err := stats.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	// A failing test still ends the aggregator's goroutines (goleak checks).
	t.Cleanup(func() { _ = agg.Stop(context.Background()) })
	began := time.Now()

	ts := workloadTemplates()
	ps := make([]*producer, producers)
	for i := range ps {
		ps[i] = newProducer(uint64(i + 1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Four phases of concurrent publishing. Between the first three the
	// test flushes; during the last one a flusher races the producers. Groups
	// thus split over payloads, and their sums must still come out exact.
	const phases = 4
	var flushes int
	for phase := range phases {
		var wg sync.WaitGroup
		errs := make([]error, producers)
		for i, p := range ps {
			wg.Go(func() { errs[i] = p.run(agg, ts, perProducer/phases) })
		}
		if phase == phases-1 {
			done := make(chan struct{})
			var fwg sync.WaitGroup
			fwg.Go(func() {
				for range 50 {
					if err := agg.Flush(ctx); err != nil {
						t.Errorf("racing Flush: %v", err)
						return
					}
					flushes++
					select {
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
				}
			})
			wg.Wait()
			close(done)
			fwg.Wait()
		} else {
			wg.Wait()
			if err := agg.Flush(ctx); err != nil {
				t.Errorf("Flush after phase %d: %v", phase, err)
			}
			flushes++
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := agg.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	ended := time.Now()

	want := map[groupKey]*tally{}
	var accepted, ineligible, rejected, errCount uint64
	for _, p := range ps {
		accepted += p.accepted
		ineligible += p.ineligible
		rejected += p.rejected
		for k, tl := range p.want {
			w := want[k]
			if w == nil {
				w = &tally{}
				want[k] = w
			}
			w.add(tl)
			errCount += tl.errors
		}
	}
	t.Logf("%d spans counted in %d groups (%.1f%% errors), %d ineligible, %d Publish retries, %d flushes",
		accepted, len(want), 100*float64(errCount)/float64(accepted), ineligible, rejected, flushes)

	bodies, headers, other := rec.snapshot()
	if len(other) > 0 {
		t.Errorf("unexpected requests: %q", other)
	}
	if len(bodies) < phases { // a payload per mid-way flush and the final report
		t.Fatalf("%d payloads, want at least %d", len(bodies), phases)
	}

	h := agg.Health()
	if h.Counted != accepted || h.Ineligible != ineligible || h.InboxFull != rejected ||
		h.SpansSent != accepted || h.PayloadsSent != uint64(len(bodies)) ||
		h.PayloadsFailed != 0 || h.PayloadsDropped != 0 || h.AggregateDropped != 0 || h.Overflowed != 0 {
		t.Errorf("health %+v; want counted %d, ineligible %d, inbox full %d, %d payloads sent, nothing failed or overflowed",
			h, accepted, ineligible, rejected, len(bodies))
	}

	got := map[groupKey]*decodedGroup{}
	var bodyBytes, noErrors, noOk int
	for i, body := range bodies {
		bodyBytes += len(body)
		if ct := headers[i].Get("Content-Type"); ct != "application/msgpack" {
			t.Errorf("payload %d: Content-Type %q", i, ct)
		}
		var p pb.ClientStatsPayload
		rest, err := p.UnmarshalMsg(body)
		if err != nil {
			t.Fatalf("payload %d: agent UnmarshalMsg: %v", i, err)
		}
		if len(rest) != 0 {
			t.Fatalf("payload %d: %d trailing bytes after the agent decoded it", i, len(rest))
		}
		// The agent's HTTP receiver decodes with the streaming reader.
		var ps pb.ClientStatsPayload
		if err := msgp.Decode(bytes.NewReader(body), &ps); err != nil {
			t.Fatalf("payload %d: agent DecodeMsg: %v", i, err)
		}
		if !proto.Equal(&p, &ps) {
			t.Fatalf("payload %d: UnmarshalMsg and DecodeMsg disagree", i)
		}
		if err := checkWireShape(body); err != nil {
			t.Errorf("payload %d: %v", i, err)
		}

		if p.Env != cfg.Env || p.Service != cfg.Service || p.Version != cfg.Version || p.Hostname != cfg.Hostname ||
			p.Lang != "go" || p.RuntimeID != cfg.RuntimeID || p.TracerVersion != cfg.TracerVersion ||
			p.ContainerID != cfg.ContainerID || !slices.Equal(p.Tags, cfg.Tags) || p.GitCommitSha != cfg.GitCommitSha ||
			p.ImageTag != cfg.ImageTag || p.ProcessTags != cfg.ProcessTags || p.AgentAggregation != "" {
			t.Errorf("payload %d: header %+v does not match the config", i, &p)
		}
		if p.Sequence != uint64(i+1) {
			t.Errorf("payload %d: Sequence %d, want %d", i, p.Sequence, i+1)
		}
		if len(p.Stats) == 0 {
			t.Errorf("payload %d: no bucket", i)
		}
		for bi, b := range p.Stats {
			if b.Start == 0 || b.Duration == 0 || b.Duration > uint64(interval) {
				t.Errorf("payload %d bucket %d: Start %d Duration %d", i, bi, b.Start, b.Duration)
			}
			if b.Start < uint64(began.Add(-interval).UnixNano()) || b.Start+b.Duration > uint64(ended.UnixNano()) {
				t.Errorf("payload %d bucket %d: [%d, +%d) is outside the run", i, bi, b.Start, b.Duration)
			}
			inBucket := map[groupKey]bool{}
			for gi, g := range b.Stats {
				where := fmt.Sprintf("payload %d bucket %d group %d (%s %s %s)", i, bi, gi, g.Service, g.Name, g.Resource)
				k := agentGroupKey(g)
				if inBucket[k] {
					t.Errorf("%s: key repeated within one bucket", where)
				}
				inBucket[k] = true
				if got := peerSet(g.PeerTags); len(g.PeerTags) != strings.Count(got, "\n")+boolInt(got != "") {
					t.Errorf("%s: PeerTags %q has duplicates", where, g.PeerTags)
				}
				if g.IsTraceRoot != pb.Trilean_TRUE && g.IsTraceRoot != pb.Trilean_FALSE {
					t.Errorf("%s: IsTraceRoot %v, want TRUE or FALSE", where, g.IsTraceRoot)
				}
				if g.Hits == 0 || g.Errors > g.Hits || g.TopLevelHits > g.Hits {
					t.Errorf("%s: hits %d errors %d top-level %d", where, g.Hits, g.Errors, g.TopLevelHits)
				}
				ok, err := decodeSummary(g.OkSummary)
				if err != nil {
					t.Fatalf("%s: OkSummary: %v", where, err)
				}
				es, err := decodeSummary(g.ErrorSummary)
				if err != nil {
					t.Fatalf("%s: ErrorSummary (errors %d): %v", where, g.Errors, err)
				}
				noErrors += boolInt(g.Errors == 0)
				noOk += boolInt(g.Errors == g.Hits)
				if ok.GetCount() != float64(g.Hits-g.Errors) || es.GetCount() != float64(g.Errors) {
					t.Errorf("%s: sketch counts ok %v err %v, want %d and %d", where, ok.GetCount(), es.GetCount(), g.Hits-g.Errors, g.Errors)
				}
				d := got[k]
				if d == nil {
					d = &decodedGroup{ok: ok, errs: es}
					got[k] = d
				} else {
					if err := d.ok.MergeWith(ok); err != nil {
						t.Fatalf("%s: merge ok sketch: %v", where, err)
					}
					if err := d.errs.MergeWith(es); err != nil {
						t.Fatalf("%s: merge error sketch: %v", where, err)
					}
				}
				d.hits += g.Hits
				d.errors += g.Errors
				d.topLevel += g.TopLevelHits
				d.duration += g.Duration
				d.seen++
			}
		}
	}
	t.Logf("%d payloads, %d bytes, decoded by the agent into %d groups; %d groups without errors, %d with errors only",
		len(bodies), bodyBytes, len(got), noErrors, noOk)
	if noErrors == 0 || noOk == 0 {
		t.Errorf("the workload made no group without errors (%d) or without ok spans (%d): the empty-summary cases went untested", noErrors, noOk)
	}

	checkGroups(t, want, got)
}

// checkGroups reports every group of want missing from got or differing in
// hits, errors, top-level hits, durations or sketch bins (against the
// agent's own sketch of the durations), and every group of got not in want.
func checkGroups(t *testing.T, want map[groupKey]*tally, got map[groupKey]*decodedGroup) {
	t.Helper()
	for k, w := range want {
		d := got[k]
		if d == nil {
			t.Errorf("group %+v: missing (want %d hits)", k, w.hits)
			continue
		}
		if d.hits != w.hits || d.errors != w.errors || d.topLevel != w.topLevel || d.duration != w.duration {
			t.Errorf("group %+v: hits %d errors %d top-level %d duration %d; want %d %d %d %d",
				k, d.hits, d.errors, d.topLevel, d.duration, w.hits, w.errors, w.topLevel, w.duration)
		}
		if err := sameSketch(d.ok, referenceSketch(t, w.ok)); err != nil {
			t.Errorf("group %+v: ok sketch: %v", k, err)
		}
		if err := sameSketch(d.errs, referenceSketch(t, w.errs)); err != nil {
			t.Errorf("group %+v: error sketch: %v", k, err)
		}
	}
	for k, d := range got {
		if want[k] == nil {
			t.Errorf("group %+v: not published (%d hits)", k, d.hits)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// msgpKind is the msgpack family of the value at the start of b: integer
// widths and signedness are one family, since the agent reads any width.
func msgpKind(b []byte) string {
	switch typ := msgp.NextType(b); typ {
	case msgp.IntType, msgp.UintType:
		return "int"
	default:
		return typ.String()
	}
}

// mapFields splits the msgpack map at the start of b into its keys and raw
// values; keys must be str, as the agent writes them.
func mapFields(b []byte) (keys []string, vals [][]byte, rest []byte, err error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, nil, nil, err
	}
	for range n {
		if msgp.NextType(b) != msgp.StrType {
			return nil, nil, nil, fmt.Errorf("map key of type %v, want str", msgp.NextType(b))
		}
		var k []byte
		k, b, err = msgp.ReadStringZC(b)
		if err != nil {
			return nil, nil, nil, err
		}
		start := b
		if b, err = msgp.Skip(b); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", k, err)
		}
		keys = append(keys, string(k))
		vals = append(vals, start[:len(start)-len(b)])
	}
	return keys, vals, b, nil
}

// arrayElems splits the msgpack array at the start of b into raw elements.
func arrayElems(b []byte) ([][]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for range n {
		start := b
		if b, err = msgp.Skip(b); err != nil {
			return nil, err
		}
		out = append(out, start[:len(start)-len(b)])
	}
	return out, nil
}

// shape is, per map level, the msgpack family of each key the agent's own
// encoder writes.
type shape struct {
	payload, bucket, group map[string]string
}

var (
	agentShapeOnce sync.Once
	agentShapeV    shape
	agentShapeErr  error
)

// agentShape learns the key set and value families from the agent's encoder,
// with every field set so that none is omitted.
func agentShape() (shape, error) {
	agentShapeOnce.Do(func() {
		g := &pb.ClientGroupedStats{
			Service: "s", Name: "n", Resource: "r", HTTPStatusCode: 200, Type: "t", DBType: "d",
			Hits: 1, Errors: 1, Duration: 1, OkSummary: []byte{1}, ErrorSummary: []byte{1}, Synthetics: true,
			TopLevelHits: 1, SpanKind: "k", PeerTags: []string{"a:b"}, IsTraceRoot: pb.Trilean_TRUE,
			GRPCStatusCode: "0", HTTPMethod: "GET", HTTPEndpoint: "/", ServiceSource: "x",
			SpanDerivedPrimaryTags: []string{"a:b"}, AdditionalMetricTags: []string{"a:b"},
		}
		p := &pb.ClientStatsPayload{
			Hostname: "h", Env: "e", Version: "v", Lang: "go", TracerVersion: "t", RuntimeID: "r", Sequence: 1,
			AgentAggregation: "a", Service: "s", ContainerID: "c", Tags: []string{"a:b"}, GitCommitSha: "g",
			ImageTag: "i", ProcessTagsHash: 1, ProcessTags: "p",
			Stats: []*pb.ClientStatsBucket{{Start: 1, Duration: 1, AgentTimeShift: 1, Stats: []*pb.ClientGroupedStats{g}}},
		}
		b, err := p.MarshalMsg(nil)
		if err != nil {
			agentShapeErr = err
			return
		}
		var s shape
		s.payload, agentShapeErr = levelShape(b, "Stats", func(v []byte) error {
			s.bucket, err = levelShape(v, "Stats", func(v []byte) error {
				s.group, err = levelShape(v, "", nil)
				return err
			})
			return err
		})
		agentShapeV = s
	})
	return agentShapeV, agentShapeErr
}

// levelShape maps each key of the map at b to its value's family and calls
// down on the first element of the array under key child.
func levelShape(b []byte, child string, down func([]byte) error) (map[string]string, error) {
	keys, vals, _, err := mapFields(b)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i, k := range keys {
		m[k] = msgpKind(vals[i])
		if k == child {
			elems, err := arrayElems(vals[i])
			if err != nil || len(elems) == 0 {
				return nil, fmt.Errorf("%s: %v (%d elements)", k, err, len(elems))
			}
			if err := down(elems[0]); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// checkWireShape walks an SDK body and requires every key to be one the
// agent's encoder writes (an unknown key would be skipped by the agent
// silently, losing the field) with a value of the same msgpack family
// (str not bin for strings, bin for summaries), and no key twice in a map.
func checkWireShape(body []byte) error {
	sh, err := agentShape()
	if err != nil {
		return fmt.Errorf("learning the agent's shape: %w", err)
	}
	var walk func(b []byte, level map[string]string, path string, next ...map[string]string) error
	walk = func(b []byte, level map[string]string, path string, next ...map[string]string) error {
		keys, vals, _, err := mapFields(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		seen := map[string]bool{}
		for i, k := range keys {
			p := path + "/" + k
			if seen[k] {
				return fmt.Errorf("%s: key written twice", p)
			}
			seen[k] = true
			want, known := level[k]
			if !known {
				return fmt.Errorf("%s: key the agent does not know (it would drop the value)", p)
			}
			if got := msgpKind(vals[i]); got != want && got != "nil" {
				return fmt.Errorf("%s: msgpack %s, the agent writes %s", p, got, want)
			}
			if k == "Stats" && len(next) > 0 {
				elems, err := arrayElems(vals[i])
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				for j, e := range elems {
					if err := walk(e, next[0], fmt.Sprintf("%s/%d", p, j), next[1:]...); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return walk(body, sh.payload, "", sh.bucket, sh.group)
}

// agentSketch builds a sketch the way the agent does and encodes it as the
// agent puts it on the wire: ToProto, then proto.Marshal.
func agentSketch(t *testing.T, provider store.Provider, zeros int, values ...float64) (*ddsketch.DDSketch, []byte) {
	t.Helper()
	var sk *ddsketch.DDSketch
	if provider == nil {
		var err error
		if sk, err = ddsketch.LogCollapsingLowestDenseDDSketch(agentAccuracy, agentMaxBins); err != nil {
			t.Fatal(err)
		}
	} else {
		m, err := mapping.NewLogarithmicMapping(agentAccuracy)
		if err != nil {
			t.Fatal(err)
		}
		sk = ddsketch.NewDDSketchFromStoreProvider(m, provider)
	}
	for _, v := range values {
		if err := sk.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	for range zeros {
		if err := sk.Add(0); err != nil {
			t.Fatal(err)
		}
	}
	b, err := proto.Marshal(sk.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	return sk, b
}

// spread returns n durations from lo to hi ns, log-spaced.
func spread(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Round(lo * math.Pow(hi/lo, float64(i)/float64(max(n-1, 1))))
	}
	return out
}

// sameAsAgentSketch compares a writer-decoded sketch with the agent's.
func sameAsAgentSketch(got *aggregate.Sketch, want *ddsketch.DDSketch) error {
	if want == nil || want.IsEmpty() {
		if got != nil && got.Count() != 0 {
			return fmt.Errorf("count %d, want an empty sketch", got.Count())
		}
		return nil
	}
	if got == nil {
		return fmt.Errorf("nil sketch, want %v values", want.GetCount())
	}
	if float64(got.Count()) != want.GetCount() || float64(got.ZeroCount()) != want.GetZeroCount() {
		return fmt.Errorf("count %d (zeros %d), want %v (zeros %v)", got.Count(), got.ZeroCount(), want.GetCount(), want.GetZeroCount())
	}
	lo, counts := got.Bins()
	gb := map[int]float64{}
	for i, c := range counts {
		if c != 0 {
			gb[lo+i] = float64(c)
		}
	}
	if wb := bins(want); !mapsEqual(gb, wb) {
		return fmt.Errorf("bins differ: %d bins, want %d", len(gb), len(wb))
	}
	for _, q := range quantiles {
		w, err := want.GetValueAtQuantile(q)
		if err != nil {
			return err
		}
		if g := got.Quantile(q); g != w {
			return fmt.Errorf("p%v = %v, want %v", q*100, g, w)
		}
	}
	return nil
}

// TestEmptyKeyRefusedLikeAgent: a payload, bucket or group map with an
// empty key is refused by the agent's streaming decoder (its HTTP
// receiver's) and by writer's, so the relay rejects what the agent would
// answer with a 400 rather than forward it.
func TestEmptyKeyRefusedLikeAgent(t *testing.T) {
	str, u64 := msgp.AppendString, msgp.AppendUint64
	stats := func(b []byte) []byte { // {"Stats": [ ... ]} around b, a map
		return append(msgp.AppendArrayHeader(str(msgp.AppendMapHeader(nil, 1), "Stats"), 1), b...)
	}
	payload := str(str(msgp.AppendMapHeader(nil, 2), ""), "x")
	payload = str(str(payload, "Env"), "prod")
	bucket := u64(str(msgp.AppendMapHeader(nil, 2), ""), 1)
	bucket = u64(str(bucket, "Start"), 5)
	group := u64(str(msgp.AppendMapHeader(nil, 2), ""), 1)
	group = u64(str(group, "Hits"), 1)
	for name, in := range map[string][]byte{"payload": payload, "bucket": stats(bucket), "group": stats(stats(group))} {
		var p pb.ClientStatsPayload
		if err := msgp.Decode(bytes.NewReader(in), &p); err == nil {
			t.Errorf("%s: the agent's decoder took an empty key", name)
		}
		if _, err := writer.DecodePayload(in); !errors.Is(err, writer.ErrEmptyKey) {
			t.Errorf("%s: writer.DecodePayload = %v, want ErrEmptyKey", name, err)
		}
	}
}

// TestNilRefusedLikeAgent: the agent's decoder refuses nil for an array
// or a summary, which writer.DecodePayloadAsAgent (statstest's) refuses too
// and writer.DecodePayload (the relay's, lenient) reads as empty; a nil
// bucket or group in its array all three skip.
func TestNilRefusedLikeAgent(t *testing.T) {
	str, u64, nilv := msgp.AppendString, msgp.AppendUint64, msgp.AppendNil
	arr := func(b []byte, elems ...[]byte) []byte {
		b = msgp.AppendArrayHeader(b, uint32(len(elems)))
		for _, e := range elems {
			b = append(b, e...)
		}
		return b
	}
	group := func(field string) []byte { // Hits 1, and field nil unless ""
		g := u64(str(msgp.AppendMapHeader(nil, 2), "Hits"), 1)
		if field == "" {
			return str(str(g, "Name"), "op")
		}
		return nilv(str(g, field))
	}
	payload := func(buckets ...[]byte) []byte {
		return arr(str(str(str(msgp.AppendMapHeader(nil, 2), "Env"), "prod"), "Stats"), buckets...)
	}
	bucket := func(groups ...[]byte) []byte {
		return arr(str(u64(str(msgp.AppendMapHeader(nil, 2), "Start"), 5), "Stats"), groups...)
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		agent bool // the agent takes it
	}{
		{"payload Stats", nilv(str(str(str(msgp.AppendMapHeader(nil, 2), "Env"), "prod"), "Stats")), false},
		{"Tags", nilv(str(str(str(msgp.AppendMapHeader(nil, 2), "Env"), "prod"), "Tags")), false},
		{"bucket Stats", payload(nilv(str(u64(str(msgp.AppendMapHeader(nil, 2), "Start"), 5), "Stats"))), false},
		{"PeerTags", payload(bucket(group("PeerTags"))), false},
		{"OkSummary", payload(bucket(group("OkSummary"))), false},
		{"ErrorSummary", payload(bucket(group("ErrorSummary"))), false},
		{"a nil bucket", payload(nilv(nil), bucket(group(""))), true},
		{"a nil group", payload(bucket(nilv(nil), group(""))), true},
	} {
		var p pb.ClientStatsPayload
		aerr := msgp.Decode(bytes.NewReader(tc.in), &p)
		if (aerr == nil) != tc.agent {
			t.Errorf("%s nil: the agent's decoder says %v; want it to take it: %v", tc.name, aerr, tc.agent)
		}
		if _, err := writer.DecodePayloadAsAgent(tc.in); (err == nil) != tc.agent {
			t.Errorf("%s nil: DecodePayloadAsAgent = %v, the agent's decoder %v", tc.name, err, aerr)
		}
		if _, err := writer.DecodePayload(tc.in); err != nil {
			t.Errorf("%s nil: DecodePayload = %v, want it read as empty", tc.name, err)
		}
	}
}

// TestAgentPayloadDecodesWithWriter is the other direction: a payload built
// and encoded by the agent's own code (msgp MarshalMsg and EncodeMsg, sketches
// from sketches-go ToProto + proto.Marshal, dense, sparse and empty) must
// decode with writer.DecodePayload into identical values.
func TestAgentPayloadDecodesWithWriter(t *testing.T) {
	type groupWant struct {
		g       *pb.ClientGroupedStats
		ok, err *ddsketch.DDSketch
	}
	var wants [][]groupWant

	// Bucket 0: an HTTP server group with errors; a client group without
	// errors whose error summary is an encoded empty sketch and whose ok
	// sketch holds zero durations; a consumer group with a sparse
	// (map-encoded) ok sketch and no error summary at all.
	okA, okAB := agentSketch(t, nil, 0, spread(500, 1e3, 1e10)...)
	errA, errAB := agentSketch(t, nil, 0, spread(40, 5e4, 3e9)...)
	okB, okBB := agentSketch(t, nil, 3, spread(100, 2e5, 8e7)...)
	emptyB, emptyBB := agentSketch(t, nil, 0)
	okC, okCB := agentSketch(t, store.SparseStoreConstructor, 0, spread(60, 1e6, 1e9)...)
	wants = append(wants, []groupWant{
		{g: &pb.ClientGroupedStats{
			Service: "web", Name: "http.request", Resource: "GET /users/{id}", Type: "web", HTTPStatusCode: 500,
			Hits: 540, Errors: 40, Duration: 123_456_789_012, TopLevelHits: 530, OkSummary: okAB, ErrorSummary: errAB,
			SpanKind: "server", IsTraceRoot: pb.Trilean_TRUE, HTTPMethod: "GET", HTTPEndpoint: "/users/{id}",
			Synthetics: true,
		}, ok: okA, err: errA},
		{g: &pb.ClientGroupedStats{
			Service: "web", Name: "postgres.query", Resource: "SELECT ?", Type: "sql",
			Hits: 103, Duration: 9_999_999, OkSummary: okBB, ErrorSummary: emptyBB, SpanKind: "client",
			PeerTags:    []string{"peer.service:users-db", "db.instance:users", "peer.hostname:pg-1"},
			IsTraceRoot: pb.Trilean_FALSE, ServiceSource: "opt.integration", DBType: "postgresql",
		}, ok: okB, err: emptyB},
		{g: &pb.ClientGroupedStats{
			Service: "billing", Name: "kafka.consume", Resource: "Consume Topic orders", Type: "queue",
			Hits: 60, Duration: 77_000_000_000, TopLevelHits: 60, OkSummary: okCB, SpanKind: "consumer",
			PeerTags: []string{"messaging.system:kafka", "messaging.destination:orders"}, GRPCStatusCode: "",
			ServiceSource: "redis", AdditionalMetricTags: []string{"tenant:a"}, SpanDerivedPrimaryTags: []string{"region:eu"},
		}, ok: okC},
	})
	// Bucket 1: a gRPC group whose ok summary is absent (every span failed).
	errD, errDB := agentSketch(t, nil, 0, spread(7, 1e4, 1e5)...)
	wants = append(wants, []groupWant{
		{g: &pb.ClientGroupedStats{
			Service: "ledger", Name: "grpc.server", Resource: "/ledger.Ledger/Post", Type: "rpc",
			Hits: 7, Errors: 7, Duration: 350_000, ErrorSummary: errDB, SpanKind: "server",
			GRPCStatusCode: "14", IsTraceRoot: pb.Trilean_TRUE,
		}, err: errD},
	})

	p := &pb.ClientStatsPayload{
		Hostname: "h-1", Env: "prod", Version: "9.9.9", Lang: "go", TracerVersion: "v2.0.0", RuntimeID: "rid-1",
		Sequence: 42, AgentAggregation: "distributions", Service: "web", ContainerID: "cid", Tags: []string{"a:b", "c:d"},
		GitCommitSha: "deadbeef", ImageTag: "v1", ProcessTagsHash: 0xfeedface, ProcessTags: "entrypoint.name:web",
	}
	for bi, gws := range wants {
		b := &pb.ClientStatsBucket{Start: 1_700_000_000_000_000_000 + uint64(bi)*10e9, Duration: 10e9, AgentTimeShift: -int64(bi)}
		for _, gw := range gws {
			b.Stats = append(b.Stats, gw.g)
		}
		p.Stats = append(p.Stats, b)
	}
	body, err := p.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	var streamed bytes.Buffer
	if err := msgp.Encode(&streamed, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(streamed.Bytes(), body) {
		t.Fatalf("the agent's EncodeMsg and MarshalMsg differ (%d vs %d bytes)", streamed.Len(), len(body))
	}

	d, err := writer.DecodePayload(body)
	if err != nil {
		t.Fatalf("writer.DecodePayload of the agent's payload: %v", err)
	}
	h := d.Header
	if h.Hostname != p.Hostname || h.Env != p.Env || h.Version != p.Version || h.Lang != p.Lang ||
		h.TracerVersion != p.TracerVersion || h.RuntimeID != p.RuntimeID || h.Sequence != p.Sequence ||
		h.AgentAggregation != p.AgentAggregation || h.Service != p.Service || h.ContainerID != p.ContainerID ||
		!slices.Equal(h.Tags, p.Tags) || h.GitCommitSha != p.GitCommitSha || h.ImageTag != p.ImageTag ||
		h.ProcessTagsHash != p.ProcessTagsHash || h.ProcessTags != p.ProcessTags {
		t.Errorf("header %+v, want the agent's %+v", h, p)
	}
	if len(d.Buckets) != len(p.Stats) {
		t.Fatalf("%d buckets, want %d", len(d.Buckets), len(p.Stats))
	}
	for bi, b := range d.Buckets {
		ab := p.Stats[bi]
		if b.Start != ab.Start || b.Duration != ab.Duration || b.AgentTimeShift != ab.AgentTimeShift {
			t.Errorf("bucket %d: [%d +%d shift %d], want [%d +%d shift %d]", bi, b.Start, b.Duration, b.AgentTimeShift, ab.Start, ab.Duration, ab.AgentTimeShift)
		}
		if len(b.Groups) != len(wants[bi]) {
			t.Fatalf("bucket %d: %d groups, want %d", bi, len(b.Groups), len(wants[bi]))
		}
		for gi := range b.Groups {
			g, w := &b.Groups[gi], wants[bi][gi]
			a := w.g
			where := fmt.Sprintf("bucket %d group %d (%s)", bi, gi, a.Name)
			if g.Service != a.Service || g.Name != a.Name || g.Resource != a.Resource || g.Type != a.Type ||
				g.HTTPStatusCode != a.HTTPStatusCode || g.SpanKind != a.SpanKind || g.HTTPMethod != a.HTTPMethod ||
				g.HTTPEndpoint != a.HTTPEndpoint || g.GRPCStatusCode != a.GRPCStatusCode ||
				g.ServiceSource != a.ServiceSource || g.Synthetics != a.Synthetics ||
				int32(g.IsTraceRoot) != int32(a.IsTraceRoot) || g.DBType != a.DBType {
				t.Errorf("%s: labels %+v, want the agent's %+v", where, g.Key, a)
			}
			if peerSet(g.PeerTags) != peerSet(a.PeerTags) {
				t.Errorf("%s: PeerTags %q, want the set %q", where, g.PeerTags, a.PeerTags)
			}
			if !slices.Equal(g.AdditionalMetricTags, a.AdditionalMetricTags) || !slices.Equal(g.SpanDerivedPrimaryTags, a.SpanDerivedPrimaryTags) {
				t.Errorf("%s: additional tags %q / %q, want %q / %q", where, g.AdditionalMetricTags, g.SpanDerivedPrimaryTags, a.AdditionalMetricTags, a.SpanDerivedPrimaryTags)
			}
			if g.Hits != a.Hits || g.Errors != a.Errors || g.TopLevelHits != a.TopLevelHits || g.Duration != a.Duration {
				t.Errorf("%s: hits %d errors %d top-level %d duration %d, want %d %d %d %d",
					where, g.Hits, g.Errors, g.TopLevelHits, g.Duration, a.Hits, a.Errors, a.TopLevelHits, a.Duration)
			}
			if err := sameAsAgentSketch(g.Ok, w.ok); err != nil {
				t.Errorf("%s: ok sketch: %v", where, err)
			}
			if err := sameAsAgentSketch(g.Err, w.err); err != nil {
				t.Errorf("%s: error sketch: %v", where, err)
			}
		}
	}

	// Merging the decoded groups (what the relay does) keeps the agent's bins.
	var merged aggregate.Entry
	for _, b := range d.Buckets {
		for gi := range b.Groups {
			merged.Merge(&b.Groups[gi].Entry)
		}
	}
	wantOk, _ := agentSketch(t, nil, 0)
	wantErr, _ := agentSketch(t, nil, 0)
	for _, gws := range wants {
		for _, w := range gws {
			if w.ok != nil {
				if err := wantOk.MergeWith(w.ok); err != nil {
					t.Fatal(err)
				}
			}
			if w.err != nil {
				if err := wantErr.MergeWith(w.err); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := sameAsAgentSketch(merged.Ok, wantOk); err != nil {
		t.Errorf("merged ok sketch: %v", err)
	}
	if err := sameAsAgentSketch(merged.Err, wantErr); err != nil {
		t.Errorf("merged error sketch: %v", err)
	}
}

// TestAgentSketchMappingMatchesSDK pins the mapping the SDK writes to the one
// sketches-go builds for the agent's accuracy, and checks that a sketch the
// SDK encodes for the agent merges into an agent sketch without re-mapping.
func TestAgentSketchMappingMatchesSDK(t *testing.T) {
	ours := aggregate.Mapping().ToProto()
	ref, err := mapping.NewLogarithmicMapping(agentAccuracy)
	if err != nil {
		t.Fatal(err)
	}
	theirs := ref.ToProto()
	if ours.Gamma != theirs.Gamma || ours.IndexOffset != theirs.IndexOffset || ours.Interpolation != theirs.Interpolation {
		t.Fatalf("SDK mapping %v, agent mapping %v", ours, theirs)
	}
	if math.Abs(ours.Gamma-agentGamma) > 1e-9 {
		t.Fatalf("gamma %.12f, want %.12f", ours.Gamma, agentGamma)
	}

	values := spread(300, 1e3, 1e10)
	var s aggregate.Sketch
	for _, v := range values {
		s.Add(v)
	}
	enc := writer.AppendSketch(nil, &s)
	sk, err := decodeSummary(enc)
	if err != nil {
		t.Fatal(err)
	}
	agent := referenceSketch(t, values[:100])
	if err := agent.MergeWith(sk); err != nil {
		t.Fatalf("the agent's sketch cannot merge the SDK's: %v", err)
	}
	if err := sameSketch(agent, referenceSketch(t, append(slices.Clone(values[:100]), values...))); err != nil {
		t.Fatal(err)
	}
	// An empty SDK sketch (a group without errors) still decodes for the agent.
	empty, err := decodeSummary(writer.AppendSketch(nil, nil))
	if err != nil || !empty.IsEmpty() {
		t.Fatalf("empty sketch: %v, empty %v", err, empty != nil && empty.IsEmpty())
	}
}
