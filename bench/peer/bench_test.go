// This file holds the benchmarks that run the SDK and the agent's
// concentrator side by side, at saturation and at a fixed load, and the
// live heap each holds per entry.

package peer

import (
	"context"
	"runtime"
	"testing"
	"time"

	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/bench"
	"github.com/spanstats/spanstats/stats"
)

// Side-by-side benchmarks: each workload through the SDK and through the
// agent's SpanConcentrator driven as dd-trace-go drives it, in one process,
// named so that `benchstat -col /impl` pairs them. bench.Run measures both
// the same way (8 producers, Stop inside the timed region).

// sideBySide runs w through both implementations.
func sideBySide(b *testing.B, w func() *bench.Workload) {
	b.Run("impl=spanstats", func(b *testing.B) { bench.Run(b, w(), bench.OpenSDK(agentPeerTagKeys())) })
	b.Run("impl=peer", func(b *testing.B) { bench.Run(b, w(), OpenConcentrator) })
}

// BenchmarkPaced is the comparison at the loads applications run at: each
// workload (the interned ones, the SDK's best case, and their fresh-string
// copies, see BenchmarkSteadyStateFreshStrings) offered at fixed rates far below what the SDK absorbs, in 1 ms
// bursts and spread evenly, through the peer and the SDK in alternating
// rounds (bench.RunPaced). cpu-ns/span-<impl> is the process CPU per
// published span less the pacing driver's; ratio is the peer's ÷ the SDK's;
// work-ns/span-spanstats is the SDK's Publish and consumer work on one
// goroutine without the handoff, in the same rounds (bench.OpenInlineSDK),
// and solo-ns/span-spanstats the same work on one goroutine paced at the
// cell's load.
// The saturated benchmarks below are a throughput race under overload,
// not this.
func BenchmarkPaced(b *testing.B) {
	for _, w := range []func() *bench.Workload{bench.SteadyState, bench.ClientPeerTags,
		bench.SteadyStateFreshStrings, bench.ClientPeerTagsFreshStrings} {
		for _, rate := range []int{20_000, 200_000, 1_000_000} {
			for _, burst := range []time.Duration{time.Millisecond, 0} {
				p := bench.Pacing{Rate: rate, Burst: burst}
				b.Run("workload="+w().Name+"/"+p.String(), func(b *testing.B) {
					bench.RunPaced(b, w(), p,
						bench.PacedSide{Name: "peer", Open: OpenConcentrator},
						bench.PacedSide{Name: "spanstats", Open: bench.OpenSDK(agentPeerTagKeys()),
							Inline: bench.OpenInlineSDK(agentPeerTagKeys())})
				})
			}
		}
	}
}

func BenchmarkSteadyState(b *testing.B)             { sideBySide(b, bench.SteadyState) }
func BenchmarkHighCardinalityResource(b *testing.B) { sideBySide(b, bench.HighCardinalityResource) }
func BenchmarkHighCardinalityPeer(b *testing.B)     { sideBySide(b, bench.HighCardinalityPeer) }
func BenchmarkAdversarial(b *testing.B)             { sideBySide(b, bench.Adversarial) }
func BenchmarkClientPeerTags(b *testing.B)          { sideBySide(b, bench.ClientPeerTags) }

// The fresh-string workloads: the same keys as SteadyState and
// ClientPeerTags, with the strings a tracer builds per span (resource,
// HTTP method, peer-tag pairs) fresh at every position, so that the SDK's
// recent-span cache, which matches strings by address, cannot find them:
// the interned workloads above are the SDK's best case. The SDK side joins
// the peer tags per span with a stats.PeerTagJoiner, as the peer's
// concentrator joins them (bench.JoinsPeerTags).
func BenchmarkSteadyStateFreshStrings(b *testing.B) { sideBySide(b, bench.SteadyStateFreshStrings) }
func BenchmarkClientPeerTagsFreshStrings(b *testing.B) {
	sideBySide(b, bench.ClientPeerTagsFreshStrings)
}

// BenchmarkHeapPerEntry is the live heap each implementation holds for
// bench.HeapKeys entries filled with bench.HeapSpansPerKey log-uniform
// durations each (both sketches of every entry in use, as 20 % of the spans
// are errors): HeapAlloc after two GCs, minus HeapAlloc before the
// aggregator was created, per entry.
//
//	impl=spanstats        the whole stats.Aggregator (table, inbox ring,
//	                      payload buffers, HTTP client) within one
//	                      interval, not flushed: what
//	                      the SDK really retains while the entries are live
//	impl=spanstats-table  the aggregate.Table alone: the per-entry cost
//	                      without the fixed ~2.6 MiB inbox (8192 × 336 B)
//	impl=peer             the agent's SpanConcentrator holding one bucket
func BenchmarkHeapPerEntry(b *testing.B) {
	w := bench.HeapEntries()
	b.Run("impl=spanstats", func(b *testing.B) { heapPerEntry(b, w, heapOfAggregator) })
	b.Run("impl=spanstats-table", func(b *testing.B) { heapPerEntry(b, w, heapOfTable) })
	b.Run("impl=peer", func(b *testing.B) { heapPerEntry(b, w, heapOfConcentrator) })
}

// heapFunc sets up an implementation, calls begin, fills it with w, calls
// measure while it is live and returns its number of entries: what it sets
// up before begin (a loopback agent) is not counted.
type heapFunc func(b *testing.B, w *bench.Workload, begin, measure func()) int

func heapPerEntry(b *testing.B, w *bench.Workload, fill heapFunc) {
	b.ReportAllocs()
	var total float64
	for range b.N {
		var before, after runtime.MemStats
		entries := fill(b, w, func() {
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&before)
		}, func() {
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
		})
		if entries != bench.HeapKeys {
			b.Fatalf("%d entries, want %d", entries, bench.HeapKeys)
		}
		total += (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(entries)
	}
	b.ReportMetric(total/float64(b.N), "heap-B/entry")
}

func heapOfAggregator(b *testing.B, w *bench.Workload, begin, measure func()) int {
	agent := bench.NewAgent(agentPeerTagKeys()) // the agent is not the SDK's memory: made before begin
	defer agent.Close()
	begin()
	// One interval, as the peer holds one bucket: with the default 10 s, a
	// fill that crosses a boundary reports mid-fill, and the measurement
	// can catch that payload (~3.5 KB an entry here) still being sent.
	a, err := stats.New(stats.Config{AgentURL: agent.URL(), Env: "bench", Service: "bench", Hostname: "bench-host",
		BucketInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	a.Start()
	p := w.Producer(0)
	for range w.Len() {
		_, s := p.Next()
		for !a.Publish(s) { // inbox full: let the consumer catch up
			runtime.Gosched()
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for h := a.Health(); h.Counted < uint64(w.Len()); h = a.Health() {
		if time.Now().After(deadline) {
			b.Fatalf("consumer did not catch up: %+v", h)
		}
		time.Sleep(time.Millisecond)
	}
	measure()
	entries := int(a.Health().Entries)
	runtime.KeepAlive(a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return entries
}

func heapOfTable(_ *testing.B, w *bench.Workload, begin, measure func()) int {
	begin()
	t := aggregate.NewTable(0)
	var rec aggregate.Record
	p := w.Producer(0)
	for range w.Len() {
		_, s := p.Next()
		rec = aggregate.Record{
			Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type, SpanKind: s.SpanKind,
			HTTPMethod: s.HTTPMethod, HTTPEndpoint: s.HTTPEndpoint, GRPCStatusCode: s.GRPCStatusCode,
			ServiceSource: s.ServiceSource, HTTPStatusCode: s.HTTPStatusCode, Duration: s.Duration,
			Error: s.Error, TopLevel: s.TopLevel, TraceRoot: s.TraceRoot, Synthetics: s.Synthetics,
		}
		if s.SpanKind == "client" || s.SpanKind == "producer" || s.SpanKind == "consumer" {
			rec.SetPeerTags(s.PeerTags)
		}
		t.Add(&rec)
	}
	measure()
	runtime.KeepAlive(t)
	return t.Len()
}

func heapOfConcentrator(b *testing.B, w *bench.Workload, begin, measure func()) int {
	tags := tagsFor(w) // the workload's tag maps are not the peer's memory: made before begin
	begin()
	now := time.Now()
	sc := newSpanConcentrator(now)
	d := &Concentrator{
		tags: tags, start: now.UnixNano(), peerTags: agentPeerTagKeys(),
		aggKey: agentstats.PayloadAggregationKey{Hostname: "bench-host", Env: "bench", Version: "1.0.0", Lang: "go"},
	}
	p := w.Producer(0)
	for range w.Len() {
		i, s := p.Next()
		meta := tags.metas[tags.meta[i]]
		ss, ok := sc.NewStatSpanWithConfig(d.statSpanConfig(s, meta))
		if !ok {
			b.Fatalf("span %d not eligible for the peer", i)
		}
		sc.AddSpan(ss, d.aggKey, "", nil, "")
	}
	measure()
	entries := 0
	for _, pl := range sc.Flush(time.Now().Add(time.Hour).UnixNano(), true) {
		for _, bk := range pl.Stats {
			entries += len(bk.Stats)
		}
	}
	runtime.KeepAlive(sc)
	return entries
}
