// This file tests that the SDK cuts a long resource where the agent's
// TruncateUTF8 cuts it.

package peer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats"
)

// TestTruncationMatchesAgent: a resource over stats.MaxResourceLen is cut
// by the SDK exactly where the agent's normalize.TruncateUTF8 cuts it, for
// valid UTF-8 with runes straddling the limit and for invalid bytes around
// it, so that the SDK's groups are the agent's.
func TestTruncationMatchesAgent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Bytes that make every case near the limit: ASCII, lead bytes of 2, 3
	// and 4-byte runes, continuation bytes, and bytes never valid.
	alphabet := []string{"a", "é", "€", "𝄞", "\x80", "\xbf", "\xc3", "\xe2\x82", "\xf0\x9d", "\xff"}
	const limit = stats.MaxResourceLen
	for i := range 20000 {
		var b strings.Builder
		b.WriteString(strings.Repeat("r", limit-8-rng.IntN(8)))
		for b.Len() <= limit+8 {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		v := b.String()
		var r aggregate.Record
		s := stats.Span{Service: "s", Name: "n", Resource: v, Duration: 1}
		s.Snapshot(&r)
		if want := normalize.TruncateUTF8(v, limit); r.Resource != want {
			t.Fatalf("case %d: the SDK kept %d bytes ending %q, the agent %d ending %q",
				i, len(r.Resource), r.Resource[max(0, len(r.Resource)-8):], len(want), want[max(0, len(want)-8):])
		}
	}
}
