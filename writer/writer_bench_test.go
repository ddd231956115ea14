// This file holds the package's benchmarks: a full report encoded and
// decoded, and one sketch encoded and decoded.

package writer

import (
	"math/rand/v2"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

// Package-level sinks keep the compiler from discarding benchmarked work.
var (
	sinkBytes   []byte
	sinkPayload *Payload
	sinkErr     error
)

// BenchmarkAppendPayload2048 encodes a full table's report: 2048 entries,
// each with an ok and an error sketch of 100 durations log-uniform between
// 50µs and 2s, into a buffer reused across iterations.
func BenchmarkAppendPayload2048(b *testing.B) {
	entries := benchEntries(b, 2048, 100)
	buckets := []Bucket{{Start: 1_700_000_000_000_000_000, Duration: 10e9, Groups: entries}}
	h := testHeader
	buf := AppendPayload(nil, &h, buckets)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		buf = AppendPayload(buf[:0], &h, buckets)
	}
	sinkBytes = buf
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(entries)), "ns/entry")
	b.ReportMetric(float64(len(buf)), "payload-bytes")
}

// BenchmarkAppendSketch encodes one realistic sketch (100 durations,
// log-uniform 50µs–2s) into a reused buffer.
func BenchmarkAppendSketch(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	s := new(aggregate.Sketch)
	for range 100 {
		s.Add(logUniform(r, 50e3, 2e9))
	}
	buf := AppendSketch(nil, s)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		buf = AppendSketch(buf[:0], s)
	}
	sinkBytes = buf
}

// BenchmarkDecodePayload decodes the payload of BenchmarkAppendPayload2048.
func BenchmarkDecodePayload(b *testing.B) {
	entries := benchEntries(b, 2048, 100)
	h := testHeader
	body := AppendPayload(nil, &h, []Bucket{{Start: 1, Duration: 10e9, Groups: entries}})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sinkPayload, sinkErr = DecodePayload(body)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(entries)), "ns/group")
}

// BenchmarkDecodeSketch decodes one realistic sketch into a reused sketch.
func BenchmarkDecodeSketch(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	s := new(aggregate.Sketch)
	for range 100 {
		s.Add(logUniform(r, 50e3, 2e9))
	}
	in := AppendSketch(nil, s)
	into := new(aggregate.Sketch)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		into.Reset()
		sinkErr = DecodeSketch(in, into)
	}
	if sinkErr != nil || into.Count() != 100 {
		b.Fatal(sinkErr, into.Count())
	}
}
