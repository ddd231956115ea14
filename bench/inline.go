// This file holds OpenInlineSDK: the SDK's Publish and consumer work on one
// goroutine, without the handoff, for RunPaced to compare the SDK with.

package bench

import (
	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
	"github.com/spanstats/spanstats/stats"
)

// drainBatch is the aggregator's batch (stats' drainBatch).
const drainBatch = 256

// inlineMark is how many queued spans make inlineSDK drain: the SDK
// consumer's mark, half the default inbox (stats' wakeFraction), which at
// 20 k spans/s comes about as often as its 200 ms period, so that the
// table is re-warmed as often as the SDK re-warms it.
const inlineMark = stats.DefaultInboxSize / 2

// inlineSDK is the SDK's own work on one goroutine, without the handoff:
// Publish's eligibility check and copy into an inbox slot, then, once
// inlineMark spans are queued, the consumer's drain of them into a table,
// in place, batch by batch. No
// goroutine waits or wakes, and the inbox's slots and the table stay in
// the one core's cache: RunPaced compares the paced SDK with it to show
// what handing spans to another goroutine costs at that load.
type inlineSDK struct {
	join    *stats.PeerTagJoiner // non-nil: Workload.JoinsPeerTags, as SDK.Publish
	ring    *inbox.Ring[aggregate.Record]
	table   *aggregate.Table
	batch   []*aggregate.Record
	counted uint64
	other   uint64 // ineligible or shed
}

// OpenInlineSDK opens the SDK's work without the handoff (see inlineSDK),
// with the aggregator's default inbox, table cap and budgets. Its
// Publish must be called from one goroutine.
func OpenInlineSDK(peerTagKeys []string) OpenFunc {
	return func(w *Workload) (Driver, error) {
		d := &inlineSDK{
			join:  w.joiner(),
			ring:  inbox.New[aggregate.Record](stats.DefaultInboxSize),
			table: aggregate.NewTable(0),
			batch: make([]*aggregate.Record, drainBatch),
		}
		d.ring.SetClear((*aggregate.Record).Reset)
		d.table.SetLimits(aggregate.DefaultLimits())
		if len(peerTagKeys) > 0 {
			d.table.SetPeerTagKeys(peerTagKeys)
		}
		return d, nil
	}
}

// Publish implements Driver.
func (d *inlineSDK) Publish(_ int, s *stats.Span) {
	if d.join != nil {
		JoinPeerTags(d.join, s.PeerTags) // in place: the producer's own
	}
	if !s.Eligible() {
		d.other++
		return
	}
	c, ok := d.ring.Claim()
	if !ok {
		d.other++
		return
	}
	s.Snapshot(c.Value()) // Publish's own copy; Counts has no place for the cuts
	c.Commit()
	if d.ring.Len() >= inlineMark {
		d.drain()
	}
}

// drain is the consumer's loop: in place, batch by batch.
func (d *inlineSDK) drain() {
	for {
		n := d.ring.Ready(drainBatch)
		if n == 0 {
			return
		}
		for i := range n {
			d.batch[i] = d.ring.At(i)
		}
		d.table.AddBatch(d.batch[:n])
		d.ring.Release(n)
		d.counted += uint64(n)
	}
}

// Stop implements Driver.
func (d *inlineSDK) Stop() error { d.drain(); return nil }

// Close implements Driver.
func (d *inlineSDK) Close() {}

// Counts implements Driver. It first drains what is queued (on the one
// goroutine that publishes): no consumer would ever take it.
func (d *inlineSDK) Counts() Counts {
	d.drain()
	return Counts{Published: d.counted + d.other, Counted: d.counted, Ineligible: d.other}
}
