// This file tests that the SDK and the concentrator driver see the same
// keys on one workload, so the benchmarks compare like with like.

package peer

import (
	"context"
	"runtime"
	"testing"
	"time"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"

	"github.com/spanstats/spanstats/bench"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestDriversAgree publishes a few-key workload once through each
// implementation and checks that both count every span in as many groups
// (TestDriversSameKeys compares the groups label by label): the
// translation of a span into dd-trace-go's fields, meta and metrics must
// not lose a label (a status code or a peer tag) that the SDK keys on, or
// the comparison would flatter whichever side aggregates fewer groups.
func TestDriversAgree(t *testing.T) {
	for _, w := range []*bench.Workload{bench.SteadyState(), bench.ClientPeerTags(),
		bench.SteadyStateFreshStrings(), bench.ClientPeerTagsFreshStrings()} {
		t.Run(w.Name, func(t *testing.T) {
			n := uint64(w.Len())

			d := NewConcentrator(w)
			p := w.Producer(0)
			for range w.Len() {
				d.Publish(p.Next())
				for len(d.in) > peerInboxLen/2 { // do not shed: this test counts
					runtime.Gosched()
				}
			}
			if err := d.Stop(); err != nil {
				t.Fatal(err)
			}
			if c := d.Counts(); c.Counted != n || c.Published != n || c.Shed != 0 || c.Collapsed != 0 {
				t.Errorf("peer counts %+v, want all %d counted, none shed or collapsed", c, n)
			}

			groups, hits, errs := 0, uint64(0), uint64(0)
			for _, pl := range d.sc.Flush(time.Now().Add(time.Hour).UnixNano(), true) {
				t.Fatalf("a payload left after the final flush: %d buckets", len(pl.Stats))
			}
			sc := newSpanConcentrator(time.Now())
			p = w.Producer(0)
			for range w.Len() {
				i, s := p.Next()
				ss, ok := sc.NewStatSpanWithConfig(d.statSpanConfig(s, d.tags.metas[d.tags.meta[i]]))
				if !ok {
					t.Fatalf("span %d (%s, kind %q) is not eligible for the peer", i, s.Name, s.SpanKind)
				}
				sc.AddSpan(ss, d.aggKey, "", nil, "")
			}
			for _, pl := range sc.Flush(time.Now().Add(time.Hour).UnixNano(), true) {
				for _, b := range pl.Stats {
					for _, g := range b.Stats {
						groups++
						hits += g.Hits
						errs += g.Errors
						switch g.SpanKind {
						case "server":
							if g.HTTPStatusCode != 200 || g.HTTPMethod == "" || g.HTTPEndpoint == "" {
								t.Errorf("server group %s %s lost its HTTP labels: status %d, %q %q", g.Service, g.Resource, g.HTTPStatusCode, g.HTTPMethod, g.HTTPEndpoint)
							}
						case "client":
							if len(g.PeerTags) != 3 {
								t.Errorf("client group %s %s has peer tags %q, want 3", g.Service, g.Resource, g.PeerTags)
							}
						}
					}
				}
			}
			if groups != bench.SteadyStateKeys || hits != n {
				t.Errorf("peer: %d groups, %d hits; want %d groups, %d hits", groups, hits, bench.SteadyStateKeys, n)
			}
			if r := float64(errs) / float64(hits); r < 0.19 || r > 0.21 {
				t.Errorf("peer error rate %.3f, want 0.20", r)
			}

			// An hour's bucket: a run that crossed a 10 s boundary would
			// hold each key twice, once per bucket (seen under -race).
			sdk, err := bench.NewSDKConfig(stats.Config{BucketInterval: time.Hour}, agentPeerTagKeys())
			if err != nil {
				t.Fatal(err)
			}
			defer sdk.Close()
			a := sdk.Aggregator()
			first := time.Now().Truncate(time.Hour)
			p = w.Producer(0)
			for range w.Len() {
				_, s := p.Next()
				for !a.Publish(s) {
					runtime.Gosched()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			waitCounted(t, a, n)
			h := a.Health()
			buckets := uint64(time.Now().Truncate(time.Hour).Sub(first)/time.Hour) + 1
			if err := a.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			keys := uint64(bench.SteadyStateKeys)
			if h.Entries%keys != 0 || h.Entries == 0 || h.Entries/keys > buckets || h.CollapsedSpans != 0 || h.Overflowed != 0 {
				t.Errorf("SDK: %d entries in at most %d buckets, %d collapsed, %d overflowed; want %d per bucket, 0, 0", h.Entries, buckets, h.CollapsedSpans, h.Overflowed, keys)
			}
		})
	}
}

func waitCounted(t *testing.T, a *stats.Aggregator, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for a.Health().Counted < n {
		if time.Now().After(deadline) {
			t.Fatalf("consumer stuck: %+v", a.Health())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDriversSameKeys: each workload's spans give the same groups, label
// for label (the agent's key fields, decoded with the agent's own code),
// with the same hits, errors and top-level hits, through the SDK as
// bench.SDK publishes them and through the peer driver's translation: the
// two sides do the same work per span.
func TestDriversSameKeys(t *testing.T) {
	for _, w := range []*bench.Workload{bench.SteadyState(), bench.ClientPeerTags(),
		bench.SteadyStateFreshStrings(), bench.ClientPeerTagsFreshStrings()} {
		t.Run(w.Name, func(t *testing.T) {
			want := map[semKey]*semGroup{}
			sc := newSpanConcentrator(time.Now())
			d := NewConcentrator(w)
			defer d.Stop()
			p := w.Producer(0)
			for range w.Len() {
				i, s := p.Next()
				meta := d.tags.metas[d.tags.meta[i]]
				sc.SetObfuscationEnabled(false, false)
				ss, ok := sc.NewStatSpanWithConfig(d.statSpanConfig(s, meta))
				if !ok {
					t.Fatal("ineligible")
				}
				sc.AddSpan(ss, d.aggKey, "", nil, meta["_dd.origin"])
			}
			for _, pl := range sc.Flush(time.Now().Add(time.Hour).UnixNano(), true) {
				for _, b := range pl.Stats {
					for _, g := range b.Stats {
						addSemGroup(t, want, g, nil)
					}
				}
			}

			agent := statstest.New()
			defer agent.Close()
			agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Env: "bench", Service: "bench", BucketInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			agg.Start()
			// The agent's peer-tag list in force, as in the benchmarks' steady state.
			for deadline := time.Now().Add(10 * time.Second); agg.Health().InfoReads == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no /info read")
				}
			}
			var j *stats.PeerTagJoiner
			if w.JoinsPeerTags() {
				j = stats.NewPeerTagJoiner()
			}
			p = w.Producer(0)
			for range w.Len() {
				_, s := p.Next()
				if j != nil {
					bench.JoinPeerTags(j, s.PeerTags)
				}
				for !agg.Publish(s) {
					runtime.Gosched()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := agg.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			got := map[semKey]*semGroup{}
			for _, r := range statstest.Accepted(agent.Requests()) {
				var pl pb.ClientStatsPayload
				if _, err := pl.UnmarshalMsg(r.Body); err != nil {
					t.Fatal(err)
				}
				for _, b := range pl.Stats {
					for _, g := range b.Stats {
						addSemGroup(t, got, g, nil)
					}
				}
			}
			miss := 0
			for k, wg := range want {
				g, ok := got[k]
				if !ok {
					if miss++; miss <= 3 {
						t.Errorf("peer key missing from SDK: %v", k)
					}
					continue
				}
				if g.Hits != wg.Hits || g.Errors != wg.Errors || g.TopLevelHits != wg.TopLevelHits {
					t.Errorf("counts differ for %v: peer %d/%d/%d SDK %d/%d/%d", k, wg.Hits, wg.Errors, wg.TopLevelHits, g.Hits, g.Errors, g.TopLevelHits)
				}
			}
			if len(got) != len(want) || miss > 0 {
				t.Errorf("peer %d groups, SDK %d groups, %d peer keys missing in the SDK's", len(want), len(got), miss)
			}
		})
	}
}
