// This file tests the fake agent: what it records and answers, its handler
// and failure hooks, its limits, Sum and SumExact, and Close.

package statstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"
	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/writer"
)

// The agent runs an HTTP server; every one must be gone when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// payload encodes one bucket holding the entries of spans (a table per call).
func payload(t *testing.T, spans ...aggregate.Record) []byte {
	t.Helper()
	tb := aggregate.NewTable(0)
	for i := range spans {
		tb.Add(&spans[i])
	}
	h := &writer.Header{Hostname: "h", Env: "test", Version: "1", Lang: "go", TracerVersion: "t/1"}
	return writer.AppendPayload(nil, h, []writer.Bucket{{Start: 10e9, Duration: 10e9, Groups: tb.Touched(nil)}})
}

func post(t *testing.T, c *http.Client, url string, body []byte) int {
	t.Helper()
	resp, err := c.Post(url+"/v0.6/stats", "application/msgpack", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestStatsAndSum: a decodable payload is answered 200 and recorded decoded,
// a body that does not decode is answered 400 with its error, a Notify
// follows each, and Accepted and Sum count only what was answered 200.
func TestStatsAndSum(t *testing.T) {
	a := New()
	defer a.Close()
	web := aggregate.Record{Service: "web", Name: "http.request", Resource: "GET /", Type: "web", SpanKind: "server",
		HTTPStatusCode: 200, TopLevel: true, Duration: 1000}
	webErr := web
	webErr.Error, webErr.Duration = true, 3000
	db := aggregate.Record{Service: "web", Name: "pg.query", Resource: "SELECT 1", SpanKind: "client", Duration: 500}

	c := &http.Client{Timeout: 10 * time.Second}
	if got := post(t, c, a.URL(), payload(t, web, webErr, db)); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	select {
	case <-a.Notify():
	case <-time.After(10 * time.Second):
		t.Fatal("no Notify after a request")
	}
	if got := post(t, c, a.URL(), []byte{0xc1}); got != http.StatusBadRequest { // 0xc1: never used in msgpack
		t.Fatalf("status %d for garbage, want 400", got)
	}
	if got := post(t, c, a.URL(), payload(t, web)); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}

	reqs := a.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests recorded, want 3", len(reqs))
	}
	if r := reqs[1]; r.Payload != nil || r.Err == nil || r.Status != http.StatusBadRequest || !bytes.Equal(r.Body, []byte{0xc1}) {
		t.Fatalf("garbage recorded as %+v, want its body, a decode error and 400", r)
	}
	if r := reqs[0]; r.Payload == nil || r.Payload.Env != "test" || r.Header.Get("Content-Type") != "application/msgpack" {
		t.Fatalf("first request recorded as %+v", r)
	}
	if n := len(Accepted(reqs)); n != 2 {
		t.Fatalf("Accepted: %d, want 2", n)
	}
	m, hits := Sum(reqs)
	if hits != 4 || len(m) != 2 {
		t.Fatalf("Sum: %d hits in %d groups, want 4 in 2", hits, len(m))
	}
	w := m[GroupKey{"web", "http.request", "GET /", "web", "server", 200}]
	if w == nil || *w != (Totals{Hits: 3, Errors: 1, TopLevelHits: 3, Duration: 5000, OkCount: 2, ErrCount: 1}) {
		t.Fatalf("web group totals %+v", w)
	}
	d := m[GroupKey{"web", "pg.query", "SELECT 1", "", "client", 0}]
	if d == nil || *d != (Totals{Hits: 1, Duration: 500, OkCount: 1}) {
		t.Fatalf("db group totals %+v", d)
	}
}

// TestSetHandlerAndInfo: a handler answers in the agent's place (its status
// is recorded and Sum skips what it refused), and SetInfo replaces /info.
func TestSetHandlerAndInfo(t *testing.T) {
	a := New()
	defer a.Close()
	a.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	c := &http.Client{Timeout: 10 * time.Second}
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	if got := post(t, c, a.URL(), body); got != http.StatusServiceUnavailable {
		t.Fatalf("first status %d, want 503", got)
	}
	if got := post(t, c, a.URL(), body); got != http.StatusOK {
		t.Fatalf("second status %d, want 200", got)
	}
	reqs := a.Requests()
	if len(reqs) != 2 || reqs[0].Status != http.StatusServiceUnavailable || reqs[0].Payload == nil {
		t.Fatalf("requests %+v: want the refused one recorded, decoded, with 503", reqs)
	}
	if _, hits := Sum(reqs); hits != 1 {
		t.Fatalf("Sum counted %d hits, want 1 (the 503 skipped)", hits)
	}

	info := func() map[string]any {
		resp, err := c.Get(a.URL() + "/info")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// A default agent's: stats among the endpoints, /info not; its
	// peer_tags list, and client_drop_p0s.
	m := info()
	eps, _ := m["endpoints"].([]any)
	peers, _ := m["peer_tags"].([]any)
	if !slices.Contains(eps, any("/v0.6/stats")) || slices.Contains(eps, any("/info")) ||
		len(peers) != len(agentclient.DefaultPeerTags) || peers[0] != "_dd.base_service" || m["client_drop_p0s"] != true {
		t.Fatalf("default /info %v", m)
	}
	a.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}, "peer_tags": []string{"db.system"}})
	if m := info(); len(m["endpoints"].([]any)) != 1 || m["peer_tags"].([]any)[0] != "db.system" {
		t.Fatalf("/info after SetInfo: %v", m)
	}
}

// TestUnixPathTooLong: a socket path longer than a Unix socket path holds
// is refused naming the path and the limit, not with the kernel's bare
// "invalid argument"; a relative path is measured as the absolute one it
// is bound at.
func TestUnixPathTooLong(t *testing.T) {
	dir := sockdir.Dir(t)
	t.Chdir(dir)
	rel := strings.Repeat("s", sockdir.MaxPath-len(dir)) // fits; absolute, it does not
	for _, path := range []string{filepath.Join(dir, rel), rel} {
		a, err := NewUnix(path)
		if err == nil {
			a.Close()
			t.Fatalf("NewUnix(%q) succeeded", path)
		}
		if want := fmt.Sprintf("%q is %d bytes; a Unix socket path holds at most %d", filepath.Join(dir, rel), len(dir)+1+len(rel), sockdir.MaxPath); !strings.Contains(err.Error(), want) {
			t.Errorf("NewUnix(%q) = %v, want it to say %s", path, err, want)
		}
	}
}

// TestUnix: NewUnix serves the same API on a Unix socket.
func TestUnix(t *testing.T) {
	path := sockdir.Path(t, "apm.socket")
	a, err := NewUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	if got := post(t, c, "http://apm", body); got != http.StatusOK {
		t.Fatalf("status %d over the Unix socket, want 200", got)
	}
	if _, hits := Sum(a.Requests()); hits != 1 {
		t.Fatalf("%d hits over the Unix socket, want 1", hits)
	}
	if _, err := NewUnix(path); err == nil {
		t.Fatal("a second NewUnix on a path in use succeeded")
	}
}

// TestFailNextAndWaitHits: FailNext answers exactly the next n requests
// with its status, then the agent accepts again; WaitHits returns once the
// accepted hits reach its target and reports the context's end otherwise.
func TestFailNextAndWaitHits(t *testing.T) {
	a := New()
	defer a.Close()
	a.FailNext(2, http.StatusBadRequest)
	c := &http.Client{Timeout: 10 * time.Second}
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	for i, want := range []int{400, 400, 200, 200} {
		if got := post(t, c, a.URL(), body); got != want {
			t.Fatalf("request %d: status %d, want %d", i+1, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hits, err := a.WaitHits(ctx, 2); err != nil || hits != 2 {
		t.Fatalf("WaitHits(2) = %d, %v; want 2, nil", hits, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if hits, err := a.WaitHits(short, 3); err != context.DeadlineExceeded || hits != 2 {
		t.Fatalf("WaitHits(3) = %d, %v; want 2, DeadlineExceeded", hits, err)
	}
}

// TestReadLimit: a body over the limit is answered 400 "read limit
// reached…", as the agent answers it, and recorded without its body; one
// at the limit is taken; /info gives the limit.
func TestReadLimit(t *testing.T) {
	a := New()
	defer a.Close()
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	a.SetMaxRequestBytes(int64(len(body)))
	c := &http.Client{Timeout: 10 * time.Second}
	big := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "rr", SpanKind: "server", Duration: 7})
	resp, err := c.Post(a.URL()+"/v0.6/stats", "application/msgpack", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !bytes.HasPrefix(msg, []byte("read limit reached")) {
		t.Fatalf("over the limit: %d %q; want 400 read limit reached", resp.StatusCode, msg)
	}
	if got := post(t, c, a.URL(), body); got != http.StatusOK {
		t.Fatalf("at the limit: %d, want 200", got)
	}
	reqs := a.Requests()
	if len(reqs) != 2 || reqs[0].Err != ErrReadLimit || reqs[0].Body != nil || reqs[0].Status != 400 || reqs[1].Status != 200 {
		t.Fatalf("recorded %+v", reqs)
	}
	resp, err = c.Get(a.URL() + "/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Config struct {
			MaxRequestBytes int64 `json:"max_request_bytes"`
		} `json:"config"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.Config.MaxRequestBytes != int64(len(body)) {
		t.Fatalf("/info config.max_request_bytes %d (%v), want %d", info.Config.MaxRequestBytes, err, len(body))
	}
}

// TestConcurrentRequestsAndWaiters: requests in flight together get
// distinct numbers, and every WaitHits waiter wakes on the request that
// completes its count.
func TestConcurrentRequestsAndWaiters(t *testing.T) {
	a := New()
	defer a.Close()
	const n = 8
	release := make(chan struct{})
	seen := make(chan int, n)
	a.SetHandler(func(_ http.ResponseWriter, _ *http.Request, i int) bool {
		seen <- i
		<-release // every request is in the handler before any returns
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waited := make(chan error, 3)
	for range 3 {
		go func() { _, err := a.WaitHits(ctx, n); waited <- err }()
	}
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	c := &http.Client{Timeout: 10 * time.Second}
	posted := make(chan error, n) // t.Fatal belongs to the test's goroutine
	for range n {
		go func() {
			resp, err := c.Post(a.URL()+"/v0.6/stats", "application/msgpack", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			posted <- err
		}()
	}
	nums := map[int]bool{}
	for range n {
		select {
		case i := <-seen:
			nums[i] = true
		case err := <-posted: // a request that failed before the handler
			close(release)
			t.Fatalf("a request failed: %v", err)
		}
	}
	close(release)
	for range n {
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
	}
	if len(nums) != n {
		t.Fatalf("%d requests in flight together got %d distinct numbers: %v", n, len(nums), nums)
	}
	for range 3 {
		if err := <-waited; err != nil {
			t.Fatalf("a waiter missed the wake-up: %v", err)
		}
	}
	c.CloseIdleConnections()
}

// TestCloseWithStalledClient: Close returns although a client stopped in
// the middle of a body.
func TestCloseWithStalledClient(t *testing.T) {
	a := New()
	conn, err := net.Dial("tcp", a.URL()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /v0.6/stats HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	time.Sleep(200 * time.Millisecond) // the headers are read: the connection is active, the handler reads the body
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a stalled client")
	}
}

// TestSumExact: Sum adds up groups that share a GroupKey but that the SDK
// and the agent keep apart (here by HTTP method, endpoint, gRPC code,
// service source, synthetics, trace root and peer tags); SumExact keeps
// them apart, and takes peer tags as a set, in any order, as the SDK and
// the relay do (the agent sorts them but keeps duplicates).
func TestSumExact(t *testing.T) {
	a := New()
	defer a.Close()
	base := aggregate.Record{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "client", Duration: 1000}
	variants := []aggregate.Record{base}
	for _, set := range []func(*aggregate.Record){
		func(r *aggregate.Record) { r.HTTPMethod = "GET" },
		func(r *aggregate.Record) { r.HTTPEndpoint = "/users/{id}" },
		func(r *aggregate.Record) { r.GRPCStatusCode = "2" },
		func(r *aggregate.Record) { r.ServiceSource = "opt.split" },
		func(r *aggregate.Record) { r.Synthetics = true },
		func(r *aggregate.Record) { r.TraceRoot = true },
		func(r *aggregate.Record) { r.SetPeerTags([]string{"peer.service:db", "db.instance:a"}) },
	} {
		r := base
		set(&r)
		variants = append(variants, r)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	if got := post(t, c, a.URL(), payload(t, variants...)); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	// The same peer tags in the other order: the same group.
	tb := aggregate.NewTable(0)
	tb.Add(&variants[len(variants)-1])
	groups := tb.Touched(nil)
	groups[0].PeerTags = []string{"peer.service:db", "db.instance:a"}
	h := &writer.Header{Env: "test", Lang: "go"}
	if got := post(t, c, a.URL(), writer.AppendPayload(nil, h, []writer.Bucket{{Start: 10e9, Duration: 10e9, Groups: groups}})); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}

	coarse, hits := Sum(a.Requests())
	if hits != 9 || len(coarse) != 1 {
		t.Fatalf("Sum: %d hits in %d groups, want 9 in 1 (GroupKey leaves these fields out)", hits, len(coarse))
	}
	exact, hits := SumExact(a.Requests())
	if hits != 9 || len(exact) != len(variants) {
		t.Fatalf("SumExact: %d hits in %d groups, want 9 in %d: %v", hits, len(exact), len(variants), exact)
	}
	gk := GroupKey{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "client"}
	for _, k := range []ExactKey{
		{GroupKey: gk, IsTraceRoot: aggregate.False},
		{GroupKey: gk, IsTraceRoot: aggregate.False, HTTPMethod: "GET"},
		{GroupKey: gk, IsTraceRoot: aggregate.True},
		{GroupKey: gk, IsTraceRoot: aggregate.False, Synthetics: true},
	} {
		if g := exact[k]; g == nil || g.Hits != 1 {
			t.Errorf("SumExact[%+v] = %+v, want 1 hit", k, g)
		}
	}
	pk := ExactKey{GroupKey: gk, IsTraceRoot: aggregate.False, PeerTags: PeerTagsKey("peer.service:db", "db.instance:a", "db.instance:a")}
	if g := exact[pk]; g == nil || g.Hits != 2 {
		t.Errorf("SumExact[%+v] = %+v, want 2 hits: one group in either order", pk, g)
	}
}

// TestSetMaxRequestBytesAfterSetInfo: the body limit goes into whatever
// document SetInfo set, nil included, and keeps its other config keys.
func TestSetMaxRequestBytesAfterSetInfo(t *testing.T) {
	a := New()
	defer a.Close()
	a.SetInfo(nil)
	a.SetMaxRequestBytes(1000)
	if got := getInfo(t, a); fmt.Sprint(got["config"]) != "map[max_request_bytes:1000]" {
		t.Fatalf("/info after SetInfo(nil), SetMaxRequestBytes(1000): %v", got)
	}
	a.SetInfo(map[string]any{"config": map[string]any{"statsd_port": 8125}})
	a.SetMaxRequestBytes(2000)
	if got := getInfo(t, a); fmt.Sprint(got["config"]) != "map[max_request_bytes:2000 statsd_port:8125]" {
		t.Fatalf("/info config after SetMaxRequestBytes(2000): %v, want statsd_port kept", got["config"])
	}
}

func getInfo(t *testing.T, a *Agent) map[string]any {
	t.Helper()
	resp, err := http.Get(a.URL() + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHandlerReadsBody: a handler sees the request's body, not the empty
// reader the agent left after it read and decoded the body.
func TestHandlerReadsBody(t *testing.T) {
	a := New()
	defer a.Close()
	body := payload(t, aggregate.Record{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1})
	got := make(chan []byte, 1)
	a.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		b, _ := io.ReadAll(r.Body)
		got <- b
		return false
	})
	if status := post(t, &http.Client{Timeout: 10 * time.Second}, a.URL(), body); status != http.StatusOK {
		t.Fatalf("status %d, want 200", status)
	}
	if b := <-got; !bytes.Equal(b, body) {
		t.Fatalf("the handler read %d bytes, want the %d of the body", len(b), len(body))
	}
}

// TestWriteTopBadInput: WriteTop prints what it can of a request with no
// payload or a negative count, rather than panic.
func TestWriteTopBadInput(t *testing.T) {
	body := payload(t, aggregate.Record{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1})
	p, err := writer.DecodePayload(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    Request
		top  int
		want string
	}{
		{Request{Payload: p, Body: body, Status: http.StatusOK}, -1, "1 groups  1 hits"},
		{Request{}, 3, "no decoded payload"},
	} {
		var out bytes.Buffer
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("WriteTop(top %d): panic %v", tc.top, p)
				}
			}()
			WriteTop(&out, tc.r, tc.top)
		}()
		if !bytes.Contains(out.Bytes(), []byte(tc.want)) {
			t.Errorf("WriteTop(top %d) printed %q, want it to contain %q", tc.top, out.String(), tc.want)
		}
	}
}

// TestSumExactWholeKey: SumExact keeps apart groups that differ only in a
// key field the SDK leaves empty but a relay forwards and keeps apart
// (DBType, SpanDerivedPrimaryTags, AdditionalMetricTags; the agent
// v0.85.4 groups by the last only), and
// peer-tag sets that a plain comma join would spell alike.
func TestSumExactWholeKey(t *testing.T) {
	a := New()
	defer a.Close()
	var groups []writer.Group
	for _, set := range []func(g *writer.Group){
		func(*writer.Group) {},
		func(g *writer.Group) { g.DBType = "postgresql" },
		func(g *writer.Group) { g.SpanDerivedPrimaryTags = []string{"region:eu"} },
		func(g *writer.Group) { g.AdditionalMetricTags = []string{"team:a"} },
		func(g *writer.Group) { g.PeerTags = []string{"db.instance:b,peer.service:a"} },
		func(g *writer.Group) { g.PeerTags = []string{"db.instance:b", "peer.service:a"} },
	} {
		g := writer.Group{}
		g.Service, g.Name, g.Resource, g.SpanKind, g.Hits, g.Duration = "web", "op", "r", "client", 1, 10
		set(&g)
		groups = append(groups, g)
	}
	pl := writer.Payload{Header: writer.Header{Env: "test", Lang: "go"},
		Buckets: []writer.DecodedBucket{{Start: 10e9, Duration: 10e9, Groups: groups}}}
	c := &http.Client{Timeout: 10 * time.Second}
	if got := post(t, c, a.URL(), pl.Append(nil)); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	exact, hits := SumExact(a.Requests())
	if hits != uint64(len(groups)) || len(exact) != len(groups) {
		t.Fatalf("SumExact: %d hits in %d groups, want %d in %d: %v", hits, len(exact), len(groups), len(groups), exact)
	}
	if PeerTagsKey("db.instance:b,peer.service:a") == PeerTagsKey("db.instance:b", "peer.service:a") {
		t.Fatal("PeerTagsKey spells one tag holding a comma as the two tags around it")
	}
}

// TestQuantileOfTheLongestSpans: a quantile past what a Duration holds
// (spans of math.MaxInt64 ns, whose sketch bin reads above it) prints as
// a bound, not as a negative duration.
func TestQuantileOfTheLongestSpans(t *testing.T) {
	var s aggregate.Sketch
	s.Add(float64(math.MaxInt64))
	if got := quantile(&s, 0.5); !strings.HasPrefix(got, ">2562047h") {
		t.Fatalf("quantile of MaxInt64 ns = %q", got)
	}
	s = aggregate.Sketch{}
	s.Add(float64(3 * time.Millisecond))
	if got := quantile(&s, 0.5); got != "2.989ms" { // the bin's value, within 1 %
		t.Fatalf("quantile of 3 ms = %q", got)
	}
}

// TestFailNextNotCountedInN: requests FailNext answers are not counted
// in a handler's n: the first request reaching it after FailNext(1, …)
// sees n == 1.
func TestFailNextNotCountedInN(t *testing.T) {
	a := New()
	defer a.Close()
	got := make(chan int, 4)
	a.SetHandler(func(_ http.ResponseWriter, _ *http.Request, n int) bool {
		got <- n
		return false
	})
	a.FailNext(1, http.StatusServiceUnavailable)
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	c := &http.Client{Timeout: 10 * time.Second}
	if s := post(t, c, a.URL(), body); s != http.StatusServiceUnavailable {
		t.Fatalf("first request: status %d, want 503 from FailNext", s)
	}
	if s := post(t, c, a.URL(), body); s != http.StatusOK {
		t.Fatalf("second request: status %d", s)
	}
	if n := <-got; n != 1 {
		t.Fatalf("the first request reaching the handler has n=%d; SetHandler documents that FailNext's requests are not counted in n, want 1", n)
	}
}

// TestHandlerCanFlushAndHijack: a handler's ResponseWriter flushes and
// hijacks, directly and through http.ResponseController; a handler that
// resets the connection leaves the client an error and a request recorded
// with Status 0, which Sum leaves out.
func TestHandlerCanFlushAndHijack(t *testing.T) {
	a := New()
	defer a.Close()
	type caps struct{ hijack, flush, rcFlush bool }
	got := make(chan caps, 1)
	a.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			_, h := w.(http.Hijacker)
			_, f := w.(http.Flusher)
			got <- caps{h, f, http.NewResponseController(w).Flush() == nil}
			return false
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return false
		}
		c.Close()     // a reset, as the agent restarting
		return n == 2 // the third says it wrote no answer: it wrote none either
	})
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	c := &http.Client{Timeout: 10 * time.Second}
	if s := post(t, c, a.URL(), body); s != http.StatusOK {
		t.Fatalf("first request: status %d", s)
	}
	if c := <-got; !c.hijack || !c.flush || !c.rcFlush {
		t.Fatalf("handler's ResponseWriter: Hijacker %v, Flusher %v, ResponseController.Flush ok %v; want all true", c.hijack, c.flush, c.rcFlush)
	}
	for i := 2; i <= 3; i++ {
		if resp, err := c.Post(a.URL()+"/v0.6/stats", "application/msgpack", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
			t.Fatalf("request %d answered %d; want the connection reset", i, resp.StatusCode)
		}
	}
	// The client sees the reset before the handler returns and the
	// request is recorded.
	reqs := a.Requests()
	for deadline := time.Now().Add(5 * time.Second); len(reqs) < 3 && time.Now().Before(deadline); reqs = a.Requests() {
		time.Sleep(time.Millisecond)
	}
	if len(reqs) != 3 || reqs[0].Status != http.StatusOK || reqs[1].Status != 0 || reqs[2].Status != 0 {
		t.Fatalf("recorded %d requests %+v; want 200, 0, 0", len(reqs), reqs)
	}
	if _, hits := Sum(reqs); hits != 1 {
		t.Fatalf("Sum counts %d hits; want the first request's 1", hits)
	}
}

// TestNilRefusedAsAgent: a payload whose Stats array, or a group's
// PeerTags or OkSummary, is msgpack nil is answered 400, as the agent
// (v0.85.4) answers it, and Sum leaves it out (bench/peer's
// TestNilRefusedLikeAgent checks the agent's decoder).
func TestNilRefusedAsAgent(t *testing.T) {
	a := New()
	defer a.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	top := msgp.AppendMapHeader(nil, 2)
	top = msgp.AppendString(top, "Hostname")
	top = msgp.AppendString(top, "h")
	top = msgp.AppendString(top, "Stats")
	top = msgp.AppendNil(top)
	// One bucket, one group with Hits 1, PeerTags nil and OkSummary nil.
	g := msgp.AppendMapHeader(nil, 6)
	g = msgp.AppendString(g, "Service")
	g = msgp.AppendString(g, "s")
	g = msgp.AppendString(g, "Name")
	g = msgp.AppendString(g, "n")
	g = msgp.AppendString(g, "Resource")
	g = msgp.AppendString(g, "r")
	g = msgp.AppendString(g, "Hits")
	g = msgp.AppendUint64(g, 1)
	g = msgp.AppendString(g, "PeerTags")
	g = msgp.AppendNil(g)
	g = msgp.AppendString(g, "OkSummary")
	g = msgp.AppendNil(g)
	grp := msgp.AppendMapHeader(nil, 2)
	grp = msgp.AppendString(grp, "Hostname")
	grp = msgp.AppendString(grp, "h")
	grp = msgp.AppendString(grp, "Stats")
	grp = msgp.AppendArrayHeader(grp, 1)
	grp = msgp.AppendMapHeader(grp, 3)
	grp = msgp.AppendString(grp, "Start")
	grp = msgp.AppendUint64(grp, 10e9)
	grp = msgp.AppendString(grp, "Duration")
	grp = msgp.AppendUint64(grp, 10e9)
	grp = msgp.AppendString(grp, "Stats")
	grp = msgp.AppendArrayHeader(grp, 1)
	grp = append(grp, g...)
	for name, body := range map[string][]byte{"Stats nil": top, "PeerTags and OkSummary nil": grp} {
		if s := post(t, c, a.URL(), body); s != http.StatusBadRequest {
			t.Errorf("%s: the fake answered %d; the agent's msgp decoder refuses nil for an array or bin field (400)", name, s)
		}
	}
	if _, hits := Sum(a.Requests()); hits != 0 {
		t.Errorf("Sum counts %d hits of payloads the agent would refuse", hits)
	}
}

// TestRecordedStatusIsTheClients: the recorded Status is the first one a
// handler answered, the one the client got, whatever the handler returns;
// a handler that wrote only a body answered 200, with that body.
func TestRecordedStatusIsTheClients(t *testing.T) {
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	for _, tc := range []struct {
		name     string
		h        func(w http.ResponseWriter) bool
		want     int
		wantBody string
		wantHits uint64
	}{
		{"error, returns false", func(w http.ResponseWriter) bool {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return false
		}, 503, "busy\n", 0},
		{"two statuses", func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusTooManyRequests)
			w.WriteHeader(http.StatusOK)
			return true
		}, 429, "", 0},
		{"body only, returns false", func(w http.ResponseWriter) bool {
			_, _ = io.WriteString(w, "mine")
			return false
		}, 200, "mine", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			defer a.Close()
			a.SetHandler(func(w http.ResponseWriter, _ *http.Request, _ int) bool { return tc.h(w) })
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(a.URL()+"/v0.6/stats", "application/msgpack", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			reqs := a.Requests()
			_, hits := Sum(reqs)
			if resp.StatusCode != tc.want || string(got) != tc.wantBody || len(reqs) != 1 || reqs[0].Status != tc.want || hits != tc.wantHits {
				t.Fatalf("client got %d %q; recorded %d requests, status %d; Sum %d hits; want %d %q, %d hits",
					resp.StatusCode, got, len(reqs), reqs[0].Status, hits, tc.want, tc.wantBody, tc.wantHits)
			}
		})
	}
}

// TestNoReadLimit: SetMaxRequestBytes(math.MaxInt64), no limit, takes a
// body (its one byte past the limit would overflow).
func TestNoReadLimit(t *testing.T) {
	a := New()
	defer a.Close()
	a.SetMaxRequestBytes(math.MaxInt64)
	body := payload(t, aggregate.Record{Service: "s", Name: "n", Resource: "r", SpanKind: "server", Duration: 7})
	if got := post(t, &http.Client{Timeout: 10 * time.Second}, a.URL(), body); got != http.StatusOK {
		t.Fatalf("status %d (%v), want 200", got, a.Requests()[0].Err)
	}
	if _, hits := Sum(a.Requests()); hits != 1 {
		t.Fatalf("Sum: %d hits, want 1", hits)
	}
}

// TestFailNextRefusesNonErrors: FailNext with a status that is not an
// error panics; it would silently answer as usual (0) or count (200).
func TestFailNextRefusesNonErrors(t *testing.T) {
	a := New()
	defer a.Close()
	for _, status := range []int{0, 200, 302, 600} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FailNext(1, %d) did not panic", status)
				}
			}()
			a.FailNext(1, status)
		}()
	}
	a.FailNext(1, 599) // the edges are errors
	a.FailNext(1, 400)
}

// TestWriteTopCutsCharacters: a long resource is cut at a character, not
// in the middle of one's bytes.
func TestWriteTopCutsCharacters(t *testing.T) {
	body := payload(t, aggregate.Record{Service: "web", Name: "op", Resource: strings.Repeat("é", 40), SpanKind: "server", Duration: 1})
	p, err := writer.DecodePayload(body)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteTop(&out, Request{Payload: p, Body: body, Status: http.StatusOK}, 1)
	if !utf8.Valid(out.Bytes()) || !strings.Contains(out.String(), strings.Repeat("é", 31)+"…") {
		t.Fatalf("WriteTop printed %q: want valid UTF-8 and 31 é then …", out.String())
	}
}
