// This file holds Agent, the fake Datadog agent: its HTTP endpoints, the
// requests it records and decodes, the failures it is told to answer with,
// and the sums tests read.

package statstest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/writer"
)

// Request is one received stats request.
type Request struct {
	Header  http.Header
	Body    []byte
	Payload *writer.Payload // nil when the body did not decode
	Err     error           // the decode error, if any
	Status  int             // the status the agent answered; 0: none (a handler hijacked the connection)
}

// Agent is a running fake agent.
type Agent struct {
	srv *httptest.Server
	url string // URL's answer

	mu       sync.Mutex
	requests []Request
	seq      int           // stats requests numbered so far (SetHandler's n)
	notify   chan struct{} // coalesced, for Notify
	changed  chan struct{} // closed and replaced at each recorded request
	maxBody  int64         // the body limit (SetMaxRequestBytes)
	// handler, when set, answers a stats request instead of the default
	// 200. Tests use it to misbehave.
	handler func(w http.ResponseWriter, r *http.Request, n int) bool
	info    map[string]any
	// failN requests from now on are answered failStatus (FailNext).
	failN, failStatus int
}

// New starts a fake agent on a loopback TCP port.
func New() *Agent {
	a := newAgent()
	a.srv = httptest.NewServer(a.mux())
	a.url = a.srv.URL
	return a
}

// NewUnix starts a fake agent listening on the Unix socket at path.
func NewUnix(path string) (*Agent, error) {
	// Made absolute now: a relative path names the socket from the current
	// directory, which may change before the URL is used.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// The kernel's bare "invalid argument" says nothing of the length.
	if err := dgram.CheckUnixPath(abs); err != nil {
		return nil, fmt.Errorf("statstest: %w", err)
	}
	l, err := net.Listen("unix", abs)
	if err != nil {
		return nil, err
	}
	a := newAgent()
	a.srv = httptest.NewUnstartedServer(a.mux())
	a.srv.Listener = l
	a.srv.Start()
	// httptest's URL is "http://" and the socket path, which reaches
	// nothing: the agent URL of a socket is unix:///path, escaped.
	a.url = (&url.URL{Scheme: "unix", Path: abs}).String()
	return a, nil
}

// DefaultMaxRequestBytes is the agent's default body limit
// (max_request_bytes), which the fake agent applies as the agent does.
const DefaultMaxRequestBytes = 25 << 20

func newAgent() *Agent {
	return &Agent{
		notify:  make(chan struct{}, 1),
		changed: make(chan struct{}),
		maxBody: DefaultMaxRequestBytes,
		// Shaped as a default agent's (v0.85.4): /info is not among its
		// endpoints, and its peer_tags list decides which peer tags the
		// SDK keeps, as in production.
		info: map[string]any{
			"version":         "7.99.0-fake",
			"endpoints":       []string{"/v0.3/traces", "/v0.4/traces", "/v0.5/traces", "/v0.7/traces", "/v0.6/stats"},
			"client_drop_p0s": true,
			"peer_tags":       slices.Clone(agentclient.DefaultPeerTags),
			"config":          map[string]any{"max_request_bytes": DefaultMaxRequestBytes},
		},
	}
}

func (a *Agent) mux() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v0.6/stats", a.serveStats)
	m.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		b, _ := json.Marshal(a.info)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	return m
}

// ErrReadLimit is the Err of a request whose body was over the limit.
var ErrReadLimit = errors.New("read limit reached")

func (a *Agent) serveStats(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	limit := a.maxBody
	a.mu.Unlock()
	// One byte past the limit tells an over-limit body; MaxInt64 has none.
	body, err := io.ReadAll(io.LimitReader(r.Body, min(limit, math.MaxInt64-1)+1))
	if err != nil {
		a.record(Request{Header: r.Header.Clone(), Err: err, Status: http.StatusBadRequest})
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if int64(len(body)) > limit {
		// As the agent (v0.85.4) answers it: its decoder wraps the limited
		// reader's error, so the status is 400, not 413. The body is not
		// kept.
		a.record(Request{Header: r.Header.Clone(), Err: ErrReadLimit, Status: http.StatusBadRequest})
		http.Error(w, fmt.Sprintf("%v at Stats (statstest: body over max_request_bytes %d)", ErrReadLimit, limit),
			http.StatusBadRequest)
		return
	}
	req := Request{Header: r.Header.Clone(), Body: body}
	req.Payload, req.Err = writer.DecodePayloadAsAgent(body)
	a.mu.Lock()
	h := a.handler
	fail, n := 0, 0
	if a.failN > 0 {
		a.failN--
		fail = a.failStatus
	} else {
		a.seq++ // FailNext's answers are not counted in n
		n = a.seq
	}
	a.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body)) // read above: the handler may read it again
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	switch {
	case fail != 0:
		http.Error(sw, "statstest: failing on purpose", fail)
	case h != nil && h(sw, r, n):
	case sw.hijacked: // the handler took the connection, whatever it returned
	case sw.wrote: // the handler answered, whatever it returned
	case req.Err != nil:
		http.Error(sw, fmt.Sprintf("decode: %v", req.Err), http.StatusBadRequest)
	default:
		sw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(sw, "OK\n")
	}
	req.Status = sw.status
	a.record(req)
}

// record keeps req and wakes the waiters.
func (a *Agent) record(req Request) {
	a.mu.Lock()
	a.requests = append(a.requests, req)
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// statusWriter remembers the status a handler answered: the first one,
// which is what the client gets. It passes on Flush and Hijack (a handler
// that resets the connection: recorded with Status 0), and Unwrap for
// http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool // a status line went out (WriteHeader or Write)
	hijacked bool
}

// WriteHeader records code and passes it on, unless an answer went out
// already (net/http would only log the superfluous call).
func (w *statusWriter) WriteHeader(code int) {
	if w.hijacked || w.wrote {
		return
	}
	if code >= 200 { // 1xx are informational: the answer is still to come
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes body bytes; the first one sends 200 if no status went out.
func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.hijacked && !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes what the handler wrote; with nothing written, it sends 200.
func (w *statusWriter) Flush() {
	if !w.hijacked && !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes the connection over; the request is then recorded with
// Status 0, no answer.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.status, w.hijacked = 0, true
	}
	return c, rw, err
}

// Unwrap is the writer net/http gave.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// URL is the agent's URL, for Config.AgentURL: "http://127.0.0.1:port",
// or "unix:///path/to/socket" for an agent started with NewUnix.
func (a *Agent) URL() string { return a.url }

// SetHandler installs h; it sees each stats request (n counts them from 1),
// its body readable, and returns true if it wrote the answer (an answer it
// began to write, a status or body bytes, counts as written whatever it
// returns). The request is recorded once h returns, with the first status
// h answered, the one the client got. Requests FailNext answers, and those
// over the body limit or whose body could not be read (answered 400
// first, as the agent does), are recorded without reaching h, nor being
// counted in n.
func (a *Agent) SetHandler(h func(w http.ResponseWriter, r *http.Request, n int) bool) {
	a.mu.Lock()
	a.handler = h
	a.mu.Unlock()
}

// FailNext answers the next n stats requests with status (e.g. 503, which
// the SDK retries, or 400, which it drops). The requests are recorded with
// that status; Sum skips them. It panics on a status that is not an error
// (outside 400–599), as net/http's WriteHeader panics on an invalid code:
// such a call is a mistake in the test.
func (a *Agent) FailNext(n, status int) {
	if status < 400 || status > 599 {
		panic(fmt.Sprintf("statstest: FailNext(%d, %d): status is not an error status (400-599)", n, status))
	}
	a.mu.Lock()
	a.failN, a.failStatus = n, status
	a.mu.Unlock()
}

// SetMaxRequestBytes sets the body limit (DefaultMaxRequestBytes at
// first): a larger body is answered 400 "read limit reached", as the agent
// answers it, recorded with Err ErrReadLimit and no Body. The limit is
// also written into the /info document's config.max_request_bytes (the
// document SetInfo set, if any; its other keys are kept).
func (a *Agent) SetMaxRequestBytes(n int64) {
	a.mu.Lock()
	a.maxBody = n
	// Cloned, not written in place: the maps may be the caller's (SetInfo).
	info := maps.Clone(a.info)
	if info == nil {
		info = map[string]any{} // after SetInfo(nil)
	}
	config, _ := info["config"].(map[string]any)
	config = maps.Clone(config)
	if config == nil {
		config = map[string]any{}
	}
	config["max_request_bytes"] = n
	info["config"] = config
	a.info = info
	a.mu.Unlock()
}

// SetInfo replaces the JSON document served at GET /info. The map is kept,
// not copied, and marshalled at each request: do not change it afterwards
// (SetMaxRequestBytes does not: it writes a copy).
func (a *Agent) SetInfo(info map[string]any) {
	a.mu.Lock()
	a.info = info
	a.mu.Unlock()
}

// Requests returns a copy of the list of every stats request received so
// far; the Requests in it share their Header, Body and Payload with the
// agent's and with other callers': read them, do not change them.
func (a *Agent) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.requests...)
}

// Notify receives (coalesced) after each stats request: one reader at a
// time; WaitHits serves any number of waiters.
func (a *Agent) Notify() <-chan struct{} { return a.notify }

// WaitHits waits until the accepted requests hold at least n spans (hits)
// in total, and returns that total, or ctx's error with the total so far.
func (a *Agent) WaitHits(ctx context.Context, n uint64) (uint64, error) {
	for {
		a.mu.Lock()
		changed := a.changed
		a.mu.Unlock()
		if _, hits := Sum(a.Requests()); hits >= n {
			return hits, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			_, hits := Sum(a.Requests())
			return hits, ctx.Err()
		}
	}
}

// Close stops the server and closes its connections, also those of
// requests in flight: a client stalled in the middle of a body does not
// hold it up. It waits for the handlers in flight, except one that took
// its connection over (http.Hijacker): net/http no longer tracks that one,
// which records its request when it returns.
func (a *Agent) Close() {
	a.srv.Listener.Close() // no connection from here on: none can stall Close
	a.srv.CloseClientConnections()
	a.srv.Close()
}

// GroupKey is the part of a group's key that Sum adds up by. It leaves
// out HTTPMethod, HTTPEndpoint, GRPCStatusCode, ServiceSource, Synthetics,
// IsTraceRoot and the peer tags, so groups the SDK keeps apart by those
// are added together here; SumExact tells them apart.
type GroupKey struct {
	Service, Name, Resource, Type, SpanKind string
	HTTPStatusCode                          uint32
}

// ExactKey is a group's whole key, every field the SDK and the relay
// (cmd/statsrelay) tell groups apart by: GroupKey and the label fields it
// leaves out, the peer tags as a set (PeerTags is their PeerTagsKey), and
// the fields the SDK leaves empty but a relay forwards from other tracers
// (DBType, and the two tag lists as sets, each spelled by PeerTagsKey too).
// It is stricter than the agent's own aggregation key (v0.85.4's
// BucketsAggregationKey), which leaves out DBType and
// SpanDerivedPrimaryTags and sorts the tag lists without removing
// duplicates: groups ExactKey keeps apart the agent may add together.
type ExactKey struct {
	GroupKey
	HTTPMethod, HTTPEndpoint, GRPCStatusCode, ServiceSource string
	Synthetics                                              bool
	IsTraceRoot                                             aggregate.Trilean
	PeerTags                                                string
	DBType                                                  string
	SpanDerivedPrimaryTags, AdditionalMetricTags            string
}

// PeerTagsKey is ExactKey.PeerTags for a group's peer tags ("key:value"):
// sorted, duplicates removed, each quoted (a value may hold a comma) and
// joined with commas, so that one set has one key in whatever order its
// tags arrive, and two sets never share one.
func PeerTagsKey(tags ...string) string {
	tags = slices.Clone(tags)
	slices.Sort(tags)
	tags = slices.Compact(tags)
	for i, t := range tags {
		tags[i] = strconv.Quote(t)
	}
	return strings.Join(tags, ",")
}

// Totals are the summed values of the groups with one GroupKey.
type Totals struct {
	Hits, Errors, TopLevelHits, Duration uint64
	OkCount, ErrCount                    uint64 // values in the decoded sketches
}

// Accepted returns the requests answered 200.
func Accepted(reqs []Request) []Request {
	var ok []Request
	for _, r := range reqs {
		if r.Status == http.StatusOK {
			ok = append(ok, r)
		}
	}
	return ok
}

// Sum adds up every decoded group of every request answered 200 by
// GroupKey, and the grand total of hits. Groups that differ only in a field
// GroupKey leaves out are added together: use SumExact to check how spans
// were grouped by those.
func Sum(reqs []Request) (map[GroupKey]*Totals, uint64) {
	return sum(reqs, func(g *writer.Group) GroupKey { return groupKey(g) })
}

// SumExact is Sum by each group's whole key (ExactKey).
func SumExact(reqs []Request) (map[ExactKey]*Totals, uint64) {
	return sum(reqs, func(g *writer.Group) ExactKey {
		return ExactKey{
			GroupKey:   groupKey(g),
			HTTPMethod: g.HTTPMethod, HTTPEndpoint: g.HTTPEndpoint,
			GRPCStatusCode: g.GRPCStatusCode, ServiceSource: g.ServiceSource,
			Synthetics: g.Synthetics, IsTraceRoot: g.IsTraceRoot,
			PeerTags:               PeerTagsKey(g.PeerTags...),
			DBType:                 g.DBType,
			SpanDerivedPrimaryTags: PeerTagsKey(g.SpanDerivedPrimaryTags...),
			AdditionalMetricTags:   PeerTagsKey(g.AdditionalMetricTags...),
		}
	})
}

func groupKey(g *writer.Group) GroupKey {
	return GroupKey{g.Service, g.Name, g.Resource, g.Type, g.SpanKind, g.HTTPStatusCode}
}

// sum adds up the decoded groups of the requests answered 200 by key.
func sum[K comparable](reqs []Request, key func(*writer.Group) K) (map[K]*Totals, uint64) {
	m := map[K]*Totals{}
	var hits uint64
	for _, r := range reqs {
		if r.Payload == nil || r.Status != http.StatusOK {
			continue
		}
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				g := &b.Groups[i]
				k := key(g)
				t := m[k]
				if t == nil {
					t = &Totals{}
					m[k] = t
				}
				t.Hits += g.Hits
				t.Errors += g.Errors
				t.TopLevelHits += g.TopLevelHits
				t.Duration += g.Duration
				if g.Ok != nil {
					t.OkCount += g.Ok.Count()
				}
				if g.Err != nil {
					t.ErrCount += g.Err.Count()
				}
				hits += g.Hits
			}
		}
	}
	return m, hits
}
