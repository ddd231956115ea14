package stats_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// A tracer creates one Aggregator, publishes every finished span, and stops
// it at shutdown. The fake agent stands in for the Datadog agent.
func Example() {
	agent := statstest.New() // a real agent listens on http://localhost:8126
	defer agent.Close()

	agg, err := stats.New(stats.Config{
		AgentURL: agent.URL(),
		Env:      "prod", Service: "web", Version: "1.2.3",
		TracerVersion:  "v0.1.0",
		BucketInterval: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for i := range 10 {
		agg.Publish(&stats.Span{
			Service: "web", Name: "http.request", Resource: "GET /users/:id",
			SpanKind: "server", HTTPStatusCode: 200, HTTPMethod: "GET",
			Duration: int64(time.Millisecond), TopLevel: true, Error: i == 0,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil { // drains, sends the last report
		panic(err)
	}
	h := agg.Health()
	fmt.Printf("published %d counted %d payloads %d\n", h.Published, h.Counted, h.PayloadsSent)
	g := agent.Requests()[0].Payload.Buckets[0].Groups[0]
	fmt.Printf("%s %s hits=%d errors=%d\n", g.Service, g.Resource, g.Hits, g.Errors)
	// Output:
	// published 10 counted 10 payloads 1
	// web GET /users/:id hits=10 errors=1
}
