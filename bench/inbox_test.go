// This file holds BenchmarkInboxOverload: the default inbox against a
// deeper one under overload.

package bench

import (
	"testing"

	"github.com/spanstats/spanstats/stats"
)

// BenchmarkInboxOverload weighs Config.InboxSize under overload: the SDK
// with the default inbox and with a deeper one (DeepInbox), in alternating
// rounds (runAB), 8 producers publishing as fast as they can. Overloaded,
// the deeper inbox's consumer counts fewer spans a second (its slots,
// four times the memory, likely outgrow the caches); below saturation it
// makes drains fewer and larger (BenchmarkPacedInbox in bench/peer).
func BenchmarkInboxOverload(b *testing.B) {
	for _, w := range []func() *Workload{SteadyState, HighCardinalityResource} {
		b.Run("workload="+w().Name, func(b *testing.B) {
			runAB(b, w(), abSide{"default", OpenSDK(nil)},
				abSide{"deep", OpenSDKConfig(stats.Config{InboxSize: DeepInbox}, nil)})
		})
	}
}
