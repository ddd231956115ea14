// This file holds the examples of the fake agent: the main flow (WaitHits
// and Sum), SumExact against Sum, and FailNext.

package statstest_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// The main flow of a test: point the SDK at the fake agent, publish, wait
// until the agent holds the spans (WaitHits, here after a Flush; a test
// that stops the aggregator can read Requests right after Stop), and
// check what arrived with Sum.
func ExampleAgent_WaitHits() {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL()})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for i := range 5 {
		agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "/users", SpanKind: "server",
			Start: time.Now().UnixNano(), Duration: int64(time.Millisecond), Error: i == 0, TopLevel: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Flush(ctx); err != nil {
		panic(err)
	}
	if _, err := agent.WaitHits(ctx, 5); err != nil {
		panic(err)
	}
	groups, hits := statstest.Sum(agent.Requests())
	t := groups[statstest.GroupKey{Service: "web", Name: "http.request", Resource: "/users", SpanKind: "server"}]
	fmt.Println("hits", hits, "groups", len(groups), "errors", t.Errors, "top-level", t.TopLevelHits)
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// hits 5 groups 1 errors 1 top-level 5
}

// A test of how spans are grouped: Sum would add the GET and POST groups
// together (GroupKey has no HTTP method); SumExact keeps them apart.
func ExampleSumExact() {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL()})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for _, method := range []string{"GET", "GET", "POST"} {
		agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "/users", SpanKind: "server",
			HTTPMethod: method, Start: time.Now().UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}

	coarse, _ := statstest.Sum(agent.Requests())
	exact, hits := statstest.SumExact(agent.Requests())
	fmt.Println("hits", hits, "Sum groups", len(coarse), "SumExact groups", len(exact))
	var lines []string
	for k, t := range exact {
		lines = append(lines, fmt.Sprintf("%s %s hits %d", k.Resource, k.HTTPMethod, t.Hits))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// hits 3 Sum groups 1 SumExact groups 2
	// /users GET hits 2
	// /users POST hits 1
}

// FailNext makes the agent refuse for a moment: the SDK retries a 503,
// and only the accepted request counts in Sum.
func ExampleAgent_FailNext() {
	agent := statstest.New()
	defer agent.Close()
	agent.FailNext(1, 503)
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	agg.Start()
	agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "/users", SpanKind: "server",
		Start: time.Now().UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	for _, r := range agent.Requests() {
		fmt.Println("answered", r.Status)
	}
	_, hits := statstest.Sum(agent.Requests())
	h := agg.Health()
	fmt.Println("hits", hits, "failed attempts", h.PayloadsFailed, "sent", h.PayloadsSent)
	// Output:
	// answered 503
	// answered 200
	// hits 1 failed attempts 1 sent 1
}
