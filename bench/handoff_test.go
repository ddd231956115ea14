// This file holds BenchmarkHandoff: what handing a span to another
// goroutine through the inbox costs at the paced loads, by record size.

package bench

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
	"github.com/spanstats/spanstats/stats"
)

// handoffPeriod and handoffMark are the SDK consumer's rhythm (its drain
// period and half the inbox): a handoff driver's consumer drains when the
// inbox holds handoffMark spans, or every handoffPeriod.
const (
	handoffPeriod = sdkDrainPeriod
	handoffMark   = stats.DefaultInboxSize / 2
)

// handoff is a Driver that does only the SDK's handoff: producers write a
// record of T into a claimed inbox slot, and one consumer goroutine, woken
// as the SDK's is, reads each record's fields and releases the slots,
// aggregating nothing.
type handoff[T any] struct {
	ring    *inbox.Ring[T]
	write   func(*T, *stats.Span)
	read    func(*T) uint64
	counted atomic.Uint64
	shed    atomic.Uint64
	sum     uint64 // what read returned, so the reads are not optimised away
	stop    chan struct{}
	wg      sync.WaitGroup
}

func openHandoff[T any](clear func(*T), write func(*T, *stats.Span), read func(*T) uint64) *handoff[T] {
	d := &handoff[T]{ring: inbox.New[T](stats.DefaultInboxSize), write: write, read: read, stop: make(chan struct{})}
	if clear != nil {
		d.ring.SetClear(clear)
	}
	d.wg.Go(d.consume)
	return d
}

func (d *handoff[T]) consume() {
	poll := time.NewTimer(handoffPeriod)
	defer poll.Stop()
	for {
		for n := d.ring.Ready(drainBatch); n > 0; n = d.ring.Ready(drainBatch) {
			for i := range n {
				d.sum += d.read(d.ring.At(i))
			}
			d.ring.Release(n)
			d.counted.Add(uint64(n))
		}
		if !d.ring.ParkUntil(handoffMark) {
			continue
		}
		poll.Reset(handoffPeriod)
		select {
		case <-d.ring.Wake():
		case <-poll.C:
		case <-d.stop:
			d.ring.Unpark()
			return
		}
		d.ring.Unpark()
	}
}

// Publish implements Driver.
func (d *handoff[T]) Publish(_ int, s *stats.Span) {
	if c, ok := d.ring.Claim(); ok {
		d.write(c.Value(), s)
		c.Commit()
		return
	}
	d.shed.Add(1)
}

// Stop implements Driver: it waits for the consumer to empty the inbox.
func (d *handoff[T]) Stop() error {
	for d.ring.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	close(d.stop)
	d.wg.Wait()
	return nil
}

// Close implements Driver.
func (d *handoff[T]) Close() {}

// Counts implements Driver.
func (d *handoff[T]) Counts() Counts {
	return Counts{Counted: d.counted.Load(), Shed: d.shed.Load()}
}

// openRecordHandoff hands over the SDK's record: an aggregate.Record
// written by stats.Span.Snapshot, as Publish writes it (labels, peer tags
// and measurements), read as the consumer's key compare reads it, cleared
// by Record.Reset.
func openRecordHandoff(*Workload) (Driver, error) {
	return openHandoff((*aggregate.Record).Reset, func(r *aggregate.Record, s *stats.Span) {
		s.Snapshot(r)
	}, func(r *aggregate.Record) uint64 {
		n := len(r.Resource) + len(r.Service) + len(r.Name) + len(r.Type) + len(r.SpanKind) +
			len(r.HTTPMethod) + len(r.HTTPEndpoint) + len(r.GRPCStatusCode) + len(r.ServiceSource) + len(r.ExtraPeerTags)
		for _, t := range r.PeerTags[:r.NumPeerTags] {
			n += len(t)
		}
		return uint64(n) + uint64(r.HTTPStatusCode) + uint64(r.Duration) + uint64(r.NumPeerTags)
	}), nil
}

// compactRecord is what a span would need to carry if the producer had
// already resolved its label set to a shared, immutable key: that key's
// address and the span's measurements, in half a cache line.
type compactRecord struct {
	key       unsafe.Pointer
	duration  int64
	end       int64
	errTopLvl uint8
}

// openCompactHandoff hands over a compactRecord per span (the key is the
// span's resource string, standing in for a resolved key).
func openCompactHandoff(*Workload) (Driver, error) {
	return openHandoff(nil, func(r *compactRecord, s *stats.Span) {
		r.key = unsafe.Pointer(unsafe.StringData(s.Resource))
		r.duration, r.end = s.Duration, s.Start+s.Duration
		r.errTopLvl = 0
		if s.Error {
			r.errTopLvl |= 1
		}
		if s.TopLevel {
			r.errTopLvl |= 2
		}
	}, func(r *compactRecord) uint64 {
		return uint64(uintptr(r.key)) + uint64(r.duration) + uint64(r.errTopLvl)
	}), nil
}

// BenchmarkHandoff measures, at the 200 k and 1 M spans/s loads of
// bench/peer's BenchmarkPaced (8 producers; SteadyState; at 20 k the
// harness's own cost varies by more than a handoff), the CPU per span of the
// handoff alone: producers claiming inbox slots and writing a record,
// a consumer woken as the SDK's reading and releasing them, less the
// harness (RunPaced). Two records: the SDK's aggregate.Record (328 bytes,
// its labels over three cache lines that move from the producer's core to
// the consumer's and back each lap, as the consumer clears them), and a
// 32-byte compactRecord. The difference is what a producer-side key
// resolution could save before any aggregation; "ratio" is record ÷
// compact.
func BenchmarkHandoff(b *testing.B) {
	for _, p := range []Pacing{
		{Rate: 200_000, Burst: time.Millisecond}, {Rate: 200_000},
		{Rate: 1_000_000, Burst: time.Millisecond}, {Rate: 1_000_000},
	} {
		b.Run(p.String(), func(b *testing.B) {
			RunPaced(b, SteadyState(), p,
				PacedSide{Name: "record", Open: openRecordHandoff},
				PacedSide{Name: "compact", Open: openCompactHandoff})
		})
	}
}
