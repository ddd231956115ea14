// This file holds the Aggregator's benchmarks: Publish from one producer
// and from eight, an interval's report, and an aggregator left idle.

package stats

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/stats/statstest"
)

var sinkBool bool

func benchSpans(n int) []Span {
	spans := make([]Span, n)
	for i := range spans {
		spans[i] = Span{
			Service: "web-store", Name: "http.request", Resource: fmt.Sprintf("GET /api/v1/items/%d", i),
			Type: "web", SpanKind: "server", HTTPStatusCode: 200, HTTPMethod: "GET",
			HTTPEndpoint: fmt.Sprintf("/api/v1/items/%d", i), Duration: int64(50_000 + i*997),
			TopLevel: true, Error: i%5 == 0,
		}
	}
	return spans
}

// benchAggregator runs a real aggregator (consumer draining, reports to a
// loopback agent at the default interval) so Publish is measured against a
// live consumer, not an idle ring.
func benchAggregator(b *testing.B, cfg ...Config) (*Aggregator, func()) {
	ag := statstest.New()
	c := Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.AgentURL = ag.URL()
	a, stop := startAggregator(b, c)
	return a, func() {
		stop()
		ag.Close()
	}
}

// startAggregator starts an aggregator configured by c and returns it with
// the function that stops it.
func startAggregator(b *testing.B, c Config) (*Aggregator, func()) {
	a, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	a.Start()
	return a, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	}
}

func reportDrops(b *testing.B, a *Aggregator) {
	h := a.Health()
	if h.Published > 0 {
		b.ReportMetric(float64(h.InboxFull)/float64(h.Published), "full/op")
	}
}

// BenchmarkPublish measures one producer on the accepted path:
// eligibility, the snapshot copy and the ring push. No consumer runs; the
// benchmark drains the inbox itself outside the timer so no push finds it
// full (full/op must read 0).
func BenchmarkPublish(b *testing.B) {
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"}) // never started: nothing is sent
	if err != nil {
		b.Fatal(err)
	}
	spans := benchSpans(200)
	drained := make([]aggregate.Record, 1024)
	room := a.inbox.Cap()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if room == 0 {
			b.StopTimer()
			for a.inbox.Drain(drained) > 0 {
			}
			room = a.inbox.Cap()
			b.StartTimer()
		}
		sinkBool = a.Publish(&spans[i%len(spans)])
		room--
	}
	b.StopTimer()
	reportDrops(b, a)
}

// BenchmarkPublish8Producers runs 8 publishing goroutines whatever
// GOMAXPROCS is, against the live consumer. Producers outrun one consumer
// by far, so many pushes find the inbox full: full/op says how many,
// accepted/s how many spans went in (all of them are counted), and ns/op
// mixes the accepted and the shed path. Sub-benchmarks: the default (a
// yield on one in DefaultShedYieldEvery full-inbox calls), a yield on
// every one, and none.
func BenchmarkPublish8Producers(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchPublish8(b, Config{}) })
	b.Run("yield-every-shed", func(b *testing.B) { benchPublish8(b, Config{ShedYieldEvery: 1}) })
	b.Run("shed-without-yield", func(b *testing.B) { benchPublish8(b, Config{ShedWithoutYield: true}) })
	b.Run("ineligible", benchPublishIneligible)
}

// benchPublishIneligible: 8 producers publishing internal spans, which
// Publish counts in Health.Ineligible (a striped counter) and nothing else:
// most spans of a tracer that sends them all.
func benchPublishIneligible(b *testing.B) {
	a, done := benchAggregator(b)
	defer done()
	span := Span{Service: "web-store", Name: "template.render", Resource: "index", SpanKind: "internal", Duration: 1000}
	b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ok bool
		for pb.Next() {
			ok = a.Publish(&span)
		}
		sinkBool = ok
	})
	b.StopTimer()
	if h := a.Health(); h.Ineligible != uint64(b.N) {
		b.Fatalf("Ineligible %d, want %d", h.Ineligible, b.N)
	}
}

func benchPublish8(b *testing.B, cfg Config) {
	a, done := benchAggregator(b, cfg)
	defer done()
	spans := benchSpans(200)
	b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		var ok bool
		for pb.Next() {
			ok = a.Publish(&spans[i%len(spans)])
			i++
		}
		sinkBool = ok
	})
	b.StopTimer()
	reportDrops(b, a)
	h := a.Health()
	b.ReportMetric(float64(h.Published-h.InboxFull)/b.Elapsed().Seconds(), "accepted/s")
}

// BenchmarkPublishClientPeerTags publishes client spans with 3 peer tags.
func BenchmarkPublishClientPeerTags(b *testing.B) {
	a, done := benchAggregator(b)
	defer done()
	spans := benchSpans(200)
	for i := range spans {
		spans[i].SpanKind = "client"
		spans[i].TopLevel = false
		spans[i].PeerTags = []string{"peer.service:users-db", fmt.Sprintf("peer.hostname:db-%d.internal", i%8), "db.system:postgresql"}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		sinkBool = a.Publish(&spans[i%len(spans)])
	}
	b.StopTimer()
	reportDrops(b, a)
}

// BenchmarkReport2048 is one interval's report on the consumer: 2048
// entries (ok and error sketches of log-uniform 50 µs–2 s durations)
// encoded into a payload and handed to the sender, then the table reset
// for the next interval. Allocations must not grow with the entries.
func BenchmarkReport2048(b *testing.B) {
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	c := a.cons
	c.start = time.Now().Truncate(c.interval)
	spans := make([]aggregate.Record, 2048)
	for i := range spans {
		spans[i] = aggregate.Record{Service: "web-store", Name: "http.request", Type: "web", SpanKind: "server",
			Resource: fmt.Sprintf("GET /api/v1/items/%d", i), HTTPMethod: "GET", HTTPStatusCode: 200}
	}
	durs := logUniform(1 << 12)
	refill := func() {
		for j := range 100 {
			for i := range spans {
				spans[i].Duration = durs[(i*100+j)&(len(durs)-1)]
				spans[i].Error = j%5 == 0
				c.table.Add(&spans[i])
			}
		}
	}
	var bytes int
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		refill()
		b.StartTimer()
		c.reportAll(time.Now(), nil)
		r := <-a.snd.in // what the sender would take
		for _, p := range r.parts {
			bytes += len(p.body)
			c.bufs.put(p.body)
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "payload-B/op")
}

// logUniform returns n durations log-uniform in [50 µs, 2 s].
func logUniform(n int) []int64 {
	d := make([]int64, n)
	lo, hi := math.Log(50e3), math.Log(2e9)
	for i := range d {
		d[i] = int64(math.Exp(lo + (hi-lo)*float64((i*7919)%n)/float64(n)))
	}
	return d
}

// BenchmarkIdle is the cost of an aggregator that receives no span: a
// started one, reporting to a loopback agent, left alone for idleStretch
// per op. It reports the consumer's wake-ups per second; the process's CPU
// (user+sys, getrusage) as a fraction of one core (%core), the benchmark's
// own sleeping goroutine and the loopback agent included; the same process
// just before the aggregator started, over as many stretches
// (%core-without: a Go process that only sleeps costs several hundredths
// of a percent of a core on these hosts, its runtime and timers, and moves
// by as much from one second to the next); and the difference, what the
// aggregator adds (%core-aggregator). Run it for seconds (bench/run: 4 s),
// not the default 1 s: the process's own cost is that noisy.
func BenchmarkIdle(b *testing.B) {
	const idleStretch = 500 * time.Millisecond
	const settle = time.Second // start-ups (the agent's, then the first /info read) pass
	b.StopTimer()
	// The framework's first call (b.N = 1) freed an aggregator: return its
	// memory now, or the runtime's background scavenger does it during
	// the measurement.
	debug.FreeOSMemory()
	ag := statstest.New()
	defer ag.Close()
	time.Sleep(settle)
	without := cputime.ShareWhileSleeping(b.N, idleStretch)
	a, stop := startAggregator(b, Config{AgentURL: ag.URL()})
	defer stop()
	time.Sleep(settle)
	w0, t0 := a.cons.wakeups.Load(), time.Now()
	b.StartTimer()
	with := cputime.ShareWhileSleeping(b.N, idleStretch)
	b.StopTimer()
	b.ReportMetric(float64(a.cons.wakeups.Load()-w0)/time.Since(t0).Seconds(), "wakeups/s")
	b.ReportMetric(with, "%core")
	b.ReportMetric(without, "%core-without")
	b.ReportMetric(with-without, "%core-aggregator")
}
