// This file holds the package's examples: the quick start, Flush and Clear.

package stats_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// The README's quick start (TestReadmeQuickStart runs the README's copy as
// a program of its own). A tracer creates one Aggregator, publishes every
// finished span, and stops it at shutdown; statstest stands in for the
// Datadog agent.
func Example() {
	agent := statstest.New() // stands in for the Datadog agent; drop it and AgentURL to use the real one
	defer agent.Close()

	agg, err := stats.New(stats.Config{
		AgentURL: agent.URL(), // default: SPANSTATS_RELAY_URL, DD_TRACE_AGENT_URL, DD_AGENT_HOST/DD_TRACE_AGENT_PORT, the agent's socket, or http://localhost:8126
		Env:      "prod", Service: "web", Version: "1.2.3", TracerVersion: "my-tracer/1.0",
	})
	if err != nil {
		panic(err)
	}
	agg.Start()

	// on every finished span, from any goroutine:
	for i := range 10 {
		agg.Publish(&stats.Span{
			Service: "web", Name: "http.request", Resource: "GET /users/:id",
			SpanKind: "server", HTTPStatusCode: 200, HTTPMethod: "GET",
			Start:    time.Now().Add(-3 * time.Millisecond).UnixNano(), // a span that has just ended
			Duration: int64(3 * time.Millisecond), TopLevel: true, Error: i == 0,
		})
	}

	// at shutdown: drain, send the last report, stop the goroutines
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	h := agg.Health() // every span is in Counted or a named drop counter
	groups, hits := statstest.Sum(agent.Requests())
	fmt.Println("counted", h.Counted, "agent received", hits, "in", len(groups), "group")
	for k, g := range groups {
		fmt.Println(k.Service, k.Resource, "hits", g.Hits, "errors", g.Errors)
	}
	// Output:
	// counted 10 agent received 10 in 1 group
	// web GET /users/:id hits 10 errors 1
}

// Flush reports what was published so far without waiting for the
// interval to end (before a serverless function freezes, say), and returns
// once the agent has answered.
func ExampleAggregator_Flush() {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Service: "web"})
	if err != nil {
		panic(err)
	}
	agg.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	defer agg.Stop(ctx)

	for range 3 {
		agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server",
			Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	}
	if err := agg.Flush(ctx); err != nil {
		panic(err)
	}
	_, hits := statstest.Sum(agent.Requests())
	h := agg.Health()
	fmt.Println("agent received", hits, "of", h.Counted, "counted; sent", h.SpansSent)
	// Output:
	// agent received 3 of 3 counted; sent 3
}

// Clear discards everything aggregated (the agent's ClearSignal): the
// spans are counted in Health.Cleared and never reach the agent.
func ExampleAggregator_Clear() {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Service: "web"})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for range 5 {
		agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server",
			Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	}
	agg.Clear() // does not wait: Stop carries it out first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	_, hits := statstest.Sum(agent.Requests())
	h := agg.Health()
	fmt.Println("counted", h.Counted, "cleared", h.Cleared, "agent received", hits)
	// Output:
	// counted 5 cleared 5 agent received 0
}

// A tracer holding a span's tags as key and value joins its peer tags with
// one PeerTagJoiner for the process: a pair seen before costs no
// allocation.
func ExamplePeerTagJoiner() {
	peers := stats.NewPeerTagJoiner() // one per process, shared by every goroutine
	tags := map[string]string{"peer.service": "billing", "db.instance": "orders"}

	var buf [8]string // Publish copies the tags: a buffer of the goroutine's own will do
	span := stats.Span{Service: "web", Name: "postgres.query", Resource: "SELECT ?", SpanKind: "client",
		PeerTags: append(buf[:0], peers.Join("db.instance", tags["db.instance"]), peers.Join("peer.service", tags["peer.service"]))}
	fmt.Println(span.PeerTags)
	// Output:
	// [db.instance:orders peer.service:billing]
}
