// This file holds the relay's own metrics, exposed at /metrics in the
// Prometheus text format, and the HTTP handler beside them (/healthz,
// /debug/pprof/).
//
// The exposition is github.com/VictoriaMetrics/metrics: a maintained
// Prometheus text library whose whole graph is two small modules, where
// prometheus/client_golang would bring a dozen (common, procfs,
// klauspost/compress, protobuf models…) into every SDK user's go.sum.

package relay

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/spanstats/spanstats/internal/agentclient"
)

// Handler serves /metrics (the relay's counters, then the process's and
// the Go runtime's), /healthz and /debug/pprof/.
func (s *Server) Handler() http.Handler {
	// TYPE lines tell a scraper counters from gauges: untyped, each series
	// leaves every scraper to guess. The switch is the library's,
	// process-wide: only statsrelay serves this handler.
	metrics.ExposeMetadata(true)
	set := metrics.NewSet()
	// One scrape at a time writes the set: two at once would each print a
	// mix of both snapshots, in which the span identity need not hold.
	var scraping sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		var own bytes.Buffer
		scraping.Lock()
		s.snapshot(set)
		set.WritePrometheus(&own)
		scraping.Unlock()
		buf := bytes.NewBuffer(withHelp(own.Bytes()))
		// The process's own CPU, memory and descriptors (process_*, go_*):
		// what the relay costs is read where it runs, not only in bench/.
		metrics.WriteProcessMetrics(buf)
		metrics.WriteFDMetrics(buf)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(buf.Bytes())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// A stopping relay still forwards what it holds, but a readiness
		// probe should stop sending senders its way. A socket path another
		// relay took over does not fail it: restarted by a liveness probe,
		// each relay would take the path from the other in turn
		// (statsrelay_unix_socket_bound says it instead). A removed socket
		// that cannot be bound again does: its senders all drop.
		if s.stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		if s.sock.unbindable.Load() {
			http.Error(w, "the Unix socket file was removed and cannot be bound again (see the log)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// snapshot copies the counters into set, read once per scrape: the Relay
// keeps its own counters (its accounting identity needs them under one
// lock), so the metrics are a view of them, not a second count.
func (s *Server) snapshot(set *metrics.Set) {
	var open [NumTransports]bool
	for t := range NumTransports {
		open[t] = s.conn(t) != nil
	}
	statsMetrics(set, s.relay.Stats(), open)
	counter := func(name string, v uint64) { set.GetOrCreateCounter(name).Set(v) }
	gauge := func(name string, v float64) { set.GetOrCreateGauge(name, nil).Set(v) }
	for t := range NumTransports {
		c := s.conn(t)
		if c == nil {
			continue
		}
		l := fmt.Sprintf(`{transport=%q}`, t.String())
		counter("statsrelay_kernel_drops_total"+l, c.KernelDrops())
		set.GetOrCreateFloatCounter("statsrelay_reader_wait_seconds_total" + l).Set(s.wait[t].waited().Seconds())
		counter("statsrelay_reads_total"+l, s.reads[t].Load())
		counter("statsrelay_read_pauses_total"+l, s.pauses[t].Load())
		if t == UDP {
			gauge("statsrelay_udp_receive_buffer_bytes", float64(c.GrantedBuffer()))
		}
		if t == Unix {
			bound := 0.0
			if s.unixBound() {
				bound = 1
			}
			gauge("statsrelay_unix_socket_bound", bound)
			counter("statsrelay_unix_socket_rebinds_total", s.sock.rebinds.Load())
			counter("statsrelay_unix_socket_taken_total", s.sock.taken.Load())
		}
	}
	s.requests.Range(func(code, n any) bool {
		counter(fmt.Sprintf(`statsrelay_forward_requests_total{code=%q}`, code), n.(*atomic.Uint64).Load())
		return true
	})
	version, revision := Build()
	gauge(fmt.Sprintf(`statsrelay_build_info{version=%q,revision=%q,goversion=%q}`, version, revision, runtime.Version()), 1)
	gauge("statsrelay_forward_last_round_seconds", time.Duration(s.lastRound.Load()).Seconds())
	counter("statsrelay_forward_rounds_total", uint64(s.rounds.Load()))
	counter("statsrelay_forward_slow_rounds_total", s.slowRounds.Load())
	counter("statsrelay_spans_dropped_after_timeout_total", s.droppedAfterTimeout.Load())
	counter("statsrelay_agent_info_failures_total", s.infoFailures.Load())
	counter("statsrelay_clock_steps_back_total", s.clockStepsBack.Load())
	off := 0.0
	if s.agentOff.Load() {
		off = 1
	}
	gauge("statsrelay_agent_off", off)
}

// dropReasons are the reasons statsrelay_spans_dropped_total always shows,
// at 0 until a span is dropped so.
var dropReasons = []string{DropMaxGroups, DropMaxBytes, DropRetryBudget, DropAgentOff, DropRefused, DropTooLarge, DropStopped, DropUnattributable}

// statsMetrics sets in set the metric of every Stats field (a field without
// one would be a count no operator sees: TestEveryStatIsAMetric); the
// per-transport ones for the transports open. A drop reason not in
// dropReasons still gets its series.
func statsMetrics(set *metrics.Set, st Stats, open [NumTransports]bool) {
	counter := func(name string, v uint64) { set.GetOrCreateCounter(name).Set(v) }
	gauge := func(name string, v float64) { set.GetOrCreateGauge(name, nil).Set(v) }
	for t := range NumTransports {
		if open[t] {
			l := fmt.Sprintf(`{transport=%q}`, t.String())
			counter("statsrelay_datagrams_received_total"+l, st.Datagrams[t])
			counter("statsrelay_bytes_received_total"+l, st.Bytes[t])
		}
	}
	for r := range NumReasons {
		counter(fmt.Sprintf(`statsrelay_datagrams_rejected_total{reason=%q}`, r.String()), st.Rejected[r])
	}
	counter("statsrelay_datagrams_unsequenced_total", st.Unsequenced)
	counter("statsrelay_sender_seq_gaps_total", st.SeqGaps)
	counter("statsrelay_sender_restarts_total", st.SeqRestarts)
	counter("statsrelay_sender_late_total", st.SeqLate)
	counter("statsrelay_senders_forgotten_total", st.SendersForgotten)
	counter("statsrelay_sender_dropped_payloads_total", st.SenderDroppedPayloads)
	counter("statsrelay_sender_dropped_spans_total", st.SenderDroppedSpans)
	counter("statsrelay_spans_received_total", st.SpansReceived)
	counter("statsrelay_spans_forwarded_total", st.SpansForwarded)
	for _, reason := range dropReasons {
		counter(fmt.Sprintf(`statsrelay_spans_dropped_total{reason=%q}`, reason), st.SpansDropped[reason])
	}
	for reason, n := range st.SpansDropped {
		if !slices.Contains(dropReasons, reason) {
			counter(fmt.Sprintf(`statsrelay_spans_dropped_total{reason=%q}`, reason), n)
		}
	}
	gauge("statsrelay_spans_pending", float64(st.SpansPending))
	counter("statsrelay_spans_folded_total", st.FoldedSpans)
	counter("statsrelay_overflow_groups_total", st.OverflowGroups)
	counter("statsrelay_spans_late_total", st.LateSpans)
	counter("statsrelay_container_mismatches_total", st.ContainerMismatches)
	gauge("statsrelay_agent_peer_tag_keys", float64(st.PeerTagKeys))
	gauge("statsrelay_groups", float64(st.Groups))
	gauge("statsrelay_held_bytes", float64(st.HeldBytes))
	gauge("statsrelay_senders", float64(st.Senders))
}

// cmdline is pprof.Cmdline with each argument redacted: -agent may carry a
// password, which the logs hide too, and -http answers whoever reaches it.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = agentclient.Redact(a)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(args, "\x00"))
}

// help is each relay metric's HELP text. The exposition library writes the
// HELP line of a family (with its TYPE, where metadata is on, as statsrelay
// turns it on) but never its text; an operator reading /metrics, or a
// scraper that shows HELP beside a series, gets it from here.
var help = map[string]string{
	"statsrelay_agent_info_failures_total":         "Reads of the agent's /info that failed.",
	"statsrelay_agent_off":                         "1 while the agent refuses stats (404 on /v0.6/stats) and held spans wait for it to come back.",
	"statsrelay_agent_peer_tag_keys":               "Peer tag keys in the agent's /info list; -1 until it is read (every key kept).",
	"statsrelay_build_info":                        "Always 1; the labels give the relay's version, revision and Go version.",
	"statsrelay_bytes_received_total":              "Bytes of the datagrams read, rejected ones included.",
	"statsrelay_clock_steps_back_total":            "Times the wall clock stepped back between two forwarding rounds.",
	"statsrelay_container_mismatches_total":        "Payloads whose ContainerID differed from their sender's credentials (credentials win).",
	"statsrelay_datagrams_received_total":          "Datagrams read from the socket, rejected ones included.",
	"statsrelay_datagrams_rejected_total":          "Datagrams rejected whole, by reason: truncated, malformed, invalid.",
	"statsrelay_datagrams_unsequenced_total":       "Datagrams merged without an envelope or a runtime id to follow their sender by.",
	"statsrelay_forward_last_round_seconds":        "How long the last forwarding round took.",
	"statsrelay_forward_requests_total":            "Requests to the agent's /v0.6/stats, by outcome: 2xx, the status code of a refusal, or error when no answer came back.",
	"statsrelay_forward_rounds_total":              "Forwarding rounds run.",
	"statsrelay_forward_slow_rounds_total":         "Forwarding rounds longer than half the interval.",
	"statsrelay_groups":                            "Label groups held for the next forward, or harvested by the round under way and not yet encoded.",
	"statsrelay_held_bytes":                        "Memory the held groups take, label strings and sketches included, those the round under way has not yet encoded too.",
	"statsrelay_kernel_drops_total":                "Datagrams the kernel dropped at the socket's full queue before the relay read them (UDP: the socket's counter, SO_RXQ_OVFL and SO_MEMINFO). Always 0 for unix: a full Unix socket drops nothing, its senders wait and then count what they drop (statsrelay_sender_dropped_payloads_total).",
	"statsrelay_reader_wait_seconds_total":         "Time the socket's reader waited for a decode worker, leaving datagrams to the kernel's queue.",
	"statsrelay_reads_total":                       "Reads (recvmmsg calls) that took datagrams from the socket.",
	"statsrelay_read_pauses_total":                 "Pauses of -read-coalesce the socket's reader made between reads while datagrams came sparsely.",
	"statsrelay_sender_dropped_payloads_total":     "Payloads the senders say they dropped (socket full, relay missing).",
	"statsrelay_sender_dropped_spans_total":        "Spans in the payloads the senders say they dropped.",
	"statsrelay_sender_late_total":                 "Datagrams whose sequence was received before or already counted as a gap; their spans are merged.",
	"statsrelay_sender_restarts_total":             "Senders that started over at sequence 1 (1 again, then a sequence received before: 1 again, then a new one, was a duplicate, counted late).",
	"statsrelay_sender_seq_gaps_total":             "Sequence numbers a sender skipped, missing for a whole interval (a truncated or malformed datagram, or one invalid for a summary, which names no sender, counts here too).",
	"statsrelay_senders":                           "Senders in the sender table.",
	"statsrelay_senders_forgotten_total":           "Senders evicted from a full sender table while still sending.",
	"statsrelay_spans_dropped_after_timeout_total": "Spans dropped after a request, sent whole, timed out, lost its connection before the answer or was cut by the stop: the agent may have taken them.",
	"statsrelay_spans_dropped_total":               "Spans dropped, by reason: max_groups, max_bytes, retry_budget, agent_off, refused, too_large (the agent, or a proxy before it, answered 413 down to one group), stopped, unattributable.",
	"statsrelay_spans_folded_total":                "Spans folded into an overflow group at the -max-groups or -max-held-bytes bound.",
	"statsrelay_overflow_groups_total":             "Overflow groups created at the -max-groups or -max-held-bytes bound (one per identity and window).",
	"statsrelay_spans_forwarded_total":             "Spans the agent accepted.",
	"statsrelay_spans_late_total":                  "Spans of a window already forwarded, forwarded at the next round.",
	"statsrelay_spans_pending":                     "Spans held, not yet forwarded or dropped.",
	"statsrelay_spans_received_total":              "Spans in the datagrams merged; always forwarded + dropped + pending.",
	"statsrelay_udp_receive_buffer_bytes":          "The UDP socket's receive buffer, as the kernel granted it.",
	"statsrelay_unix_socket_bound":                 "1 while the Unix socket path names the relay's socket, else 0.",
	"statsrelay_unix_socket_rebinds_total":         "Times the Unix socket was bound again after its path was removed.",
	"statsrelay_unix_socket_taken_total":           "Times another file or socket was found at the Unix socket's path.",
}

// withHelp returns text with the help of each family it knows after the
// family's empty "# HELP name" line.
func withHelp(text []byte) []byte {
	out := make([]byte, 0, len(text)+len(help)*80)
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line = text[:i+1]
		}
		text = text[len(line):]
		name, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("# HELP "))
		if h := help[string(name)]; ok && h != "" {
			out = append(out, "# HELP "...)
			out = append(out, name...)
			out = append(out, ' ')
			out = append(out, h...)
			out = append(out, '\n')
			continue
		}
		out = append(out, line...)
	}
	return out
}
