// This file holds BenchmarkConsumer and BenchmarkConsumerCold: what the
// aggregating goroutine alone costs per span, with warm and emptied caches.

package bench

import (
	"fmt"
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
		b.Run(w().Name, func(b *testing.B) { benchConsumer(b, w(), consumerBatch, nil) })
	}
}

// BenchmarkConsumerCold is BenchmarkConsumer with every cache emptied
// before each drain (a walk over a buffer far larger than the last-level
// cache, outside the timer), by drain size: what a drain costs once the
// application has run on the core since the last one. Over the drain
// sizes, the extra ns/op against BenchmarkConsumer splits into a fixed cost
// per drain (pulling the table back in, shared by the drain's spans) and a
// cost per span (its slot read from memory). The walk also evicts the
// slots, which producers have just written in a live process: a bound.
// The walks take far longer than the drains they precede, so give it a
// count (-benchtime 1000000x); bench/run leaves it out.
func BenchmarkConsumerCold(b *testing.B) {
	evict := make([]byte, evictBytes)
	for _, w := range []func() *Workload{SteadyState, SteadyStateFreshStrings} {
		for _, n := range []int{consumerBatch / 4, consumerBatch, consumerBatch * 4} {
			b.Run(fmt.Sprintf("workload=%s/drain=%d", w().Name, n), func(b *testing.B) { benchConsumer(b, w(), n, evict) })
		}
	}
}

// evictBytes is the buffer BenchmarkConsumerCold walks to empty the caches:
// several times any last-level cache of the hosts this runs on.
const evictBytes = 64 << 20

// benchConsumer drains batches of size spans of w, walking evict (if any)
// between queuing each batch and draining it.
func benchConsumer(b *testing.B, w *Workload, size int, evict []byte) {
	ring := inbox.New[aggregate.Record](size)
	ring.SetClear((*aggregate.Record).Reset) // as the aggregator's inbox
	table := aggregate.NewTable(0)
	table.SetLimits(aggregate.DefaultLimits())
	walks := make([]*Producer, Producers)
	for i := range walks {
		walks[i] = w.Producer(i)
	}
	fill := func(size int) {
		for k := range size {
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
	for range WarmupSpans / size { // as Run: the steady state is measured
		fill(size)
		for drain() > 0 {
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		// Exactly b.N spans in all: ns/op is per span.
		fill(min(size, b.N-done))
		for i := 0; i < len(evict); i += 64 { // a cache line each
			evict[i]++
		}
		b.StartTimer()
		for n := drain(); n > 0; n = drain() {
			done += n
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(table.CollapsedSpans())/float64(b.N+WarmupSpans), "collapsed/op")
}
