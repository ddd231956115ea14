// This file tests the sender over HTTP against the agent's faults: refused,
// failed and timed-out requests, 404 and /info, 413 splits, the retry
// budget, a stuck sender, and the send jitter.

package stats

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestUnixFakeAgentURL: the URL of a fake agent on a Unix socket is the
// AgentURL that reaches it, as New's is for TCP, relative path included.
func TestUnixFakeAgentURL(t *testing.T) {
	dir := sockdir.Dir(t)
	t.Chdir(dir)
	ag, err := statstest.NewUnix("apm.socket")
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	if want := "unix://" + filepath.Join(dir, "apm.socket"); ag.URL() != want {
		t.Fatalf("URL() = %q, want %q", ag.URL(), want)
	}
	a := newStarted(t, Config{AgentURL: ag.URL()})
	publishN(a, 3, "r")
	stop(t, a)
	if _, hits := statstest.Sum(ag.Requests()); hits != 3 || a.Health().SpansSent != 3 {
		t.Fatalf("agent received %d hits, SpansSent %d; want 3, 3", hits, a.Health().SpansSent)
	}
}

// TestHeadersAndPayloadIdentity checks the request headers and payload
// fields the agent relies on, over a Unix socket.
func TestHeadersAndPayloadIdentity(t *testing.T) {
	sock := sockdir.Path(t, "apm.socket")
	ag, err := statstest.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: "unix://" + sock, Env: "prod", Service: "web", Version: "1.2.3",
		Hostname: "h1", RuntimeID: "rid", TracerVersion: "v9", ContainerID: "cid", EntityID: "eid", LangVersion: "1.26"})
	a.Publish(&Span{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server", HTTPStatusCode: 200, Duration: 42})
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	hd := reqs[0].Header
	for k, v := range map[string]string{
		"Content-Type": "application/msgpack", "Datadog-Meta-Lang": "go", "Datadog-Meta-Lang-Version": "1.26",
		"Datadog-Meta-Tracer-Version": "v9", "Datadog-Container-Id": "cid", "Datadog-Entity-Id": "eid",
	} {
		if hd.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, hd.Get(k), v)
		}
	}
	p := reqs[0].Payload
	if p.Env != "prod" || p.Service != "web" || p.Version != "1.2.3" || p.Hostname != "h1" || p.RuntimeID != "rid" ||
		p.Lang != "go" || p.TracerVersion != "v9" || p.ContainerID != "cid" {
		t.Fatalf("payload header = %+v", p.Header)
	}
	g := p.Buckets[0].Groups[0]
	if g.Hits != 1 || g.Duration != 42 || g.IsTraceRoot != aggregate.False || g.HTTPStatusCode != 200 {
		t.Fatalf("group = %+v", g.Entry)
	}
}

// TestBadRequestIsDroppedNotRetried: a 400 means the agent will never take
// the payload; it is dropped at once and counted.
func TestBadRequestIsDroppedNotRetried(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		http.Error(w, "boom", http.StatusBadRequest)
		return true
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), RetryBackoff: time.Millisecond})
	a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	err := a.Flush(context.Background())
	var ae *AgentError
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Body != "boom" {
		t.Fatalf("Flush = %v, want AgentError 400 boom", err)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsFailed != 1 || h.PayloadsDropped != 1 || h.PayloadsRetried != 0 || h.SpansUnsent != 2 || h.PayloadsSent != 0 {
		t.Fatalf("failed %d dropped %d retried %d unsent %d sent %d", h.PayloadsFailed, h.PayloadsDropped, h.PayloadsRetried, h.SpansUnsent, h.PayloadsSent)
	}
	if n := len(ag.Requests()); n != 1 {
		t.Fatalf("agent saw %d requests, want 1", n)
	}
}

func TestFaultConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: every dial is refused
	a := newStarted(t, fastRetries(Config{AgentURL: "http://" + addr, MaxRetries: 2}))
	publishN(a, 5, "r")
	err = a.Flush(context.Background())
	if !errors.Is(err, ErrRetryBudget) {
		t.Fatalf("Flush = %v, want ErrRetryBudget", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("Flush error %v does not carry the dial error", err)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsFailed != 3 || h.PayloadsRetried != 2 || h.PayloadsDropped != 1 || h.SpansUnsent != 5 || h.PayloadsSent != 0 {
		t.Fatalf("failed %d retried %d dropped %d unsent %d sent %d; want 3 2 1 5 0",
			h.PayloadsFailed, h.PayloadsRetried, h.PayloadsDropped, h.SpansUnsent, h.PayloadsSent)
	}
	checkConservation(t, h)
}

func TestFaultHangPastTimeout(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		<-r.Context().Done() // hang until the client gives up
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	a := newStarted(t, fastRetries(Config{AgentURL: ag.URL(), HTTPTimeout: 100 * time.Millisecond, MaxRetries: 1}))
	publishN(a, 3, "r")
	start := time.Now()
	err := a.Flush(context.Background())
	if !errors.Is(err, ErrRetryBudget) {
		t.Fatalf("Flush = %v, want ErrRetryBudget", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Flush took %s: two attempts of a 100 ms timeout should take ~200 ms", d)
	}
	// Publish stays non-blocking while the sender is stuck.
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishN(a, 1000, "r2")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked while the agent hangs")
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsFailed < 2 || h.PayloadsSent != 0 || h.PayloadsDropped < 1 || h.SpansSent != 0 {
		t.Fatalf("failed %d sent %d dropped %d spansSent %d", h.PayloadsFailed, h.PayloadsSent, h.PayloadsDropped, h.SpansSent)
	}
	if h.SpansUnsent != h.Counted || h.Counted != 1003 {
		t.Fatalf("unsent %d counted %d, want 1003 both", h.SpansUnsent, h.Counted)
	}
	checkConservation(t, h)
}

func TestFault500Then200DeliversOnce(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			http.Error(w, "try later", http.StatusInternalServerError)
			return true
		}
		return false
	})
	a := newStarted(t, fastRetries(Config{AgentURL: ag.URL()}))
	publishN(a, 7, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush = %v, want nil after the retry", err)
	}
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) != 2 || reqs[0].Status != 500 || reqs[1].Status != 200 {
		t.Fatalf("agent saw %d requests", len(reqs))
	}
	_, hits := statstest.Sum(reqs)
	if hits != 7 {
		t.Fatalf("accepted hits %d, want 7 (once)", hits)
	}
	h := a.Health()
	if h.PayloadsFailed != 1 || h.PayloadsRetried != 1 || h.PayloadsSent != 1 || h.PayloadsDropped != 0 || h.SpansSent != 7 {
		t.Fatalf("failed %d retried %d sent %d dropped %d spansSent %d", h.PayloadsFailed, h.PayloadsRetried, h.PayloadsSent, h.PayloadsDropped, h.SpansSent)
	}
	// BytesSent counts the accepted body only, not the refused attempt.
	if h.BytesSent != uint64(len(reqs[1].Body)) || len(reqs[1].Body) == 0 {
		t.Fatalf("BytesSent %d, want the accepted body's %d", h.BytesSent, len(reqs[1].Body))
	}
	checkConservation(t, h)
}

// TestFault404ThenInfoRecovery: a 404 disables stats and clears the table
// through the consumer; spans published meanwhile are counted in AgentOffSpans;
// once /info lists /v0.6/stats again, stats flow again, and the log says so.
func TestFault404ThenInfoRecovery(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			// The agent was downgraded: no stats endpoint any more.
			ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
			http.NotFound(w, nil)
			return true
		}
		return false
	})
	log, buf := textLogger()
	a := newStarted(t, Config{AgentURL: ag.URL(), InfoRefresh: 20 * time.Millisecond, Logger: log})
	waitFor(t, "first /info", func() bool { return a.Health().InfoReads >= 1 })
	publishN(a, 4, "before")
	err := a.Flush(context.Background())
	if !errors.Is(err, ErrAgentOff) {
		t.Fatalf("Flush = %v, want ErrAgentOff", err)
	}
	// AgentOff: Publish refuses and counts.
	if a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1}) {
		t.Fatal("Publish returned true while stats are disabled")
	}
	if h := a.Health(); !h.AgentOff || h.AgentOffSpans != 1 || h.AgentOffTimes != 1 {
		t.Fatalf("AgentOff %v, AgentOffSpans %d, AgentOffTimes %d", h.AgentOff, h.AgentOffSpans, h.AgentOffTimes)
	}
	// The agent is upgraded again.
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces", "/v0.6/stats"}})
	waitFor(t, "re-enable through /info", func() bool { return !a.Health().AgentOff })
	waitFor(t, "the return logged", func() bool {
		return slices.ContainsFunc(buf.lines(), func(l string) bool { return strings.Contains(l, "accepts client stats again") })
	})
	publishN(a, 6, "after")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	got, hits := statstest.Sum(ag.Requests())
	if hits != 6 || got[statstest.GroupKey{Service: "s", Name: "op", Resource: "after", SpanKind: "server"}].Hits != 6 {
		t.Fatalf("accepted hits %d, want 6 from after the recovery", hits)
	}
	h := a.Health()
	if h.AgentOffSpans != 1 || h.PayloadsDropped != 1 || h.SpansUnsent != 4 || h.SpansSent != 6 {
		t.Fatalf("AgentOffSpans %d dropped %d unsent %d sent %d", h.AgentOffSpans, h.PayloadsDropped, h.SpansUnsent, h.SpansSent)
	}
	checkConservation(t, h)
}

// TestFault404ClearsTheTable: DESIGN §5 and §7, a 404 clears the table.
// Spans the consumer counted while the refused request was in flight are
// discarded (Cleared), never sent once the agent takes stats again.
func TestFault404ClearsTheTable(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
			close(entered)
			<-release
			http.NotFound(w, nil)
			return true
		}
		return false
	})
	// An hour's bucket: no interval report (which discards too while the
	// agent is off) comes between the 404 and the recovery.
	a := newStarted(t, Config{AgentURL: ag.URL(), InfoRefresh: 20 * time.Millisecond,
		RetryBackoff: time.Millisecond, BucketInterval: time.Hour})
	waitFor(t, "first /info", func() bool { return a.Health().InfoReads >= 1 })
	publishN(a, 4, "before")
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(context.Background()) }()
	<-entered
	publishN(a, 3, "during") // into the table while the agent holds the request
	waitFor(t, "the 3 spans counted", func() bool { return a.Health().Counted == 7 })
	close(release)
	if err := <-flushed; !errors.Is(err, ErrAgentOff) {
		t.Fatalf("Flush = %v, want ErrAgentOff", err)
	}
	waitFor(t, "the table cleared", func() bool { return a.Health().Cleared == 3 })
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces", "/v0.6/stats"}})
	waitFor(t, "re-enable through /info", func() bool { return !a.Health().AgentOff })
	publishN(a, 6, "after")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	got, hits := statstest.Sum(ag.Requests())
	if hits != 6 || len(got) != 1 || got[statstest.GroupKey{Service: "s", Name: "op", Resource: "after", SpanKind: "server"}].Hits != 6 {
		t.Fatalf("accepted %d hits in %v, want only the 6 published after the recovery", hits, got)
	}
	h := a.Health()
	if h.Cleared != 3 || h.SpansUnsent != 4 || h.SpansSent != 6 || h.Counted != 13 {
		t.Fatalf("cleared %d unsent %d sent %d counted %d, want 3 4 6 13", h.Cleared, h.SpansUnsent, h.SpansSent, h.Counted)
	}
	checkConservation(t, h)
}

// TestInfoWithoutStatsAtStart: an agent whose /info lacks /v0.6/stats gets
// no payload at all; the spans are counted in AgentOffSpans.
func TestInfoWithoutStatsAtStart(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
	a := newStarted(t, Config{AgentURL: ag.URL()})
	waitFor(t, "first /info", func() bool { return a.Health().InfoReads >= 1 })
	publishN(a, 9, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	if n := len(ag.Requests()); n != 0 {
		t.Fatalf("agent got %d stats requests, want 0", n)
	}
	h := a.Health()
	if h.AgentOffSpans != 9 || h.Counted != 0 {
		t.Fatalf("AgentOffSpans %d Counted %d, want 9 and 0", h.AgentOffSpans, h.Counted)
	}
	checkConservation(t, h)
}

// TestInfoListsStatsLater: an agent whose /info lacked /v0.6/stats at
// start is polled, as after a 404, and gets the stats once it lists it.
func TestInfoListsStatsLater(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
	a := newStarted(t, Config{AgentURL: ag.URL(), RetryBackoff: 10 * time.Millisecond, InfoRefresh: MinInfoRefresh})
	waitFor(t, "first /info", func() bool { return a.Health().InfoReads >= 1 })
	publishN(a, 3, "off")
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.6/stats"}})
	waitFor(t, "stats accepted", func() bool { return !a.Health().AgentOff })
	publishN(a, 9, "on")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	if _, hits := statstest.Sum(ag.Requests()); hits != 9 {
		t.Fatalf("agent got %d hits, want the 9 published once /info listed the endpoint", hits)
	}
	h := a.Health()
	if h.AgentOffSpans != 3 || h.SpansSent != 9 {
		t.Fatalf("AgentOffSpans %d SpansSent %d, want 3 and 9", h.AgentOffSpans, h.SpansSent)
	}
	checkConservation(t, h)
}

func TestInfoPeerTagsFilterKeys(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.6/stats"}, "peer_tags": []string{"peer.service", "db.instance"}})
	a := newStarted(t, Config{AgentURL: ag.URL()})
	waitFor(t, "first /info", func() bool { return a.Health().InfoReads >= 1 })
	a.Publish(&Span{Name: "q", SpanKind: "client", Duration: 5,
		PeerTags: []string{"peer.hostname:db-1", "peer.service:users", "db.instance:main"}})
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	g := reqs[0].Payload.Buckets[0].Groups[0]
	if !slices.Equal(g.PeerTags, []string{"db.instance:main", "peer.service:users"}) {
		t.Fatalf("peer tags %v, want only the keys /info lists", g.PeerTags)
	}
}

// TestInfoSamePeerTagsKeepTheList: /info is polled every InfoRefresh while
// the agent is up; a poll with the list the consumer already has must not
// hand it a new one, which would empty both tables' recent-span caches and
// peer-tag memos on every poll.
func TestInfoSamePeerTagsKeepTheList(t *testing.T) {
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s := a.snd
	s.Info(&agentclient.Info{PeerTags: []string{"peer.service", "db.instance"}})
	first := s.peerTags.Load()
	if first == nil || !slices.Equal(*first, []string{"peer.service", "db.instance"}) {
		t.Fatalf("list after the first /info: %v", first)
	}
	s.Info(&agentclient.Info{PeerTags: []string{"peer.service", "db.instance"}})
	if got := s.peerTags.Load(); got != first {
		t.Fatalf("an unchanged list was handed over again: %p, want %p", got, first)
	}
	s.Info(&agentclient.Info{PeerTags: []string{"peer.service"}})
	if got := s.peerTags.Load(); got == first || !slices.Equal(*got, []string{"peer.service"}) {
		t.Fatalf("a changed list was not handed over: %v", *got)
	}
	if got := a.Health().InfoReads; got != 3 {
		t.Fatalf("InfoReads %d, want 3: every poll counts", got)
	}
}

// TestFault413SplitsPayload: the agent refuses bodies over a size; the
// sender splits them until they fit, and the accepted payloads carry every
// group exactly once.
func TestFault413SplitsPayload(t *testing.T) {
	const agentLimit = 16 << 10
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.ContentLength > agentLimit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return true
		}
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for i := range 200 {
		a.Publish(&Span{Service: "s", Name: "op", Resource: fmt.Sprint("r", i), SpanKind: "server", Duration: int64(1000 * (i + 1))})
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush = %v, want nil once split", err)
	}
	stop(t, a)
	seen := map[string]int{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		if len(r.Body) > agentLimit {
			t.Fatalf("accepted body of %d bytes", len(r.Body))
		}
		for _, b := range r.Payload.Buckets { // a boundary may fall while publishing
			for _, g := range b.Groups {
				seen[g.Resource]++
				if g.Hits != 1 {
					t.Fatalf("group %s hits %d", g.Resource, g.Hits)
				}
			}
		}
	}
	if len(seen) != 200 {
		t.Fatalf("%d groups accepted, want 200", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("group %s accepted %d times", k, n)
		}
	}
	h := a.Health()
	if h.PayloadsSplit == 0 || h.PayloadsDropped != 0 || h.SpansSent != 200 {
		t.Fatalf("split %d dropped %d spansSent %d", h.PayloadsSplit, h.PayloadsDropped, h.SpansSent)
	}
	checkConservation(t, h)
}

// checkRetryBudget runs one scenario against an agent that fails every
// payload, with cfg's retry budget: a payload of 2 spans waits for a retry
// an hour away; the next, of 3 spans, does not fit beside it and is
// dropped at once; the agent recovers and Stop's last attempt delivers the
// first.
func checkRetryBudget(t *testing.T, ag *statstest.Agent, cfg Config) {
	t.Helper()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	// Retries an hour apart: Stop's window (50 ms) ends before the first,
	// and its last attempt delivers the queued payload.
	cfg.AgentURL, cfg.RetryBackoff, cfg.MaxRetryBackoff, cfg.StopRetryWindow = ag.URL(), time.Hour, time.Hour, 50*time.Millisecond
	a := newStarted(t, cfg)
	publishN(a, 2, "a")
	if err := flushWithin(a, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want the deadline (payload waiting for retry)", err)
	}
	publishN(a, 3, "b")
	if err := flushWithin(a, 5*time.Second); !errors.Is(err, ErrRetryBudget) { // not queued: answered at once
		t.Fatalf("second Flush = %v, want ErrRetryBudget (over the budget)", err)
	}
	ag.SetHandler(nil)
	stop(t, a)
	h := a.Health()
	if h.PayloadsFailed != 2 || h.PayloadsRetried != 1 || h.PayloadsDropped != 1 || h.SpansUnsent != 3 || h.SpansSent != 2 {
		t.Fatalf("failed %d retried %d dropped %d unsent %d sent %d; want 2 1 1 3 2",
			h.PayloadsFailed, h.PayloadsRetried, h.PayloadsDropped, h.SpansUnsent, h.SpansSent)
	}
	checkConservation(t, h)
}

// TestRetryBudgetBoundsQueue: the retry queue bounded to one payload.
func TestRetryBudgetBoundsQueue(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	checkRetryBudget(t, ag, Config{MaxRetryPayloads: 1})
}

// TestRetryBudgetBoundsBytes: the retry queue's byte bound, not its
// payload count, drops the second payload. The bound is set between the
// first payload's size and both payloads' (measured in a dry run against a
// healthy agent).
func TestRetryBudgetBoundsBytes(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	publishN(a, 2, "a")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishN(a, 3, "b")
	stop(t, a)
	var sizes []int
	for _, r := range ag.Requests() {
		sizes = append(sizes, len(r.Body))
	}
	if len(sizes) != 2 {
		t.Fatalf("dry run sent %d payloads, want 2", len(sizes))
	}
	checkRetryBudget(t, ag, Config{MaxRetryPayloads: 100, MaxRetryBytes: sizes[0] + sizes[1]/2})
}

// flushWithin is Flush with a deadline of d.
func flushWithin(a *Aggregator, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return a.Flush(ctx)
}

// fillSendQueue, against an agent that holds every request and signals
// arrived, leaves the sender inside the POST of a 1-span report and a
// 2-span report waiting in a send queue of one.
func fillSendQueue(t *testing.T, a *Aggregator, arrived <-chan struct{}) {
	t.Helper()
	publishN(a, 1, "r1")
	if err := flushWithin(a, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Flush = %v, want the deadline (its request is held)", err)
	}
	select {
	case <-arrived: // the sender is inside the first POST
	case <-time.After(5 * time.Second):
		t.Fatal("the first payload never reached the agent")
	}
	publishN(a, 2, "r2")
	if err := flushWithin(a, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Flush = %v, want the deadline (its report waits in the send queue)", err)
	}
}

// TestStuckSenderNeverBlocksConsumer: while the agent holds the sender's
// request open, reports queue up to SendQueue; the next is dropped and
// counted at once (ErrSendQueueFull), and the consumer goes on counting.
func TestStuckSenderNeverBlocksConsumer(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	ag.SetHandler(func(http.ResponseWriter, *http.Request, int) bool {
		arrived <- struct{}{}
		<-release
		return false // then answered as usual: 200
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release) // a failed test must not leave the handler waiting
		}
	}()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendQueue: 1, HTTPTimeout: time.Minute})
	fillSendQueue(t, a, arrived)
	publishN(a, 3, "r3")
	start := time.Now()
	if err := flushWithin(a, 5*time.Second); !errors.Is(err, ErrSendQueueFull) {
		t.Fatalf("third Flush = %v, want ErrSendQueueFull", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the full send queue was answered after %s: the consumer waited for the sender", d)
	}
	publishN(a, 4, "r4")
	waitFor(t, "the consumer to count while the sender is stuck", func() bool { return a.Health().Counted == 10 })
	if h := a.Health(); h.PayloadsDropped != 1 || h.SpansUnsent != 3 || h.PayloadsSent != 0 {
		t.Fatalf("dropped %d unsent %d sent %d while stuck; want 1 3 0", h.PayloadsDropped, h.SpansUnsent, h.PayloadsSent)
	} else if !errors.Is(h.LastSendError, ErrSendQueueFull) {
		t.Fatalf("LastSendError = %v, want ErrSendQueueFull", h.LastSendError)
	}
	close(release)
	stop(t, a)
	h := a.Health()
	if h.PayloadsSent != 3 || h.SpansSent != 7 || h.PayloadsDropped != 1 || h.SpansUnsent != 3 {
		t.Fatalf("sent %d payloads %d spans, dropped %d unsent %d; want 3 7 1 3", h.PayloadsSent, h.SpansSent, h.PayloadsDropped, h.SpansUnsent)
	}
	got, hits := statstest.Sum(ag.Requests())
	if hits != 7 || len(got) != 3 {
		t.Fatalf("agent got %d hits in %d groups, want 7 in 3 (r1, r2, r4)", hits, len(got))
	}
	checkConservation(t, h)
}

// TestStopDeadlineWithStuckSender: Stop waits for a held request and a
// full send queue only until its context ends; then every goroutine ends
// and the spans it could not deliver are counted as unsent.
func TestStopDeadlineWithStuckSender(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	arrived := make(chan struct{}, 8)
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		arrived <- struct{}{}
		<-r.Context().Done() // held until the client gives up
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), SendQueue: 1, HTTPTimeout: time.Minute})
	fillSendQueue(t, a, arrived)
	publishN(a, 4, "r3") // Stop's final report: the send queue is full
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop returned after %s, past its 300 ms deadline", d)
	}
	h := a.Health()
	if h.Counted != 7 || h.SpansUnsent != 7 || h.SpansSent != 0 || h.PayloadsDropped != 3 {
		t.Fatalf("counted %d unsent %d sent %d dropped %d; want 7 7 0 3", h.Counted, h.SpansUnsent, h.SpansSent, h.PayloadsDropped)
	}
	checkConservation(t, h)
}

// TestChaosConservation: 8 producers publish while the agent answers the
// payloads with a mix of 200, 500, 408, 413, 404 and 400, and Clear and
// Flush run concurrently with short intervals. After Stop both identities
// of Health hold, and the agent accepted exactly the spans Health counts as
// sent: each once, however often its payload was retried or split.
func TestChaosConservation(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	// Each run of 20 requests meets every answer; the stride mixes them.
	answers := [20]int{200, 500, 200, 413, 200, 500, 200, 400, 200, 404,
		200, 413, 200, 500, 200, 408, 200, 400, 200, 413}
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		code := answers[(n*7)%len(answers)]
		if code == http.StatusOK {
			return false
		}
		http.Error(w, http.StatusText(code), code)
		return true
	})
	a := newStarted(t, fastRetries(Config{AgentURL: ag.URL(), BucketInterval: 20 * time.Millisecond,
		InfoRefresh: 5 * time.Millisecond, InboxSize: 512, SendQueue: 2}))

	done := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(7 * time.Millisecond):
				a.Clear()
			}
		}
	})
	chaos.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
			_ = a.Flush(ctx) // any outcome: the counters must account for it
			cancel()
		}
	})

	const producers, perProducer = 8, 30000
	resources := make([]string, 64)
	for i := range resources {
		resources[i] = fmt.Sprintf("GET /r/%d", i)
	}
	var accepted [producers]uint64
	var pub sync.WaitGroup
	for p := range producers {
		pub.Go(func() {
			for i := range perProducer {
				s := Span{Service: "svc", Name: "op", Resource: resources[(i*7+p)%len(resources)],
					SpanKind: "server", Duration: int64(1 + i%5000), Error: i%6 == 0}
				if i%10 == 0 {
					s.SpanKind = "internal" // ineligible: not top-level or measured
				}
				if a.Publish(&s) {
					accepted[p]++
				}
				if i%32 == 0 {
					time.Sleep(time.Millisecond) // a run of ~1 s: many intervals, faults and clears interleave
				}
			}
		})
	}
	pub.Wait()
	close(done)
	chaos.Wait()
	stop(t, a)

	h := a.Health()
	checkConservation(t, h)
	if h.Published != producers*perProducer {
		t.Fatalf("Published %d, want %d", h.Published, producers*perProducer)
	}
	var acc uint64
	for _, n := range accepted {
		acc += n
	}
	if acc != h.Counted+h.AggregateDropped+h.Ineligible { // false means dropped (full, stopped, disabled)
		t.Fatalf("Publish returned true %d times, counted %d + dropped %d + ineligible %d", acc, h.Counted, h.AggregateDropped, h.Ineligible)
	}
	_, hits := statstest.Sum(ag.Requests())
	if hits != h.SpansSent {
		t.Fatalf("agent accepted %d hits, Health.SpansSent %d", hits, h.SpansSent)
	}
	// The faults really happened (else this test proves little).
	if h.PayloadsSent == 0 || h.PayloadsRetried == 0 || h.PayloadsSplit == 0 || h.AgentOffTimes == 0 ||
		h.PayloadsDropped == 0 || h.Cleared == 0 || h.Ineligible == 0 {
		t.Fatalf("a fault path was never taken: %+v", h)
	}
	t.Logf("published %d: counted %d (sent %d, unsent %d, cleared %d), ineligible %d, inbox full %d, disabled %d; "+
		"payloads sent %d retried %d split %d dropped %d; disabled %d times",
		h.Published, h.Counted, h.SpansSent, h.SpansUnsent, h.Cleared, h.Ineligible, h.InboxFull, h.AgentOffSpans,
		h.PayloadsSent, h.PayloadsRetried, h.PayloadsSplit, h.PayloadsDropped, h.AgentOffTimes)
}

// recordingOut is a transport that records when each report was sent.
type recordingOut struct {
	mu   sync.Mutex
	sent []time.Time
}

func (r *recordingOut) start() {}
func (r *recordingOut) send(*report, bool) {
	r.mu.Lock()
	r.sent = append(r.sent, time.Now())
	r.mu.Unlock()
}
func (r *recordingOut) nextDue() (time.Time, bool) { return time.Time{}, false }
func (r *recordingOut) runDue(time.Time)           {}
func (r *recordingOut) stop()                      {}

// sentAt returns when the n-th report was sent, once it was.
func (r *recordingOut) sentAt(t *testing.T, n int) time.Time {
	t.Helper()
	waitFor(t, fmt.Sprintf("report %d sent", n), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.sent) > n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[n]
}

// recordingSender runs the sender of an aggregator of 1 s intervals whose
// jitter past a bucket's close is jitter, fed by in, into a recordingOut.
func recordingSender(t *testing.T, jitter time.Duration) (chan *report, *sender, *recordingOut) {
	t.Helper()
	a, err := New(Config{AgentURL: "http://127.0.0.1:1", BucketInterval: time.Second, SendJitter: jitter + time.Second/graceDivisor})
	if err != nil {
		t.Fatal(err)
	}
	out := &recordingOut{}
	in := make(chan *report, 32)
	s := a.snd
	s.out, s.in = out, in
	go s.run()
	return in, s, out
}

// TestSendJitter: a report that Flush waits for is sent at once; an
// interval's report (nobody waits for it) after a random delay of at most
// SendJitter, the delays differing.
func TestSendJitter(t *testing.T) {
	const jitter = 50 * time.Millisecond
	in, s, out := recordingSender(t, jitter)
	flushed := time.Now()
	in <- &report{parts: []part{{}}, done: make(chan error, 1)} // a Flush: not delayed
	if d := out.sentAt(t, 0).Sub(flushed); d > jitter/2 {
		t.Errorf("the report Flush waits for was sent %s after it was queued", d)
	}
	// One report at a time: held reports leave in order, so reports queued
	// together would leave together (TestJitterKeepsOrder).
	lo, hi := time.Hour, time.Duration(0)
	for i := range 20 {
		queued := time.Now()
		in <- &report{}
		d := out.sentAt(t, i+1).Sub(queued)
		lo, hi = min(lo, d), max(hi, d)
	}
	close(in)
	<-s.done
	// The slack covers a loaded machine's timer latency.
	if hi > jitter+100*time.Millisecond {
		t.Errorf("an interval report waited %s, over the %s jitter", hi, jitter)
	}
	if hi-lo < jitter/4 {
		t.Errorf("20 interval reports waited between %s and %s: no jitter", lo, hi)
	}
}

// TestJitterCountsFromTheQueueing: a report that waited in the queue past
// its jitter (the sender was busy, say, with a slow agent for seconds) is
// sent at once, not after a fresh jitter from when the sender took it,
// which could push it past the agent's and a relay's time windows.
func TestJitterCountsFromTheQueueing(t *testing.T) {
	const jitter = 400 * time.Millisecond
	in, s, out := recordingSender(t, jitter)
	for i := range 5 {
		took := time.Now()
		in <- &report{queued: took.Add(-2 * jitter)}
		d := out.sentAt(t, i).Sub(took)
		// Five fresh jitters all under 50 ms: 1 in 33 000.
		if d > 50*time.Millisecond {
			t.Errorf("report %d queued %s ago sent %s after the sender took it, want at once", i, 2*jitter, d)
		}
	}
	close(in)
	<-s.done
}

// TestJitterKeepsOrder: a report Flush waits for, and a held report due
// before an earlier one, never overtake the reports held before them.
func TestJitterKeepsOrder(t *testing.T) {
	in, s, order := orderedSender(t, time.Second, 30*time.Millisecond+time.Second/graceDivisor, 64)
	for i := range 40 {
		in <- &report{parts: []part{{hits: uint64(i)}}}
		if i%10 == 9 {
			in <- &report{parts: []part{{hits: uint64(100 + i)}}, done: make(chan error, 1)}
		}
		time.Sleep(time.Millisecond)
	}
	close(in)
	<-s.done
	want := []int{}
	for i := range 40 {
		want = append(want, i)
		if i%10 == 9 {
			want = append(want, 100+i)
		}
	}
	if got := fmt.Sprint(order()); got != fmt.Sprint(want) {
		t.Fatalf("sent in the order %v, want %v", got, want)
	}
}

// orderedSender runs an aggregator's sender (interval iv, SendJitter
// jitter) fed by the returned channel of room queue, over an orderOut;
// order returns the hits of the parts sent so far, in order.
func orderedSender(t *testing.T, iv, jitter time.Duration, queue int) (in chan *report, s *sender, order func() []int) {
	t.Helper()
	a, err := New(Config{AgentURL: "http://127.0.0.1:1", BucketInterval: iv, SendJitter: jitter})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []int
	in = make(chan *report, queue)
	s = a.snd
	s.out, s.in = &orderOut{record: func(n int) { mu.Lock(); sent = append(sent, n); mu.Unlock() }}, in
	go s.run()
	return in, s, func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(sent) }
}

// orderOut is a transport that records each part's hits, in order.
type orderOut struct{ record func(int) }

func (o *orderOut) start() {}
func (o *orderOut) send(r *report, _ bool) {
	for _, p := range r.parts {
		o.record(int(p.hits))
	}
	if r.done != nil {
		r.done <- r.answer
	}
}
func (o *orderOut) nextDue() (time.Time, bool) { return time.Time{}, false }
func (o *orderOut) runDue(time.Time)           {}
func (o *orderOut) stop()                      {}

// TestFlushReleasesHeldReport: a Flush that finds nothing to send still
// goes through the sender, which first sends the reports it holds for
// their jitter: Flush returns once they are sent, with the consumer's
// answer (here ErrAgentOff).
func TestFlushReleasesHeldReport(t *testing.T) {
	in, s, order := orderedSender(t, time.Hour, 20*time.Minute, 4)
	in <- &report{parts: []part{{hits: 1}}} // held for up to 14 minutes
	in <- &report{parts: []part{{hits: 2}}}
	done := make(chan error, 1)
	in <- &report{done: done, answer: ErrAgentOff} // a Flush with nothing to send
	select {
	case err := <-done:
		if got := fmt.Sprint(order()); !errors.Is(err, ErrAgentOff) || got != "[1 2]" {
			t.Fatalf("Flush answered %v having sent %s; want ErrAgentOff after [1 2]", err, got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush not answered")
	}
	close(in)
	<-s.done
}

// TestEmptyFlushSendsHeldReport: end to end, an interval's report held by
// the jitter is at the agent when a Flush that found the table empty
// returns; refused (400), Flush returns the agent's error.
func TestEmptyFlushSendsHeldReport(t *testing.T) {
	for _, status := range []int{200, 400} {
		t.Run(strconv.Itoa(status), func(t *testing.T) { emptyFlushSendsHeldReport(t, status) })
	}
}

func emptyFlushSendsHeldReport(t *testing.T, status int) {
	ag := statstest.New()
	defer ag.Close()
	if status != 200 {
		ag.FailNext(1, status)
	}
	// A second, so that the Flush below, 30 ms after the close, comes
	// hundreds of milliseconds before the held report's send time: a
	// loaded host that oversleeps by less than that still finds it held.
	const iv = time.Second
	a, err := New(Config{AgentURL: ag.URL(), BucketInterval: iv, SendJitter: iv / 2})
	if err != nil {
		t.Fatal(err)
	}
	// A seed whose first delay is over 350 of the sender's 400 ms.
	if a.snd.jitter != 400*time.Millisecond {
		t.Fatalf("the sender's jitter is %s, want 400ms (SendJitter less the grace)", a.snd.jitter)
	}
	for seed := uint64(1); ; seed++ {
		if rand.New(rand.NewPCG(seed, seed)).Int64N(int64(a.snd.jitter)+1) > int64(350*time.Millisecond) {
			a.snd.rng = rand.New(rand.NewPCG(seed, seed))
			break
		}
	}
	time.Sleep(time.Until(time.Now().Truncate(iv).Add(iv + 5*time.Millisecond)))
	a.Start()
	defer stop(t, a)
	now := time.Now()
	a.Publish(&Span{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Start: now.UnixNano() - 1e6, Duration: 1e6})
	// The bucket closes a grace after its end; its report is then held
	// for 350 to 400 ms.
	time.Sleep(time.Until(now.Truncate(iv).Add(iv + iv/graceDivisor + 30*time.Millisecond)))
	err = a.Flush(context.Background())
	h, reqs := a.Health(), len(ag.Requests())
	if status == 200 && (err != nil || h.SpansSent != 1 || reqs != 1) {
		t.Fatalf("Flush = %v with %d spans sent, %d requests at the agent; want nil, 1, 1", err, h.SpansSent, reqs)
	}
	var ae *AgentError
	if status != 200 && (!errors.As(err, &ae) || ae.StatusCode != status || h.SpansUnsent != 1 || reqs != 1) {
		t.Fatalf("Flush = %v with %d spans unsent, %d requests; want the agent's %d, 1, 1", err, h.SpansUnsent, reqs, status)
	}
}

// TestEmptyFlushOnFullQueue: a Flush with nothing to send that finds the
// send queue full drops nothing, but cannot wait for the reports before
// it: ErrSendQueueFull, no drop counted.
func TestEmptyFlushOnFullQueue(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	ag.SetHandler(func(http.ResponseWriter, *http.Request, int) bool {
		arrived <- struct{}{}
		<-release
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), SendQueue: 1, HTTPTimeout: time.Minute})
	fillSendQueue(t, a, arrived)
	before := a.Health()
	err := flushWithin(a, 5*time.Second) // nothing published since
	after := a.Health()
	close(release)
	stop(t, a)
	if !errors.Is(err, ErrSendQueueFull) || after.PayloadsDropped != before.PayloadsDropped || after.SpansUnsent != before.SpansUnsent {
		t.Fatalf("an empty Flush on a full queue = %v, dropped %d -> %d; want ErrSendQueueFull, nothing dropped", err, before.PayloadsDropped, after.PayloadsDropped)
	}
}

// TestUnsentAfterTimeout: a payload given up after an attempt that timed
// out once sent may have reached the agent: its spans are in SpansUnsent
// and in UnsentAfterTimeout, and the agent's hits stay within SpansSent +
// UnsentAfterTimeout. A payload given up for a refused connection is not.
func TestUnsentAfterTimeout(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		time.Sleep(200 * time.Millisecond) // then taken, after the SDK gave up
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), HTTPTimeout: 50 * time.Millisecond, MaxRetries: 1,
		RetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond, StopRetryWindow: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	publishN(a, 10, "r")
	stop(t, a)
	if _, err := ag.WaitHits(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	h := a.Health()
	_, hits := statstest.Sum(statstest.Accepted(ag.Requests()))
	if h.SpansUnsent != 10 || h.UnsentAfterTimeout != 10 || h.SpansSent != 0 || hits > h.SpansSent+h.UnsentAfterTimeout {
		t.Fatalf("SpansSent %d, SpansUnsent %d, UnsentAfterTimeout %d, agent hits %d; want 0, 10, 10 and hits within them",
			h.SpansSent, h.SpansUnsent, h.UnsentAfterTimeout, hits)
	}

	closed := statstest.New()
	url := closed.URL()
	closed.Close()
	b := newStarted(t, Config{AgentURL: url, MaxRetries: 1, RetryBackoff: time.Millisecond, StopRetryWindow: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	publishN(b, 3, "r")
	stop(t, b)
	if h := b.Health(); h.SpansUnsent != 3 || h.UnsentAfterTimeout != 0 {
		t.Fatalf("refused connection: SpansUnsent %d, UnsentAfterTimeout %d; want 3 and 0", h.SpansUnsent, h.UnsentAfterTimeout)
	}
}

// TestUnsentAfterStopDeadline: a payload whose request the agent has read
// when Stop's deadline cancels it may have been taken: the agent then
// holds spans that Health counts unsent, and UnsentAfterTimeout must
// cover them as it does for a timeout.
func TestUnsentAfterStopDeadline(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	read, release := make(chan struct{}), make(chan struct{})
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		close(read) // the body is read whole before the handler runs
		<-release   // then taken, after Stop gave up
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), Logger: slog.New(slog.DiscardHandler)})
	publishN(a, 10, "r")
	stopped := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { stopped <- a.Stop(ctx) }()
	<-read
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop = %v, want its context's error", err)
	}
	close(release)
	if _, err := ag.WaitHits(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	h := a.Health()
	_, hits := statstest.Sum(statstest.Accepted(ag.Requests()))
	if h.SpansUnsent != 10 || hits > h.SpansSent+h.UnsentAfterTimeout {
		t.Fatalf("SpansSent %d, SpansUnsent %d, UnsentAfterTimeout %d, agent hits %d; want the agent's within SpansSent + UnsentAfterTimeout",
			h.SpansSent, h.SpansUnsent, h.UnsentAfterTimeout, hits)
	}
}

// TestAgentURLCredentialsAreSent: an AgentURL with a user and password
// (an agent behind an authenticating proxy) is accepted by New, and its
// credentials go with every request as Basic authorization, as net/http
// and the Datadog tracers send them, not dropped.
func TestAgentURLCredentialsAreSent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	u := strings.Replace(ag.URL(), "http://", "http://user:s3cret@", 1)
	a := newStarted(t, Config{AgentURL: u})
	a.Publish(&Span{Service: "web", Name: "http.request", SpanKind: "server", Duration: 42})
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:s3cret"))
	if got := reqs[0].Header.Get("Authorization"); got != want {
		t.Fatalf("Authorization = %q, want %q", got, want)
	}
}

// TestInfoFailureInHealthAndLog: /info reads that fail (a 503, then a body
// that is not JSON) are counted in InfoFailures, the last one's error kept
// in InfoError, and logged once for the whole streak however many polls
// fail; a good read clears InfoError and logs the recovery once. A later
// streak (a 404 sends the client back to polling /info) logs again.
func TestInfoFailureInHealthAndLog(t *testing.T) {
	var mode atomic.Int32  // /info: 0 answers 503, 1 a body that is not JSON, 2 a good document
	var refuse atomic.Bool // /v0.6/stats answers 404
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v0.6/stats" {
			if refuse.Load() {
				http.NotFound(w, r)
			}
			return
		}
		switch mode.Load() {
		case 0:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case 1:
			_, _ = io.WriteString(w, "<html>")
		default:
			_, _ = io.WriteString(w, `{"endpoints":["/v0.6/stats"]}`)
		}
	}))
	defer srv.Close()
	log, buf := textLogger()
	count := func(msg string) (n int) {
		for _, l := range buf.lines() {
			if strings.Contains(l, msg) {
				n++
			}
		}
		return n
	}
	const warned, recovered = "/info could not be read", "/info answers again"
	start := time.Now()
	a := newStarted(t, Config{AgentURL: srv.URL, RetryBackoff: 5 * time.Millisecond, InfoRefresh: MinInfoRefresh, Logger: log})

	waitFor(t, "three failed /info reads", func() bool { return a.Health().InfoFailures >= 3 })
	h := a.Health()
	var ae *AgentError
	if !errors.As(h.InfoError, &ae) || ae.StatusCode != http.StatusServiceUnavailable || h.InfoErrorAt.Before(start) || h.InfoReads != 0 {
		t.Fatalf("InfoError %v at %v, InfoReads %d; want the 503, timed during the test, and no read", h.InfoError, h.InfoErrorAt, h.InfoReads)
	}
	mode.Store(1)
	var se *json.SyntaxError
	waitFor(t, "the bad /info body in Health", func() bool { return errors.As(a.Health().InfoError, &se) })
	if n := count(warned); n != 1 {
		t.Fatalf("%d warnings for one streak of %d failed reads, want 1:\n%s", n, a.Health().InfoFailures, strings.Join(buf.lines(), ""))
	}
	if l := buf.lines()[0]; !strings.Contains(l, "level=WARN") || !strings.Contains(l, "503") {
		t.Fatalf("first line %q: want a warning with the 503", l)
	}
	mode.Store(2)
	waitFor(t, "a good /info read", func() bool { return a.Health().InfoReads >= 1 })
	if h := a.Health(); h.InfoError != nil || !h.InfoErrorAt.IsZero() {
		t.Fatalf("after a good read: InfoError %v at %v, want nil and zero", h.InfoError, h.InfoErrorAt)
	}
	waitFor(t, "the recovery logged", func() bool { return count(recovered) == 1 })
	failures := a.Health().InfoFailures

	// A 404 turns stats off: /info is polled again, and fails again.
	mode.Store(0)
	refuse.Store(true)
	publishN(a, 3, "r")
	_ = a.Flush(context.Background())
	waitFor(t, "a second streak's warning", func() bool { return count(warned) == 2 })
	mode.Store(2)
	refuse.Store(false)
	waitFor(t, "stats accepted again", func() bool { return !a.Health().AgentOff })
	waitFor(t, "the second recovery logged", func() bool { return count(recovered) == 2 })
	stop(t, a)
	h = a.Health()
	if h.InfoFailures <= failures || h.InfoError != nil {
		t.Fatalf("InfoFailures %d (was %d), InfoError %v; want more, and nil", h.InfoFailures, failures, h.InfoError)
	}
	if w, r := count(warned), count(recovered); w != 2 || r != 2 {
		t.Fatalf("%d warnings, %d recoveries logged; want 2 and 2:\n%s", w, r, strings.Join(buf.lines(), ""))
	}
	checkConservation(t, h)
}

// TestHTTPSendJitteredAfterBoundary: over HTTP too, with the default
// SendJitter, each interval's report reaches the agent after its bucket's
// close (a tenth of the interval past the boundary) and by min(interval/5,
// 2 s) past it, at offsets that differ from report to report, while every
// bucket stays aligned to the interval.
func TestHTTPSendJitteredAfterBoundary(t *testing.T) {
	const iv, reports = time.Second, 6
	ag := statstest.New()
	defer ag.Close()
	var mu sync.Mutex
	var arrived []time.Time
	ag.SetHandler(func(_ http.ResponseWriter, _ *http.Request, _ int) bool {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), BucketInterval: iv})
	deadline := time.Now().Add(reports*iv + 5*time.Second)
	for len(ag.Requests()) < reports {
		if time.Now().After(deadline) {
			t.Fatalf("%d reports by the deadline, want %d", len(ag.Requests()), reports)
		}
		a.Publish(&Span{Service: "s", Name: "op", Resource: "r", TopLevel: true, Duration: 5})
		time.Sleep(20 * time.Millisecond) // a span now and then, not an assertion
	}
	stop(t, a)
	mu.Lock()
	defer mu.Unlock()
	var offs []time.Duration
	for i, r := range ag.Requests()[:reports] {
		b := r.Payload.Buckets[0]
		if b.Start%uint64(iv) != 0 || b.Duration != uint64(iv) {
			t.Fatalf("report %d: bucket [%d, +%d), want aligned to %s and as long", i, b.Start, b.Duration, iv)
		}
		offs = append(offs, arrived[i].Sub(time.Unix(0, int64(b.Start+b.Duration))))
	}
	slices.Sort(offs)
	lo, hi := offs[0], offs[len(offs)-2]
	// The second latest, with slack: a loaded machine may delay one
	// request's timer or its HTTP round trip.
	if lo < iv/graceDivisor || hi > min(iv/5, 2*time.Second)+150*time.Millisecond {
		t.Fatalf("reports arrived %v past their boundary; want within [%s, %s]", offs, iv/graceDivisor, min(iv/5, 2*time.Second))
	}
	// Five of six draws over 100 ms within 5 ms of each other: under 1
	// in 5 000.
	if hi-lo < 5*time.Millisecond {
		t.Fatalf("reports arrived %v past their boundary: no jitter", offs)
	}
}

// TestRetriesAfterTimeout: the agent reads the payload, then answers only
// after HTTPTimeout; the SDK retries and the agent receives the body twice
// (at-least-once). Health counts exactly that one retry after a timeout.
func TestRetriesAfterTimeout(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n == 1 { // accepted, but the answer comes after the SDK gave up
			<-r.Context().Done()
			return true
		}
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), HTTPTimeout: 500 * time.Millisecond, RetryBackoff: time.Millisecond})
	a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: 5, TopLevel: true})
	if err := flushWithin(a, 5*time.Second); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	stop(t, a)
	h := a.Health()
	if h.RetriesAfterTimeout != 1 || h.PayloadsRetried != 1 || h.PayloadsSent != 1 || h.SpansSent != 1 {
		t.Fatalf("retries after a timeout %d, retries %d, payloads sent %d, spans sent %d; want 1 1 1 1",
			h.RetriesAfterTimeout, h.PayloadsRetried, h.PayloadsSent, h.SpansSent)
	}
	reqs := ag.Requests()
	if len(reqs) != 2 || !bytes.Equal(reqs[0].Body, reqs[1].Body) {
		t.Fatalf("the agent received %d requests, want the same body twice", len(reqs))
	}
}

// TestInfoRereadWhileUp: an agent restarted with another peer_tags list
// fails no request, so the SDK reads /info again while the agent takes
// stats (every InfoRecheck × InfoRefresh) and keeps the new list's tags
// from then on. Before, /info was read again only while the agent was off
// or /info failing: db.instance stayed dropped for good.
func TestInfoRereadWhileUp(t *testing.T) {
	defer func(v time.Duration) { minInfoRefresh = v }(minInfoRefresh)
	minInfoRefresh = time.Millisecond
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.6/stats"}, "peer_tags": []string{"peer.service"}})
	a := newStarted(t, Config{AgentURL: ag.URL(), InfoRefresh: 10 * time.Millisecond, SendJitter: -1})
	span := func() *Span {
		return &Span{Name: "q", SpanKind: "client", Duration: 5, Start: time.Now().UnixNano(),
			PeerTags: []string{"peer.service:users", "db.instance:main"}}
	}
	waitFor(t, "the first /info", func() bool { return a.Health().InfoReads >= 1 })
	a.Publish(span())
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.6/stats"}, "peer_tags": []string{"peer.service", "db.instance"}})
	waitFor(t, "/info read again", func() bool { return a.Health().InfoReads >= 2 })
	a.Publish(span())
	stop(t, a)
	var got [][]string
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				got = append(got, g.PeerTags)
			}
		}
	}
	if len(got) != 2 || !slices.Equal(got[0], []string{"peer.service:users"}) ||
		!slices.Equal(got[1], []string{"db.instance:main", "peer.service:users"}) {
		t.Fatalf("groups' peer tags %q; want the first list's, then the new one's", got)
	}
}

// TestStopBoundWithHungAgent: against an agent that never answers, with
// reports still queued for the sender when Stop begins and payloads
// waiting for a retry, the retries used to go on at their backoff while
// the queued reports went out, an HTTPTimeout each, so Stop took several
// times what its doc says (43 failed attempts of 8 payloads, 8.6 s with a
// 200 ms timeout, against a bound near 3 s). From Stop on they wait for
// the stop's window: each payload gets its first attempt, what fits in
// the window, and its last one.
func TestStopBoundWithHungAgent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(_ http.ResponseWriter, r *http.Request, _ int) bool {
		<-r.Context().Done()
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), HTTPTimeout: 200 * time.Millisecond, StopRetryWindow: 100 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond, MaxRetries: 32, SendQueue: 8})
	for range 7 { // reports queued for the sender, each Flush given up at once
		publishN(a, 5, "x")
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = a.Flush(ctx)
		cancel()
	}
	publishN(a, 4, "y")
	before := a.Health().PayloadsFailed
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	h := a.Health()
	payloads := h.PayloadsSent + h.PayloadsDropped
	t.Logf("%d payloads, %d failed attempts during Stop", payloads, h.PayloadsFailed-before)
	if failed := h.PayloadsFailed - before; payloads == 0 || failed > 3*payloads {
		t.Fatalf("%d failed attempts during Stop for %d payloads: want at most 3 each (first, in the window, last)", failed, payloads)
	}
	checkConservation(t, h)
}
