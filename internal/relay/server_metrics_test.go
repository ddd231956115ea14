// This file tests what the Server tells its operator: /metrics (names,
// types, help, the span identity), /healthz, and the trouble log.

package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestMetricsExposition: /metrics serves every metric the operators'
// dashboards use, by its exact name, in the Prometheus text format.
func TestMetricsExposition(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	// An hour's interval: the group must still be held at the scrape, not
	// forwarded at a boundary that falls between the send and the scrape.
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Interval: time.Hour})
	defer stop()
	conn := dialUDP(t, srv)
	conn.Write(validDatagram(1, 4))
	conn.Write([]byte{0xc1})
	conn.Close()
	waitFor(t, "two datagrams", func() bool { return srv.Relay().Stats().Datagrams[relay.UDP] == 2 })
	text := scrape(srv)
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
	body := scrape(srv)
	type family struct {
		help, typ string
		samples   int
	}
	fams := map[string]*family{}
	var order []string
	var cur string
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
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
		t.Log(body)
	}
}

// TestConcurrentScrapesKeepTheIdentity: scrapes of /metrics at once,
// while datagrams merge and forwards (some refused) settle them, each
// print one snapshot: received = forwarded +
// dropped + pending in every exposition.
func TestConcurrentScrapesKeepTheIdentity(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	// Forwards while it is scraped, some refused: spans move from pending
	// to forwarded and dropped amid the scrapes.
	ag.FailNext(3, http.StatusBadRequest)
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: 100 * time.Millisecond})
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
			for !done.Load() {
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
	// Until 800 scrapes and both a forward taken and one refused; a
	// generous bound: under -race on a loaded host 800 scrapes beside the
	// merging loop have taken more than 10 s.
	settled := func() bool {
		st := srv.Relay().Stats()
		var dropped uint64
		for _, n := range st.SpansDropped {
			dropped += n
		}
		return scrapes.Load() >= 800 && st.SpansForwarded > 0 && dropped > 0
	}
	for deadline := time.Now().Add(time.Minute); !settled() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	done.Store(true)
	scraping.Wait()
	merging.Wait()
	if !settled() {
		t.Fatalf("after a minute: %d scrapes, %+v; want 800, spans forwarded and dropped", scrapes.Load(), srv.Relay().Stats())
	}
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d scrapes broke received = forwarded + dropped + pending, e.g. %v", n, scrapes.Load(), example.Load())
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
	conn := dialUDP(t, srv)
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
	mergeOverUDP(t, s, 3)
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
