// This file checks peer tags over stats.MaxTagLen against the agent: the
// SDK sends the agent's value cut to the limit, as the table keys it.

package peer

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestCutPeerTagIsStable: a peer tag over stats.MaxTagLen is grouped under
// the agent's value (IP addresses quantized, duplicate list entries
// dropped) cut to the limit, its other peer tags under the agent's values,
// through Publish and the table's caches. The table quantizes the cut value
// again: a cut that ends in a partial entry which then reads otherwise
// ("10.1.2.34" of "10.1.2.345" would become "…,blocked-ip-address", 209
// bytes, over the limit) or repeats an earlier entry (dropped as a
// duplicate) goes without that last entry, so that what the table keys is
// the cut it was given.
func TestCutPeerTagIsStable(t *testing.T) {
	const v = len("out.host:")
	long := func(n int) string { return strings.Repeat("h", n) }
	for _, tc := range []struct {
		kind string
		tags []string
	}{
		{"client", []string{"out.host:" + long(stats.MaxTagLen-v-10) + ",10.1.2.345"}}, // cut to ",10.1.2.34": left out
		{"client", []string{"out.host:a," + long(stats.MaxTagLen-v-4) + ",ab"}},        // cut to ",a": left out
		{"client", []string{"out.host:" + long(stats.MaxTagLen-v-10) + ",10.1.2.345", "peer.hostname:10.1.2.3:80",
			"db.instance:a,a", "peer.service:users"}},
		{"producer", []string{"peer.service:users", "out.host:" + long(300) + ",10.1.2.3"}},
		{"consumer", []string{"peer.service:", "db.instance:,,", "out.host:" + long(300)}}, // a value that quantizes to none is kept
		{"internal", []string{"_dd.base_service:" + long(stats.MaxTagLen-len("_dd.base_service:")-10) + ",10.1.2.345"}},
		{"client", []string{"out.host:" + long(stats.MaxTagLen-v-8) + ",1.2.3.4"}}, // 200 bytes: not cut
		{"client", []string{"out.host:10.1.2.3,10.1.2.4", "peer.hostname:a,a"}},    // nothing cut
	} {
		agentTags := agentPeerTagsOf(t, tc.kind, tc.tags)
		var want []string
		for _, tag := range agentTags {
			// The documented cut: of the tags the tracer gave over the limit.
			k, _, _ := strings.Cut(tag, ":")
			if i := slices.IndexFunc(tc.tags, func(s string) bool { return strings.HasPrefix(s, k+":") }); len(tc.tags[i]) > stats.MaxTagLen {
				tag = normalize.TruncateUTF8(tag, stats.MaxTagLen)
				// Without a last entry the agent's quantization would
				// rewrite, as the table would.
				if val := tag[len(k)+1:]; obfuscate.QuantizePeerIPAddresses(val) != val {
					tag = tag[:len(k)+1+strings.LastIndexByte(val, ',')]
				}
			}
			want = append(want, tag)
		}
		got := sdkPeerTagsOf(t, tc.kind, tc.tags)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("kind %q, tags %.60q:\n  agent, cut: %q\n  SDK:        %q", tc.kind, tc.tags, want, got)
		}
	}
}

// agentPeerTagsOf returns the peer tags of the one group the agent's
// SpanConcentrator makes of a measured span of kind carrying tags.
func agentPeerTagsOf(t *testing.T, kind string, tags []string) []string {
	t.Helper()
	meta := map[string]string{"span.kind": kind}
	for _, tag := range tags {
		k, v, _ := strings.Cut(tag, ":")
		meta[k] = v
	}
	now := time.Now()
	sc := newSpanConcentrator(now)
	ss, ok := sc.NewStatSpanWithConfig(agentstats.StatSpanConfig{
		Service: "web", Name: "op", Resource: "r", ParentID: 1, Start: now.UnixNano(), Duration: 1000,
		Meta: meta, Metrics: map[string]float64{"_dd.measured": 1}, PeerTags: agentPeerTagKeys(),
	})
	if !ok {
		t.Fatalf("kind %q: the agent does not count the span", kind)
	}
	sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "e"}, "", nil, "")
	var groups [][]string
	for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				groups = append(groups, g.PeerTags)
			}
		}
	}
	if len(groups) != 1 {
		t.Fatalf("kind %q: the agent made %d groups, want 1", kind, len(groups))
	}
	return groups[0]
}

// sdkPeerTagsOf is agentPeerTagsOf of the SDK, through Publish and the fake
// agent.
func sdkPeerTagsOf(t *testing.T, kind string, tags []string) []string {
	t.Helper()
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Env: "e", PeerTagKeys: agentPeerTagKeys()})
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
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				groups = append(groups, g.PeerTags)
			}
		}
	}
	if len(groups) != 1 {
		t.Fatalf("kind %q: the SDK sent %d groups, want 1", kind, len(groups))
	}
	return groups[0]
}
