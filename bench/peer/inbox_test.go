// This file holds BenchmarkPacedInbox: the default inbox against a deeper
// one at the loads applications run at.

package peer

import (
	"strconv"
	"testing"
	"time"

	"github.com/spanstats/spanstats/bench"
	"github.com/spanstats/spanstats/stats"
)

// BenchmarkPacedInbox weighs Config.InboxSize at the loads applications
// run at: the SDK with the default inbox and with bench.DeepInbox, in
// alternating rounds of bench.RunPaced, at 200 k and 1 M spans/s in 1 ms
// bursts. The consumer drains at half full, so a deeper inbox makes
// fewer, larger drains; cpu-ns/span-inbox=<n> is each one's CPU per
// span less the pacing driver's. Its price is the deeper inbox's memory
// and, overloaded, fewer spans counted (bench's BenchmarkInboxOverload):
// why the default stays where it is.
func BenchmarkPacedInbox(b *testing.B) {
	for _, w := range []func() *bench.Workload{bench.SteadyState, bench.SteadyStateFreshStrings} {
		for _, rate := range []int{200_000, 1_000_000} {
			p := bench.Pacing{Rate: rate, Burst: time.Millisecond}
			b.Run("workload="+w().Name+"/"+p.String(), func(b *testing.B) {
				sides := make([]bench.PacedSide, 0, 2)
				for _, n := range []int{stats.DefaultInboxSize, bench.DeepInbox} {
					sides = append(sides, bench.PacedSide{Name: "inbox=" + strconv.Itoa(n),
						Open: bench.OpenSDKConfig(stats.Config{InboxSize: n}, agentPeerTagKeys())})
				}
				bench.RunPaced(b, w(), p, sides...)
			})
		}
	}
}
