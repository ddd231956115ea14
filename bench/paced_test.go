package bench

import (
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

// pacedRounds is how many rounds BenchmarkPaced alternates its sides.
const pacedRounds = 4

// BenchmarkPaced measures CPU per span at one offered load, PacedRate,
// rather than at saturation: in Run's benchmarks both cores are always
// busy (producers spin on a full inbox), so their CPU per counted span is
// 2 cores ÷ throughput. Here the producers publish at PacedRate, the
// consumer keeps up (and parks between bursts, as it does in a real
// process), and the process's user+sys CPU over a round divided by the
// spans published is what each span costs: the SDK's Publish and
// aggregation, and the harness (the producers' walk and pacing), which the
// same rounds through a driver that only counts measure, to subtract.
//
// SteadyState and Adversarial through the SDK and through the counting
// driver run in alternating rounds in one process, so that a change of the
// host's speed hits all alike. It reports for each workload
// cpu-ns/span-<workload> (process CPU per span), harness-ns/span-<workload>
// (the same with the counting driver), sdk-ns/span-<workload> (the
// difference: what the SDK costs per span), shed/op-<workload>, and
// adversarial-ratio: sdk-ns/span of Adversarial ÷ that of SteadyState.
func BenchmarkPaced(b *testing.B) {
	type side struct {
		w       *Workload
		d       Driver
		harness bool
		walks   []*Producer
		base    Counts
		cpu     time.Duration
		spans   int
	}
	var sides []*side
	for _, w := range []*Workload{SteadyState(), Adversarial()} {
		for _, harness := range []bool{false, true} {
			s := &side{w: w, harness: harness}
			var err error
			if harness {
				s.d = &nullDriver{stretch: w.Len() / Producers}
			} else if s.d, err = NewSDK(w, nil); err != nil {
				b.Fatal(err)
			}
			defer s.d.Close()
			s.base = warmUp(b, w, s.d)
			s.walks = allWalks(w)
			sides = append(sides, s)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for r := range pacedRounds {
		n := share(b.N, pacedRounds, r)
		for _, s := range sides {
			cpu0 := cpuTime()
			publishPaced(b, s.d, s.walks, n, Pacing{Rate: PacedRate, Burst: pacedTick})
			s.cpu += cpuTime() - cpu0
			s.spans += n
		}
	}
	b.StopTimer()
	sdk := map[string]float64{}
	for _, s := range sides {
		if err := s.d.Stop(); err != nil {
			b.Fatalf("%s: stop: %v", s.w.Name, err)
		}
		c := s.d.Counts().Sub(s.base)
		if c.Accounted() != uint64(s.spans) || c.Lost != 0 {
			b.Errorf("%s: published %d spans; the driver accounts for %d, lost %d: %+v", s.w.Name, s.spans, c.Accounted(), c.Lost, c)
		}
		if s.spans == 0 {
			continue
		}
		per := float64(s.cpu.Nanoseconds()) / float64(s.spans)
		if s.harness {
			b.ReportMetric(per, "harness-ns/span-"+s.w.Name)
			sdk[s.w.Name] -= per
		} else {
			b.ReportMetric(per, "cpu-ns/span-"+s.w.Name)
			b.ReportMetric(float64(c.Shed)/float64(s.spans), "shed/op-"+s.w.Name)
			sdk[s.w.Name] += per
		}
	}
	if b.N >= pacedRounds {
		for name, v := range sdk {
			b.ReportMetric(v, "sdk-ns/span-"+name)
		}
		if st := sdk[SteadyState().Name]; st > 0 {
			b.ReportMetric(sdk[Adversarial().Name]/st, "adversarial-ratio")
		}
	}
}
