// This file holds the examples of a Config filled from the Datadog
// tracers' environment variables and of its Logger.

package stats_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// A Config field left at its zero value is read from the variables a
// service configured for dd-trace-go or dd-trace-java already has: here
// DD_ENV and DD_SERVICE, and the version from DD_TAGS, since DD_VERSION
// is unset. A field set in the Config wins over its variable.
func ExampleConfig_environment() {
	for k, v := range map[string]string{"DD_ENV": "staging", "DD_SERVICE": "checkout", "DD_TAGS": "version:2.0.1,team:payments"} {
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	os.Unsetenv("DD_VERSION")
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), TracerVersion: "my-tracer/1.0"})
	if err != nil {
		panic(err)
	}
	agg.Start()
	agg.Publish(&stats.Span{Service: "checkout", Name: "http.request", Resource: "POST /pay",
		Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond), TopLevel: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	p := agent.Requests()[0].Payload
	fmt.Println("env", p.Env, "service", p.Service, "version", p.Version)
	// Output:
	// env staging service checkout version 2.0.1
}

// Config.Logger receives the SDK's warnings: here, when New runs, a
// variable it cannot use. Later ones (failed sends, dropped spans) come
// from the sender goroutine at most once a minute per kind, with counts.
func ExampleConfig_logger() {
	os.Setenv(stats.EnvAggregatesLimit, "lots")
	defer os.Unsetenv(stats.EnvAggregatesLimit)
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for a stable example output
			}
			return a
		},
	}))
	_, err := stats.New(stats.Config{AgentURL: "http://127.0.0.1:8126", Logger: log})
	if err != nil {
		panic(err)
	}
	// Output:
	// level=WARN msg="spanstats: ignoring an environment variable, as if it were unset" name=DD_TRACE_STATS_CARDINALITY_LIMIT value=lots reason="want an integer in [1, 65536]"
}
