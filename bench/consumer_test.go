package bench

import (
	"testing"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
)

// consumerBatch is how many spans BenchmarkConsumer queues, outside the
// timer, before each timed drain: half the default inbox, the mark at
// which a parked consumer is woken.
const consumerBatch = 4096

// consumerSkip is how many positions each producer walk skips after each
// span it queues: the pipeline sheds about two spans in three under
// high cardinality, so the consumer meets every third string of each
// producer's stretch, not neighbours that share cache lines.
const consumerSkip = 2

// BenchmarkConsumer is the aggregating goroutine alone, one span per op: the
// inbox holds spans that 8 producer walks queued (outside the timer) and the
// timed loop drains it into a table with the default cap and budgets, as
// the aggregator's consumer does: in place, batch by batch, with
// Table.AddBatch. Its ns/op is the consumer's CPU per span: the
// figure to compare between workloads (Adversarial against SteadyState),
// free of the producers and of the scheduler that the end-to-end benchmarks
// include.
func BenchmarkConsumer(b *testing.B) {
	for _, w := range []func() *Workload{SteadyState, ClientPeerTags, HighCardinalityResource, HighCardinalityPeer, Adversarial, SteadyStateFreshStrings, ClientPeerTagsFreshStrings} {
		b.Run(w().Name, func(b *testing.B) { benchConsumer(b, w()) })
	}
}

func benchConsumer(b *testing.B, w *Workload) {
	ring := inbox.New[aggregate.Record](consumerBatch)
	ring.SetClear((*aggregate.Record).Reset) // as the aggregator's inbox
	table := aggregate.NewTable(0)
	table.SetLimits(aggregate.DefaultLimits())
	walks := make([]*Producer, Producers)
	for i := range walks {
		walks[i] = w.Producer(i)
	}
	fill := func() {
		for k := range consumerBatch {
			p := walks[k%Producers]
			for range consumerSkip {
				p.Next()
			}
			_, s := p.Next()
			c, ok := ring.Claim()
			if !ok {
				b.Fatal("inbox full")
			}
			s.Snapshot(c.Value()) // as Publish
			c.Commit()
		}
	}
	batch := make([]*aggregate.Record, drainBatch)
	drain := func() int { // the aggregator's consumer loop
		n := ring.Ready(drainBatch)
		for i := range n {
			batch[i] = ring.At(i)
		}
		table.AddBatch(batch[:n])
		ring.Release(n)
		return n
	}
	for range WarmupSpans / consumerBatch { // as Run: the steady state is measured
		fill()
		for drain() > 0 {
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		fill()
		b.StartTimer()
		for n := drain(); n > 0; n = drain() {
			done += n
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(table.CollapsedSpans())/float64(b.N+WarmupSpans), "collapsed/op")
}
