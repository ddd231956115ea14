// This file holds the Relay's benchmarks: Accept of whole datagrams, of
// wide and narrow sketches, and one interval accepted then harvested.

package relay

import (
	"fmt"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

// benchDatagram is an enveloped payload of at most size bytes holding as
// many groups as fit (each with a few latencies), and its hits.
func benchDatagram(size int) ([]byte, uint64, int) {
	var es []*aggregate.Entry
	var d, prev []byte
	for {
		k := key(fmt.Sprintf("GET /api/v1/items/%d", len(es)))
		k.PeerTags = []string{"peer.service:db"}
		es = append(es, entry(k, 10, 1, 4, 4.1, 4.3, 5))
		prev, d = d, datagram(1, header("rt"), bucket(w0, 10*sec, es...))
		if len(d) > size {
			es = es[:len(es)-1]
			return prev, uint64(10 * len(es)), len(es)
		}
	}
}

func BenchmarkAccept(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		d, hits, groups := benchDatagram(size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			r := newTestRelay(Config{})
			b.ReportAllocs()
			b.SetBytes(int64(len(d)))
			for b.Loop() {
				if err := r.Accept(d, 0, UDP); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(groups), "groups/datagram")
			b.ReportMetric(float64(hits)*float64(b.N)/b.Elapsed().Seconds(), "spans/s")
			b.ReportMetric(float64(groups)*float64(b.N)/b.Elapsed().Seconds(), "groups-merged/s")
		})
		b.Run(fmt.Sprintf("%dKiB/parallel", size>>10), func(b *testing.B) {
			r := newTestRelay(Config{})
			b.ReportAllocs()
			b.SetBytes(int64(len(d)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := r.Accept(d, 0, UDP); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(groups)*float64(b.N)/b.Elapsed().Seconds(), "groups-merged/s")
		})
	}
}

// BenchmarkAcceptSketches: a 16 KiB datagram of groups of 50 spans, each
// latency in its own bin (wide: the binCounts map layout), or the latencies
// of bench/'s relay datagrams, 4 to 4.6 ms over a handful of bins (narrow:
// contiguous counts): the summaries' cost, checked then added to the held
// sketches.
func BenchmarkAcceptSketches(b *testing.B) {
	wide, narrow := make([]float64, 50), make([]float64, 50)
	for i := range wide {
		wide[i] = 1 + float64(i)*0.37
		narrow[i] = 4 + float64(i*i)*250e-6
	}
	b.Run("wide", func(b *testing.B) { benchAcceptSketches(b, wide) })
	b.Run("narrow", func(b *testing.B) { benchAcceptSketches(b, narrow) })
}

func benchAcceptSketches(b *testing.B, durs []float64) {
	var es []*aggregate.Entry
	var d, prev []byte
	for len(d) <= 16<<10 {
		es = append(es, entry(key(fmt.Sprintf("GET /api/v1/items/%d", len(es))), 50, 1, durs...))
		prev, d = d, datagram(1, header("rt"), bucket(w0, 10*sec, es...))
	}
	r := newTestRelay(Config{})
	b.ReportAllocs()
	b.SetBytes(int64(len(prev)))
	for b.Loop() {
		if err := r.Accept(prev, 0, UDP); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(es)-1), "ns/group")
}

var sinkBatches []Batch

// BenchmarkAcceptHarvest: one interval of 100 16 KiB datagrams of
// one identity, accepted then harvested; the cost per merged group includes
// creating it and handing it out.
func BenchmarkAcceptHarvest(b *testing.B) {
	d, _, groups := benchDatagram(16 << 10)
	r := newTestRelay(Config{})
	b.ReportAllocs()
	for b.Loop() {
		for range 100 {
			if err := r.Accept(d, 0, UDP); err != nil {
				b.Fatal(err)
			}
		}
		sinkBatches = r.Harvest(t0)
		for _, bt := range sinkBatches {
			r.Forwarded(bt.Hits)
		}
	}
	b.ReportMetric(float64(100*groups)*float64(b.N)/b.Elapsed().Seconds(), "groups-merged/s")
}
