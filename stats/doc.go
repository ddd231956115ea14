// Package stats is the public spanstats SDK: a tracer calls Publish on every
// finished span and the Aggregator reports client-side span stats (hits,
// errors, top-level hits, total duration and DDSketch latency histograms per
// group of labels) to the Datadog agent's POST /v0.6/stats every interval.
// The tracer then sends its traces with the header
// Datadog-Client-Computed-Stats: true, or the agent counts them again.
//
// Concurrency: every method of Aggregator is safe for concurrent use.
// Publish never waits and, in steady state, never allocates; when the inbox
// is full it drops the span (counted) and, on about one call in
// Config.ShedYieldEvery, yields its processor so the consumer can catch up.
//
// Design: Publish checks eligibility and writes the span's fields straight
// into a claimed slot of a bounded lock-free inbox (package inbox). One
// consumer goroutine (consumer.go) aggregates the inbox in place, in
// batches, into an aggregate.Table it alone owns; clears, flushes and stop
// reach it as signals, so the table has no lock. A span counts in the bucket
// of its end; at each interval boundary (aligned to BucketInterval) the
// current bucket's table becomes the previous one's, open for a short grace
// while a second table takes the new bucket. When the grace ends, or on
// Flush or Stop, the consumer encodes the touched entries with package
// writer into complete payloads and hands them to the sender goroutine
// (sender.go), which delivers them through the shared agent client; the
// consumer never waits for the network. Every span ends up counted in an
// entry or in a named counter of Health.
package stats
