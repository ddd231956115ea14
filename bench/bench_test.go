// This file holds the SDK's benchmarks at saturation, one per workload,
// with BenchmarkShedYield and BenchmarkHarness, and TestMain, which checks
// that they leave no goroutine running.

package bench

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats"
)

// The benchmarks start aggregators, senders and loopback agents; all of
// them must be gone when the package's tests end.
func TestMain(m *testing.M) {
	testenv.Clear() // the developer's DD_*, OTEL_* and SPANSTATS_* settings are not the benchmarks'
	goleak.VerifyTestMain(m)
}

// Each benchmark mirrors one of dd-trace-java's JMH benches: 8 producers
// publishing one-span traces into an aggregator with the default table cap
// and inbox. See Run for the metrics.

// BenchmarkSteadyState: 200 keys, realistic mix (the common case).
func BenchmarkSteadyState(b *testing.B) { Run(b, SteadyState(), OpenSDK(nil)) }

// BenchmarkHighCardinalityResource: only the resource varies (~1 M values).
func BenchmarkHighCardinalityResource(b *testing.B) {
	Run(b, HighCardinalityResource(), OpenSDK(nil))
}

// BenchmarkHighCardinalityPeer: only peer.hostname varies (32 K values).
func BenchmarkHighCardinalityPeer(b *testing.B) { Run(b, HighCardinalityPeer(), OpenSDK(nil)) }

// BenchmarkAdversarial: service, operation, resource and peer.hostname all
// vary at once.
func BenchmarkAdversarial(b *testing.B) { Run(b, Adversarial(), OpenSDK(nil)) }

// BenchmarkShedYield compares, per workload, the default
// Config.ShedYieldEvery with a yield on every Publish that finds the inbox
// full. The two aggregators run in alternating rounds inside one benchmark
// (see runAB), so a change of the host's speed hits both alike; it reports
// counted/s and ns per Publish call of each, and the ratio of their
// counted/s.
func BenchmarkShedYield(b *testing.B) {
	for _, w := range []func() *Workload{SteadyState, Adversarial} {
		b.Run("workload="+w().Name, func(b *testing.B) {
			runAB(b, w(), abSide{"default", OpenSDK(nil)},
				abSide{"every-shed", OpenSDKConfig(stats.Config{ShedYieldEvery: 1}, nil)})
		})
	}
}

// BenchmarkHarness is the cost of the harness alone on each workload: the
// producers' walk, the call and an uncontended atomic count per span.
func BenchmarkHarness(b *testing.B) {
	for _, w := range []func() *Workload{SteadyState, HighCardinalityResource, HighCardinalityPeer, Adversarial} {
		b.Run(w().Name, func(b *testing.B) {
			Run(b, w(), func(w *Workload) (Driver, error) { return &nullDriver{stretch: w.Len() / Producers}, nil })
		})
	}
}
