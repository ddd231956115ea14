// This file tests the Server end to end in trouble: hostile and flooding
// senders, agent faults, outages and clock steps, stops and starts,
// container origins, its metrics and its log.

package relay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

const testContainer = "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"

// procRoot is a fake /proc in which this process runs in testContainer.
func procRoot(t *testing.T) string {
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	line := "0::/system.slice/docker-" + testContainer + ".scope\n"
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
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

// TestOriginReachesAgent: the container id read from <proc-root>/<pid>/cgroup
// of the sending process reaches the agent's headers and the payload, though
// the SDK itself set none.
func TestOriginReachesAgent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: procRoot(t), UDPAddr: "-"})
	a, err := stats.New(stats.Config{AgentURL: "unixgram://" + srv.Addr(relay.Unix), Service: "web", TracerVersion: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	a.Publish(&stats.Span{Service: "web", Name: "op", SpanKind: "server", Duration: 5})
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop()
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	h := reqs[0].Header
	if h.Get("Datadog-Container-ID") != testContainer || h.Get("Datadog-Entity-ID") != "ci-"+testContainer ||
		reqs[0].Payload.ContainerID != testContainer {
		t.Fatalf("container header %q, entity %q, payload %q; want %s", h.Get("Datadog-Container-ID"),
			h.Get("Datadog-Entity-ID"), reqs[0].Payload.ContainerID, testContainer)
	}
	// The payload carries no language version: the relay sends no empty
	// header for it.
	if _, ok := h["Datadog-Meta-Lang-Version"]; ok || h.Get("Datadog-Meta-Lang") != "go" || h.Get("Datadog-Meta-Tracer-Version") != "v1.2.3" {
		t.Fatalf("language headers %q", h)
	}
}

// TestUnixAgentNeverMisfiles: a relay in a container forwarding to the
// agent's Unix socket never sends a request without a container id, which
// the agent would file under the relay's own container. With origin
// detection on, a Unix sender's stats go with its container id and a UDP
// sender's are dropped (counted); with it off, both are dropped.
func TestUnixAgentNeverMisfiles(t *testing.T) {
	for _, origin := range []bool{true, false} {
		t.Run(fmt.Sprintf("origin=%v", origin), func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "apm.socket")
			ag, err := statstest.NewUnix(sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ag.Close()
			srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: origin, ProcRoot: procRoot(t)})
			publishThreeEach(t, srv)
			stop()
			wantReqs, wantForwarded, wantDropped := 1, uint64(3), uint64(3)
			if !origin {
				wantReqs, wantForwarded, wantDropped = 0, 0, 6
			}
			reqs := ag.Requests()
			if len(reqs) != wantReqs || wantReqs == 1 && reqs[0].Header.Get("Datadog-Container-ID") != testContainer {
				t.Fatalf("%d requests, want %d (each with the Unix sender's container id)", len(reqs), wantReqs)
			}
			st := srv.Relay().Stats()
			if st.SpansForwarded != wantForwarded || st.SpansDropped[relay.DropUnattributable] != wantDropped {
				t.Fatalf("forwarded %d, unattributable %d; want %d and %d",
					st.SpansForwarded, st.SpansDropped[relay.DropUnattributable], wantForwarded, wantDropped)
			}
			checkIdentity(t, st)
		})
	}
}

// publishThreeEach runs an SDK over srv's Unix socket, then one over its
// UDP socket, each publishing 3 server spans named after its transport
// ("unix", "udp:") and stopping.
func publishThreeEach(t *testing.T, srv *relay.Server) {
	t.Helper()
	for _, u := range []string{"unixgram://" + srv.Addr(relay.Unix), "udp://" + srv.Addr(relay.UDP)} {
		a, err := stats.New(stats.Config{AgentURL: u, Service: "web"})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		for range 3 {
			a.Publish(&stats.Span{Service: "web", Name: u[:4], SpanKind: "server", Duration: 5})
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBurstOfThousandSenders: 1000 senders' reports reach the Unix socket
// in the same instant; the kernel queues 10, the senders wait within their
// bound, and nothing is lost. The relay runs in its own process, as it does
// beside real senders.
func TestBurstOfThousandSenders(t *testing.T) {
	// Timing-bound (each sender waits at most 100 ms): it runs where
	// .ci/test asks, alone and without the race detector, not beside other
	// packages' tests competing for the same cores.
	if os.Getenv("SPANSTATS_BURST_TEST") == "" || raceEnabled {
		t.Skip("set SPANSTATS_BURST_TEST=1 and run without -race (as .ci/test does)")
	}
	const senders = 1000
	ag := statstest.New()
	defer ag.Close()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	proc := startRelayProcess(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: sock, UDPAddr: "-"})
	aggs := make([]*stats.Aggregator, senders)
	for i := range aggs {
		a, err := stats.New(stats.Config{AgentURL: "unixgram://" + sock, Service: "web",
			InboxSize: 16, SendJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		a.Publish(&stats.Span{Service: "web", Name: "op", Resource: strconv.Itoa(i % 7), SpanKind: "server", Duration: 5})
		aggs[i] = a
	}
	// Let every consumer take its span, then flush all at once.
	waitFor(t, "every span counted", func() bool {
		for _, a := range aggs {
			if a.Health().Counted != 1 {
				return false
			}
		}
		return true
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range aggs {
		wg.Go(func() {
			<-start
			if err := a.Flush(context.Background()); err != nil {
				t.Errorf("Flush: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	var sent, dropped, failed uint64
	for _, a := range aggs {
		a.Stop(context.Background())
		h := a.Health()
		sent += h.SpansSent
		dropped += h.PayloadsDropped
		failed += h.PayloadsFailed
	}
	st := proc.stop(t)
	t.Logf("%d senders: %d failed attempts, %d datagrams", senders, failed, st.Datagrams[relay.Unix])
	if sent != senders || dropped != 0 || st.SpansReceived != senders || st.SpansForwarded != senders ||
		st.SenderDroppedPayloads != 0 || st.SeqGaps != 0 {
		t.Fatalf("sent %d, dropped %d; relay received %d forwarded %d, senders dropped %d, gaps %d; want %d everywhere, 0 lost",
			sent, dropped, st.SpansReceived, st.SpansForwarded, st.SenderDroppedPayloads, st.SeqGaps, senders)
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != senders {
		t.Fatalf("agent received %d hits, want %d", hits, senders)
	}
	checkIdentity(t, st)
}

// floodUDP starts three senders writing valid datagrams to the UDP
// address as fast as they can, kept sending once the relay refuses them;
// the function it returns stops them and waits (calling it again is a
// no-op).
func floodUDP(t *testing.T, addr string) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			d := validDatagram(uint64(g)<<32+1, 5)
			for !done.Load() {
				_, _ = c.Write(d)
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// TestStopDrainIsBounded: senders that never let the UDP socket empty do
// not keep the relay from stopping: Run returns about StopDrain after its
// context ends (the readers, one datagram per recvmmsg, then close the
// socket), and what it took is accounted for.
func TestStopDrainIsBounded(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	const drain = 100 * time.Millisecond
	s, stopRelay := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: ag.URL(),
		BatchSize: 1, Workers: 1, Queue: 1, StopDrain: drain, Logger: slog.New(slog.DiscardHandler)})
	defer floodUDP(t, s.Addr(relay.UDP))()
	waitFor(t, "the flood to reach the relay", func() bool { return s.Relay().Stats().Datagrams[relay.UDP] > 1000 })
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopRelay()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still serving 10 s after its context ended, under a flood")
	}
	// Slack for a loaded machine: the forward after the drain, to a live agent.
	if took := time.Since(start); took > drain+2*time.Second {
		t.Fatalf("Run took %s to stop under a flood, StopDrain %s", took, drain)
	}
	checkIdentity(t, s.Relay().Stats())
}

// TestStopLosesNothingSilently: while a UDP flood keeps the relay's UDP
// reader draining after Run's context ended, a datagram sent to the Unix
// socket (whose reader finished at once) is either refused where the
// sender sees it (ErrNoRelay: the path is gone) or read and counted —
// never taken by the kernel and dropped unseen when the socket closes.
func TestStopLosesNothingSilently(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	path := filepath.Join(t.TempDir(), "relay.sock")
	s, stopRelay := startServer(t, relay.ServerConfig{UnixPath: path, AgentURL: ag.URL(),
		BatchSize: 1, Workers: 1, Queue: 1, StopDrain: 3 * time.Second, SpinWait: -1,
		Logger: slog.New(slog.DiscardHandler)})
	stopFlood := floodUDP(t, s.Addr(relay.UDP))
	defer stopFlood()
	waitFor(t, "the flood to reach the relay", func() bool { return s.Relay().Stats().Datagrams[relay.UDP] > 1000 })
	snd, err := dgram.DialUnixgram(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopRelay()
	}()
	time.Sleep(300 * time.Millisecond) // the Unix reader has drained its empty socket
	werr := snd.Write(validDatagram(1, 1000))
	stopFlood()
	<-done
	st := s.Relay().Stats()
	checkIdentity(t, st)
	switch {
	case werr == nil && st.Datagrams[relay.Unix] != 1:
		t.Fatalf("a datagram the relay's Unix socket took during the stop was neither read nor refused: unix datagrams %d", st.Datagrams[relay.Unix])
	case werr != nil && !errors.Is(werr, dgram.ErrNoRelay):
		t.Fatalf("Write during the stop: %v, want ErrNoRelay or success", werr)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket file is still there after the stop: %v", err)
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

// TestHostileInput: random bytes, cut payloads, oversized datagrams, huge
// declared lengths and wrong types, then a valid datagram: the relay keeps
// serving, counts every reject by reason, forwards the valid one exactly,
// and its heap (after a GC) stays within 1 MiB of where it started.
func TestHostileInput(t *testing.T) {
	const maxDatagram = 16 << 10
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", MaxDatagram: maxDatagram})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	rng := rand.New(rand.NewPCG(1, 2))
	valid := validDatagram(1, 1)
	huge := func(prefix ...byte) []byte { // a map32/array32/str32 claiming 4 G entries
		return append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), prefix...)
	}
	var malformed, truncated, invalid, sentBytes int
	send := func(b []byte) {
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		sentBytes += len(b)
	}
	for i := range 3000 {
		switch i % 6 {
		case 0: // random bytes, sometimes starting like a map
			b := make([]byte, 1+rng.IntN(2000))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if b[0]&0xf0 == 0x80 || b[0] == 0xde || b[0] == 0xdf || (len(b) >= 4 && string(b[:4]) == "SSR1") {
				b[0] = 0xc1 // never a valid first byte
			}
			send(b)
			malformed++
		case 1: // a valid payload cut short
			send(valid[:writer.EnvelopeSize+1+rng.IntN(len(valid)-writer.EnvelopeSize-2)])
			malformed++
		case 2: // over the limit
			send(append(valid, make([]byte, maxDatagram)...))
			truncated++
		case 3: // huge declared lengths
			send(huge(0xdf, 0xff, 0xff, 0xff, 0xff, 0xa5, 'S', 't', 'a', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff))
			malformed++
		case 4: // wrong type: Stats is a string
			send(huge(0x81, 0xa5, 'S', 't', 'a', 't', 's', 0xa3, 'b', 'a', 'd'))
			malformed++
		case 5: // decodes, but more errors than hits
			b := validDatagram(1, 1)
			e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op"}, Hits: 1, Errors: 5, Duration: 1}
			h := writer.Header{Service: "web"}
			b = writer.AppendPayload(b[:writer.EnvelopeSize], &h, []writer.Bucket{{Start: 1e18, Duration: 1e9, Groups: []*aggregate.Entry{e}}})
			send(b)
			invalid++
		}
		if i%200 == 0 {
			time.Sleep(time.Millisecond) // stay under the socket buffer: this test counts, not floods
		}
	}
	send(validDatagram(2, 7))
	waitFor(t, "every datagram read", func() bool { return srv.Relay().Stats().Datagrams[relay.UDP] == 3001 })
	waitFor(t, "every datagram accepted or rejected", func() bool {
		st := srv.Relay().Stats()
		return st.SpansReceived == 7 && st.Rejected[relay.Malformed]+st.Rejected[relay.Truncated]+st.Rejected[relay.Invalid] == 3000
	})
	runtime.GC() // what is still reachable: what the relay keeps
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap grew by %d KiB over %d KiB of hostile datagrams", (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10, sentBytes>>10)
	stop()
	st := srv.Relay().Stats()
	if got := st.Rejected; got[relay.Malformed] != uint64(malformed) || got[relay.Truncated] != uint64(truncated) || got[relay.Invalid] != uint64(invalid) {
		t.Fatalf("rejected %v (truncated, malformed, invalid), want [%d %d %d]", got, truncated, malformed, invalid)
	}
	if st.SpansReceived != 7 || st.SpansForwarded != 7 {
		t.Fatalf("received %d forwarded %d, want the valid datagram's 7", st.SpansReceived, st.SpansForwarded)
	}
	totals, hits := statstest.Sum(ag.Requests())
	got := totals[statstest.GroupKey{Service: "web", Name: "op", Resource: "ok"}]
	if hits != 7 || len(totals) != 1 || got == nil || got.Hits != 7 || got.Errors != 0 || got.Duration != 70 {
		t.Fatalf("agent got %d hits in %d groups, web/op/ok %+v; want exactly the valid datagram's group: 7 hits, duration 70", hits, len(totals), got)
	}
	// Read after a GC, the heap holds what the relay kept: its read buffers
	// exist from the start, one group is held. A relay keeping even one in
	// ten of the datagrams it rejected (9 MiB sent) would hold more.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("heap grew by %d KiB under hostile input, bound 1 MiB", grew>>10)
	}
	checkIdentity(t, st)
}

// TestMetricsExposition: /metrics serves every metric the operators'
// dashboards use, by its exact name, in the Prometheus text format.
func TestMetricsExposition(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	// An hour's interval: the group must still be held at the scrape, not
	// forwarded at a boundary that falls between the send and the scrape.
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Interval: time.Hour})
	defer stop()
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(validDatagram(1, 4))
	conn.Write([]byte{0xc1})
	conn.Close()
	waitFor(t, "two datagrams", func() bool { return srv.Relay().Stats().Datagrams[relay.UDP] == 2 })
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, line := range []string{
		`statsrelay_datagrams_received_total{transport="udp"} 2`,
		`statsrelay_datagrams_received_total{transport="unix"} 0`,
		`statsrelay_bytes_received_total{transport="udp"} `,
		`statsrelay_datagrams_rejected_total{reason="malformed"} 1`,
		`statsrelay_datagrams_rejected_total{reason="truncated"} 0`,
		`statsrelay_kernel_drops_total{transport="udp"} 0`,
		`statsrelay_sender_seq_gaps_total 0`,
		`statsrelay_sender_late_total 0`,
		`statsrelay_senders_forgotten_total 0`,
		`statsrelay_sender_dropped_payloads_total 0`,
		`statsrelay_spans_received_total 4`,
		`statsrelay_spans_forwarded_total 0`,
		`statsrelay_spans_dropped_total{reason="retry_budget"} 0`,
		`statsrelay_spans_pending 4`,
		`statsrelay_spans_dropped_total{reason="max_bytes"} 0`,
		`statsrelay_groups 1`,
		`statsrelay_agent_off 0`,
		`statsrelay_held_bytes `,
		`statsrelay_senders 1`,
		`statsrelay_reader_wait_seconds_total{transport="unix"} `,
	} {
		if !strings.Contains(text, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// Every metric the README names, and every reason it lists, is served
	// before any traffic: a dashboard built from the README finds them.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`statsrelay_[a-z_]+`).FindAllString(string(readme), -1)
	if len(names) == 0 {
		t.Fatal("the README names no statsrelay_ metric")
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).MatchString(text) {
			t.Errorf("/metrics lacks %s, which the README names", name)
		}
	}
	for _, reason := range []string{"truncated", "malformed", "invalid"} {
		if !strings.Contains(text, `statsrelay_datagrams_rejected_total{reason="`+reason+`"}`) {
			t.Errorf("/metrics lacks the reject reason %q", reason)
		}
	}
	for _, reason := range []string{"max_groups", "max_bytes", "stopped", "retry_budget", "agent_off", "unattributable"} {
		if !strings.Contains(text, `statsrelay_spans_dropped_total{reason="`+reason+`"}`) {
			t.Errorf("/metrics lacks the drop reason %q", reason)
		}
	}
	if strings.Contains(text, "\nstatsrelay_held_bytes 0\n") {
		t.Error("statsrelay_held_bytes is 0 with a group held")
	}
	if t.Failed() {
		t.Log(text)
	}
	_ = binary.LittleEndian
}

// TestMetricsTypedAndHelped: every statsrelay_ family /metrics serves has
// a TYPE line (counter for a _total name, else gauge) and a HELP text, in
// the text format's order (HELP, TYPE, then the samples), and every
// family with a help text is served.
func TestMetricsTypedAndHelped(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Interval: time.Hour})
	defer stop()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	type family struct {
		help, typ string
		samples   int
	}
	fams := map[string]*family{}
	var order []string
	var cur string
	for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, text, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			if fams[name] != nil {
				t.Errorf("family %s twice", name)
			}
			fams[name] = &family{help: text}
			order = append(order, name)
			cur = name
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			if name != cur || fams[name].typ != "" {
				t.Errorf("TYPE of %s not right after its HELP", name)
				continue
			}
			fams[name].typ = typ
		default:
			name, _, _ := strings.Cut(line, " ")
			name, _, _ = strings.Cut(name, "{")
			if !strings.HasPrefix(name, "statsrelay_") {
				continue // the library's go_ and process_ families: histograms among them
			}
			if name != cur || fams[name].typ == "" {
				t.Errorf("sample %q outside its family's HELP and TYPE", line)
				continue
			}
			fams[name].samples++
		}
	}
	served := 0
	for _, name := range order {
		if !strings.HasPrefix(name, "statsrelay_") {
			continue
		}
		served++
		f := fams[name]
		want := "gauge"
		if strings.HasSuffix(name, "_total") {
			want = "counter"
		}
		if f.typ != want || f.help == "" || f.samples == 0 {
			t.Errorf("%s: TYPE %q (want %s), HELP %q, %d samples", name, f.typ, want, f.help, f.samples)
		}
	}
	if served < 30 {
		t.Errorf("%d statsrelay_ families served, want the 30 and more the README names", served)
	}
	for _, name := range relay.HelpedFamilies() {
		if fams[name] == nil {
			t.Errorf("help text for %s, which /metrics does not serve", name)
		}
	}
	if t.Failed() {
		t.Log(string(body))
	}
}

// TestConcurrentScrapesKeepTheIdentity: scrapes of /metrics at once,
// while datagrams merge, each print one snapshot: received = forwarded +
// dropped + pending in every exposition.
func TestConcurrentScrapesKeepTheIdentity(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Hour})
	defer stop()
	h := srv.Handler()
	var done atomic.Bool
	var merging, scraping sync.WaitGroup
	merging.Go(func() {
		for seq := uint64(1); !done.Load(); seq++ {
			_ = srv.Relay().Accept(validDatagram(seq, 1), 0, relay.UDP)
		}
	})
	var bad, scrapes atomic.Int64
	var example atomic.Value
	for range 4 {
		scraping.Go(func() {
			for range 200 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				var received, rest float64
				for line := range strings.SplitSeq(rec.Body.String(), "\n") {
					f := strings.Fields(line)
					if len(f) != 2 {
						continue
					}
					v, _ := strconv.ParseFloat(f[1], 64)
					switch {
					case f[0] == "statsrelay_spans_received_total":
						received = v
					case f[0] == "statsrelay_spans_pending", f[0] == "statsrelay_spans_forwarded_total",
						strings.HasPrefix(f[0], "statsrelay_spans_dropped_total{"):
						rest += v
					}
				}
				scrapes.Add(1)
				if received != rest {
					bad.Add(1)
					example.Store(fmt.Sprintf("%.0f != %.0f", received, rest))
				}
			}
		})
	}
	// Not a timed wait: under -race on a loaded host 800 scrapes beside
	// the merging loop have taken more than 10 s.
	scraping.Wait()
	done.Store(true)
	merging.Wait()
	if scrapes.Load() != 800 {
		t.Fatalf("%d scrapes, want 800", scrapes.Load())
	}
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of 800 scrapes broke received = forwarded + dropped + pending, e.g. %v", n, example.Load())
	}
}

// TestForwardKeepsFieldsTheSDKNeverSets: a tracer's groups with DBType,
// SpanDerivedPrimaryTags and AdditionalMetricTags reach the agent intact,
// merged by them (tag lists as sets).
func TestForwardKeepsFieldsTheSDKNeverSets(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
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
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
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
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
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
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
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

// TestAgentPeerTagListKeepsBaseService: as the agent (and the SDK posting
// itself) does, the one _dd.base_service tag of a span that is not a
// client, producer or consumer span is kept whether the agent's list holds
// its key or not; a client span's is cut like any key not in the list.
func TestAgentPeerTagListKeepsBaseService(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"version": "7.99.0", "endpoints": []string{"/v0.6/stats", "/info"},
		"peer_tags": []string{"peer.service"}})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-"})
	defer stop()
	waitFor(t, "the relay to read /info", func() bool { return srv.Relay().Stats().PeerTagKeys == 1 })
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	var groups []writer.Group
	for _, kind := range []string{"internal", "", "Client"} {
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
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 6 })
	stop()
	got := map[string]string{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				got[g.SpanKind] = strings.Join(g.PeerTags, ",")
			}
		}
	}
	want := map[string]string{"internal": "_dd.base_service:orig-internal", "": "_dd.base_service:orig-", "Client": "peer.service:svc"}
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

// TestAgentInfoFailures: /info reads that fail (a 503, then a body that is
// not JSON) are counted in statsrelay_agent_info_failures_total and logged
// once per streak however many polls fail, and the read that ends a streak
// once, with the streak's count. A later streak (the periodic re-read
// fails) logs again.
func TestAgentInfoFailures(t *testing.T) {
	var mode atomic.Int32 // /info: 0 answers 503, 1 a body that is not JSON, 2 a good document
	var keys atomic.Int32 // peer_tags listed by the good document
	keys.Store(1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/info" {
			return // stats accepted
		}
		switch mode.Load() {
		case 0:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case 1:
			_, _ = io.WriteString(w, "<html>")
		default:
			tags := []string{"peer.service", "db.instance"}[:keys.Load()]
			fmt.Fprintf(w, `{"endpoints":["/v0.6/stats"],"peer_tags":["%s"]}`, strings.Join(tags, `","`))
		}
	}))
	defer agent.Close()
	var log bytes.Buffer // read once the relay stopped
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: agent.URL, UnixPath: "-", Interval: time.Second,
		Grace: 10 * time.Millisecond, InfoRefresh: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer stop()
	failures := func() uint64 {
		text := scrape(srv)
		if v, ok := metricValue(text, "statsrelay_agent_info_failures_total"); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
		t.Fatalf("/metrics has no statsrelay_agent_info_failures_total:\n%s", text)
		return 0
	}
	peerTagKeys := func() int { return srv.Relay().Stats().PeerTagKeys }

	waitFor(t, "three failed /info reads", func() bool { return failures() >= 3 })
	mode.Store(1)
	n := failures()
	waitFor(t, "two more failed reads, of the bad body", func() bool { return failures() >= n+2 })
	mode.Store(2)
	waitFor(t, "a good /info read", func() bool { return peerTagKeys() == 1 })
	n = failures()

	// While the agent takes stats, /info is read again every ten
	// InfoRefresh, at a forward: that read fails, and the polls after it.
	mode.Store(0)
	waitFor(t, "a failed re-read", func() bool { return failures() >= n+3 })
	keys.Store(2)
	mode.Store(2)
	waitFor(t, "the second good read", func() bool { return peerTagKeys() == 2 })
	stop()
	total := failures()

	var warned, recovered []string
	sum := 0
	for l := range strings.Lines(log.String()) {
		switch {
		case strings.Contains(l, "/info could not be read"):
			warned = append(warned, l)
		case strings.Contains(l, "/info answers again"):
			recovered = append(recovered, l)
			_, v, _ := strings.Cut(l, " failed_reads=")
			k, _ := strconv.Atoi(strings.Fields(v + " ")[0])
			sum += k
		}
	}
	if len(warned) != 2 || len(recovered) != 2 {
		t.Fatalf("%d warnings and %d recoveries logged for two streaks of %d failed reads, want 2 and 2:\n%s",
			len(warned), len(recovered), total, log.String())
	}
	for _, l := range warned {
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "503") {
			t.Errorf("warning %q: want level WARN and the 503", l)
		}
	}
	if !strings.Contains(warned[0], "peer_tags") {
		t.Errorf("first warning %q does not say the peer_tags list is unknown", warned[0])
	}
	if uint64(sum) != total {
		t.Errorf("recoveries count %d failed reads, the metric %d", sum, total)
	}
}

// TestTroubleIsLogged: what the metrics count as lost is in the log too, by
// kind and with its counts: malformed datagrams, a request the agent
// refuses, the spans it carried. The log lines come at the latest when the
// relay stops.
func TestTroubleIsLogged(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.FailNext(100, http.StatusBadRequest) // refused: dropped without retries
	var buf bytes.Buffer                    // slog's handler serializes its writes
	// No forward before the stop: a line at a boundary amid the sends would
	// split a kind's counts over two.
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, d := range [][]byte{{0xc1}, {0xc1, 1}, {0xc1, 2}, validDatagram(1, 7)} {
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "4 datagrams read", func() bool { return srv.Relay().Stats().Datagrams[relay.UDP] == 4 })
	stop()
	st := srv.Relay().Stats()
	if st.SpansDropped[relay.DropRefused] != 7 {
		t.Fatalf("dropped %v, want the 7 spans refused", st.SpansDropped)
	}
	lines := map[string]string{}
	for l := range strings.Lines(buf.String()) {
		for _, kind := range []string{"datagrams rejected", "requests to the agent failed", "spans dropped"} {
			if strings.Contains(l, kind) {
				if lines[kind] != "" {
					t.Errorf("two lines for %q:\n%s%s", kind, lines[kind], l)
				}
				lines[kind] = l
			}
		}
	}
	for kind, want := range map[string][]string{
		"datagrams rejected":           {"level=WARN", " malformed=3"},
		"requests to the agent failed": {"level=WARN", " status_400=1"},
		"spans dropped":                {"level=ERROR", " refused=7"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[kind], w) {
				t.Errorf("%q line %q lacks %q\nlog:\n%s", kind, lines[kind], w, buf.String())
			}
		}
	}
	checkIdentity(t, st)
}

// TestReorderedMergesCountNoGaps: one sender's datagrams, all delivered
// over the Unix socket (a blocked sender waits), are merged by two decode
// workers in whatever order they finish; the relay counts every one and
// neither a gap nor a restart.
func TestReorderedMergesCountNoGaps(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UDPAddr: "-", Workers: 2,
		Logger: slog.New(slog.DiscardHandler)})
	conn, err := net.Dial("unixgram", srv.Addr(relay.Unix))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 5000
	for seq := range uint64(n) {
		if _, err := conn.Write(validDatagram(seq+1, 3)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every datagram read", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == n })
	stop()
	st := srv.Relay().Stats()
	if st.SpansReceived != 3*n || st.SeqGaps != 0 || st.SeqRestarts != 0 {
		t.Fatalf("received %d spans, %d gaps, %d restarts; want %d, 0, 0", st.SpansReceived, st.SeqGaps, st.SeqRestarts, 3*n)
	}
	checkIdentity(t, st)
}

// TestAgentFaultsSettleEverySpan: the agent answers a fixed mix of 500
// (retried), 413 (split, or dropped as refused when one group), 400
// (refused) and 200 while four senders' datagrams of several groups each
// are forwarded over a few intervals. After the stop every span is settled:
// the spans the agent took (answered 200) are exactly the forwarded ones,
// per key too, the spans of bodies it refused are exactly the refused ones,
// nothing is pending, and received = forwarded + dropped.
func TestAgentFaultsSettleEverySpan(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		switch {
		case n%7 == 2:
			http.Error(w, "busy", http.StatusInternalServerError)
		case n%5 == 1:
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		case n%11 == 4:
			http.Error(w, "bad", http.StatusBadRequest)
		default:
			return false
		}
		return true
	})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		Grace: 50 * time.Millisecond})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := map[statstest.GroupKey]uint64{}
	var total uint64
	seqs := map[string]uint64{}
	deadline := time.Now().Add(2500 * time.Millisecond)
	datagrams := 0
	for i := 0; time.Now().Before(deadline); i++ {
		datagrams++
		rid := "sender-" + strconv.Itoa(i%4)
		seqs[rid]++
		var groups []*aggregate.Entry
		for g := range 1 + i%6 {
			hits := uint64(1 + (i+g)%9)
			k := aggregate.Key{Service: "web", Name: "op", Resource: "r" + strconv.Itoa((i*3+g)%40)}
			groups = append(groups, &aggregate.Entry{Key: k, Hits: hits, Duration: 100 * hits})
			sent[statstest.GroupKey{Service: k.Service, Name: k.Name, Resource: k.Resource}] += hits
			total += hits
		}
		h := writer.Header{Service: "web", Env: "env-" + strconv.Itoa(i%2), RuntimeID: rid, Lang: "go"}
		start := uint64(time.Now().Truncate(time.Second).UnixNano())
		d := writer.AppendEnvelope(nil, writer.Envelope{Sequence: seqs[rid]})
		d = writer.AppendPayload(d, &h, []writer.Bucket{{Start: start, Duration: uint64(time.Second), Groups: groups}})
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // within the socket's buffer: UDP drops none
	}
	waitFor(t, "every span merged", func() bool { return srv.Relay().Stats().SpansReceived == total })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.SpansPending != 0 {
		t.Fatalf("%d spans pending after the stop", st.SpansPending)
	}
	// What the agent saw, by its answer; a 413 of one group is refused.
	var took, refused []statstest.Request
	statuses := map[int]int{}
	for _, r := range ag.Requests() {
		statuses[r.Status]++
		if r.Payload == nil {
			t.Fatalf("the agent could not decode a request: %v", r.Err)
		}
		groups := 0
		for _, b := range r.Payload.Buckets {
			groups += len(b.Groups)
		}
		switch {
		case r.Status == http.StatusOK:
			took = append(took, r)
		case r.Status == http.StatusBadRequest || r.Status == http.StatusRequestEntityTooLarge && groups == 1:
			r.Status = http.StatusOK // for Sum
			refused = append(refused, r)
		}
	}
	if statuses[500] == 0 || statuses[413] == 0 || statuses[400] == 0 || statuses[200] == 0 {
		t.Fatalf("answers %v: the mix was not exercised", statuses)
	}
	gotKeys, tookHits := statstest.Sum(took)
	refusedKeys, refusedHits := statstest.Sum(refused)
	if tookHits != st.SpansForwarded || refusedHits != st.SpansDropped[relay.DropRefused] {
		t.Fatalf("agent took %d and refused %d spans; relay forwarded %d, dropped %v (answers %v)",
			tookHits, refusedHits, st.SpansForwarded, st.SpansDropped, statuses)
	}
	if st.SpansDropped[relay.DropRetryBudget] != 0 {
		t.Fatalf("dropped %v: a 500 in seven requests exhausted the retry budget", st.SpansDropped)
	}
	for k, want := range sent {
		var got uint64
		if g := gotKeys[k]; g != nil {
			got += g.Hits
		}
		if r := refusedKeys[k]; r != nil {
			got += r.Hits
		}
		if got != want {
			t.Errorf("key %+v: the agent took or refused %d spans, %d sent", k, got, want)
		}
	}
	t.Logf("%d spans in %d datagrams; answers %v; forwarded %d, refused %d", total, datagrams, statuses,
		st.SpansForwarded, st.SpansDropped[relay.DropRefused])
	// statsrelay_forward_requests_total{code} counts every attempt by the
	// agent's answer, as the agent saw them ("2xx" for its 200s).
	text := scrape(srv)
	for status, n := range statuses {
		code := strconv.Itoa(status)
		if status == http.StatusOK {
			code = "2xx"
		}
		line := fmt.Sprintf("\nstatsrelay_forward_requests_total{code=%q} %d\n", code, n)
		if !strings.Contains(text, line) {
			t.Errorf("/metrics lacks %q:\n%s", line[1:len(line)-1], text)
		}
	}
	// Never compressed: the agent answers 400 to a gzip body.
	for _, r := range ag.Requests() {
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			t.Fatalf("a request with Content-Encoding %q", ce)
		}
	}
}

// TestAgentOffThenBack: the agent answers 404 and its /info stops listing
// /v0.6/stats. The relay holds that request's spans for the retry budget,
// then drops them as agent_off, and sends nothing more while the agent is
// off (statsrelay_agent_off 1): the next interval's spans are held and
// dropped so without a request. Once
// /info lists the endpoint again the relay says so in its log and its
// gauge, forwards, and the agent gets exactly the spans sent since.
func TestAgentOffThenBack(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	on := map[string]any{"version": "7.99.0-fake", "endpoints": []string{"/v0.4/traces", "/v0.6/stats", "/info"}}
	off := map[string]any{"version": "7.99.0-fake", "endpoints": []string{"/v0.4/traces", "/info"}}
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		ag.SetInfo(off)
		http.NotFound(w, nil)
		return true
	})
	var log bytes.Buffer // read once the relay stopped
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		Grace: 50 * time.Millisecond, InfoRefresh: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer stop()
	gauge := func() string {
		if v, ok := metricValue(scrape(srv), "statsrelay_agent_off"); ok {
			return v
		}
		return "missing"
	}
	if g := gauge(); g != "0" {
		t.Fatalf("statsrelay_agent_off %s at the start", g)
	}
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	seq := uint64(0)
	send := func(hits uint64) {
		seq++
		if _, err := conn.Write(validDatagram(seq, hits)); err != nil {
			t.Fatal(err)
		}
	}
	dropped := func() uint64 { return srv.Relay().Stats().SpansDropped[relay.DropAgentOff] }

	send(5) // answered 404: dropped, and the agent is off
	waitFor(t, "the 404's spans dropped", func() bool { return dropped() == 5 })
	send(7) // while off: dropped without a request
	waitFor(t, "the next interval's spans dropped", func() bool { return dropped() == 12 })
	if n := len(ag.Requests()); n != 1 {
		t.Fatalf("%d stats requests, want only the one answered 404", n)
	}
	if g := gauge(); g != "1" {
		t.Fatalf("statsrelay_agent_off %s while the agent is off", g)
	}

	ag.SetHandler(nil)
	ag.SetInfo(on)
	time.Sleep(300 * time.Millisecond) // a few /info polls
	send(11)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hits, err := ag.WaitHits(ctx, 11); err != nil || hits != 11 {
		t.Fatalf("the agent took %d spans (%v), want the 11 sent once it was back", hits, err)
	}
	if g := gauge(); g != "0" {
		t.Fatalf("statsrelay_agent_off %s once the agent is back", g)
	}
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.SpansForwarded != 11 || dropped() != 12 || st.SpansPending != 0 {
		t.Fatalf("forwarded %d, dropped %v, pending %d; want 11, agent_off 12, 0", st.SpansForwarded, st.SpansDropped, st.SpansPending)
	}
	text := log.String()
	wentOff := strings.Index(text, "does not accept client stats")
	back := strings.Index(text, "accepts client stats again")
	if wentOff < 0 || back < wentOff || strings.Count(text, "accepts client stats again") != 1 {
		t.Fatalf("the log does not say once that the agent went off, then came back:\n%s", text)
	}
}

// TestHangingAgentStopIsBounded: an agent that accepts connections but never
// answers holds neither the periodic forward nor the stop: Run returns
// about StopDrain + the stop timeout after its context ends, every span is
// settled as dropped (stopped), none pending, and the relay's last requests
// were cut, not left running.
func TestHangingAgentStopIsBounded(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var inFlight atomic.Int64
	release := make(chan struct{})
	defer close(release)
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		select {
		case <-r.Context().Done(): // the relay gave up on it
		case <-release:
		}
		http.Error(w, "gave up", http.StatusServiceUnavailable)
		return true
	})
	s, err := relay.NewServer(relay.ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: ag.URL(),
		Interval: time.Second, Grace: 50 * time.Millisecond, StopDrain: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const stopTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx, stopTimeout)
	}()
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const identities, hits = 5, 7
	send := func() {
		for i := range identities {
			h := writer.Header{Service: "web", Env: "env-" + strconv.Itoa(i), RuntimeID: "hang-" + strconv.Itoa(i), Lang: "go"}
			e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: hits, Duration: 10 * hits}
			b := writer.AppendPayload(nil, &h, []writer.Bucket{{Start: uint64(time.Now().Truncate(time.Second).UnixNano()),
				Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	send()
	waitFor(t, "a forward to hang", func() bool { return inFlight.Load() > 0 })
	send() // merged while the forwarder waits on the agent
	waitFor(t, "the second datagrams", func() bool { return s.Relay().Stats().SpansReceived == 2*identities*hits })
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run still serving 30 s after its context ended, its agent hanging")
	}
	// Slack for a loaded machine; the agent client's own request timeout
	// (10 s) would far exceed it.
	if took := time.Since(start); took > 50*time.Millisecond+stopTimeout+2*time.Second {
		t.Fatalf("Run took %s to stop with a hanging agent, stop timeout %s", took, stopTimeout)
	}
	st := s.Relay().Stats()
	checkIdentity(t, st)
	if st.SpansForwarded != 0 || st.SpansPending != 0 || st.SpansDropped[relay.DropStopped] != 2*identities*hits {
		t.Fatalf("forwarded %d, pending %d, dropped %v; want 0, 0, all %d as stopped",
			st.SpansForwarded, st.SpansPending, st.SpansDropped, 2*identities*hits)
	}
	waitFor(t, "the agent to see its requests cut", func() bool { return inFlight.Load() == 0 })
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

// TestSlowRoundsLoggedOncePerMinute: an agent that answers every request
// late makes every round slow; the relay counts each but logs them once,
// then the rest at stop, summed (a hung agent must not write a line per
// interval).
func TestSlowRoundsLoggedOncePerMinute(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(http.ResponseWriter, *http.Request, int) bool {
		time.Sleep(700 * time.Millisecond)
		return false
	})
	var log bytes.Buffer // read once the relay stopped
	s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: ag.URL(),
		Interval: time.Second, Grace: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer stop()
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const rounds = 4
	for i := range rounds {
		sendIdentities(t, conn, "slow-"+strconv.Itoa(i)+"-", 1, 3)
		waitFor(t, "the spans forwarded", func() bool { return s.Relay().Stats().SpansForwarded == uint64(3*(i+1)) })
	}
	stop()
	slow := 0
	sum := 0
	for l := range strings.Lines(log.String()) {
		if !strings.Contains(l, "forward rounds took more than half the interval") {
			continue
		}
		slow++
		_, n, _ := strings.Cut(l, " rounds=")
		k, _ := strconv.Atoi(strings.Fields(n + " ")[0])
		sum += k
	}
	// Each send lands in a round of its own; the rounds between, with
	// nothing to send, are quick.
	if slow != 2 || sum != rounds {
		t.Errorf("%d slow-round lines adding up to %d rounds, want 2 (the first, then the rest at stop) adding up to %d:\n%s",
			slow, sum, rounds, log.String())
	}
}

// TestForwardInChunks: with -forward-parallel 1 a round is encoded and sent
// four payloads at a time; nine identities still reach the agent once each,
// every span forwarded.
func TestForwardInChunks(t *testing.T) {
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

// clockedRelay is a relay on UDP alone whose wall clock is the real one
// moved by offset, its agent, and a connection to send it datagrams.
type clockedRelay struct {
	*relay.Server
	ag       *statstest.Agent
	offset   atomic.Int64
	conn     net.Conn
	interval time.Duration
}

// startClocked starts a clockedRelay forwarding every interval, 50 ms of
// grace after each boundary; the test's end stops it.
func startClocked(t *testing.T, interval time.Duration) *clockedRelay {
	t.Helper()
	c := &clockedRelay{ag: statstest.New(), interval: interval}
	t.Cleanup(c.ag.Close)
	s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: c.ag.URL(),
		Interval: interval, Grace: 50 * time.Millisecond, Now: c.now, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(stop)
	c.Server = s
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn = conn
	return c
}

func (c *clockedRelay) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// send writes a datagram (in the envelope of seq; none when seq is 0) of
// one interval's bucket from start holding hits spans of resource.
func (c *clockedRelay) send(t *testing.T, seq uint64, start time.Time, resource string, hits uint64) {
	t.Helper()
	h := writer.Header{Service: "web", Env: "prod", RuntimeID: "rt", Lang: "go"}
	e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: resource}, Hits: hits, Duration: 10 * hits}
	var b []byte
	if seq > 0 {
		b = writer.AppendEnvelope(nil, writer.Envelope{Sequence: seq})
	}
	b = writer.AppendPayload(b, &h, []writer.Bucket{{Start: uint64(start.UnixNano()), Duration: uint64(c.interval), Groups: []*aggregate.Entry{e}}})
	if _, err := c.conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

// sendNow is send of a bucket holding now.
func (c *clockedRelay) sendNow(t *testing.T, seq uint64, resource string, hits uint64) {
	t.Helper()
	c.send(t, seq, c.now().Truncate(c.interval), resource, hits)
}

// TestClockStepBackKeepsForwarding: the relay's wall clock stepping back an
// hour does not stall forwarding for that hour. The round that finds the
// step forwards everything held (spans merged before it) and realigns on
// the new time; spans stamped on the new time reach the agent an interval
// or so later, not an hour; statsrelay_clock_steps_back_total counts it.
func TestClockStepBackKeepsForwarding(t *testing.T) {
	s := startClocked(t, time.Second)
	s.sendNow(t, 0, "before", 3)
	waitFor(t, "the first datagram", func() bool { return s.Relay().Stats().SpansReceived == 3 })
	s.offset.Store(int64(-time.Hour))
	waitFor(t, "the round after the step", func() bool { return s.Relay().Stats().SpansForwarded == 3 })
	s.sendNow(t, 0, "after", 4)
	waitFor(t, "the second datagram", func() bool { return s.Relay().Stats().SpansReceived == 7 })
	waitFor(t, "the next round", func() bool { return s.Relay().Stats().SpansForwarded == 7 })
	got := map[string]uint64{}
	for _, p := range statstest.Accepted(s.ag.Requests()) {
		for _, b := range p.Payload.Buckets {
			for _, g := range b.Groups {
				got[g.Resource] += g.Hits
			}
		}
	}
	if len(got) != 2 || got["before"] != 3 || got["after"] != 4 {
		t.Fatalf("the agent got %v; want before:3 after:4", got)
	}
	wantMetrics(t, s.Server, "statsrelay_clock_steps_back_total 1")
	checkIdentity(t, s.Relay().Stats())
}

// TestClockStepBackCountsNoLateSpans: once a round has found the wall
// clock gone back and forwarded everything held, the senders' buckets at
// the new time are on time: statsrelay_spans_late_total counts none of
// them, this round or the next.
func TestClockStepBackCountsNoLateSpans(t *testing.T) {
	s := startClocked(t, time.Second)
	s.sendNow(t, 1, "r", 3)
	waitFor(t, "the first datagram", func() bool { return s.Relay().Stats().SpansReceived == 3 })
	s.offset.Store(int64(-time.Hour))
	waitFor(t, "the round after the step", func() bool { return s.Relay().Stats().SpansForwarded == 3 })
	s.sendNow(t, 2, "r", 4)
	waitFor(t, "the second datagram", func() bool { return s.Relay().Stats().SpansReceived == 7 })
	waitFor(t, "the next round", func() bool { return s.Relay().Stats().SpansForwarded == 7 })
	s.sendNow(t, 3, "r", 5)
	waitFor(t, "the third datagram", func() bool { return s.Relay().Stats().SpansReceived == 12 })
	waitFor(t, "the round after", func() bool { return s.Relay().Stats().SpansForwarded == 12 })
	if st := s.Relay().Stats(); st.LateSpans != 0 {
		t.Fatalf("LateSpans %d after a clock step back; want 0: the buckets sent since were on time", st.LateSpans)
	}
	wantMetrics(t, s.Server, "statsrelay_spans_late_total 0")
}

// TestPausedRelayForwardsWhatEndedMeanwhile: the relay's process slept
// through several intervals (a stopped process, a suspended VM; here the
// wall clock jumps ahead between two rounds). The first round after it
// forwards every window whose grace has passed by then, not only the
// window of the boundary it was waiting for: the windows that ended during
// the pause would otherwise wait another interval and grace, and reach the
// agent after it has re-timed them.
func TestPausedRelayForwardsWhatEndedMeanwhile(t *testing.T) {
	const interval = 2 * time.Second
	s := startClocked(t, interval)
	rounds := func() string { v, _ := metricValue(scrape(s.Server), "statsrelay_forward_rounds_total"); return v }
	// Right after a round: the next is an interval away.
	before := rounds()
	waitFor(t, "a forward round", func() bool { return rounds() != before })
	after := rounds()
	s.offset.Store(int64(5 * interval)) // the pause
	// A window that ended during the pause, an interval before now.
	s.send(t, 1, s.now().Truncate(interval).Add(-2*interval), "r", 7)
	waitFor(t, "the datagram", func() bool { return s.Relay().Stats().SpansReceived == 7 })
	if rounds() != after {
		t.Skip("a forward round ran amid the setup (a slow host): the window may be taken either way")
	}
	waitFor(t, "the round after the pause", func() bool { return rounds() != after })
	if st := s.Relay().Stats(); st.SpansForwarded != 7 {
		t.Fatalf("the first round after the pause forwarded %d spans, want 7: the window ended during the pause, its grace long past", st.SpansForwarded)
	}
}

// TestPauseDuringRoundForwardsWhatEndedMeanwhile: the pause comes during a
// forward round (the process stopped while the agent answered, or a round
// slower than two intervals; here the wall clock jumps ahead while the
// agent answers the round's request). The window that ended meanwhile,
// its grace long past, goes at once after the round, not at the next
// boundary an interval later.
func TestPauseDuringRoundForwardsWhatEndedMeanwhile(t *testing.T) {
	const interval = 2 * time.Second
	s := startClocked(t, interval)
	var answered atomic.Int64 // when the round's request was answered (unix ns)
	s.ag.SetHandler(func(_ http.ResponseWriter, _ *http.Request, n int) bool {
		if n == 1 {
			s.offset.Store(int64(3 * interval)) // the pause, amid the round
			answered.Store(time.Now().UnixNano())
		}
		return false
	})
	// Early in a window: both datagrams are merged before its round.
	time.Sleep(time.Until(s.now().Truncate(interval).Add(interval + 100*time.Millisecond)))
	cur := s.now().Truncate(interval)
	s.send(t, 1, cur, "r", 3)               // forwarded by the round of cur's end
	s.send(t, 2, cur.Add(interval), "r", 5) // its window ends during the pause
	waitFor(t, "the datagrams", func() bool { return s.Relay().Stats().SpansReceived == 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hits, err := s.ag.WaitHits(ctx, 8); err != nil {
		t.Fatalf("the agent took %d spans (%v), want 8", hits, err)
	}
	if took := time.Since(time.Unix(0, answered.Load())); took > interval/2 {
		t.Fatalf("the window that ended during the round's pause reached the agent %s after the round, want at once (the next boundary was %s away)",
			took.Round(time.Millisecond), interval)
	}
	checkIdentity(t, s.Relay().Stats())
}

// TestStopRetriesWhatItHolds: the agent answers 503 to the first two stats
// requests. A relay stopped while holding an interval forwards it with its
// retries (within the stop timeout), not with one last attempt that the
// 503 would drop.
func TestStopRetriesWhatItHolds(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.FailNext(2, http.StatusServiceUnavailable)
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Minute})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, 9)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram merged", func() bool { return srv.Relay().Stats().SpansReceived == 9 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	reqs := ag.Requests()
	_, hits := statstest.Sum(statstest.Accepted(reqs))
	if st.SpansForwarded != 9 || st.SpansPending != 0 || len(reqs) != 3 || hits != 9 {
		t.Fatalf("forwarded %d, dropped %v, pending %d; the agent got %d requests, took %d spans; want 9 forwarded after two 503s (3 requests)",
			st.SpansForwarded, st.SpansDropped, st.SpansPending, len(reqs), hits)
	}
}

// TestAgentOffHoldsUntilBack: the agent answers 404 and its /info stops
// listing /v0.6/stats, then lists it again a moment later (a restart into
// a new configuration). The payload that got the 404 is held, not dropped:
// /info is polled within RetryBackoff of the 404, not after InfoRefresh,
// and the payload reaches the agent.
func TestAgentOffHoldsUntilBack(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	on := map[string]any{"endpoints": []string{"/v0.4/traces", "/v0.6/stats", "/info"}}
	off := map[string]any{"endpoints": []string{"/v0.4/traces", "/info"}}
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n > 1 {
			return false
		}
		ag.SetInfo(off)
		time.AfterFunc(50*time.Millisecond, func() { ag.SetInfo(on) })
		http.NotFound(w, nil)
		return true
	})
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
		Grace: 50 * time.Millisecond, InfoRefresh: time.Hour})
	defer stop()
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, 5)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hits, err := ag.WaitHits(ctx, 5); err != nil || hits != 5 {
		t.Fatalf("the agent took %d spans (%v), want the 5 held through the 404", hits, err)
	}
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.SpansForwarded != 5 || st.SpansDropped[relay.DropAgentOff] != 0 || len(ag.Requests()) != 2 {
		t.Fatalf("forwarded %d, dropped %v, %d requests; want 5 forwarded on the second request, none dropped",
			st.SpansForwarded, st.SpansDropped, len(ag.Requests()))
	}
}

// ownCgroupRoot is a proc root where this process (relay and sender alike)
// is alive in a cgroup that names no container (cgroup v2 in a private
// namespace: "0::/").
func ownCgroupRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(os.Getpid()) + " (relay) S 1 1 1 0 -1 4194560" // alive
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
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

// TestUnixAgentDropsHostSender: a relay in a container forwarding to the
// agent's Unix socket, and a Unix sender in another process whose cgroup
// names no container (a host process), claiming one: the credentials
// correct the claim (a mismatch, counted) to no container, and without
// one the agent would file the stats under the relay's container, so they
// are dropped as unattributable, never sent.
func TestUnixAgentDropsHostSender(t *testing.T) {
	root := procRoot(t) // the relay runs in testContainer
	sock := filepath.Join(t.TempDir(), "apm.socket")
	ag, err := statstest.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: true, ProcRoot: root, UDPAddr: "-"})
	defer stop()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STATSRELAY_TEST_SENDER="+srv.Addr(relay.Unix))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := filepath.Join(root, strconv.Itoa(cmd.Process.Pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/user.slice/user-1000.slice/session-2.scope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(cmd.Process.Pid) + " (sender) S 1 1 1 0 -1 4194560" // alive, read as the relay decodes
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || out.String() != "sent\n" {
		t.Fatalf("sender: %v, said %q", err, out.String())
	}
	waitFor(t, "the sender's datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if n := len(ag.Requests()); n != 0 || st.SpansDropped[relay.DropUnattributable] != 4 || st.ContainerMismatches != 1 {
		t.Fatalf("%d requests, unattributable %d, mismatches %d; want 0, 4, 1", n, st.SpansDropped[relay.DropUnattributable], st.ContainerMismatches)
	}
}

// TestUnixAgentSameContainerSender: a relay in a container whose cgroup
// names none (cgroup v2 in a private namespace: "0::/") forwards to the
// agent's Unix socket the stats of a Unix sender that shares its cgroup —
// the agent files them under the relay's container, which is the
// sender's — without a container header, and still drops a UDP sender's
// (counted as unattributable).
func TestUnixAgentSameContainerSender(t *testing.T) {
	root := ownCgroupRoot(t)
	sock := filepath.Join(t.TempDir(), "apm.socket")
	ag, err := statstest.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: true, ProcRoot: root})
	publishThreeEach(t, srv)
	stop()
	reqs := ag.Requests()
	got, hits := statstest.Sum(statstest.Accepted(reqs))
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != "" || hits != 3 ||
		got[statstest.GroupKey{Service: "web", Name: "unix", SpanKind: "server"}].Hits != 3 {
		t.Fatalf("%d requests, %d spans taken (%v); want one request without a container header, the Unix sender's 3", len(reqs), hits, got)
	}
	st := srv.Relay().Stats()
	if st.SpansForwarded != 3 || st.SpansDropped[relay.DropUnattributable] != 3 {
		t.Fatalf("forwarded %d, unattributable %d; want 3 and 3", st.SpansForwarded, st.SpansDropped[relay.DropUnattributable])
	}
	checkIdentity(t, st)
}

// TestSameContainerSenderKeepsItsClaim: a Unix sender in the relay's own
// cgroup, which names no container, claims one: the credentials cannot
// contradict it, so the claim reaches the agent, and no mismatch is
// counted.
func TestSameContainerSenderKeepsItsClaim(t *testing.T) {
	root := ownCgroupRoot(t)
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: root, UDPAddr: "-"})
	defer stop()
	snd, err := dgram.DialUnixgram(srv.Addr(relay.Unix), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	g := writer.Group{}
	g.Service, g.Name, g.SpanKind, g.Hits, g.Duration = "web", "op", "server", 4, 40
	pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r", ContainerID: testContainer},
		Buckets: []writer.DecodedBucket{{Start: uint64(time.Now().Truncate(10 * time.Second).UnixNano()), Duration: uint64(time.Second), Groups: []writer.Group{g}}}}
	if err := snd.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != testContainer || reqs[0].Payload.ContainerID != testContainer ||
		reqs[0].Header.Get("Datadog-Entity-ID") != "ci-"+testContainer {
		t.Fatalf("%d requests; want one with the sender's claim %s in its headers and payload", len(reqs), testContainer)
	}
	if st := srv.Relay().Stats(); st.ContainerMismatches != 0 || st.SpansForwarded != 4 {
		t.Fatalf("mismatches %d, forwarded %d; want 0 and 4", st.ContainerMismatches, st.SpansForwarded)
	}
}

// TestDroppedAfterTimeout: an attempt that times out after the agent read
// it leaves the agent with the spans; when the retries then fail too (late
// again, or 503) and the budget is spent, the spans dropped (retry_budget)
// are also counted in statsrelay_spans_dropped_after_timeout_total, however
// many attempts came after the one that timed out.
func TestDroppedAfterTimeout(t *testing.T) {
	for name, firstOnly := range map[string]bool{"every attempt late": false, "first late, then 503": true} {
		t.Run(name, func(t *testing.T) {
			ag := statstest.New()
			defer ag.Close()
			ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
				if n == 1 || !firstOnly {
					time.Sleep(200 * time.Millisecond)
					return false // taken, after the relay gave up waiting
				}
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			})
			srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Second,
				Grace: 50 * time.Millisecond, AgentTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			defer stop()
			conn, err := net.Dial("udp", srv.Addr(relay.UDP))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sendIdentities(t, conn, "late-", 1, 3)
			waitFor(t, "the spans dropped", func() bool { return srv.Relay().Stats().SpansDropped[relay.DropRetryBudget] == 3 })
			wantMetrics(t, srv, "statsrelay_spans_dropped_after_timeout_total 3")
			checkIdentity(t, srv.Relay().Stats())
		})
	}
}

// TestFailedStartKeepsLiveSocket: a second relay given the socket path of
// a running one but a UDP port it cannot bind fails to start and leaves
// the running relay's socket in place, still reached by senders; one that
// starts takes the path over and says so in the log.
func TestFailedStartKeepsLiveSocket(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	first, stop := startServer(t, relay.ServerConfig{UnixPath: sock, AgentURL: ag.URL(), Logger: slog.New(slog.DiscardHandler)})
	defer stop()
	before, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if s, err := relay.NewServer(relay.ServerConfig{UnixPath: sock, UDPAddr: first.Addr(relay.UDP), AgentURL: ag.URL(),
		Logger: slog.New(slog.NewTextHandler(&log, nil))}); err == nil {
		s.Run(canceled(), time.Second)
		t.Fatal("a second relay bound the UDP port the first holds")
	}
	if after, err := os.Lstat(sock); err != nil || !os.SameFile(before, after) {
		t.Fatalf("the running relay's socket after a failed start: %v, %v", after, err)
	}
	snd, err := dgram.DialUnixgram(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	if err := snd.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first relay to read the datagram", func() bool { return first.Relay().Stats().Datagrams[relay.Unix] == 1 })
	if strings.Contains(log.String(), "took over") {
		t.Errorf("the failed start logged a take-over:\n%s", log.String())
	}

	second, err := relay.NewServer(relay.ServerConfig{UnixPath: sock, UDPAddr: "-", AgentURL: ag.URL(),
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	second.Run(canceled(), time.Second)
	if !strings.Contains(log.String(), "took over the Unix socket path from a process still receiving on it") {
		t.Errorf("no take-over warning:\n%s", log.String())
	}
}

// canceled is a context already done: Run then stops at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestForwardParallelUnderAgentLimit: the agent's /info gives a body limit
// below the relay's MaxPayloadBytes, and each identity's payload is over
// it. The payloads are packed to the agent's limit, so they go out
// ForwardParallel at once, as any others; split after packing, the client
// would post the parts one at a time, a round taking ForwardParallel
// times as long.
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

// TestStartInGraceForwardsEndedWindow: a relay started within the grace
// after a boundary (a restart during a deployment) forwards the window that
// boundary ended at its end, with the senders' late reports, not an
// interval later.
func TestStartInGraceForwardsEndedWindow(t *testing.T) { startInGrace(t, 0) }

// TestStartInGraceSlowInfoForwardsEndedWindow: as above, with an agent
// whose /info answers only after the grace has passed: the relay's first
// /info read must not move its start past the grace, which would hold the
// ended window an interval longer.
func TestStartInGraceSlowInfoForwardsEndedWindow(t *testing.T) {
	startInGrace(t, 700*time.Millisecond)
}

// startInGrace starts a relay 50 ms after a boundary, within its 600 ms
// grace, sends it a report for the window that boundary ended and checks
// that the agent gets it in the round at the boundary plus the grace: not
// before the grace ends, and before the next round (an interval later).
// /info answers infoDelay late. A report the relay took only after the
// grace (a machine too loaded to run the test's first steps in 550 ms)
// is rightly forwarded in the next round: the trial is run again.
func startInGrace(t *testing.T, infoDelay time.Duration) {
	const interval, grace = time.Second, 600 * time.Millisecond
	ag := statstest.New()
	defer ag.Close()
	agentURL := ag.URL()
	if infoDelay > 0 {
		target, err := url.Parse(ag.URL())
		if err != nil {
			t.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(target)
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/info" {
				time.Sleep(infoDelay)
			}
			proxy.ServeHTTP(w, r)
		}))
		defer slow.Close()
		agentURL = slow.URL
	}
	const trials = 5
	for trial := 1; ; trial++ {
		b := time.Now().Truncate(interval).Add(interval)
		time.Sleep(time.Until(b.Add(50 * time.Millisecond)))
		s, stop := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: agentURL, Interval: interval, Grace: grace})
		conn, err := net.Dial("udp", s.Addr(relay.UDP))
		if err != nil {
			stop()
			t.Fatal(err)
		}
		h := writer.Header{Service: "web", Env: "prod", RuntimeID: "late", Lang: "go"}
		e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: 3, Duration: 30}
		d := writer.AppendPayload(nil, &h, []writer.Bucket{{Start: uint64(b.Add(-interval).UnixNano()), Duration: uint64(interval), Groups: []*aggregate.Entry{e}}})
		if _, err := conn.Write(d); err != nil {
			conn.Close()
			stop()
			t.Fatal(err)
		}
		waitFor(t, "the late report", func() bool { return s.Relay().Stats().SpansReceived == 3 })
		if taken := time.Since(b); taken >= grace {
			conn.Close()
			stop()
			if trial == trials {
				t.Fatalf("in %d trials the relay never took the report within the grace (last: %s after the boundary)", trials, taken)
			}
			t.Logf("trial %d: the relay took the report %s after the boundary, past the grace %s: again", trial, taken, grace)
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), b.Add(3*interval))
		_, err = ag.WaitHits(ctx, 3)
		late := time.Since(b)
		cancel()
		conn.Close()
		stop()
		if err != nil {
			t.Fatalf("the window ended at the start's boundary: %v", err)
		}
		if late < grace || late >= interval+grace {
			t.Errorf("the window ended %s before the agent got it, want it in the round at the grace %s (before the next, at %s)", late, grace, interval+grace)
		}
		return
	}
}

// TestHealthzSaysStopping: /healthz answers 200 "ok" while serving and 503
// "stopping" from the moment a stop begins, while the relay still forwards
// what it holds (here to an agent that holds the request), so an
// orchestrator's readiness probe stops routing senders to it.
func TestHealthzSaysStopping(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var inFlight atomic.Int64
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // before ag.Close, which waits for the held request
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		inFlight.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return false // then taken as the agent takes it
	})
	s, err := relay.NewServer(relay.ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: ag.URL(),
		Interval: time.Hour, StopDrain: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	health := func() (int, string) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx, 30*time.Second)
	}()
	if code, body := health(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("serving: /healthz %d %q, want 200 \"ok\\n\"", code, body)
	}
	conn, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, 3)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return s.Relay().Stats().SpansReceived == 3 })
	cancel()
	waitFor(t, "the final forward to reach the agent", func() bool { return inFlight.Load() > 0 })
	if code, body := health(); code != http.StatusServiceUnavailable || body != "stopping\n" {
		t.Fatalf("stopping: /healthz %d %q, want 503 \"stopping\\n\"", code, body)
	}
	releaseOnce()
	<-done
	if st := s.Relay().Stats(); st.SpansForwarded != 3 {
		t.Fatalf("forwarded %d, want 3", st.SpansForwarded)
	}
}

// TestUnsafeClaimCorrectedByCredentials: a Unix sender whose credentials
// name its container has its claim replaced, whatever the claim holds: a
// control character in it is a mismatch, counted and corrected, not a
// reason to drop its spans (the claim is never sent as a header).
func TestUnsafeClaimCorrectedByCredentials(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: procRoot(t), UDPAddr: "-"})
	conn, err := net.Dial("unixgram", srv.Addr(relay.Unix))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: 4, Duration: 40}
	h := writer.Header{Service: "web", RuntimeID: "claims", Lang: "go", ContainerID: "bad\r\nX-Injected: 1"}
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = writer.AppendPayload(b, &h, []writer.Bucket{{Start: uint64(time.Now().Truncate(time.Second).UnixNano()),
		Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.ContainerMismatches != 1 || st.SpansForwarded != 4 {
		t.Fatalf("mismatches %d, forwarded %d, rejected %v; want 1, 4", st.ContainerMismatches, st.SpansForwarded, st.Rejected)
	}
	reqs := ag.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != testContainer || reqs[0].Payload.ContainerID != testContainer {
		t.Fatalf("%d requests; want 1 under %s", len(reqs), testContainer)
	}
}

// TestStopPollsAnAgentBackFromOff: the agent has been off long enough that
// the next /info poll is past the stop timeout, and is back when the relay
// stops. The stop reads /info at once, so what the relay holds reaches the
// agent instead of waiting for a poll after the deadline and being dropped
// as stopped.
func TestStopPollsAnAgentBackFromOff(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces", "/info"}})
	srv, err := relay.NewServer(relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", UDPAddr: "127.0.0.1:0",
		Interval: time.Second, Grace: 50 * time.Millisecond, InfoRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx, time.Second)
	}()
	// Polls at 0.2, 0.6, 1.4, 3.0 s; the next one 3.2 s later.
	time.Sleep(3100 * time.Millisecond)
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, 7)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram merged", func() bool { return srv.Relay().Stats().SpansReceived == 7 })
	time.Sleep(1200 * time.Millisecond) // a round holds it: the agent is off
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces", "/v0.6/stats", "/info"}})
	cancel()
	<-done
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	_, hits := statstest.Sum(statstest.Accepted(ag.Requests()))
	if st.SpansForwarded != 7 || hits != 7 {
		t.Fatalf("forwarded %d, dropped %v; the agent took %d; want the 7 held forwarded once the stop sees the agent back",
			st.SpansForwarded, st.SpansDropped, hits)
	}
}

// TestMetricsServedBeforeTraffic: every metric issue 12 lists exists by
// its exact name on a relay that has seen nothing yet, with its labels'
// values: an absent() alert or a dashboard must not wait for the first
// forward to find statsrelay_forward_requests_total.
func TestMetricsServedBeforeTraffic(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Interval: time.Hour})
	defer stop()
	text := scrape(srv)
	var want []string
	for _, tr := range []string{"unix", "udp"} {
		for _, m := range []string{"datagrams_received_total", "bytes_received_total", "kernel_drops_total", "reader_wait_seconds_total"} {
			want = append(want, fmt.Sprintf(`statsrelay_%s{transport=%q} 0`, m, tr))
		}
	}
	for _, r := range []string{"truncated", "malformed", "invalid"} {
		want = append(want, fmt.Sprintf(`statsrelay_datagrams_rejected_total{reason=%q} 0`, r))
	}
	want = append(want,
		"statsrelay_sender_seq_gaps_total 0",
		"statsrelay_sender_dropped_payloads_total 0",
		"statsrelay_spans_received_total 0",
		"statsrelay_spans_forwarded_total 0",
		`statsrelay_spans_dropped_total{reason="retry_budget"} 0`,
		"statsrelay_spans_pending 0",
		`statsrelay_forward_requests_total{code="2xx"} 0`,
		"statsrelay_groups 0",
		"statsrelay_senders 0",
	)
	for _, line := range want {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q before any traffic", line)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestTruncatedLineSaysWhatToChange: a sender whose datagrams exceed
// -max-datagram loses them all, and the log line counting them names the
// limit and the sender's setting that must fit under it, not a bare count.
func TestTruncatedLineSaysWhatToChange(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var buf bytes.Buffer
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Hour,
		MaxDatagram: 4096, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(make([]byte, 4097)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "1 datagram read", func() bool { return srv.Relay().Stats().Datagrams[relay.UDP] == 1 })
	stop()
	var line string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "datagrams rejected") {
			line = l
		}
	}
	for _, w := range []string{" truncated=1", "-max-datagram (4096 bytes", "MaxDatagramBytes"} {
		if !strings.Contains(line, w) {
			t.Errorf("rejected line %q lacks %q\nlog:\n%s", line, w, buf.String())
		}
	}
}
