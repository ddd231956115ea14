// Package bench holds the adversarial benchmarks of the span-stats SDK and
// the workloads they publish, mirroring dd-trace-java's JMH suite for its
// client-side stats (8 producer threads publishing one-span traces against
// the default table cap and inbox).
//
// # What it owns
//
// Workloads (workload.go): deterministic, precomputed span tables built once
// per process — SteadyState, HighCardinalityResource, HighCardinalityPeer,
// Adversarial, ClientPeerTags, HeapEntries, and SteadyStateFreshStrings and
// ClientPeerTagsFreshStrings (their strings a copy of their own per span). They are exported so that the
// nested peer module (bench/peer) drives the exact same spans through the
// Datadog agent's stats code for side-by-side ratios.
//
// The harness (driver.go, agent.go): a Driver is one implementation under
// test; Run publishes a workload through it from 8 producer goroutines and
// reports, besides ns/op and allocs/op, the figures that matter for span
// stats: spans counted per second of wall time, CPU (user+sys, whole
// process) per counted span, allocations per counted span, and the fraction
// of spans shed at the inbox, collapsed by a cardinality budget or folded
// into the overflow entry. RunPaced (paced.go) instead offers a fixed load
// (Pacing) to several drivers in alternating rounds and reports each one's
// CPU per span over a window of each round, once the driver is in its
// steady state, less a driver whose Publish does nothing (emptyDriver),
// and beside a side's work
// without the handoff to another goroutine (OpenInlineSDK: the SDK's
// Publish and consumer on one goroutine, back to back and paced). SDK is
// the Driver of this module's stats package; Agent is the loopback agent
// it reports to.
//
// # Concurrency
//
// Workloads are read-only once built and safe to share between goroutines.
// A Driver's Publish is called from many goroutines at once, but
// OpenInlineSDK's, which is called from one; Stop, Counts and Close from
// one, after every Publish returned.
//
// # Design
//
// Nothing is allocated, hashed or drawn at random in the measured loop: each
// producer goroutine walks the span table with its own counter, starting at
// its own offset so that the producers do not publish the same key in
// lockstep. Stop is inside the timed region, so spans still queued when the
// producers finish are drained and counted, and their cost is measured.
//
// Run the benchmarks with ./run in this folder (benchstat tables into
// RESULTS.md), or directly: go test -run '^$' -bench . ./bench/
package bench
