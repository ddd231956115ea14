// This file tests the harness itself: how the paced producers wake and
// what the warm-up hands the implementation.

package bench

import (
	"testing"
	"time"
)

// TestPacerBursts pins how a paced producer wakes: in bursts of a
// millisecond's worth of spans, exactly that many per wake-up, and one span
// per wake-up at most when spread (fewer wake-ups when the timer wakes it
// late). RunPaced's pacing-ratio rests on this count.
func TestPacerBursts(t *testing.T) {
	w := SteadyState()
	for _, tc := range []struct {
		p                    Pacing
		minBursts, maxBursts int
	}{
		// 80 k spans/s from 8 producers: one span every 100 µs each, so 10
		// per 1 ms burst and 100 bursts for 1000 spans.
		{Pacing{Rate: 80_000, Burst: time.Millisecond}, 100, 100},
		// Spread: a wake-up publishes the spans due, one to a
		// millisecond's worth (10).
		{Pacing{Rate: 80_000}, 100, 1000},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			d, _ := openNull(w)
			var spans, bursts paddedCount
			newPacer(tc.p, Producers).run(d, w.Producer(0), time.Now(), 1000, time.Time{}, &spans, &bursts)
			if got := spans.Load(); got != 1000 {
				t.Errorf("published %d spans, want 1000", got)
			}
			if got := d.Counts().Counted; got != 1000 {
				t.Errorf("the driver counted %d spans, want 1000", got)
			}
			if got := int(bursts.Load()); got < tc.minBursts || got > tc.maxBursts {
				t.Errorf("%d bursts for 1000 spans, want %d to %d", got, tc.minBursts, tc.maxBursts)
			}
		})
	}
}

// TestWarmUpShedsNothing: the warm-up reaches the aggregator whole, none
// of it shed at a full inbox, so that the steady state it is there for is
// the one measured.
func TestWarmUpShedsNothing(t *testing.T) {
	for _, w := range []*Workload{SteadyState(), HighCardinalityResource()} {
		d, err := NewSDK(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := warmUp(t, w, d)
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		d.Close()
		if c.Shed != 0 || c.Accounted() != WarmupSpans {
			t.Errorf("%s: warm-up of %d spans: shed %d, accounted %d", w.Name, WarmupSpans, c.Shed, c.Accounted())
		}
	}
}
