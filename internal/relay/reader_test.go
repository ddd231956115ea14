// This file tests what the Server sets up around its socket readers: failed
// reads retried (a reader never stops for good), the wait on a full decode
// queue measured, the UDP receive buffer, and the -proc-root start checks.

package relay

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/sockdir"
)

// runServer runs a Server of cfg, forwarding to an agent that is not
// there and logging nowhere, until the test ends.
func runServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	cfg.AgentURL, cfg.Logger = "http://127.0.0.1:1", slog.New(slog.DiscardHandler)
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx, time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// TestReaderSurvivesFailedReads: reads that fail with an unexpected error
// (here a read deadline in the past, which no stop asked for) are retried;
// once reads work again the reader takes the next datagram.
func TestReaderSurvivesFailedReads(t *testing.T) {
	s := runServer(t, ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0"})
	c := s.conns[UDP]
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil { // every read fails at once
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several failed reads in a row
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", s.Addr(UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{0xc1}); err != nil { // rejected as malformed, but read
		t.Fatal(err)
	}
	waitFor(t, "the datagram sent after the failed reads", func() bool { return s.Relay().Stats().Datagrams[UDP] == 1 })
}

// TestUDPRcvBufSystemDefault: a negative UDPRcvBuf keeps the system's
// receive buffer (what -udp-rcvbuf 0 asks for), zero takes
// DefaultUDPRcvBuf, each as the kernel grants it to a plain socket.
func TestUDPRcvBufSystemDefault(t *testing.T) {
	granted := func(rcvbuf int) int {
		c, err := dgram.ListenUDP("127.0.0.1:0", rcvbuf)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ReadBuffer()
	}
	for _, tc := range []struct{ cfg, want int }{{-1, granted(0)}, {0, granted(DefaultUDPRcvBuf)}} {
		s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", UDPRcvBuf: tc.cfg, AgentURL: "http://127.0.0.1:1",
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		got := s.conns[UDP].ReadBuffer()
		s.closeConns()
		if got != tc.want {
			t.Errorf("UDPRcvBuf %d: SO_RCVBUF %d, want %d", tc.cfg, got, tc.want)
		}
	}
}

// TestProcRootMissing: with origin detection on, a proc root that is not a
// directory (a mistyped -proc-root) fails the start, naming it, rather
// than finding no sender's container.
func TestProcRootMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "prco")
	_, err := NewServer(ServerConfig{UnixPath: sockdir.Path(t, "r.sock"), UDPAddr: "-", AgentURL: "http://127.0.0.1:1", Origin: true, ProcRoot: missing,
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("NewServer with proc root %s: %v, want an error naming it", missing, err)
	}
	for _, origin := range []bool{false, true} { // without a Unix socket, origins are never read
		s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: "http://127.0.0.1:1", Origin: origin, ProcRoot: missing,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("origin %v, no Unix socket: the proc root is not read, yet %v", origin, err)
		}
		s.closeConns()
	}
}

// TestReaderWaitMeasured: with every read batch held by the decode side,
// the reader waits (the kernel's queue takes the pressure) and the wait
// shows in statsrelay_reader_wait_seconds_total; the datagram sent
// meanwhile is read once a batch is free.
func TestReaderWaitMeasured(t *testing.T) {
	s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: "http://127.0.0.1:1",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var held []*dgram.Batch
	for range cap(s.free.avail) {
		<-s.free.avail
		held = append(held, s.free.pop())
	}
	done := make(chan struct{})
	go func() { defer close(done); s.read(s.conns[UDP], UDP) }()
	conn, err := net.Dial("udp", s.Addr(UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	// The wait counts from when the reader blocks, which on a busy machine
	// (or GOMAXPROCS 1) can be well after the go statement: time it from a
	// moment the reader is known to be blocked.
	waitBlocked(t, "relay.(*Server).read(", "chan receive")
	blocked := time.Now()
	const pause = 100 * time.Millisecond
	time.Sleep(pause)
	if len(s.queue) != 0 {
		t.Fatal("the reader read without a free batch")
	}
	atLeast := time.Since(blocked)
	// A scrape during the stall shows the wait under way: an operator
	// looks when the readers are stuck.
	if w := s.wait[UDP].waited(); w < atLeast {
		t.Fatalf("during the stall: wait %v, want at least the %v it has been held", w, atLeast)
	}
	s.free.put(held[0])
	j := <-s.queue
	if n := len(j.b.Datagrams()); n != 1 {
		t.Fatalf("%d datagrams read after the wait, want 1", n)
	}
	s.closeConns()
	s.free.put(j.b) // the reader's next read then finds the socket closed
	<-done
	if w := s.wait[UDP].waited(); w < atLeast {
		t.Fatalf("wait measured %v, want at least the %v it was held", w, atLeast)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`\nstatsrelay_reader_wait_seconds_total\{transport="udp"\} ([0-9.e+-]+)\n`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatalf("/metrics lacks the UDP reader's wait:\n%s", rec.Body.String())
	}
	if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < atLeast.Seconds() {
		t.Fatalf("statsrelay_reader_wait_seconds_total{transport=\"udp\"} %s, want at least %v", m[1], atLeast.Seconds())
	}
}

// waitBlocked waits until a goroutine whose stack holds fn is blocked in
// state (as runtime.Stack names it, e.g. "chan receive").
func waitBlocked(t *testing.T, fn, state string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, " ["+state) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine in %s blocked in %s", fn, state)
		}
	}
}

// TestReaderWaitTwoReaders: two readers of one transport waiting at once
// (a rebound Unix socket's old reader drains beside the new one) each add
// their wait; a single start time used to be overwritten by the second and
// zeroed by the first to end, and the total went negative for good.
func TestReaderWaitTwoReaders(t *testing.T) {
	var w readerWait
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for range 2 {
		started.Add(1)
		done.Go(func() {
			w.begin()
			started.Done()
			<-release
			w.end()
		})
	}
	started.Wait()
	t0 := time.Now()
	time.Sleep(20 * time.Millisecond)
	both := time.Since(t0) // both waited at least this long
	close(release)
	done.Wait()
	if got := w.waited(); got < 2*both || got > 10*time.Second {
		t.Fatalf("two readers waited at least %v each: total %v, want at least %v", both, got, 2*both)
	}
}

// TestProcRootWithoutSelfWarns: a directory without a self entry (not a
// proc filesystem: -proc-root /tmp, say) starts the relay, as a test's fake
// proc root does, but says so in the log, naming it; /proc does not.
func TestProcRootWithoutSelfWarns(t *testing.T) {
	for root, warns := range map[string]bool{t.TempDir(): true, "/proc": false} {
		var log bytes.Buffer
		s, err := NewServer(ServerConfig{UnixPath: sockdir.Path(t, "r.sock"), UDPAddr: "-", AgentURL: "http://127.0.0.1:1",
			Origin: true, ProcRoot: root, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.closeConns()
		if got := strings.Contains(log.String(), "no self entry") && strings.Contains(log.String(), "proc_root="+root); got != warns {
			t.Errorf("proc root %s: warned %v, want %v; log: %s", root, got, warns, log.String())
		}
	}
}
