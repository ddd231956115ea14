// This file tests the Server end to end on the happy path: SDKs over both
// sockets merged into what the agent receives, Close without Run, and its
// process metrics; and holds the helpers the server_*_test.go files share
// (startServer, waitFor, validDatagram and the like).

package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// startServer runs a Server on a temporary Unix socket and a loopback UDP
// port, forwarding to agentURL; stop ends it and waits.
func startServer(t *testing.T, cfg relay.ServerConfig) (s *relay.Server, stop func()) {
	t.Helper()
	if cfg.UnixPath == "" {
		cfg.UnixPath = sockdir.Path(t, "relay.sock")
	}
	if cfg.UDPAddr == "" {
		cfg.UDPAddr = "127.0.0.1:0"
	}
	s, err := relay.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx, 5*time.Second)
	}()
	return s, func() {
		cancel()
		<-done
	}
}

func checkIdentity(t *testing.T, st relay.Stats) {
	t.Helper()
	var dropped uint64
	for _, v := range st.SpansDropped {
		dropped += v
	}
	if st.SpansReceived != st.SpansForwarded+dropped+st.SpansPending {
		t.Fatalf("received %d != forwarded %d + dropped %d + pending %d", st.SpansReceived, st.SpansForwarded, dropped, st.SpansPending)
	}
}

// TestEndToEndThroughRelay: 4 aggregators (2 over the Unix socket, 2 over
// UDP) publish the same keys; the relay merges them and the agent receives,
// per key, exactly the hits, errors, top-level hits and durations published,
// with sketches whose counts equal the hits and whose quantiles are within
// 1 % of those of the union of the durations.
func TestEndToEndThroughRelay(t *testing.T) {
	const interval = time.Second // stats.MinBucketInterval
	ag := statstest.New()
	defer ag.Close()
	srv, stopRelay := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Interval: interval, Grace: 100 * time.Millisecond})
	urls := []string{
		"unixgram://" + srv.Addr(relay.Unix), "unixgram://" + srv.Addr(relay.Unix),
		"udp://" + srv.Addr(relay.UDP), "udp://" + srv.Addr(relay.UDP),
	}
	type tally struct {
		hits, errs, top, dur uint64
		union                aggregate.Sketch
	}
	want := map[statstest.GroupKey]*tally{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, u := range urls {
		a, err := stats.New(stats.Config{AgentURL: u, Env: "test", Service: "web", Hostname: "h", TracerVersion: "t/1",
			BucketInterval: interval, SendJitter: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		wg.Go(func() {
			defer func() {
				a.Stop(context.Background())
				if h := a.Health(); h.SpansSent != 3000 {
					t.Errorf("aggregator %d (%s): %+v", i, u, h)
				}
			}()
			for n := range 3000 {
				res := fmt.Sprintf("GET /r/%d", n%20)
				d := int64(1000 + (n*7919+i*104729)%5_000_000)
				sp := &stats.Span{Service: "web", Name: "http.request", Resource: res, SpanKind: "server",
					HTTPStatusCode: 200, Duration: d, TopLevel: n%3 == 0, Error: n%11 == 0}
				if !a.Publish(sp) {
					for !a.Publish(sp) { // inbox full: this test wants every span
						time.Sleep(50 * time.Microsecond)
					}
				}
				mu.Lock()
				k := statstest.GroupKey{Service: "web", Name: "http.request", Resource: res, SpanKind: "server", HTTPStatusCode: 200}
				w := want[k]
				if w == nil {
					w = &tally{}
					want[k] = w
				}
				w.hits++
				w.dur += uint64(d)
				if sp.Error {
					w.errs++
				}
				if sp.TopLevel {
					w.top++
				}
				w.union.Add(float64(d))
				mu.Unlock()
				if n%500 == 0 {
					time.Sleep(100 * time.Millisecond) // spread over several intervals
				}
			}
		})
	}
	wg.Wait()
	stopRelay()
	got, total := statstest.Sum(ag.Requests())
	if total != 4*3000 {
		t.Fatalf("agent received %d hits, want %d; relay %+v", total, 4*3000, srv.Relay().Stats())
	}
	for k, w := range want {
		g := got[k]
		if g == nil || g.Hits != w.hits || g.Errors != w.errs || g.TopLevelHits != w.top || g.Duration != w.dur ||
			g.ErrCount != w.errs || g.OkCount != w.hits-w.errs {
			t.Fatalf("%s: agent has %+v, published hits %d errors %d top %d duration %d", k.Resource, g, w.hits, w.errs, w.top, w.dur)
		}
	}
	// Sketches: merge each key's groups from every request and compare.
	merged := map[string]*aggregate.Sketch{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				g := &b.Groups[i]
				m := merged[g.Resource]
				if m == nil {
					m = &aggregate.Sketch{}
					merged[g.Resource] = m
				}
				for _, s := range []*aggregate.Sketch{g.Ok, g.Err} {
					if s != nil {
						m.Merge(s)
					}
				}
			}
		}
	}
	for k, w := range want {
		m := merged[k.Resource]
		for _, q := range []float64{0.5, 0.9, 0.99} {
			a, b := m.Quantile(q), w.union.Quantile(q)
			if math.Abs(a-b) > 0.01*b {
				t.Fatalf("%s p%v: merged %v, union %v", k.Resource, q*100, a, b)
			}
		}
	}
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.SpansReceived != 4*3000 || st.SpansForwarded != 4*3000 || st.SpansPending != 0 || st.Rejected != [relay.NumReasons]uint64{} {
		t.Fatalf("relay stats %+v", st)
	}
	// Four SDKs in good health: no datagram missing, restarted, repeated,
	// unsequenced or dropped by its sender, no span folded.
	if st.SeqGaps != 0 || st.SeqRestarts != 0 || st.SeqLate != 0 || st.Unsequenced != 0 ||
		st.SenderDroppedPayloads != 0 || st.FoldedSpans != 0 {
		t.Fatalf("relay stats %+v: want no gap, restart, late sequence, unsequenced datagram, sender drop or fold", st)
	}
	// Merged over the sockets, not only summed by the test: a key's groups
	// of one window and identity (the Unix senders' container, if any)
	// reach the agent as one group, in one request. Only spans the relay
	// counted late (after their window's round) may come again with that
	// start, in a later request.
	type at struct {
		cid   string
		start uint64
		key   statstest.GroupKey
	}
	seen := map[at][]uint64{}
	for ri, r := range statstest.Accepted(ag.Requests()) {
		inReq := map[at]bool{}
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				g := &b.Groups[i]
				k := at{r.Payload.ContainerID, b.Start, statstest.GroupKey{Service: g.Service, Name: g.Name,
					Resource: g.Resource, Type: g.Type, SpanKind: g.SpanKind, HTTPStatusCode: g.HTTPStatusCode}}
				if inReq[k] {
					t.Fatalf("request %d: %s at %d twice: not merged", ri, g.Resource, b.Start)
				}
				inReq[k] = true
				seen[k] = append(seen[k], g.Hits)
			}
		}
	}
	var again uint64 // hits in every repeat of a key at a start but its largest
	for _, hs := range seen {
		slices.Sort(hs)
		for _, h := range hs[:len(hs)-1] {
			again += h
		}
	}
	if again > st.LateSpans {
		t.Fatalf("%d hits came again at a start already forwarded, but the relay counted %d late: not merged", again, st.LateSpans)
	}
	if reqs := len(ag.Requests()); reqs >= int(st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP]) {
		t.Fatalf("%d requests for %d datagrams: nothing was merged", reqs, st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP])
	}
}

// TestServerCloseWithoutRun: a Server that Run never starts gives back its
// sockets on Close: the socket file is gone, the UDP port can be bound
// again, and a second Close, or one after Run returned, is a no-op.
func TestServerCloseWithoutRun(t *testing.T) {
	sock := sockdir.Path(t, "relay.sock")
	s, err := relay.NewServer(relay.ServerConfig{UnixPath: sock, UDPAddr: "127.0.0.1:0", AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	udp := s.Addr(relay.UDP)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket file after Close: %v; want it removed", err)
	}
	pc, err := net.ListenPacket("udp", udp)
	if err != nil {
		t.Errorf("binding the UDP address after Close: %v", err)
	} else {
		pc.Close()
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v; want nil", err)
	}

	ran, err := relay.NewServer(relay.ServerConfig{UnixPath: sock, UDPAddr: "-", AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ran.Run(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ran.Close(); err != nil {
		t.Errorf("Close after Run returned: %v; want nil", err)
	}
}

// TestMetricsIncludeProcess: /metrics carries the process's own figures
// beside the relay's counters, so an operator reads the relay's CPU,
// memory and sockets from the same scrape: CPU used so far, a resident
// set, at least the relay's two sockets open and below the limit, and the
// Go runtime's goroutines.
func TestMetricsIncludeProcess(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL()})
	defer stop()
	values := map[string]float64{}
	for _, line := range strings.Split(scrape(srv), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		values[name] = f
	}
	for _, c := range []struct {
		name string
		min  float64
	}{
		{"statsrelay_spans_received_total", 0},
		{"process_cpu_seconds_total", 0.001},
		{"process_resident_memory_bytes", 1 << 20},
		{"process_open_fds", 2},
		{"go_goroutines", 1},
	} {
		v, ok := values[c.name]
		if !ok {
			t.Errorf("/metrics lacks %s", c.name)
		} else if v < c.min {
			t.Errorf("%s = %g, want at least %g", c.name, v, c.min)
		}
	}
	if fds, limit := values["process_open_fds"], values["process_max_fds"]; limit < fds {
		t.Errorf("process_max_fds %g below process_open_fds %g", limit, fds)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// validDatagram is an enveloped payload of one group of hits spans.
func validDatagram(seq uint64, hits uint64) []byte {
	e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "ok"}, Hits: hits, Duration: 10 * hits}
	h := writer.Header{Service: "web", RuntimeID: "hostile-test", Lang: "go"}
	now := uint64(time.Now().Truncate(time.Second).UnixNano())
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: seq})
	return writer.AppendPayload(b, &h, []writer.Bucket{{Start: now, Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
}

// sendIdentities writes n payloads of one group of hits spans in the
// current second's bucket, each its own identity (Env env-<i>) and sender
// (RuntimeID runtime+<i>).
func sendIdentities(t *testing.T, conn net.Conn, runtime string, n int, hits uint64) {
	t.Helper()
	start := uint64(time.Now().Truncate(time.Second).UnixNano())
	for i := range n {
		h := writer.Header{Service: "web", Env: "env-" + strconv.Itoa(i), RuntimeID: runtime + strconv.Itoa(i), Lang: "go"}
		e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: hits, Duration: 10 * hits}
		b := writer.AppendPayload(nil, &h, []writer.Bucket{{Start: start, Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
}

// hostSenderDatagram is what TestUnixAgentDropsHostSender's sender sends:
// 4 spans under a container id its credentials contradict.
func hostSenderDatagram() []byte {
	e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: 4, Duration: 40}
	h := writer.Header{Service: "web", RuntimeID: "host-sender", Lang: "go",
		ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	return writer.AppendPayload(b, &h, []writer.Bucket{{Start: uint64(time.Now().Truncate(time.Second).UnixNano()),
		Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
}

// canceled is a context already done: Run then stops at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// dialUDP connects a UDP socket to srv's.
func dialUDP(t *testing.T, srv *relay.Server) net.Conn {
	t.Helper()
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// mergeOverUDP sends srv a valid datagram of hits spans (sequence 1) over
// UDP and waits until the relay has merged it.
func mergeOverUDP(t *testing.T, srv *relay.Server, hits uint64) {
	t.Helper()
	conn := dialUDP(t, srv)
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, hits)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram merged", func() bool { return srv.Relay().Stats().SpansReceived == hits })
}
