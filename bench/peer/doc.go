// Package peer holds the tests and benchmarks that need the software we
// interoperate with or measure ourselves against: the Datadog agent's own
// payload code (github.com/DataDog/datadog-agent/pkg/proto, its msgp decoder
// for POST /v0.6/stats) and sketches-go used the way the agent uses it.
//
// It is a nested module (github.com/spanstats/spanstats/bench/peer, with a
// replace of the root module to ../..) so that the agent's dependency tree
// never reaches the root go.mod: users of the SDK download none of it. Run it
// from this folder: go test -race ./...
//
// What lives here:
//   - interop tests: payloads produced by the real SDK (stats.New … Stop,
//     over HTTP to a loopback server that keeps the raw bodies) must decode
//     with the agent's ClientStatsPayload decoder with every value intact,
//     and payloads produced by the agent's encoder must decode with
//     writer.DecodePayload with every value intact — both directions of the
//     wire contract (package writer) — and what statsrelay forwards, merged
//     from SDKs' datagrams and agent-encoded payloads, must decode with the
//     agent's decoder into exactly what was published;
//   - the agent's own HTTP receiver (pkg/trace/api, started as the
//     trace-agent starts it, with a recording stats processor): the SDK
//     reads its /info (peer_tags, max_request_bytes) and its stats handler
//     takes every report, retried after its 408; the relay forwards to it
//     over TCP within its body limit and over its Unix socket, each payload
//     filed under the sender's container, never the relay's; and the
//     agent's ClientStatsAggregator behind it merges SDKs' reports, their
//     sketches exactly (agentreceiver_test.go);
//   - BenchmarkPaced, the headline: both implementations at fixed offered
//     loads (20 k, 200 k and 1 M spans/s from 8 producers, in 1 ms bursts and
//     spread), CPU per span less the pacing driver's (bench.RunPaced);
//   - side-by-side benchmarks against the agent's stats code (peer
//     comparisons), reported as ratios in one run: every workload of package
//     bench through the SDK (impl=spanstats) and through the agent's
//     pkg/trace/stats SpanConcentrator driven the way dd-trace-go v2 drives
//     it (impl=peer: NewStatSpanWithConfig on the producer goroutine, a
//     10000-slot channel to one ingester calling AddSpan, Flush and
//     MarshalMsg; see concentrator_test.go), measured by bench.Run at
//     saturation (a throughput race under overload); and the
//     live heap per entry at 2048 entries (BenchmarkHeapPerEntry). bench/run
//     runs them and writes bench/RESULTS.md;
//   - TestDriversAgree and TestDriversSameKeys: both implementations count
//     the same spans in the same groups, label for label, so that the
//     comparison is like for like.
//
// The package itself exports nothing; everything is in _test.go files.
package peer
