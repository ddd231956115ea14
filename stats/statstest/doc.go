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
// and a bit stricter: bytes after the payload are a 400 too. A test makes it misbehave with FailNext (the
// next n requests get a status) or SetHandler (any answer: hang, 413, fail
// the n-th, reset the connection through http.ResponseController), lowers its body limit with SetMaxRequestBytes (over it, the
// agent's own answer: 400 "read limit reached"), replaces the /info
// document with SetInfo, waits with WaitHits
// or Notify, and adds up what was accepted with Sum to check what it
// published against what arrived (SumExact to check how it was grouped:
// Sum's GroupKey leaves out some of the key's fields). It imports no part of package stats, so
// the stats package's own tests use it too.
package statstest
