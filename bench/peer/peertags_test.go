// This file checks, span kind by span kind, that the SDK keeps the peer
// tags the agent's concentrator keys a span on.

package peer

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/DataDog/datadog-agent/pkg/trace/config"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
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

// TestBaseServiceKeptWithoutKeyInList: the agent keeps an internal span's
// _dd.base_service tag whatever the peer-tag key list holds (only an empty
// list keeps nothing): peerTagKeysToAggregateForSpan answers with that one
// key for such a span without looking it up in the list. A tracer
// configured with its own list (Config.PeerTagKeys) that leaves the key out
// must still group such a span under it; a client span keeps only keys in
// the list.
func TestBaseServiceKeptWithoutKeyInList(t *testing.T) {
	keys := []string{"peer.service"}
	for _, tc := range []struct {
		kind string
		tags []string
	}{
		{"internal", []string{"peer.service:users-db", "_dd.base_service:web-base"}},
		{"", []string{"_dd.base_service:10.1.2.3"}},
		{"\u0130nternal", []string{"_dd.base_service:web-base"}},
		{"client", []string{"peer.service:users-db", "_dd.base_service:web-base"}},
		{"client", []string{"_dd.base_service:web-base"}},
		{"cl\u0130ent", []string{"_dd.base_service:web-base"}},
		{"server", []string{"_dd.base_service:web-base"}},
		{"weird", []string{"_dd.base_service:web-base"}},
		{"INTERNAL", []string{"_dd.base_service:web-base"}},
	} {
		want := agentPeerTagsOf(t, keys, tc.kind, tc.tags)
		got := sdkPeerTagsOf(t, keys, tc.kind, tc.tags)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("kind %q, tags %q: the SDK groups under peer tags %q, the agent %q", tc.kind, tc.tags, got, want)
		}
		// The table alone, given a record of one tag as it is, unfiltered
		// by Span.Snapshot's rules for kinds (which leave an internal
		// span its base service alone).
		if len(tc.tags) != 1 {
			continue
		}
		tb := aggregate.NewTable(0)
		tb.SetPeerTagKeys(keys)
		r := aggregate.Record{Service: "web", Name: "op", Resource: "r", SpanKind: tc.kind, Duration: 1000}
		r.SetPeerTags(tc.tags)
		tb.Add(&r)
		if es := tb.Touched(nil); len(es) != 1 || !slices.Equal(slices.Sorted(slices.Values(es[0].PeerTags)), want) {
			t.Errorf("kind %q, tags %q: the table groups under %d entries %v, the agent under peer tags %q", tc.kind, tc.tags, len(es), es, want)
		}
	}
}

// agentPeerTagsOf returns the peer tags of the one group the agent's
// SpanConcentrator, given the peer-tag key list keys, makes of a measured
// span of kind (none when empty) carrying tags.
func agentPeerTagsOf(t *testing.T, keys []string, kind string, tags []string) []string {
	t.Helper()
	meta := map[string]string{}
	if kind != "" {
		meta["span.kind"] = kind
	}
	for _, tag := range tags {
		k, v, _ := strings.Cut(tag, ":")
		meta[k] = v
	}
	now := time.Now()
	sc := newSpanConcentrator(now)
	ss, ok := sc.NewStatSpanWithConfig(agentstats.StatSpanConfig{
		Service: "web", Name: "op", Resource: "r", ParentID: 1, Start: now.UnixNano(), Duration: 1000,
		Meta: meta, Metrics: map[string]float64{"_dd.measured": 1}, PeerTags: keys,
	})
	if !ok {
		t.Fatalf("kind %q: the agent does not count the span", kind)
	}
	sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "e"}, "", nil, "")
	var groups [][]string
	for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
		groups = appendPeerTagGroups(groups, p)
	}
	if len(groups) != 1 {
		t.Fatalf("kind %q: the agent made %d groups, want 1", kind, len(groups))
	}
	return groups[0]
}

// sdkPeerTagsOf is agentPeerTagsOf of the SDK, through Publish and the fake
// agent.
func sdkPeerTagsOf(t *testing.T, keys []string, kind string, tags []string) []string {
	t.Helper()
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Env: "e", PeerTagKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	// Twice: the second span goes through the table's caches.
	for range 2 {
		agg.Publish(&stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: kind, Measured: true,
			Start: time.Now().UnixNano(), Duration: 1000, PeerTags: tags})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var groups [][]string
	for _, r := range statstest.Accepted(agent.Requests()) {
		var p pb.ClientStatsPayload
		if _, err := p.UnmarshalMsg(r.Body); err != nil {
			t.Fatal(err)
		}
		groups = appendPeerTagGroups(groups, &p)
	}
	if len(groups) != 1 {
		t.Fatalf("kind %q: the SDK sent %d groups, want 1", kind, len(groups))
	}
	return groups[0]
}

// appendPeerTagGroups appends the peer tags of each group of p.
func appendPeerTagGroups(groups [][]string, p *pb.ClientStatsPayload) [][]string {
	for _, b := range p.Stats {
		for _, g := range b.Stats {
			groups = append(groups, g.PeerTags)
		}
	}
	return groups
}

// TestPeerTagsAggregationOffMatchesAgent: an agent run with
// apm_config.peer_tags_aggregation false aggregates no peer tags: its
// /info says "peer_tags": null and its concentrator (as dd-trace-go's)
// keys a client span on none. The SDK, having read that /info, sends the
// client span without peer tags, where it used to keep every key.
func TestPeerTagsAggregationOffMatchesAgent(t *testing.T) {
	var conf *config.AgentConfig
	ag := startAgentReceiver(t, "", func(c *config.AgentConfig) { c.PeerTagsAggregation = false; conf = c })
	// The agent's own concentrator, with the keys the agent uses.
	now := time.Now()
	sc := newSpanConcentrator(now)
	ss, ok := sc.NewStatSpanWithConfig(agentstats.StatSpanConfig{
		Service: "web", Name: "http.client", Resource: "GET /x", ParentID: 1, Start: now.UnixNano(), Duration: 1000,
		Meta:    map[string]string{"span.kind": "client", "peer.service": "billing", "unlisted.key": "x"},
		Metrics: map[string]float64{"_dd.measured": 1}, PeerTags: conf.ConfiguredPeerTags(),
	})
	if !ok {
		t.Fatal("agent does not count the span")
	}
	sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "e"}, "", nil, "")
	var want []string
	for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				want = append(want, g.PeerTags...)
			}
		}
	}

	agg, err := stats.New(stats.Config{AgentURL: ag.url, Env: "interop", Service: "web", InfoRefresh: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	for deadline := time.Now().Add(10 * time.Second); agg.Health().InfoReads == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the SDK never read the agent's /info")
		}
	}
	agg.Publish(&stats.Span{Service: "web", Name: "http.client", Resource: "GET /x", SpanKind: "client",
		Start: time.Now().UnixNano() - 1000, Duration: 1000, PeerTags: []string{"peer.service:billing", "unlisted.key:x"}})
	if err := agg.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	groups := 0
	for _, r := range ag.received() {
		for _, b := range r.p.Stats {
			for _, g := range b.Stats {
				got = append(got, g.PeerTags...)
				groups++
			}
		}
	}
	if groups != 1 {
		t.Fatalf("the agent received %d groups, want the client span's one", groups)
	}
	if !slices.Equal(got, want) {
		t.Errorf("agent with peer_tags_aggregation off (peer_tags list %q): the agent's concentrator keys the client span on peer tags %q, the SDK sent %q",
			conf.ConfiguredPeerTags(), want, got)
	}
}
