package stats

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
	"github.com/spanstats/spanstats/stats/statstest"
)

// hintPools are the strings of TestHintsChangeNoOutcome's spans, each
// value one string (the same data every time it is picked, as a tracer's
// constants), including every case snapshot does not copy as it is.
var hintPools = struct {
	resource, kind, grpc, method []string
	peers                        [][]string
}{
	resource: []string{"GET /a", "GET /b", "SELECT ?", strings.Repeat("r", MaxResourceLen+10), ""},
	kind:     []string{"server", "client", "CLIENT", "internal", "", "producer", "consumer"},
	grpc:     []string{"", "0", "5", "NOT_FOUND", "StatusCode.OK", "007", "bogus"},
	method:   []string{"", "GET", strings.Repeat("m", MaxTagLen+1)},
	peers: [][]string{nil, {"peer.service:db"}, {"_dd.base_service:orig"}, {"peer.hostname:10.0.0.1", "db.system:pg"},
		{"peer.service:" + strings.Repeat("p", MaxTagLen)}, manyTags(MaxPeerTags + 2), manyTags(aggregate.MaxInlinePeerTags + 1),
		{"db.instance:a", "db.instance:a"}},
}

func manyTags(n int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = fmt.Sprintf("k%d:v%d", i%4, i) // few keys: no budget collapses them
	}
	return t
}

// hintSpan is a span of hintPools picked by r.
func hintSpan(r *rand.Rand) Span {
	p := &hintPools
	return Span{
		Service: "svc", Name: "op", Type: "web",
		Resource:       p.resource[r.IntN(len(p.resource))],
		SpanKind:       p.kind[r.IntN(len(p.kind))],
		GRPCStatusCode: p.grpc[r.IntN(len(p.grpc))],
		HTTPMethod:     p.method[r.IntN(len(p.method))],
		PeerTags:       p.peers[r.IntN(len(p.peers))],
		HTTPStatusCode: uint32(200 + 300*r.IntN(2)),
		TraceRoot:      r.IntN(4) == 0, Synthetics: r.IntN(8) == 0,
		Error: r.IntN(5) == 0, TopLevel: r.IntN(2) == 0, Measured: true,
		Duration: 1 + r.Int64N(1e9),
	}
}

// TestHintsChangeNoOutcome: a table fed as Publish feeds it, spans whose
// key is a template's handed over as the template (SnapshotWith, Hints),
// ends every interval with the very groups and counts of a table fed full
// records (Snapshot) — with spans that repeat their strings, cut labels,
// gRPC names, peer tags a kind drops, too many peer tags, tight budgets
// (spans collapse, AddBatch takes its other paths), single Adds, Rotate
// and Clear — and most spans did go as templates.
func TestHintsChangeNoOutcome(t *testing.T) {
	for _, tight := range []bool{false, true} {
		t.Run(fmt.Sprintf("tight=%v", tight), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			full, hinted := aggregate.NewTable(0), aggregate.NewTable(0)
			hints := new(aggregate.Hints)
			hinted.SetHints(hints, Hintable)
			for _, tb := range []*aggregate.Table{full, hinted} {
				l := aggregate.DefaultLimits()
				if tight {
					l.Resource, l.SpanKind, l.PeerTag = 2, 3, 2
				}
				tb.SetLimits(l)
			}
			rings := [2]*inbox.Ring[aggregate.Record]{inbox.New[aggregate.Record](512), inbox.New[aggregate.Record](512)}
			for _, g := range rings {
				g.SetClear((*aggregate.Record).Reset)
			}
			batch := make([]*aggregate.Record, 256)
			drain := func(g *inbox.Ring[aggregate.Record], tb *aggregate.Table, single bool) {
				n := g.Ready(len(batch))
				for i := range n {
					batch[i] = g.At(i)
				}
				if single {
					for _, s := range batch[:n] {
						tb.Add(s)
					}
				} else if got := tb.AddBatch(batch[:n]); got != n {
					t.Fatalf("AddBatch added %d of %d", got, n)
				}
				g.Release(n)
			}
			// A tracer's keys repeat: 60 of them, each with its own
			// measurements every time.
			keys := make([]Span, 60)
			for i := range keys {
				keys[i] = hintSpan(r)
			}
			var asTemplate, canTemplate, spans int
			for round := range 40 {
				for range 200 {
					s := keys[r.IntN(len(keys))]
					m := hintSpan(r)
					s.Error, s.TopLevel, s.Duration = m.Error, m.TopLevel, m.Duration
					if !s.Eligible() {
						continue
					}
					c0, _ := rings[0].Claim()
					c1, _ := rings[1].Claim()
					s.Snapshot(c0.Value())
					s.SnapshotWith(c1.Value(), hints)
					if c1.Value().Labels != nil {
						asTemplate++
						if !Hintable(c1.Value().Labels) || !Hintable(c0.Value()) {
							t.Fatalf("span %+v went as a template its key does not allow", s)
						}
					}
					if Hintable(c0.Value()) && copiedAsIs(&s, c0.Value()) {
						canTemplate++
					}
					spans++
					c0.Commit()
					c1.Commit()
				}
				single := round%5 == 4
				drain(rings[0], full, single)
				drain(rings[1], hinted, single)
				if round%10 == 9 {
					compareTables(t, round, full, hinted)
					if round == 19 {
						full.Clear()
						hinted.Clear()
					} else {
						full.Rotate()
						hinted.Rotate()
					}
				}
			}
			// Each key's first spans go in full, until the table has seen
			// its strings twice; so do those that collapse (tight).
			want := canTemplate * 9 / 10
			if tight {
				want = canTemplate / 3
			}
			if canTemplate < spans/20 || asTemplate < want {
				t.Errorf("%d of %d spans went as a template, of %d that Snapshot copies as they are; want %d, and those a twentieth of all",
					asTemplate, spans, canTemplate, want)
			}
			t.Logf("%d of %d spans went as a template, of %d that Snapshot copies as they are", asTemplate, spans, canTemplate)
		})
	}
}

// compareTables fails unless a and b hold the same groups with the same
// counts this interval.
func compareTables(t *testing.T, round int, a, b *aggregate.Table) {
	t.Helper()
	groups := func(tb *aggregate.Table) map[string]string {
		m := map[string]string{}
		for _, e := range tb.Touched(nil) {
			m[fmt.Sprintf("%+v", e.Key)] = fmt.Sprintf("hits %d errors %d top %d dur %d ok %v err %v",
				e.Hits, e.Errors, e.TopLevelHits, e.Duration, e.Ok.Count(), e.Err.Count())
		}
		return m
	}
	ga, gb := groups(a), groups(b)
	if len(ga) == 0 {
		t.Fatalf("round %d: no groups", round)
	}
	if !reflect.DeepEqual(ga, gb) {
		for k, v := range ga {
			if gb[k] != v {
				t.Errorf("round %d: group %.200s: full records %q, templates %q", round, k, v, gb[k])
			}
		}
		for k, v := range gb {
			if _, ok := ga[k]; !ok {
				t.Errorf("round %d: group %.200s only with templates: %q", round, k, v)
			}
		}
	}
	for f := range aggregate.NumFields {
		if x, y := a.Collapsed(f), b.Collapsed(f); x != y {
			t.Errorf("round %d: collapsed %v: %d with full records, %d with templates", round, f, x, y)
		}
	}
}

// copiedAsIs reports whether Snapshot wrote s's key fields into r as they
// are: the same strings, as many peer tags.
func copiedAsIs(s *Span, r *aggregate.Record) bool {
	if len(s.PeerTags) != int(r.NumPeerTags) || r.ExtraPeerTags != nil {
		return false
	}
	for i, p := range s.PeerTags {
		if !same(p, r.PeerTags[i]) {
			return false
		}
	}
	return same(s.Resource, r.Resource) && same(s.Service, r.Service) && same(s.Name, r.Name) &&
		same(s.Type, r.Type) && same(s.SpanKind, r.SpanKind) && same(s.HTTPMethod, r.HTTPMethod) &&
		same(s.HTTPEndpoint, r.HTTPEndpoint) && same(s.GRPCStatusCode, r.GRPCStatusCode) &&
		same(s.ServiceSource, r.ServiceSource)
}

// TestPublishHandsOverTemplates: through Publish, Flush and the agent, a
// span whose strings repeat goes as a template once the consumer has seen
// them twice, its twin with another status code gets its own, and the
// agent receives every span's hits, errors and durations under the right
// key.
func TestPublishHandsOverTemplates(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	now := time.Now().UnixNano()
	ok := Span{Service: "web", Name: "http.request", Resource: "GET /users/{id}", SpanKind: "client", HTTPStatusCode: 200,
		PeerTags: []string{"peer.service:users"}, Start: now - 1000, Duration: 1000, TopLevel: true}
	failed := ok
	failed.HTTPStatusCode, failed.Error, failed.Duration = 500, true, 3000
	const rounds, per = 4, 10
	for round := range rounds {
		if round >= 2 {
			for _, s := range []*Span{&ok, &failed} {
				if s.hint(a.hints) == nil {
					t.Fatalf("round %d: status %d has no template after two reports of its strings", round, s.HTTPStatusCode)
				}
			}
			if ok.hint(a.hints) == failed.hint(a.hints) {
				t.Fatal("the two status codes share a template")
			}
		}
		for range per {
			a.Publish(&ok)
			a.Publish(&failed)
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, a)
	type sums struct{ hits, errors, top, duration uint64 }
	got := map[uint32]sums{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				if g.Resource != ok.Resource || len(g.PeerTags) != 1 || g.PeerTags[0] != "peer.service:users" {
					t.Errorf("unexpected group %+v", g)
				}
				s := got[g.HTTPStatusCode]
				s.hits, s.errors, s.top, s.duration = s.hits+g.Hits, s.errors+g.Errors, s.top+g.TopLevelHits, s.duration+g.Duration
				got[g.HTTPStatusCode] = s
			}
		}
	}
	want := map[uint32]sums{200: {rounds * per, 0, rounds * per, rounds * per * 1000}, 500: {rounds * per, rounds * per, rounds * per, rounds * per * 3000}}
	if !maps.Equal(got, want) {
		t.Fatalf("at the agent %+v, want %+v", got, want)
	}
	if h := a.Health(); h.Counted != 2*rounds*per || h.Published != 2*rounds*per {
		t.Fatalf("Health %+v, want %d published and counted", h, 2*rounds*per)
	}
}
