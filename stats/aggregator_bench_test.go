package stats

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/testagent"
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
func benchAggregator(b *testing.B) (*Aggregator, func()) {
	ag := testagent.New()
	a, err := New(Config{AgentURL: ag.URL()})
	if err != nil {
		b.Fatal(err)
	}
	a.Start()
	return a, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
		ag.Close()
	}
}

func reportDrops(b *testing.B, a *Aggregator) {
	h := a.Health()
	if h.Published > 0 {
		b.ReportMetric(float64(h.InboxFull)/float64(h.Published), "full/op")
	}
}

// BenchmarkPublish measures one producer: eligibility, the snapshot copy and
// the ring push.
func BenchmarkPublish(b *testing.B) {
	a, done := benchAggregator(b)
	defer done()
	spans := benchSpans(200)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		sinkBool = a.Publish(&spans[i%len(spans)])
	}
	b.StopTimer()
	reportDrops(b, a)
}

// BenchmarkPublish8Producers runs 8 publishing goroutines whatever
// GOMAXPROCS is, against the live consumer.
func BenchmarkPublish8Producers(b *testing.B) {
	a, done := benchAggregator(b)
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
