package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
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
func benchSpans(n int, peers bool) []Span {
	services := []string{"web-store", "checkout-api", "auth-service", "inventory-worker"}
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	spans := make([]Span, n)
	for i := range spans {
		m := methods[i%len(methods)]
		endpoint := fmt.Sprintf("/api/v1/users/:id/items%d", i)
		s := Span{
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
