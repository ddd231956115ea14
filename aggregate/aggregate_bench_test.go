// This file holds the Table's benchmarks: adding a span whose key is held,
// a new key at the cap, churning or freshly built labels; one Sketch
// insert; and quantizing a long list of IP addresses.

package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// Package-level sinks keep the compiler from deleting benchmarked work.
var (
	sinkEntries []*Entry
	sinkU64     uint64
	sinkF64     float64
)

// benchDurations returns n durations (ns) log-uniform in [50µs, 2s].
func benchDurations(n int) []int64 {
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := math.Log(50e3), math.Log(2e9)
	d := make([]int64, n)
	for i := range d {
		d[i] = int64(math.Exp(lo + r.Float64()*(hi-lo)))
	}
	return d
}

// benchSpans returns n distinct spans with realistic field lengths; client
// spans carry peer tags when peers is set.
func benchSpans(n int, peers bool) []Record {
	services := []string{"web-store", "checkout-api", "auth-service", "inventory-worker"}
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	spans := make([]Record, n)
	for i := range spans {
		m := methods[i%len(methods)]
		endpoint := fmt.Sprintf("/api/v1/users/:id/items%d", i)
		s := Record{
			Service:        services[i%len(services)],
			Name:           "http.request",
			Resource:       m + " " + endpoint,
			Type:           "web",
			SpanKind:       "server",
			HTTPMethod:     m,
			HTTPEndpoint:   endpoint,
			HTTPStatusCode: 200,
			TopLevel:       true,
			TraceRoot:      i%3 == 0,
		}
		if peers {
			s.Name = "postgres.query"
			s.Resource = fmt.Sprintf("SELECT * FROM users WHERE id = ? /* q%d */", i)
			s.Type = "sql"
			s.SpanKind = "client"
			s.HTTPMethod, s.HTTPEndpoint, s.HTTPStatusCode = "", "", 0
			s.TopLevel = false
			s.SetPeerTags([]string{"peer.service:users-db", "db.instance:users", "peer.hostname:db-1.internal"})
		}
		spans[i] = s
	}
	return spans
}

func benchHit(b *testing.B, peers bool) {
	spans := benchSpans(200, peers)
	durs := benchDurations(4096)
	tb := NewTable(0)
	tb.SetLimits(DefaultLimits()) // as the SDK runs it
	for i := range spans {
		tb.Add(&spans[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s := &spans[i%len(spans)]
		s.Duration = durs[i&(len(durs)-1)]
		s.Error = i&63 == 0
		tb.Add(s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/span")
	sinkEntries = tb.Touched(sinkEntries[:0])
}

// BenchmarkTableAddHit is the consumer's steady state: every span's key
// already has an entry; the cost is hash, probe, compare and sketch insert.
func BenchmarkTableAddHit(b *testing.B) { benchHit(b, false) }

// BenchmarkTableAddHitPeerTags is the hit path for client spans with three
// peer tags (sorted and hashed on every span).
func BenchmarkTableAddHitPeerTags(b *testing.B) { benchHit(b, true) }

// BenchmarkTableAddMissAtCap adds a new key on every span to a full table:
// "recycle" rotates whenever every entry has been reused, so each span
// recycles an idle entry; "overflow" never rotates, so each span lands in the
// overflow entry after one unsuccessful sweep.
func BenchmarkTableAddMissAtCap(b *testing.B) {
	const keys = 1 << 14
	spans := benchSpans(keys, false)
	durs := benchDurations(4096)
	for _, mode := range []string{"recycle", "overflow"} {
		b.Run(mode, func(b *testing.B) {
			tb := NewTable(DefaultMaxEntries)
			for i := range DefaultMaxEntries {
				tb.Add(&spans[i])
			}
			if mode == "recycle" {
				tb.Rotate()
			}
			next := DefaultMaxEntries
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := &spans[next]
				next++
				if next == keys {
					next = 0
				}
				s.Duration = durs[i&(len(durs)-1)]
				tb.Add(s)
				if mode == "recycle" && (i+1)%DefaultMaxEntries == 0 {
					tb.Rotate()
				}
			}
			b.StopTimer()
			sinkU64 = tb.Recycled() + tb.Overflowed()
			if mode == "overflow" && tb.Recycled() != 0 {
				b.Fatalf("overflow mode recycled %d entries", tb.Recycled())
			}
			if mode == "recycle" && tb.Overflowed() != 0 {
				b.Fatalf("recycle mode overflowed %d spans", tb.Overflowed())
			}
		})
	}
}

// BenchmarkSketchAdd is one latency insert into a warm sketch.
func BenchmarkSketchAdd(b *testing.B) {
	durs := benchDurations(4096)
	var s Sketch
	for _, d := range durs {
		s.Add(float64(d))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Add(float64(durs[i&(len(durs)-1)]))
	}
	sinkU64 = s.Count()
	sinkF64 = s.Quantile(0.5)
}

// freshSpanBatch is the number of spans built, outside the timer, between
// timed runs of Add: the strings are fresh (as a tracer's are) yet the batch
// stays within L2/L3.
const freshSpanBatch = 4096

// benchFresh adds spans that key(i) builds with fresh strings, batch by batch
// outside the timer, and calls every(i) after each Add.
func benchFresh(b *testing.B, tb *Table, key func(i int, s *Record), every func(i int)) {
	durs := benchDurations(4096)
	spans := make([]Record, freshSpanBatch)
	fill := func(base int) {
		for j := range spans {
			i := base + j
			spans[j] = Record{Type: "sql", SpanKind: "client", Duration: durs[i&(len(durs)-1)], Error: i&63 == 0}
			key(i, &spans[j])
		}
	}
	fill(0)
	for j := range spans[:256] { // the steady state: keys already in the table
		tb.Add(&spans[j])
	}
	// The fresh strings are the benchmark's garbage, not the table's: collect
	// it outside the timer so GC work does not land on the measured spans.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j := i % freshSpanBatch
		if j == 0 && i > 0 {
			b.StopTimer()
			if i%(64*freshSpanBatch) == 0 {
				runtime.GC()
			}
			fill(i)
			b.StartTimer()
		}
		tb.Add(&spans[j])
		every(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/span")
	sinkEntries = tb.Touched(sinkEntries[:0])
}

// BenchmarkTableAddAdversarial: every span varies service (64 K values),
// operation (256 K), resource (~1 M) and peer host (32 K) at once, with the
// default budgets on; the table rotates every 1 M spans as a report would.
// Compare with BenchmarkTableAddHitFreshStrings (the steady state with
// equally fresh strings) and BenchmarkTableAddHitPeerTags (interned ones).
func BenchmarkTableAddAdversarial(b *testing.B) {
	tb := NewTable(0)
	tb.SetLimits(DefaultLimits())
	benchFresh(b, tb, func(i int, s *Record) {
		s.Service = "svc-" + strconv.Itoa((i*7)&(1<<16-1))
		s.Name = "op." + strconv.Itoa((i*13)&(1<<18-1))
		s.Resource = "GET /api/v1/users/" + strconv.Itoa((i*31)&(1<<20-1))
		s.SetPeerTags([]string{"peer.service:users-db", "peer.hostname:db-" + strconv.Itoa((i*17)&(1<<15-1)), "db.system:postgresql"})
	}, func(i int) {
		if i&(1<<20-1) == 1<<20-1 {
			tb.Rotate()
		}
	})
	b.ReportMetric(float64(tb.CollapsedSpans())/float64(b.N), "collapsed/op")
}

// BenchmarkTableAddHitFreshStrings is the steady state (200 client keys, 3
// peer tags, every key already in the table) with strings the tracer built
// anew for each span, as BenchmarkTableAddAdversarial has: the recent-span
// cache cannot help, every span is encoded, hashed and compared. It is the
// like-for-like baseline of the adversarial benchmark.
func BenchmarkTableAddHitFreshStrings(b *testing.B) {
	tb := NewTable(0)
	tb.SetLimits(DefaultLimits())
	benchFresh(b, tb, func(i int, s *Record) {
		k := i % 200
		s.Service = "svc-" + strconv.Itoa(k%4)
		s.Name = "op." + strconv.Itoa(k%8)
		s.Resource = "GET /api/v1/users/" + strconv.Itoa(k)
		s.SetPeerTags([]string{"peer.service:users-db", "peer.hostname:db-" + strconv.Itoa(k%16), "db.system:postgresql"})
	}, func(int) {})
	if tb.CollapsedSpans() != 0 || tb.Len() != 200 {
		b.Fatalf("steady state collapsed %d spans over %d entries", tb.CollapsedSpans(), tb.Len())
	}
}

// BenchmarkQuantizeIPList: what Publish pays to quantize a peer tag longer
// than stats.MaxTagLen, a Kafka bootstrap list of 60 brokers by address
// (915 bytes, read to 4*max), and the same list read whole.
func BenchmarkQuantizeIPList(b *testing.B) {
	var parts []string
	for i := range 60 {
		parts = append(parts, fmt.Sprintf("10.0.%d.%d:9092", i/200, i%200+1))
	}
	v := strings.Join(parts, ",") + ",kafka-extra.internal:9092"
	for _, max := range []int{165, len(v)} {
		b.Run(fmt.Sprintf("max=%d", max), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(min(len(v), 4*max)))
			for b.Loop() {
				QuantizeIPsTo(v, max)
			}
		})
	}
}
