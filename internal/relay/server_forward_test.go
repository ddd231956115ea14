// This file tests the forward to the agent: what each request carries
// (fields, Type twins, the relay's runtime id and sequence, the agent's
// peer tag list) and how rounds run in parallel.

package relay_test

import (
	"bytes"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// TestForwardKeepsFieldsTheSDKNeverSets: a tracer's groups with DBType,
// SpanDerivedPrimaryTags and AdditionalMetricTags reach the agent intact,
// merged by them (tag lists as sets).
func TestForwardKeepsFieldsTheSDKNeverSets(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	conn := dialUDP(t, srv)
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	for i, tags := range [][]string{{"a:1", "b:2"}, {"b:2", "a:1"}} {
		g := writer.Group{DBType: "postgres", SpanDerivedPrimaryTags: tags, AdditionalMetricTags: []string{"team:core"}}
		g.Service, g.Name, g.Hits, g.Duration = "db", "query", 5, 50
		pl := writer.Payload{Header: writer.Header{Service: "db", RuntimeID: "r" + strconv.Itoa(i)},
			Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: []writer.Group{g}}}}
		if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	waitFor(t, "two datagrams", func() bool { return srv.Relay().Stats().SpansReceived == 10 })
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 || len(reqs[0].Payload.Buckets) != 1 || len(reqs[0].Payload.Buckets[0].Groups) != 1 {
		t.Fatalf("want one request of one merged group, got %d requests", len(reqs))
	}
	g := reqs[0].Payload.Buckets[0].Groups[0]
	if g.Hits != 10 || g.DBType != "postgres" || strings.Join(g.SpanDerivedPrimaryTags, ",") != "a:1,b:2" ||
		strings.Join(g.AdditionalMetricTags, ",") != "team:core" {
		t.Fatalf("merged group %+v", g)
	}
}

// TestTypeTwinsReachAgentInSeparateBuckets: the agent (v0.85.4) merges a
// bucket's duplicate groups by a key without Type, so groups of two
// senders differing only in Type reach it, through the forward's packing,
// in separate buckets of the same start; equal ones still merge.
func TestTypeTwinsReachAgentInSeparateBuckets(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	conn := dialUDP(t, srv)
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	for i, types := range [][]string{{"web", "sql"}, {"sql", "http"}} {
		var gs []writer.Group
		for j, typ := range types {
			g := writer.Group{}
			g.Service, g.Name, g.Resource, g.Type = "web", "op", "GET /", typ
			g.Hits = uint64(1 + i*2 + j) // web 1, sql 2+3, http 4
			g.Duration = 10 * g.Hits
			gs = append(gs, g)
		}
		pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r" + strconv.Itoa(i)},
			Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: gs}}}
		if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	waitFor(t, "two datagrams", func() bool { return srv.Relay().Stats().SpansReceived == 10 })
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	got := map[string]uint64{}
	for _, b := range reqs[0].Payload.Buckets {
		if b.Start != start || len(b.Groups) != 1 {
			t.Fatalf("bucket at %d of %d groups, want each at %d with one group: %+v", b.Start, len(b.Groups), start, reqs[0].Payload.Buckets)
		}
		got[b.Groups[0].Type] += b.Groups[0].Hits
	}
	if len(reqs[0].Payload.Buckets) != 3 || got["web"] != 1 || got["sql"] != 5 || got["http"] != 4 {
		t.Fatalf("%d buckets, hits by Type %v; want 3 buckets: web 1, sql 5, http 4", len(reqs[0].Payload.Buckets), got)
	}
}

// TestForwardCarriesRelayRuntimeIDAndSequence: every request carries the
// relay's own runtime id, not a sender's (it merges many), and a sequence
// that counts the relay's payloads 1, 2, 3 … across identities and rounds;
// the container headers only when a container id is known.
func TestForwardCarriesRelayRuntimeIDAndSequence(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		Grace: 50 * time.Millisecond})
	defer stop()
	conn := dialUDP(t, srv)
	defer conn.Close()
	seq := uint64(0)
	for round := range 2 {
		seq++
		start := uint64(time.Now().Truncate(time.Second).UnixNano())
		for _, env := range []string{"a", "b"} { // two identities: two requests a round
			g := writer.Group{}
			g.Service, g.Name, g.Hits, g.Duration = "web", "op", 2, 20
			pl := writer.Payload{Header: writer.Header{Service: "web", Env: env, RuntimeID: "sender-" + env, Sequence: 9},
				Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: []writer.Group{g}}}}
			if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: seq}))); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "a round's two requests", func() bool { return len(ag.Requests()) == 2*(round+1) })
	}
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	id := reqs[0].Payload.RuntimeID
	seqs := map[uint64]bool{}
	for _, r := range reqs {
		if r.Payload.RuntimeID != id || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
			t.Fatalf("runtime ids %q and %q: want the relay's one, 32 hex digits", id, r.Payload.RuntimeID)
		}
		seqs[r.Payload.Sequence] = true
		// A UDP sender has no origin: no container headers, not empty ones.
		for _, h := range []string{"Datadog-Container-ID", "Datadog-Entity-ID"} {
			if _, ok := r.Header[h]; ok {
				t.Fatalf("header %s %q on a request without a container id", h, r.Header.Get(h))
			}
		}
	}
	if !seqs[1] || !seqs[2] || !seqs[3] || !seqs[4] {
		t.Fatalf("sequences %v, want 1, 2, 3, 4", seqs)
	}
}

// TestSlowRequestHoldsOneSlot: an agent slow to answer one request holds
// that request's slot, not the identities after it (README, -forward-parallel):
// it holds the round's first request for 1.5 s and answers every other at
// once, and the 69 other identities reach it meanwhile (ForwardParallel 8).
// The round used to go out in chunks, each waiting for its slowest request.
func TestSlowRequestHoldsOneSlot(t *testing.T) {
	var n atomic.Int32
	var mu sync.Mutex
	var arrivals []time.Time
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/info" {
			_, _ = io.WriteString(w, `{"endpoints":["/v0.6/stats"]}`)
			return
		}
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		if n.Add(1) == 1 {
			time.Sleep(1500 * time.Millisecond)
		}
	}))
	defer agent.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: agent.URL, UnixPath: "-", Interval: time.Second,
		Grace: 50 * time.Millisecond, AgentTimeout: 5 * time.Second, ForwardParallel: 8})
	defer stop()
	conn := dialUDP(t, srv)
	defer conn.Close()
	// Early in a second: the 70 datagrams are merged before that window's
	// round, which forwards them all.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
	sendIdentities(t, conn, "slow-", 70, 3)
	waitFor(t, "70 identities forwarded", func() bool { return srv.Relay().Stats().SpansForwarded == 70*3 })
	mu.Lock()
	defer mu.Unlock()
	late := 0
	for _, a := range arrivals {
		if a.Sub(arrivals[0]) > time.Second {
			late++
		}
	}
	if len(arrivals) != 70 || late > 0 {
		t.Fatalf("%d requests, %d of them more than 1 s after the round's first: held back by the one slow request", len(arrivals), late)
	}
}

// TestAgentPeerTagList: the agent's /info peer_tags list applies to what
// the relay merges, as an SDK posting itself applies it: tags of other keys
// are left out, and groups that differed only in them merge.
func TestAgentPeerTagList(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"version": "7.99.0", "endpoints": []string{"/v0.6/stats", "/info"},
		"peer_tags": []string{"peer.service", "db.instance"}})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	defer stop()
	waitFor(t, "the relay to read /info", func() bool { return srv.Relay().Stats().PeerTagKeys == 2 })
	conn := dialUDP(t, srv)
	defer conn.Close()
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	for i := range 3 {
		g := writer.Group{}
		g.Service, g.Name, g.SpanKind, g.Hits, g.Duration = "web", "pg.query", "client", 5, 50
		g.PeerTags = []string{"peer.hostname:pg-" + strconv.Itoa(i), "peer.service:users-db", "db.instance:users", "nokey"}
		pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r" + strconv.Itoa(i)},
			Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: []writer.Group{g}}}}
		if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three datagrams", func() bool { return srv.Relay().Stats().SpansReceived == 15 })
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 || len(reqs[0].Payload.Buckets) != 1 || len(reqs[0].Payload.Buckets[0].Groups) != 1 {
		t.Fatalf("want one request of one merged group, got %+v", reqs)
	}
	g := reqs[0].Payload.Buckets[0].Groups[0]
	if g.Hits != 15 || strings.Join(g.PeerTags, ",") != "db.instance:users,peer.service:users-db" {
		t.Fatalf("merged group: %d hits, peer tags %q; want 15 hits under the listed keys only", g.Hits, g.PeerTags)
	}
}

// TestAgentWithoutPeerTagList: an agent whose /info has no peer_tags list
// (null: its peer_tags_aggregation is off) keys its own stats on no peer
// tag; the relay, once it has read that, keeps none either, not even an
// internal span's _dd.base_service, where it used to keep every key.
func TestAgentWithoutPeerTagList(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"version": "7.99.0", "endpoints": []string{"/v0.6/stats", "/info"}, "peer_tags": nil})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	defer stop()
	waitFor(t, "the relay to read /info", func() bool { return srv.Relay().Stats().PeerTagKeys == 0 })
	conn := dialUDP(t, srv)
	defer conn.Close()
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	var groups []writer.Group
	for kind, tag := range map[string]string{"client": "peer.service:users-db", "internal": "_dd.base_service:orig"} {
		g := writer.Group{}
		g.Service, g.Name, g.SpanKind, g.Hits, g.Duration = "web", "op", kind, 2, 20
		g.PeerTags = []string{tag}
		groups = append(groups, g)
	}
	pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r"},
		Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: groups}}}
	if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	n := 0
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				if n++; len(g.PeerTags) != 0 {
					t.Errorf("%s group forwarded with peer tags %q; want none", g.SpanKind, g.PeerTags)
				}
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d groups at the agent, want 2", n)
	}
}

// TestAgentPeerTagListKeepsBaseService: as the agent (and the SDK posting
// itself) does, the one _dd.base_service tag of an internal span or one
// without kind is kept whether the agent's list holds its key or not; a
// client's, a server's or another kind's is cut like any key not in the
// list.
func TestAgentPeerTagListKeepsBaseService(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"version": "7.99.0", "endpoints": []string{"/v0.6/stats", "/info"},
		"peer_tags": []string{"peer.service"}})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	defer stop()
	waitFor(t, "the relay to read /info", func() bool { return srv.Relay().Stats().PeerTagKeys == 1 })
	conn := dialUDP(t, srv)
	defer conn.Close()
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	var groups []writer.Group
	for _, kind := range []string{"internal", "", "Client", "server", "weird"} {
		g := writer.Group{}
		g.Service, g.Name, g.SpanKind, g.Hits, g.Duration = "web", "op", kind, 2, 20
		g.PeerTags = []string{"_dd.base_service:orig-" + kind, "peer.service:svc"}
		if kind != "Client" {
			g.PeerTags = g.PeerTags[:1]
		}
		groups = append(groups, g)
	}
	pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r"},
		Buckets: []writer.DecodedBucket{{Start: start, Duration: uint64(time.Second), Groups: groups}}}
	if _, err := conn.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 10 })
	stop()
	got := map[string]string{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				got[g.SpanKind] = strings.Join(g.PeerTags, ",")
			}
		}
	}
	want := map[string]string{"internal": "_dd.base_service:orig-internal", "": "_dd.base_service:orig-", "Client": "peer.service:svc",
		"server": "", "weird": ""}
	if !maps.Equal(got, want) {
		t.Fatalf("peer tags by kind at the agent %q, want %q", got, want)
	}
}

// TestAgentPeerTagListReread: while the agent takes stats, the relay reads
// /info again every ten InfoRefresh: a list the agent changed (a restart
// with another configuration fails no request) takes effect.
func TestAgentPeerTagListReread(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	info := func(keys ...string) map[string]any {
		return map[string]any{"version": "7.99.0", "endpoints": []string{"/v0.6/stats", "/info"}, "peer_tags": keys}
	}
	ag.SetInfo(info("peer.service", "db.instance"))
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		Grace: 10 * time.Millisecond, InfoRefresh: 100 * time.Millisecond})
	defer stop()
	waitFor(t, "the relay to read /info", func() bool { return srv.Relay().Stats().PeerTagKeys == 2 })
	ag.SetInfo(info("peer.service", "db.instance", "peer.hostname"))
	waitFor(t, "the relay to read the new list", func() bool { return srv.Relay().Stats().PeerTagKeys == 3 })
}

// TestForwardParallel: a forward round has ForwardParallel requests in
// flight at once, not one: while the agent holds the first ones, the
// other identities' requests are already out, up to the bound and no
// further; once it answers, every span is forwarded.
func TestForwardParallel(t *testing.T) {
	const parallel, identities, hits = 3, 7, 5
	ag := statstest.New()
	defer ag.Close()
	var inFlight, peak, started atomic.Int64
	release := make(chan struct{})
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		started.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false // then the agent takes it as usual
	})
	var log bytes.Buffer // read once the relay stopped
	s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: ag.URL(),
		Interval: time.Second, Grace: 50 * time.Millisecond, ForwardParallel: parallel,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer stop() // a second stop returns at once
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Early in a second, so that every identity lands in the same round.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
	sendIdentities(t, conn, "par-", identities, hits)
	waitFor(t, "the datagrams", func() bool { return s.Relay().Stats().SpansReceived == identities*hits })
	waitFor(t, "requests in flight", func() bool { return inFlight.Load() == parallel })
	// Room for a request beyond the bound to show, and a round longer than
	// half the interval, which the relay reports.
	const held = 600 * time.Millisecond
	time.Sleep(held)
	if n := started.Load(); n != parallel {
		t.Errorf("%d requests started while the agent held %d, want %d", n, parallel, parallel)
	}
	close(release)
	waitFor(t, "every span forwarded", func() bool { return s.Relay().Stats().SpansForwarded == identities*hits })
	if p := peak.Load(); p != parallel {
		t.Errorf("peak requests in flight %d, want %d", p, parallel)
	}
	if reqs := statstest.Accepted(ag.Requests()); len(reqs) != identities {
		t.Errorf("agent accepted %d requests, want one per identity: %d", len(reqs), identities)
	}
	checkIdentity(t, s.Relay().Stats())
	text := scrape(s)
	var last float64
	if v, ok := metricValue(text, "statsrelay_forward_last_round_seconds"); ok {
		last, _ = strconv.ParseFloat(v, 64)
	}
	rounds, ok := metricValue(text, "statsrelay_forward_rounds_total")
	if !ok {
		rounds = "missing"
	}
	// The round that waited on the agent is the last one unless another
	// boundary passed since: then the latest round is short.
	switch {
	case rounds == "missing" || rounds == "0":
		t.Errorf("statsrelay_forward_rounds_total %s, want at least 1", rounds)
	case rounds == "1" && last < held.Seconds():
		t.Errorf("statsrelay_forward_last_round_seconds %g after the one round, held %s", last, held)
	}
	if !strings.Contains(text, "\nstatsrelay_forward_slow_rounds_total 1\n") {
		t.Errorf("statsrelay_forward_slow_rounds_total is not 1 after the one slow round:\n%s", text)
	}
	stop()
	if !strings.Contains(log.String(), "forward rounds took more than half the interval") || !strings.Contains(log.String(), " rounds=1") {
		t.Errorf("no warning of the %s round (last round metric %gs) in the log:\n%s", held, last, log.String())
	}
}

// TestForwardInSequence: with -forward-parallel 1 a round encodes each
// payload while the one before it is in flight and posts it once that one
// is answered; nine identities still reach the agent once each, every span
// forwarded.
func TestForwardInSequence(t *testing.T) {
	const identities, hits = 9, 3
	ag := statstest.New()
	defer ag.Close()
	s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: ag.URL(),
		Interval: time.Second, Grace: 50 * time.Millisecond, ForwardParallel: 1,
		Logger: slog.New(slog.DiscardHandler)})
	defer stop()
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sendIdentities(t, conn, "chunk-", identities, hits)
	waitFor(t, "every span forwarded", func() bool { return s.Relay().Stats().SpansForwarded == identities*hits })
	envs := map[string]int{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		envs[r.Payload.Env]++
	}
	if len(envs) != identities {
		t.Errorf("agent got identities %v, want %d, one request each", envs, identities)
	}
	for env, n := range envs {
		if n != 1 {
			t.Errorf("%s: %d requests, want 1", env, n)
		}
	}
	checkIdentity(t, s.Relay().Stats())
}

// TestForwardParallelUnderAgentLimit: the agent's /info gives a body limit
// below the relay's MaxPayloadBytes, and each identity's payload is over
// it. The payloads are packed to the agent's limit and go out
// ForwardParallel at once, as any others, every one taken (none refused
// as too large).
func TestForwardParallelUnderAgentLimit(t *testing.T) {
	const parallel, identities, groups, limit = 3, 4, 40, 1500
	ag := statstest.New()
	defer ag.Close()
	ag.SetMaxRequestBytes(limit)
	var inFlight, peak atomic.Int64
	release := make(chan struct{})
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false
	})
	s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: ag.URL(),
		Interval: time.Second, Grace: 50 * time.Millisecond, ForwardParallel: parallel})
	defer stop()
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
	start := uint64(time.Now().Truncate(time.Second).UnixNano())
	for i := range identities {
		h := writer.Header{Service: "web", Env: "env-" + strconv.Itoa(i), RuntimeID: "lim-" + strconv.Itoa(i), Lang: "go"}
		var es []*aggregate.Entry
		for g := range groups {
			es = append(es, &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "resource-" + strconv.Itoa(g)}, Hits: 1, Duration: 10})
		}
		b := writer.AppendPayload(nil, &h, []writer.Bucket{{Start: start, Duration: uint64(time.Second), Groups: es}})
		if len(b) < 2*limit {
			t.Fatalf("a payload of %d bytes: want it over twice the agent's limit %d", len(b), limit)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the datagrams", func() bool { return s.Relay().Stats().SpansReceived == identities*groups })
	waitFor(t, "requests in flight", func() bool { return inFlight.Load() == parallel })
	close(release)
	waitFor(t, "every span forwarded", func() bool { return s.Relay().Stats().SpansForwarded == identities*groups })
	if p := peak.Load(); p != parallel {
		t.Errorf("peak requests in flight %d, want %d", p, parallel)
	}
	for _, r := range ag.Requests() {
		if r.Err != nil || r.Status != http.StatusOK {
			t.Errorf("the agent answered %d (%v)", r.Status, r.Err)
		}
	}
	checkIdentity(t, s.Relay().Stats())
}

// TestForwardRoundLoggedAtDebug: at debug level each forward round logs
// what it sent: here the stop's round, every window held, one identity in
// one request of the 7 spans received.
func TestForwardRoundLoggedAtDebug(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var buf bytes.Buffer // read after the stop, the handler's last write
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	mergeOverUDP(t, srv, 7)
	stop()
	var rounds []string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, `msg="statsrelay: forward round"`) {
			rounds = append(rounds, l)
		}
	}
	if len(rounds) != 1 {
		t.Fatalf("%d forward round lines, want the stop's one:\n%s", len(rounds), buf.String())
	}
	for _, want := range []string{"level=DEBUG", " all_held=true", " identities=1", " requests=1", " spans=7 ", " spans_unattributable=0", " took="} {
		if !strings.Contains(rounds[0], want) {
			t.Errorf("round line %q lacks %q", rounds[0], want)
		}
	}
	if got := srv.Relay().Stats().SpansForwarded; got != 7 {
		t.Errorf("forwarded %d spans, want 7", got)
	}
}

// TestSlowRoundHoldsWithinTheBounds: a forward round that waits on a slow
// agent keeps the groups it harvested charged against MaxHeldBytes until
// it has encoded them, so the senders' next spans fold or drop (counted)
// instead of growing a second bound's worth beside them: the heap grows by
// at most MaxHeldBytes and a quarter (the bodies in flight, a few 64 KiB,
// and the runtime's slack).
func TestSlowRoundHoldsWithinTheBounds(t *testing.T) {
	const maxBytes = 16 << 20
	ag := statstest.New()
	defer ag.Close()
	release, blocked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		once.Do(func() { close(blocked) })
		select {
		case <-release:
		case <-r.Context().Done(): // the test failed: ag.Close waits for the handlers
		}
		return false
	})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		MaxHeldBytes: maxBytes, MaxGroups: 1 << 20, ForwardParallel: 1, AgentTimeout: time.Minute})
	defer stop()
	r := srv.Relay()
	// The first fill in one window, harvested by the round that blocks.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	before := liveHeap()
	fillIdentities(t, r, "a", 400)
	held := r.Stats().HeldBytes
	if held < maxBytes*3/4 {
		t.Fatalf("the first fill holds %d bytes, want most of %d", held, maxBytes)
	}
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("no forward round started")
	}
	lost := func(st relay.Stats) uint64 {
		return st.FoldedSpans + st.SpansDropped[relay.DropMaxBytes] + st.SpansDropped[relay.DropMaxGroups]
	}
	lostBefore := lost(r.Stats())
	fillIdentities(t, r, "b", 400) // 1600 spans
	grew := liveHeap() - before
	st := r.Stats()
	if st.HeldBytes > maxBytes || grew > maxBytes+maxBytes/4 {
		t.Errorf("during the slow round: %d bytes held (bound %d), heap grew %d bytes", st.HeldBytes, maxBytes, grew)
	}
	// Room for new groups: the batch the round sent before it blocked
	// (one identity, 4 spans), and as much again for slack (the next
	// batch waits in Send, unreleased).
	if n := lost(st) - lostBefore; n < 1600-2*4 {
		t.Errorf("the second fill found room beside the round's groups: %d of its 1600 spans folded or dropped (folded %d, dropped %v)",
			n, st.FoldedSpans, st.SpansDropped)
	}
	close(release)
	stop()
	st = r.Stats()
	checkIdentity(t, st)
	if st.SpansPending != 0 || st.Groups != 0 || st.HeldBytes != 0 {
		t.Errorf("after the stop: %d spans pending, %d groups, %d bytes held", st.SpansPending, st.Groups, st.HeldBytes)
	}
}

// fillIdentities merges n identities (tag and a number in Env) of 4
// groups each, their resources 16 KiB long, in 2 datagrams per identity.
func fillIdentities(t *testing.T, r *relay.Relay, tag string, n int) {
	t.Helper()
	long := strings.Repeat("r", 16<<10)
	start := uint64(time.Now().Truncate(time.Second).UnixNano())
	for i := range n {
		h := writer.Header{Service: "web", Env: tag + "-" + strconv.Itoa(i), RuntimeID: tag + strconv.Itoa(i), Lang: "go"}
		for d := range 2 {
			var es []*aggregate.Entry
			for g := range 2 {
				es = append(es, &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op",
					Resource: strconv.Itoa(d*2+g) + long}, Hits: 1, Duration: 10})
			}
			b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: uint64(d + 1)})
			b = writer.AppendPayload(b, &h, []writer.Bucket{{Start: start, Duration: uint64(time.Second), Groups: es}})
			if err := r.Accept(b, 0, relay.UDP); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
