// Package statstest is a fake Datadog agent for tests of code that uses
// package stats: it accepts POST /v0.6/stats on loopback (TCP, or a Unix
// socket with NewUnix), decodes and keeps every payload, answers GET /info
// as an agent left at its defaults does (its peer_tags list, which decides
// the peer tags the SDK keeps), and can be told to fail.
//
//	agent := statstest.New()
//	defer agent.Close()
//	agg, _ := stats.New(stats.Config{AgentURL: agent.URL()})
//	// ... publish, then agg.Stop(ctx)
//	groups, hits := statstest.Sum(agent.Requests())
//
// Concurrency: every method is safe for concurrent use.
//
// Design: an httptest server whose handlers record every stats request —
// headers, body, the decoded payload or the decode error, and the status
// answered — under one mutex. It decodes as the agent does
// (writer.DecodePayloadAsAgent: nil for an array or a summary is a 400),
// and stricter where the agent's handler (v0.85.4) looks no further: it
// answers 400 to bytes after the payload, to a summary that is not a
// DDSketch of the agent's mapping or holds a negative count, and to an
// array claiming more elements than the bytes left could hold at the
// decoder's least size per element (writer.MinWireGroupBytes a group,
// writer.MinWireStringBytes a string: the relay's guard against hostile
// input, which no payload of the SDK comes near). It is looser in one
// case: an unknown field nested deeper than the agent's recursion limit
// is skipped, where the agent answers 400. A test makes it misbehave with FailNext (the
// next n requests get a status) or SetHandler (any answer: hang, 413, fail
// the n-th, reset the connection through http.ResponseController), lowers its body limit with SetMaxRequestBytes (over it, the
// agent's own answer: 400 "read limit reached"), replaces the /info
// document with SetInfo, waits with WaitHits
// or Notify, and adds up what was accepted with Sum to check what it
// published against what arrived (SumExact to check how it was grouped:
// Sum's GroupKey leaves out some of the key's fields). It imports no part of package stats, so
// the stats package's own tests use it too.
package statstest
