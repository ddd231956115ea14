// This file holds BenchmarkPaced: the SDK's CPU per span at a fixed offered
// load rather than at saturation.

package bench

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// PacedRate is the offered load of BenchmarkPaced, in spans per second
// from all producers together: well below what the SDK counts per second on
// any workload here (BenchmarkSteadyState and BenchmarkAdversarial in
// bench/RESULTS.md), so that hardly a span is shed and every one costs what
// it costs.
const PacedRate = 2_000_000

// pacedTick is how often a paced producer sleeps: it publishes a tick's
// worth of spans (PacedRate/Producers per second), then sleeps until the
// next tick is due.
const pacedTick = time.Millisecond

// BenchmarkPaced measures CPU per span at one offered load, PacedRate,
// rather than at saturation: in Run's benchmarks both cores are always
// busy (producers spin on a full inbox), so their CPU per counted span is
// 2 cores ÷ throughput. Here the producers publish at PacedRate, the
// consumer keeps up (and parks between bursts, as it does in a real
// process), and the process's user+sys CPU over a round's window divided
// by the spans published in it is what each span costs: the SDK's Publish
// and aggregation, and the harness (the producers' walk and pacing), which
// the same rounds through a driver whose Publish does nothing (emptyDriver,
// as bench/peer's RunPaced) measure, to subtract.
// A round is measured as RunPaced's are (publishWindow: PacedLead
// unmeasured, then a window of at least PacedWindow), PacedRounds of them.
//
// SteadyState and Adversarial through the SDK and through that empty
// driver run in alternating rounds in one process, so that a change of the
// host's speed hits all alike. It reports for each workload, as medians
// over the rounds, cpu-ns/span-<workload> (process CPU per span),
// harness-ns/span-<workload> (the same with the empty driver),
// sdk-ns/span-<workload> (the difference within each round: what the SDK
// costs per span), shed/op-<workload>, and adversarial-ratio: sdk-ns/span
// of Adversarial ÷ that of SteadyState; and window-ms, a round's measured
// window.
func BenchmarkPaced(b *testing.B) {
	if n := askedCount(); n > 0 && n < PacedRounds {
		b.Fatalf("-benchtime %dx: a paced run needs at least %d", n, PacedRounds)
	}
	if b.N < PacedRounds {
		return // the framework's first call, which every run makes: a round is long
	}
	type side struct {
		w       *Workload
		d       Driver
		harness bool
		walks   []*Producer
		base    Counts
		per     []float64 // CPU per span, by round
		spans   int
	}
	var sides []*side
	for _, w := range []*Workload{SteadyState(), Adversarial()} {
		for _, harness := range []bool{false, true} {
			s := &side{w: w, harness: harness}
			var err error
			if harness {
				s.d = &emptyDriver{}
			} else if s.d, err = NewSDK(w, nil); err != nil {
				b.Fatal(err)
			}
			defer s.d.Close()
			s.base = warmUp(b, w, s.d)
			s.walks = allWalks(w)
			sides = append(sides, s)
		}
	}
	p := Pacing{Rate: PacedRate, Burst: pacedTick}
	var windows []float64 // ms, by round
	b.ReportAllocs()
	b.ResetTimer()
	for r := range PacedRounds {
		window := roundWindow(share(b.N, PacedRounds, r), p)
		windows = append(windows, float64(window.Milliseconds()))
		for i := range sides {
			s := sides[(i+r)%len(sides)]
			b.StopTimer()
			runtime.GC() // one side's garbage is not collected on another's time
			b.StartTimer()
			c := publishWindow(b, s.d, s.walks, p, PacedLead, window)
			s.per = append(s.per, c.perSpan)
			s.spans += c.published
		}
	}
	b.StopTimer()
	b.ReportMetric(median(windows), "window-ms")
	byName := map[string][2]*side{} // workload → SDK and harness sides
	for _, s := range sides {
		if err := s.d.Stop(); err != nil {
			b.Fatalf("%s: stop: %v", s.w.Name, err)
		}
		c := s.d.Counts().Sub(s.base)
		if c.Accounted() != uint64(s.spans) || c.Lost != 0 {
			b.Errorf("%s: published %d spans; the driver accounts for %d, lost %d: %+v", s.w.Name, s.spans, c.Accounted(), c.Lost, c)
		}
		pair := byName[s.w.Name]
		if s.harness {
			pair[1] = s
			b.ReportMetric(median(slices.Clone(s.per)), "harness-ns/span-"+s.w.Name)
		} else {
			pair[0] = s
			b.ReportMetric(median(slices.Clone(s.per)), "cpu-ns/span-"+s.w.Name)
			b.ReportMetric(float64(c.Shed)/float64(s.spans), "shed/op-"+s.w.Name)
		}
		byName[s.w.Name] = pair
	}
	sdk := map[string]float64{}
	for name, pair := range byName {
		d := make([]float64, len(pair[0].per))
		for r := range d {
			d[r] = pair[0].per[r] - pair[1].per[r]
		}
		sdk[name] = median(d)
		b.ReportMetric(sdk[name], "sdk-ns/span-"+name)
	}
	// Every run, +Inf where noise swallowed SteadyState's cost: a run left
	// out would pull the median toward the target.
	b.ReportMetric(costRatio(sdk[Adversarial().Name], sdk[SteadyState().Name]), "adversarial-ratio")
}
