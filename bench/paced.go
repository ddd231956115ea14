// This file holds RunPaced: implementations side by side at a fixed
// offered load (Pacing), CPU per span less the pacing driver's.

package bench

import (
	"flag"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/stats"
)

// Pacing is an offered load: Rate spans per second from Producers
// goroutines together, each publishing a Burst's worth of its spans at once
// and then sleeping until the next burst is due. With Burst 0 each
// producer's spans are spread evenly, one every Producers/Rate seconds, as
// far as the Go timer allows: a producer that wakes late publishes the spans
// already due at once, so above a few hundred thousand spans per second
// "spread" becomes bursts of the timer's granularity. A producer never
// publishes more than maxCatchUp's worth (or one Burst) and one span at
// once: one that fell further behind, its thread descheduled by the host,
// resumes the pace from there rather than flooding the implementation with
// the spans of the time it lost, as an application that stalled would.
type Pacing struct {
	Rate  int
	Burst time.Duration
}

// String names the pacing in a benchmark: "rate=200k/burst=1ms",
// "rate=1M/spread".
func (p Pacing) String() string {
	r := fmt.Sprint(p.Rate)
	switch {
	case p.Rate%1_000_000 == 0:
		r = fmt.Sprint(p.Rate/1_000_000, "M")
	case p.Rate%1000 == 0:
		r = fmt.Sprint(p.Rate/1000, "k")
	}
	if p.Burst > 0 {
		return "rate=" + r + "/burst=" + p.Burst.String()
	}
	return "rate=" + r + "/spread"
}

// PacedSide is one implementation RunPaced compares: its name in the
// metrics, and how to open it. Inline, if set, opens the side's own work
// without the handoff to another goroutine (OpenInlineSDK), which RunPaced
// runs in the same rounds from one goroutine twice: unpaced, and paced at
// the same offered load.
type PacedSide struct {
	Name   string
	Open   OpenFunc
	Inline OpenFunc
}

// PacedRounds is how many rounds RunPaced alternates its sides: enough
// that a median over them ignores the rounds another process on the host
// disturbed, and that neighbouring rounds meet the same host.
const PacedRounds = 8

// How RunPaced publishes a side's spans.
const (
	paced   = iota // from Producers goroutines at the offered load
	unpaced        // from one goroutine, back to back
	solo           // from one goroutine at the offered load
)

// RunPaced publishes spans of w through each side at the offered load p,
// in PacedRounds alternating rounds, beside a driver whose Publish does
// nothing (the harness, emptyDriver: the producers' walk, their call and
// their pacing). Each paced round runs
// PacedLead, then a window of PacedWindow (longer if b.N asks for more
// spans) over which it measures the process CPU (user+sys, every goroutine
// and the runtime) per span published in it (see publishWindow); a round
// fed back to back publishes as many spans as the window's offered load.
// b.N sets no more than that floor, so ns/op is not a figure to read. It
// reports for each side the median over the rounds of its figure in that
// round (so less the harness's in that same round):
//
//	cpu-ns/span-<name>    CPU per published span, less the harness's
//	shed/op-<name>        fraction of the published spans shed
//	work-ns/span-<name>   with Inline: CPU per span of the inline driver
//	                      fed back to back from one goroutine, less the
//	                      harness's fed the same way
//	work-ratio-<name>     cpu-ns/span-<name> ÷ work-ns/span-<name>
//	solo-ns/span-<name>   with Inline: the same, the one goroutine paced at
//	                      the offered load (its bursts sleeping between
//	                      them, no handoff)
//	solo-ratio-<name>     cpu-ns/span-<name> ÷ solo-ns/span-<name>
//	load-<name>           spans published in the window ÷ those offered
//	bursts/span-<name>    the producers' wake-ups per span in the window
//	pacing-ratio-<name>   bursts/span-<name> ÷ the harness's
//
// and harness-ns/span, harness-bursts/span, harness-load, window-ms (the
// measured window of a round), and with two sides "ratio": the first
// side's cpu-ns/span ÷ the second's.
//
// Subtracting the harness's CPU is sound only when a side's producers wake
// as often per span as the harness's: each wake-up costs the process
// microseconds. Where a side's Publish holds a producer past its next due
// time, that producer publishes more spans per wake-up than the harness's
// (pacing-ratio below 1: the harness's cost over-corrects the side's);
// where a side keeps the process busy, the timer wakes its sleeping
// producers closer to their due times (above 1: under-corrects). A load
// below 1 says a side fell behind the offered load.
//
// The rounds rotate which side goes first, and a GC runs before each,
// outside the measurement: the garbage of one side is not collected on
// another's time. A side that allocates per span pays for the cycles its
// allocation starts inside its window, not for the collection of what is
// left when the window closes.
func RunPaced(b *testing.B, w *Workload, p Pacing, sides ...PacedSide) {
	if n := askedCount(); n > 0 && n < PacedRounds {
		b.Fatalf("-benchtime %dx: a paced cell needs at least %d (one span a round)", n, PacedRounds)
	}
	if b.N < PacedRounds {
		// The framework's first call, which every run makes (a round is
		// long), or under a -benchtime of time a guess after a slow first
		// call: returning at once makes the framework try a larger b.N.
		return
	}
	type side struct {
		name  string
		d     Driver
		how   int
		walks []*Producer
		base  Counts
		per   []float64 // CPU per span, by round
		spans int
		// By paced round: wake-ups per span, and the load achieved.
		bursts, load []float64
	}
	var all []*side
	open := func(name string, o OpenFunc, how int) *side {
		d, err := o(w)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(d.Close)
		walks := allWalks(w)
		if how == solo {
			walks = walks[:1]
		}
		s := &side{name: name, d: d, how: how, base: warmUp(b, w, d), walks: walks}
		all = append(all, s)
		return s
	}
	var harness [solo + 1]*side // by how it is fed
	harness[paced] = open("harness", openEmpty, paced)
	var impls []*side
	inlines := map[*side][2]*side{} // an impl's unpaced and solo inline sides
	for _, ps := range sides {
		s := open(ps.Name, ps.Open, paced)
		impls = append(impls, s)
		if ps.Inline != nil {
			inlines[s] = [2]*side{open(ps.Name, ps.Inline, unpaced), open(ps.Name, ps.Inline, solo)}
		}
	}
	if len(inlines) > 0 {
		harness[unpaced] = open("harness", openEmpty, unpaced)
		harness[solo] = open("harness", openEmpty, solo)
	}
	var windows []float64 // ms, by round
	b.ReportAllocs()
	b.ResetTimer()
	for r := range PacedRounds {
		// The window is PacedWindow, or longer if b.N asks for more spans.
		n := share(b.N, PacedRounds, r)
		window := roundWindow(n, p)
		windows = append(windows, float64(window.Milliseconds()))
		n = max(n, int(window.Seconds()*float64(p.Rate)))
		for i := range all {
			s := all[(i+r)%len(all)]
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
			if s.how == unpaced {
				cpu0 := cputime.Process()
				publishInline(b, s.d, s.walks, n)
				s.per = append(s.per, float64((cputime.Process()-cpu0).Nanoseconds())/float64(n))
				s.spans += n
				continue
			}
			c := publishWindow(b, s.d, s.walks, p, PacedLead, window)
			s.per = append(s.per, c.perSpan)
			s.bursts = append(s.bursts, c.burstsPerSpan)
			s.load = append(s.load, c.load)
			s.spans += c.published
		}
	}
	b.StopTimer()
	for _, s := range all { // a deferred Close does not stop an aggregator
		if err := s.d.Stop(); err != nil {
			b.Fatalf("%s: stop: %v", s.name, err)
		}
	}
	for _, s := range all {
		c := s.d.Counts().Sub(s.base)
		if c.Accounted() != uint64(s.spans) || c.Lost != 0 {
			b.Errorf("%s: published %d spans; the driver accounts for %d, lost %d: %+v", s.name, s.spans, c.Accounted(), c.Lost, c)
		}
	}
	// less is the median over the rounds of s's figure less that of the
	// harness run the same way.
	less := func(s *side) float64 {
		h := harness[s.how]
		d := make([]float64, len(s.per))
		for r := range d {
			d[r] = s.per[r] - h.per[r]
		}
		return median(d)
	}
	h := harness[paced]
	b.ReportMetric(median(windows), "window-ms")
	b.ReportMetric(median(slices.Clone(h.per)), "harness-ns/span")
	b.ReportMetric(median(slices.Clone(h.bursts)), "harness-bursts/span")
	b.ReportMetric(median(slices.Clone(h.load)), "harness-load")
	per := make([]float64, len(impls))
	for i, s := range impls {
		c := s.d.Counts().Sub(s.base)
		per[i] = less(s)
		b.ReportMetric(per[i], "cpu-ns/span-"+s.name)
		b.ReportMetric(float64(c.Shed)/float64(s.spans), "shed/op-"+s.name)
		b.ReportMetric(median(slices.Clone(s.load)), "load-"+s.name)
		b.ReportMetric(median(slices.Clone(s.bursts)), "bursts/span-"+s.name)
		pacing := make([]float64, len(s.bursts))
		for r := range pacing {
			pacing[r] = s.bursts[r] / h.bursts[r]
		}
		b.ReportMetric(median(pacing), "pacing-ratio-"+s.name)
		in, ok := inlines[s]
		if !ok {
			continue
		}
		for j, unit := range [2]string{"work", "solo"} {
			work := less(in[j])
			b.ReportMetric(work, unit+"-ns/span-"+s.name)
			b.ReportMetric(costRatio(per[i], work), unit+"-ratio-"+s.name)
		}
	}
	if len(impls) == 2 {
		b.ReportMetric(ratioOf(per[0], per[1]), "ratio")
	}
}

// ratioOf is a ÷ b, and +Inf where b is not positive (the harness's
// noise in that round swallowed b's cost): reported in every run, so that
// a median over runs is over all of them.
func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return a / b
}

// costRatio is ratioOf for a ratio a target bounds from above (the SDK's
// figure over another): +Inf where a is not positive either, as such a
// run measured nothing of a and must not pull the median toward a pass.
func costRatio(a, b float64) float64 {
	if a <= 0 {
		return math.Inf(1)
	}
	return ratioOf(a, b)
}

// roundWindow is a paced round's measured window: PacedWindow, or longer
// if the round's share of b.N, n spans, takes longer at p's rate, in whole
// SDK drain periods either way (see PacedWindow).
func roundWindow(n int, p Pacing) time.Duration {
	d := time.Duration(float64(n) / float64(p.Rate) * float64(time.Second))
	return max(PacedWindow, (d+sdkDrainPeriod-1)/sdkDrainPeriod*sdkDrainPeriod)
}

// median sorts v and returns its median.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// publishInline publishes n spans through d from this goroutine, back to
// back, taking them from the walks in turn as the paced producers' spans
// interleave, and returns once d accounted for all of them.
func publishInline(b *testing.B, d Driver, walks []*Producer, n int) {
	before := d.Counts().Accounted()
	for i := range n {
		d.Publish(walks[i%len(walks)].Finished())
	}
	tell(d, uint64(n))
	if err := d.Stop(); err != nil { // the inline drivers drain on Stop
		b.Fatal(err)
	}
	awaitAccounted(b, d, before+uint64(n), backoff())
}

// pacer is one producer's pace at an offered load shared by several.
type pacer struct {
	every time.Duration // between two of its spans: span i is due i*every after the start
	tick  time.Duration // between two of its wake-ups: Burst, or every when spread
	most  int           // at most at once when late
}

func newPacer(p Pacing, producers int) pacer {
	every := time.Duration(float64(time.Second) * float64(producers) / float64(p.Rate))
	tick := max(every, p.Burst)
	// A burst whose tick is not a multiple of every holds one span more
	// than tick/every at times (2 or 3 at 20 k spans/s, 1 ms bursts); so
	// does a spread producer's catch-up after the Go timer oversleeps by
	// about a millisecond (TestSpreadCatchesUpAMillisecond).
	return pacer{every: every, tick: tick, most: int(max(tick, maxCatchUp)/every) + 1}
}

// run publishes w's spans through d at the pace from start, until it has
// published k or end (if not zero) has passed, storing its count in c after
// each burst and adding one to bursts each time it sleeps: bursts per span
// is what the pacing's wake-ups cost per span. It wakes on the ticks of the
// pace (each Burst, or at each span's due time when spread) and publishes
// every span due by then, so a burst of 1 ms holds a millisecond's worth
// on average whatever the rate. A producer that a slow Publish holds past
// its next due time does not sleep, and so does not count one (counting
// passes instead gave every burst cell the harness's figure, however late
// its producers ran).
func (pc pacer) run(d Driver, w *Producer, start time.Time, k int, end time.Time, c, bursts *paddedCount) {
	paceFrom, done := start, 0
	for done < k {
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return
		}
		due := int(now.Sub(paceFrom)/pc.every) + 1 // spans 0..due-1 are due
		if behind := due - (done + pc.most); behind > 0 {
			// Too far behind: resume the pace from here.
			paceFrom = paceFrom.Add(time.Duration(behind) * pc.every)
			due -= behind
		}
		for due = min(due, k); done < due; done++ {
			d.Publish(w.Finished())
		}
		c.Store(uint64(done))
		if wait := time.Until(paceFrom.Add(pc.wake(done))); wait > 0 {
			time.Sleep(wait)
			bursts.Add(1)
		}
	}
}

// wake is when, after the start of the pace, a producer that has
// published done spans wakes next: at the first tick not before span
// done's due time.
func (pc pacer) wake(done int) time.Duration {
	due := time.Duration(done) * pc.every
	return (due + pc.tick - 1) / pc.tick * pc.tick
}

// windowCost is what publishWindow measured over a window.
type windowCost struct {
	published int     // spans published, lead and window
	perSpan   float64 // process CPU per span published in the window
	// burstsPerSpan is the producers' wake-ups per span in the window; load
	// is the spans published in it over those the offered load asks for.
	// Both depend on the side: a producer that a slow Publish holds up past
	// its next due time publishes more spans per wake-up, or falls behind.
	burstsPerSpan, load float64
}

// publishWindow publishes through d from one goroutine per walk at the
// offered load p for lead, then for window, and returns once d accounted
// for every span: how many it published, and the process CPU per span, the
// wake-ups per span and the load reached over the window alone. The lead
// brings the side to its steady state (its consumer draining on its own
// rhythm, its caches as that rhythm leaves them) before the window opens,
// and the window closes when the producers stop, before the side drains
// what they left: what a round costs at its edges (the first spans waking
// a consumer that idled through the other sides' rounds, the last ones
// drained at a timer) is not a cost per span of a process publishing at
// that load, and it weighed more, the shorter the round.
func publishWindow(b *testing.B, d Driver, walks []*Producer, p Pacing, lead, window time.Duration) windowCost {
	before := d.Counts().Accounted()
	pc := newPacer(p, len(walks))
	counts := make([]paddedCount, len(walks)) // spans published, by producer
	bursts := make([]paddedCount, len(walks))
	start := time.Now()
	end := start.Add(lead + window)
	var wg sync.WaitGroup
	for i, w := range walks {
		wg.Go(func() { pc.run(d, w, start, math.MaxInt, end, &counts[i], &bursts[i]) })
	}
	sum := func(c []paddedCount) (n uint64) {
		for i := range c {
			n += c[i].Load()
		}
		return n
	}
	time.Sleep(time.Until(start.Add(lead)))
	cpu0, n0, b0, t0 := cputime.Process(), sum(counts), sum(bursts), time.Now()
	wg.Wait()
	cpu1, n1, b1, t1 := cputime.Process(), sum(counts), sum(bursts), time.Now()
	tell(d, n1)
	awaitAccounted(b, d, before+n1, backoff())
	if n1 == n0 {
		b.Fatalf("no span published in a %v window at %d spans/s", window, p.Rate)
	}
	n := float64(n1 - n0)
	return windowCost{
		published:     int(n1),
		perSpan:       float64((cpu1 - cpu0).Nanoseconds()) / n,
		burstsPerSpan: float64(b1-b0) / n,
		load:          n / (t1.Sub(t0).Seconds() * float64(p.Rate)),
	}
}

// PacedLead and PacedWindow time each paced round of RunPaced: a lead at
// the offered load, not measured, then the window measured. Where half its
// inbox takes longer than sdkDrainPeriod to fill (bench/peer's rate=20k
// cells), the SDK's consumer drains on that period from the round's first
// span: a window of whole periods, its edges half a period from a drain,
// holds one drain of its own spans per period. A window of another length
// is charged for whichever drains fall in it (TestPacedWindowHoldsItsDrains).
const (
	PacedLead   = sdkDrainPeriod / 2
	PacedWindow = 2 * sdkDrainPeriod
)

// sdkDrainPeriod is how often a parked SDK consumer drains its inbox
// (stats' drainPeriod).
const sdkDrainPeriod = 200 * time.Millisecond

// maxCatchUp is the most time's worth of spans a paced producer publishes
// at once (see Pacing).
const maxCatchUp = time.Millisecond

// backoff returns a pause for awaitAccounted that sleeps 100 µs, then twice
// as long each time up to 20 ms: a consumer that drains on a period (the
// SDK's) is waited for with a few wake-ups, not one every few microseconds
// charged to its CPU.
func backoff() func() {
	d := 100 * time.Microsecond
	return func() {
		time.Sleep(d)
		d = min(2*d, 20*time.Millisecond)
	}
}

// nullDriver counts and drops: BenchmarkHarness measures what Run itself
// costs per span (the walk of the workload and the call); the paced
// benchmarks subtract emptyDriver instead, which does not count. Each
// producer walks its own stretch of positions, so counting per stretch
// keeps the counters uncontended.
type nullDriver struct {
	stretch int
	n       [Producers + 1]paddedCount
}

func openNull(w *Workload) (Driver, error) { return &nullDriver{stretch: w.Len() / Producers}, nil }

type paddedCount struct {
	atomic.Uint64
	_ [56]byte
}

func (d *nullDriver) Publish(i int, _ *stats.Span) { d.n[i/d.stretch].Add(1) }
func (d *nullDriver) Stop() error                  { return nil }
func (d *nullDriver) Close()                       {}
func (d *nullDriver) Counts() Counts {
	var c Counts
	for i := range d.n {
		c.Counted += d.n[i].Load()
	}
	c.Published = c.Counted
	return c
}

// askedCount is the count of iterations -test.benchtime asks for (100
// for 100x), 0 for a duration. The framework calls a benchmark with b.N 1
// first whatever it asks, and with 1x only then: a count under
// PacedRounds must fail, not pass with no figures.
func askedCount() int {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return 0
	}
	count, ok := strings.CutSuffix(f.Value.String(), "x")
	n, err := strconv.Atoi(count)
	if !ok || err != nil {
		return 0
	}
	return n
}

// emptyDriver is the paced harness: its Publish does nothing, so that
// what it costs is the producers' walk, their call and their pacing alone,
// which both sides pay (a counting Publish's divide and atomic add, which
// neither side pays, would be subtracted from both). It counts what its
// callers tell it they published (told).
type emptyDriver struct{ n atomic.Uint64 }

func openEmpty(*Workload) (Driver, error) { return &emptyDriver{}, nil }

func (d *emptyDriver) Publish(int, *stats.Span) {}
func (d *emptyDriver) Stop() error              { return nil }
func (d *emptyDriver) Close()                   {}
func (d *emptyDriver) Counts() Counts {
	n := d.n.Load()
	return Counts{Published: n, Counted: n}
}
func (d *emptyDriver) told(n uint64) { d.n.Add(n) }

// tell tells a driver that does not count what it is handed (emptyDriver)
// that n more spans were published to it.
func tell(d Driver, n uint64) {
	if t, ok := d.(interface{ told(uint64) }); ok {
		t.told(n)
	}
}
