// This file holds the example of the aggregator's health sent as DogStatsD
// counts (Config.Metrics).

package stats_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// printCounts stands in for a DogStatsD client (datadog-go's *statsd.Client
// satisfies stats.MetricsClient) and prints the counts it gets.
type printCounts struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (p *printCounts) Count(name string, value int64, _ []string, _ float64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[name] += value
	return nil
}

func (p *printCounts) Gauge(string, float64, []string, float64) error { return nil }

// The aggregator's own health as DogStatsD counts. The client here already
// prepends "datadog.tracer.", so the names it gets start at "stats.".
func ExampleConfig_metrics() {
	agent := statstest.New()
	defer agent.Close()
	client := &printCounts{counts: map[string]int64{}}
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), Metrics: client, MetricsNamespace: "datadog.tracer."})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for range 3 {
		agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "/", SpanKind: "server",
			Start: time.Now().UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	client.mu.Lock()
	defer client.mu.Unlock()
	fmt.Println("stats.spans.counted", client.counts["stats.spans.counted"])
	fmt.Println("stats.spans.sent", client.counts["stats.spans.sent"])
	fmt.Println("stats.payloads.sent", client.counts["stats.payloads.sent"])
	// Output:
	// stats.spans.counted 3
	// stats.spans.sent 3
	// stats.payloads.sent 1
}
