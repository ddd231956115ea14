// This file tests which Publish calls that find the inbox full yield: the
// premise of Publish's latency bound under overload (by default rarely, but
// some do), and the ShedYieldEvery and ShedWithoutYield knobs.

package stats

import (
	"fmt"
	"testing"
)

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

// TestShedYieldEvery checks which Publish calls yield: only those that find
// the inbox full, one in ShedYieldEvery of them, none with ShedWithoutYield.
func TestShedYieldEvery(t *testing.T) {
	var yields int
	defer func(f func()) { yield = f }(yield)
	yield = func() { yields++ }
	const sheds = 3 * DefaultShedYieldEvery
	for _, tc := range []struct {
		cfg   Config
		every int // 0: never
	}{
		{Config{}, DefaultShedYieldEvery},
		{Config{ShedYieldEvery: 1}, 1},
		{Config{ShedYieldEvery: 3}, 3},
		{Config{ShedYieldEvery: 3, ShedWithoutYield: true}, 0},
	} {
		name := fmt.Sprintf("ShedYieldEvery=%d ShedWithoutYield=%v", tc.cfg.ShedYieldEvery, tc.cfg.ShedWithoutYield)
		// Never started: nothing drains, so the inbox fills and stays full.
		a, err := New(Config{AgentURL: "http://127.0.0.1:1", InboxSize: 16,
			ShedYieldEvery: tc.cfg.ShedYieldEvery, ShedWithoutYield: tc.cfg.ShedWithoutYield})
		if err != nil {
			t.Fatal(err)
		}
		yields = 0
		s := &Span{Name: "op", TopLevel: true, Duration: 1}
		for range 16 {
			if !a.Publish(s) {
				t.Fatal("Publish into an inbox with room returned false")
			}
		}
		if yields != 0 {
			t.Fatalf("%s: %d yields on accepted spans", name, yields)
		}
		for range sheds {
			if a.Publish(s) {
				t.Fatal("Publish into a full inbox returned true")
			}
		}
		// Each stripe of the counter yields on its multiples of every;
		// one goroutine normally stays on one stripe (sheds/every yields),
		// but a moved stack would change stripes.
		want := 0
		for i := range a.c.inboxFull.cells {
			if tc.every > 0 {
				want += int(a.c.inboxFull.cells[i].Load()) / tc.every
			}
		}
		if yields != want || (tc.every > 0 && want < sheds/tc.every-1) {
			t.Errorf("%s: %d yields over %d sheds, want %d (about %d)", name, yields, sheds, want, sheds/max(tc.every, 1))
		}
		if h := a.Health(); h.InboxFull != sheds {
			t.Errorf("%s: InboxFull %d, want %d", name, h.InboxFull, sheds)
		}
	}
}
