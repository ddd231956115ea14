// Package agentclient is the one client of the Datadog agent's stats API,
// shared by the SDK's sender (package stats) and the relay's forwarder: a
// POST of one msgpack payload to /v0.6/stats, a GET of /info, and the retry
// machine around them — exponential backoff with jitter inside a budget of
// attempts, queued payloads and bytes; a 413 answered by splitting the
// payload into complete parts of about half its size; a 404 switching the
// client off until /info (polled from RetryBackoff after it, backing off
// to InfoRefresh) lists the
// stats endpoint again, the payloads meanwhile held within the retry
// budget; and a Final that gives what waits its retries within the
// owner's deadline.
//
// A Client is driven by one goroutine (its methods, NewPass and a Pass's
// included, are not safe for concurrent use, Off aside); only the off
// flag it shares through Config.Off is read by other goroutines. Every outcome is reported to an Observer, so nothing
// it gives up on goes uncounted.
package agentclient
