// This file checks peer tags over stats.MaxTagLen against the agent: the
// SDK sends the agent's value cut to the limit, as the table keys it.

package peer

import (
	"slices"
	"strings"
	"testing"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"

	"github.com/spanstats/spanstats/stats"
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
		agentTags := agentPeerTagsOf(t, agentPeerTagKeys(), tc.kind, tc.tags)
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
		got := sdkPeerTagsOf(t, agentPeerTagKeys(), tc.kind, tc.tags)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("kind %q, tags %.60q:\n  agent, cut: %q\n  SDK:        %q", tc.kind, tc.tags, want, got)
		}
	}
}
