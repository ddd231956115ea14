// This file tests the harness itself: how the paced producers wake and
// what the warm-up hands the implementation.

package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/spanstats/spanstats/stats"
)

// TestPacerBursts pins how a paced producer wakes: in bursts of a
// millisecond's worth of spans, at least that many per wake-up, and one span
// per wake-up at most when spread (fewer wake-ups when the timer wakes it
// late: the next burst is then due already, and goes without a sleep).
// RunPaced's pacing-ratio rests on this count.
func TestPacerBursts(t *testing.T) {
	w := SteadyState()
	for _, tc := range []struct {
		p                    Pacing
		minBursts, maxBursts int
	}{
		// 80 k spans/s from 8 producers: one span every 100 µs each, so 10
		// per 1 ms burst and 100 bursts for 1000 spans, a sleep after each
		// but those the timer overslept into the next.
		{Pacing{Rate: 80_000, Burst: time.Millisecond}, 50, 100},
		// 20 k spans/s: one span every 400 µs each, so 2 or 3 per burst,
		// 2.5 on average, and 400 bursts for 1000 spans (not bursts of 2
		// every 800 µs: 500).
		{Pacing{Rate: 20_000, Burst: time.Millisecond}, 200, 400},
		// Spread: a wake-up publishes the spans due, one to a
		// millisecond's worth (10).
		{Pacing{Rate: 80_000}, 50, 1000},
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

// TestSpreadCatchesUpAMillisecond: a producer woken late publishes up to
// a millisecond's worth and one span, spread or bursting, at every offered
// load of the paced table, so that the Go timer's ~1 ms oversleep costs no
// side, the harness included, part of its load.
func TestSpreadCatchesUpAMillisecond(t *testing.T) {
	for _, rate := range []int{20_000, 200_000, 1_000_000} {
		for _, burst := range []time.Duration{0, time.Millisecond} {
			pc := newPacer(Pacing{Rate: rate, Burst: burst}, Producers)
			if n := time.Duration(pc.most) * pc.every; n <= maxCatchUp || n > maxCatchUp+pc.every {
				t.Errorf("%v: at most %d spans (%v) at once, want a millisecond's worth and one", Pacing{Rate: rate, Burst: burst}, pc.most, time.Duration(pc.most)*pc.every)
			}
		}
	}
}

// TestEmptyDriverCountsWhatItIsTold: the paced harness's Publish does
// nothing, and it accounts for what warmUp, publishWindow and
// publishInline tell it.
func TestEmptyDriverCountsWhatItIsTold(t *testing.T) {
	w := SteadyState()
	d, _ := openEmpty(w)
	base := warmUp(t, w, d)
	if base.Accounted() != uint64(min(w.Len(), WarmupSpans)) {
		t.Fatalf("warm-up accounted %d", base.Accounted())
	}
	d.Publish(w.Producer(0).Finished())
	if d.Counts() != base {
		t.Fatalf("Publish counted: %+v, want %+v", d.Counts(), base)
	}
	tell(d, 5)
	if c := d.Counts().Sub(base); c.Accounted() != 5 || c.Published != 5 {
		t.Fatalf("told 5, accounted %+v", c)
	}
	base = d.Counts()
	var published, calls int // over the framework's calls, whatever b.N
	res := testing.Benchmark(func(b *testing.B) {
		c := publishWindow(b, d, allWalks(w), Pacing{Rate: 80_000, Burst: time.Millisecond}, 10*time.Millisecond, 20*time.Millisecond)
		publishInline(b, d, allWalks(w), 1000)
		published += c.published + 1000
		calls++
	})
	if res.N == 0 || published <= 1000*calls {
		t.Fatalf("the rounds did not run: %+v, %d published", res, published)
	}
	if c := d.Counts().Sub(base); c.Accounted() != uint64(published) {
		t.Fatalf("published %d over %d calls, accounted %+v", published, calls, c)
	}
}

// TestPacerWakesOnTicks: a bursting producer wakes on the Burst's ticks
// and publishes what is due by each, so that its bursts average a Burst's
// worth (2.5 spans at 20 k spans/s from 8 producers, not 2 every 800 µs);
// a spread one wakes at each span's due time.
func TestPacerWakesOnTicks(t *testing.T) {
	ms := time.Millisecond
	burst := newPacer(Pacing{Rate: 20_000, Burst: ms}, Producers) // a span every 400 µs
	spread := newPacer(Pacing{Rate: 20_000}, Producers)
	for _, tc := range []struct {
		pc   pacer
		done int
		want time.Duration
	}{
		{burst, 1, ms}, {burst, 2, ms}, {burst, 3, 2 * ms}, {burst, 5, 2 * ms}, {burst, 6, 3 * ms}, {burst, 8, 4 * ms},
		{spread, 1, 400 * time.Microsecond}, {spread, 5, 2 * ms},
	} {
		if got := tc.pc.wake(tc.done); got != tc.want {
			t.Errorf("tick %v: wake after %d spans at %v, want %v", tc.pc.tick, tc.done, got, tc.want)
		}
	}
}

// slowDriver is a driver whose Publish takes spin of CPU.
type slowDriver struct {
	Driver
	spin time.Duration
}

func (d slowDriver) Publish(i int, s *stats.Span) {
	for t := time.Now(); time.Since(t) < d.spin; {
	}
	d.Driver.Publish(i, s)
}

// TestPacerSlowPublishDoesNotWake: a producer that Publish holds past its
// next due time never sleeps, so it counts no wake-up (the pacing-ratio
// that marks a cell not comparable rests on it); counting passes gave it
// the harness's figure, one per millisecond's worth of spans.
func TestPacerSlowPublishDoesNotWake(t *testing.T) {
	w := SteadyState()
	null, _ := openNull(w)
	d := slowDriver{Driver: null, spin: 200 * time.Microsecond} // 10 spans: 2 ms, due every 1 ms
	var spans, bursts paddedCount
	newPacer(Pacing{Rate: 80_000, Burst: time.Millisecond}, Producers).run(d, w.Producer(0), time.Now(), 200, time.Time{}, &spans, &bursts)
	if got := spans.Load(); got != 200 {
		t.Fatalf("published %d spans, want 200", got)
	}
	if got := bursts.Load(); got > 2 {
		t.Errorf("%d wake-ups for 200 spans published late all along, want at most 2 (20 counting passes)", got)
	}
}

// TestPacedWindowHoldsItsDrains: at 20 k spans/s the SDK's consumer drains
// on its period, not at the inbox's mark, and a round's window counts
// about the spans published in it, not the drains that happen to fall in
// it: RunPaced charges the window's CPU to those spans.
func TestPacedWindowHoldsItsDrains(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("paced rounds take seconds, and their timing is not the measured one under -race")
	}
	w := SteadyState()
	d, err := NewSDK(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	warmUp(t, w, d)
	walks := allWalks(w)
	pc := newPacer(Pacing{Rate: 20_000, Burst: time.Millisecond}, len(walks))
	var ratios []float64
	for range 3 {
		time.Sleep(2 * sdkDrainPeriod) // the consumer goes quiet, as while other sides run
		before := d.Counts().Accounted()
		counts := make([]paddedCount, len(walks))
		bursts := make([]paddedCount, len(walks))
		start := time.Now()
		var wg sync.WaitGroup
		for i, p := range walks {
			wg.Go(func() { pc.run(d, p, start, math.MaxInt, start.Add(PacedLead+PacedWindow), &counts[i], &bursts[i]) })
		}
		published := func() (n uint64) {
			for i := range counts {
				n += counts[i].Load()
			}
			return n
		}
		time.Sleep(time.Until(start.Add(PacedLead)))
		n0, c0 := published(), d.Counts().Counted
		wg.Wait()
		n1, c1 := published(), d.Counts().Counted
		awaitAccounted(t, d, before+n1, backoff())
		ratios = append(ratios, float64(c1-c0)/float64(n1-n0))
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if m := median(slices.Clone(ratios)); m < 0.9 || m > 1.1 {
		t.Errorf("spans counted in a window ÷ spans published in it: %.2f (rounds %.2f), want 1", m, ratios)
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

// TestSDKCountsEveryDrop: every span the SDK driver was handed is in
// Counts, drops in Shed or Lost, including those a Stop whose context
// ended left undrained (Health.StopUndrained), so that RunPaced's
// conservation check names them rather than reports spans unaccounted.
func TestSDKCountsEveryDrop(t *testing.T) {
	w := SteadyState()
	for try := range 20 {
		d, err := NewSDK(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := w.Producer(0)
		for range 1000 { // under the inbox's wake mark: the consumer waits for its period
			d.Publish(p.Finished())
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // Stop halts the consumer at once, the spans undrained
		_ = d.Aggregator().Stop(ctx)
		c, h := d.Counts(), d.Aggregator().Health()
		d.Close()
		if h.StopUndrained == 0 {
			continue // the consumer drained them first: try again
		}
		if c.Accounted() != c.Published || c.Lost < h.StopUndrained {
			t.Fatalf("try %d: published %d, accounted %d, lost %d, %d undrained at Stop: %+v", try, c.Published, c.Accounted(), c.Lost, h.StopUndrained, c)
		}
		return
	}
	t.Skip("Stop drained every span in 20 tries: nothing undrained to count")
}

// TestCostRatio: a ratio of the SDK's figure to another is +Inf, the worst
// run for a target bounding it from above, wherever either figure came out
// at or below zero; ratioOf only where the denominator did.
func TestCostRatio(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct{ a, b, cost, plain float64 }{
		{120, 100, 1.2, 1.2},
		{-50, 100, inf, -0.5},
		{0, 100, inf, 0},
		{120, 0, inf, inf},
		{120, -3, inf, inf},
	} {
		if got := costRatio(c.a, c.b); got != c.cost {
			t.Errorf("costRatio(%v, %v) = %v, want %v", c.a, c.b, got, c.cost)
		}
		if got := ratioOf(c.a, c.b); got != c.plain {
			t.Errorf("ratioOf(%v, %v) = %v, want %v", c.a, c.b, got, c.plain)
		}
	}
}

// TestSDKJoinsFreshPeerTags: on a FreshStrings workload the SDK drivers
// join each span's peer tags anew (the tracer's per-span work the peer's
// concentrator does itself): with + into strings equal to the workload's
// but of their own memory, with a stats.PeerTagJoiner into one string per
// pair; they count every span and leave the workload's own tags, which
// every producer reads, untouched. An interned workload is not joined.
func TestSDKJoinsFreshPeerTags(t *testing.T) {
	w := ClientPeerTagsFreshStrings()
	if !w.JoinsPeerTags() || ClientPeerTags().JoinsPeerTags() || SteadyState().JoinsPeerTags() {
		t.Fatalf("JoinsPeerTags: fresh %v, interned %v, %v; want true, false, false",
			w.JoinsPeerTags(), ClientPeerTags().JoinsPeerTags(), SteadyState().JoinsPeerTags())
	}
	var tags []string
	for i := 0; len(tags) == 0; i++ {
		tags = w.spans[i].PeerTags
	}
	joined := slices.Clone(tags)
	JoinPeerTags(nil, joined)
	for i := range tags {
		if joined[i] != tags[i] || unsafe.StringData(joined[i]) == unsafe.StringData(tags[i]) {
			t.Fatalf("tag %d: joined %q at %p, want %q in memory of its own (%p)", i, joined[i], unsafe.StringData(joined[i]), tags[i], unsafe.StringData(tags[i]))
		}
	}
	j := stats.NewPeerTagJoiner()
	once, again := slices.Clone(tags), slices.Clone(tags)
	JoinPeerTags(j, once)
	JoinPeerTags(j, again)
	for i := range tags {
		if once[i] != tags[i] || unsafe.StringData(once[i]) != unsafe.StringData(again[i]) {
			t.Fatalf("tag %d joined by a PeerTagJoiner: %q then %q, want %q, the same string", i, once[i], again[i], tags[i])
		}
	}
	before := make([][]string, w.Len())
	for i := range before {
		before[i] = slices.Clone(w.spans[i].PeerTags)
	}
	for _, open := range []OpenFunc{OpenSDK(nil), OpenInlineSDK(nil)} {
		d, err := open(w)
		if err != nil {
			t.Fatal(err)
		}
		const n = 5000
		for _, next := range []func(*Producer) (int, *stats.Span){(*Producer).Next, (*Producer).Finished} {
			p := w.Producer(0)
			for range n {
				d.Publish(next(p))
			}
		}
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		if c := d.Counts(); c.Counted == 0 || c.Counted+c.Ineligible+c.Shed != 2*n || c.Lost != 0 {
			t.Errorf("%T: counted %d + ineligible %d + shed %d of %d (lost %d)", d, c.Counted, c.Ineligible, c.Shed, 2*n, c.Lost)
		}
		d.Close()
	}
	for i := range before {
		for k, tag := range w.spans[i].PeerTags {
			if tag != before[i][k] || unsafe.StringData(tag) != unsafe.StringData(before[i][k]) {
				t.Fatalf("position %d, tag %d: the workload's own tag became %q (was %q)", i, k, tag, before[i][k])
			}
		}
	}
}
