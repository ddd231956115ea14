// This file tests the Server's stop and failed start: the bounded drain
// and final forward, nothing lost silently, a hanging agent, and a
// socket another relay holds.

package relay_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

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
	path := sockdir.Path(t, "relay.sock")
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

// TestStopRetriesWhatItHolds: the agent answers 503 to the first two stats
// requests. A relay stopped while holding an interval forwards it with its
// retries (within the stop timeout), not with one last attempt that the
// 503 would drop.
func TestStopRetriesWhatItHolds(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.FailNext(2, http.StatusServiceUnavailable)
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: "-", Interval: time.Minute})
	mergeOverUDP(t, srv, 9)
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

// TestFailedStartKeepsLiveSocket: a second relay given the socket path of
// a running one but a UDP port it cannot bind fails to start and leaves
// the running relay's socket in place, still reached by senders; one that
// starts takes the path over and says so in the log.
func TestFailedStartKeepsLiveSocket(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	sock := sockdir.Path(t, "relay.sock")
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
	mergeOverUDP(t, srv, 7)
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

// TestStopDuringSlowInfoForwards: the forwarder reads the agent's /info as
// it starts, and the client polls it again while a read failed; an agent
// slow to answer it (here: not before the test ends) held the stop's
// final forward back until the stop timeout cancelled every request, and
// the spans held were dropped untried. The stop now ends the read: what
// is held goes out at once. "first": every /info read hangs; "poll": the
// first answers 500, and the poll after it hangs.
func TestStopDuringSlowInfoForwards(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		name := map[bool]string{false: "first", true: "poll"}[failFirst]
		t.Run(name, func(t *testing.T) { stopDuringSlowInfo(t, failFirst) })
	}
}

func stopDuringSlowInfo(t *testing.T, failFirst bool) {
	release := make(chan struct{})
	var hits atomic.Uint64
	var infos atomic.Int32
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/info":
			if infos.Add(1) == 1 && failFirst {
				http.Error(w, "starting", http.StatusInternalServerError)
				return
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case r.Method == http.MethodPost && r.URL.Path == "/v0.6/stats":
			body, _ := io.ReadAll(r.Body)
			p, err := writer.DecodePayload(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, b := range p.Buckets {
				for _, g := range b.Groups {
					hits.Add(g.Hits)
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer agent.Close()
	defer close(release) // before agent.Close, deferred earlier
	srv, err := relay.NewServer(relay.ServerConfig{AgentURL: agent.URL, UnixPath: "-", UDPAddr: "127.0.0.1:0",
		Interval: time.Hour, AgentTimeout: time.Minute, InfoRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const stopTimeout = 20 * time.Second
	go func() { done <- srv.Run(ctx, stopTimeout) }()
	conn, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(validDatagram(1, 7)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram merged and an /info read hanging", func() bool {
		return srv.Relay().Stats().SpansReceived == 7 && (!failFirst || infos.Load() >= 2)
	})
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(stopTimeout + 10*time.Second):
		t.Fatal("Run did not return")
	}
	st := srv.Relay().Stats()
	if took := time.Since(start); took > stopTimeout/2 || st.SpansForwarded != 7 || hits.Load() != 7 {
		t.Fatalf("stopped in %v (stop timeout %v): forwarded %d, the agent took %d, dropped %v; want 7 forwarded at once",
			took, stopTimeout, st.SpansForwarded, hits.Load(), st.SpansDropped)
	}
}

// TestStopCountsOpenGaps: a hole in a sender's sequence is counted as a
// gap once two harvests saw it missing (it may be a datagram another
// worker decodes), but at stop every datagram read is merged and nothing
// more is read: the holes still open then are gaps, counted before Run
// returns, not left out of the relay's last counts.
func TestStopCountsOpenGaps(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	s, stopRelay := startServer(t, relay.ServerConfig{UnixPath: "-", AgentURL: ag.URL(), Interval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	c, err := net.Dial("udp", s.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, seq := range []uint64{1, 2, 5} { // 3 and 4 never come
		if _, err := c.Write(validDatagram(seq, 2)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three datagrams merged", func() bool { return s.Relay().Stats().SpansReceived == 6 })
	if st := s.Relay().Stats(); st.SeqGaps != 0 {
		t.Fatalf("%d gaps before any harvest, want 0", st.SeqGaps)
	}
	stopRelay()
	if st := s.Relay().Stats(); st.SeqGaps != 2 || st.SpansForwarded != 6 {
		t.Fatalf("after stop: %d gaps, %d spans forwarded; want 2, 6", st.SeqGaps, st.SpansForwarded)
	}
}
