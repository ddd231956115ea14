// Package testagent is a fake Datadog agent on loopback: it accepts
// POST /v0.6/stats, decodes every payload with package writer and keeps it,
// and answers GET /info. Tests and cmd/statsgen use it so that the whole
// pipeline runs without a real agent.
//
// Concurrency: every method is safe for concurrent use.
//
// Design: an httptest server (TCP on 127.0.0.1, or a Unix socket with
// NewUnix) whose handlers record every stats request — headers, body, the
// decoded payload or the decode error, and the status answered — under one
// mutex. A test can replace the answer (SetHandler: fail the n-th request,
// hang, answer 413) and the /info document (SetInfo), wait for requests on
// Notify, and add up what arrived with Accepted and Sum to check
// conservation against what it published.
package testagent
