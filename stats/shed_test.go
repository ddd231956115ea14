// This file tests the premise of Publish's latency bound under overload:
// by default, calls that find the inbox full yield rarely, but some do.

package stats

import "testing"

// TestShedYieldsStayOutOfP999 checks the premise of Publish's latency bound
// under overload: a yield can cost the caller a whole scheduling round, so
// with the default Config fewer than one Publish call in 1000 that find the
// inbox full may yield (then yields cannot reach the p99.9 latency of
// BenchmarkPublishLatencyOverload), yet some must, or the consumer loses its
// share of the processors to the publishers.
func TestShedYieldsStayOutOfP999(t *testing.T) {
	var yields int
	defer func(f func()) { yield = f }(yield)
	yield = func() { yields++ }
	// Never started: nothing drains, so the inbox fills and stays full.
	a, err := New(Config{AgentURL: "http://127.0.0.1:1", InboxSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := &Span{Name: "op", TopLevel: true, Duration: 1}
	for range 16 {
		a.Publish(s)
	}
	const sheds = 20_000
	for range sheds {
		if a.Publish(s) {
			t.Fatal("Publish into a full inbox returned true")
		}
	}
	if yields*1000 >= sheds || yields == 0 {
		t.Fatalf("%d yields over %d sheds: want at least 1 and under 1 in 1000", yields, sheds)
	}
}
