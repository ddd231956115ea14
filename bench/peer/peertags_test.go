// This file checks, span kind by span kind, that the SDK keeps the peer
// tags the agent's concentrator keys a span on.

package peer

import (
	"slices"
	"testing"
	"time"

	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats"
)

// TestPeerTagsByKindMatchAgent: a measured span carrying peer.service and
// _dd.base_service, of each kind, gets from Span.Snapshot the peer tags the
// agent's SpanConcentrator groups it under (its meta holding the same
// tags): all of them for a client, none for a server, and for an internal
// span or one without kind the base service alone, the agent's mark of a
// service overridden by custom instrumentation.
func TestPeerTagsByKindMatchAgent(t *testing.T) {
	tags := []string{"peer.service:users-db", "_dd.base_service:web-base"}
	for _, kind := range []string{"internal", "", "server", "client", "Internal"} {
		meta := map[string]string{"peer.service": "users-db", "_dd.base_service": "web-base"}
		if kind != "" {
			meta["span.kind"] = kind
		}
		now := time.Now()
		sc := newSpanConcentrator(now)
		ss, ok := sc.NewStatSpanWithConfig(agentstats.StatSpanConfig{
			Service: "web", Name: "op", Resource: "r", ParentID: 1,
			Start: now.UnixNano(), Duration: 1000, Meta: meta,
			Metrics: map[string]float64{"_dd.measured": 1}, PeerTags: agentPeerTagKeys(),
		})
		if !ok {
			t.Fatalf("kind %q: the agent does not count the span", kind)
		}
		sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "e"}, "", nil, "")
		var want []string
		groups := 0
		for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
			for _, b := range p.Stats {
				for _, g := range b.Stats {
					groups++
					want = g.PeerTags
				}
			}
		}
		if groups != 1 {
			t.Fatalf("kind %q: the agent made %d groups, want 1", kind, groups)
		}
		s := stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: kind, Measured: true,
			Duration: 1000, PeerTags: tags}
		var r aggregate.Record
		s.Snapshot(&r)
		got := slices.Clone(r.PeerTags[:r.NumPeerTags])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("kind %q: the SDK keeps peer tags %q, the agent %q", kind, got, want)
		}
	}
}
