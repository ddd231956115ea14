// This file tests the Server across clock steps and pauses: windows
// forwarded once whatever the wall clock does, and a start inside a
// boundary's grace.

package relay_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

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

// TestLateTickRunsOneRound: the forwarder's loop reaches a tick between
// one interval and two intervals less the grace late (paused, or blocked in
// RunDue on a slow agent; here the wall clock jumps ahead 1.5 intervals
// just after a round). The round forwards every window whose grace has
// passed, and is one round, not two back to back: a second harvest
// milliseconds after the first would count the hole at sequence 2 as a gap
// (the sender table judges holes over harvests an interval apart), and the
// datagram filling it, merged just after, as late.
func TestLateTickRunsOneRound(t *testing.T) {
	const interval = 2 * time.Second
	s := startClocked(t, interval)
	rounds := func() int {
		v, _ := metricValue(scrape(s.Server), "statsrelay_forward_rounds_total")
		n, _ := strconv.Atoi(v)
		return n
	}
	before := rounds()
	waitFor(t, "a forward round", func() bool { return rounds() != before })
	after := rounds()
	// Sequences 1 and 3 of one sender: 2 is in flight (another worker).
	s.sendNow(t, 1, "r", 1)
	s.sendNow(t, 3, "r", 1)
	waitFor(t, "seq 1 and 3", func() bool { return s.Relay().Stats().SpansReceived == 2 })
	s.offset.Store(int64(interval * 3 / 2)) // the tick is handled 1.5 intervals late
	waitFor(t, "the late round", func() bool { return rounds() != after })
	// The next round is due at the next boundary of the jumped clock, a
	// grace after it: on a host too loaded to check before then, that
	// round is no second one of the late tick, and nothing is measured.
	due := s.now().Truncate(interval).Add(interval + 50*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	got := rounds() - after
	s.sendNow(t, 2, "r", 1) // the datagram in flight, merged just after the round
	waitFor(t, "seq 2", func() bool { return s.Relay().Stats().SpansReceived == 3 })
	st := s.Relay().Stats()
	t.Logf("rounds run for the late tick: %d; SeqGaps %d SeqLate %d", got, st.SeqGaps, st.SeqLate)
	if !s.now().Before(due) {
		t.Skipf("the host took past the next round's due time (%s late) to check this one: nothing measured", s.now().Sub(due))
	}
	if got != 1 || st.SeqGaps != 0 || st.SeqLate != 0 {
		t.Fatalf("late tick: %d rounds back to back (want 1); SeqGaps %d, SeqLate %d (want 0, 0: seq 2 was missing at one harvest only)",
			got, st.SeqGaps, st.SeqLate)
	}
}

// TestSmallStepBackDoesNotForwardEarly: the wall clock stepping back by
// more than the grace but less than an interval, before a round: the
// round's timer fires on the monotonic clock, when the wall clock has not
// yet reached the window's end. The senders on the host are still filling
// the window by their clocks, so the round waits for its grace on the wall
// clock: the window goes to the agent once, with what came after the step.
func TestSmallStepBackDoesNotForwardEarly(t *testing.T) {
	s := startClocked(t, time.Second)
	for s.now().Sub(s.now().Truncate(time.Second)) > 200*time.Millisecond {
		time.Sleep(5 * time.Millisecond) // early in a window: time to step before its round
	}
	w := s.now().Truncate(time.Second)
	s.send(t, 0, w, "r", 3)
	waitFor(t, "the first datagram", func() bool { return s.Relay().Stats().SpansReceived == 3 })
	s.offset.Store(int64(-600 * time.Millisecond))
	// Past the round's timer (the window's end and 50 ms of grace, on the
	// monotonic clock), before the wall clock reaches the window's end.
	time.Sleep(time.Until(w.Add(1100 * time.Millisecond)))
	s.send(t, 0, w, "r", 4)
	waitFor(t, "both datagrams forwarded", func() bool { return s.Relay().Stats().SpansForwarded == 7 })
	var reqs []uint64
	for _, p := range statstest.Accepted(s.ag.Requests()) {
		for _, b := range p.Payload.Buckets {
			for _, g := range b.Groups {
				reqs = append(reqs, g.Hits)
			}
		}
	}
	if len(reqs) != 1 || reqs[0] != 7 {
		t.Fatalf("the window reached the agent as %v hits; want once, 7", reqs)
	}
	// A step of less than an interval is waited out, not taken for one.
	wantMetrics(t, s.Server, "statsrelay_clock_steps_back_total 0")
}
