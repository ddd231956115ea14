package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// The benchmarks start aggregators, senders and loopback agents; all of
// them must be gone when the package's tests end.
func TestMain(m *testing.M) {
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
