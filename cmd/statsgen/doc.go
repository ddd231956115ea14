// Command statsgen is a synthetic span load generator for the spanstats SDK.
// It publishes spans from several goroutines through a stats.Aggregator.
// Without -agent it starts an embedded fake agent on loopback, decodes every
// payload it receives and prints, after each interval, the top keys with
// their hits, errors and latency quantiles read from the decoded sketches.
//
//	go run ./cmd/statsgen                      # 8 s against the embedded agent
//	go run ./cmd/statsgen -agent http://localhost:8126 -run 1m
//
// Concurrency: -producers goroutines call Publish, each with its own random
// source and span value; the main goroutine prints what the fake agent
// received (or the aggregator's Health when sending to a real agent) and,
// when the run time is over or on an interrupt, stops the producers, then
// the aggregator (which sends the last interval, waiting at most 10 s for
// the agent), then the fake agent. The first SIGINT or SIGTERM while
// publishing starts that stop; any signal once it has started ends the
// process at once, with exit status 1, even for a process started with
// SIGINT ignored.
//
// Design: each producer draws a key out of -keys (service × resource, with
// a span kind and, for non-server spans, a peer tag), an error with
// probability -errors and a duration from -dist, and sleeps until its next
// span is due, waking at most once a millisecond, to keep its share of
// -rate (or runs flat out with -rate 0). The printed
// quantiles come from the DDSketches as the agent would decode them, so the
// output checks the whole pipeline: inbox, table, encoder, HTTP and decoder.
//
// Exit status: 0 when every counted span was delivered (spans the inbox shed
// under load are counted, not lost); 1 when some were not, the agent did
// not accept client stats (those spans are never counted), the embedded
// agent decoded another number, or a signal ended the stop; 2 for a flag
// it refuses.
package main
