// This file tests the Unix socket check: a removed socket bound again, a
// path another process took left alone, and the metrics and log lines that
// tell an operator.

package relay_test

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
)

// syncBuffer is a log read by the test while the relay may still write it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// count is how many lines hold s.
func (w *syncBuffer) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.b.String(), s)
}

// sendUnix sends d in one datagram to path, as a sender that dials anew.
func sendUnix(path string, d []byte) error {
	c, err := net.Dial("unixgram", path)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write(d)
	return err
}

// scrape returns the /metrics text.
func scrape(srv *relay.Server) string {
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// metricValue is the value of the sample named name (with its labels, as
// exposed) in the /metrics text, and whether text has it.
func metricValue(text, name string) (string, bool) {
	for l := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

func wantMetrics(t *testing.T, srv *relay.Server, lines ...string) {
	t.Helper()
	text := scrape(srv)
	for _, l := range lines {
		if !strings.Contains(text, "\n"+l+"\n") {
			t.Errorf("metrics lack %q", l)
		}
	}
}

// healthz is the status /healthz answers.
func healthz(srv *relay.Server) int {
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code
}

// startWatched runs a Server on a Unix socket only, its check run by the
// test alone (SocketCheck negative), logging into the returned buffer.
func startWatched(t *testing.T, path string, check time.Duration) (*relay.Server, *syncBuffer, func()) {
	t.Helper()
	ag := statstest.New()
	t.Cleanup(ag.Close)
	logs := new(syncBuffer)
	// An hour's interval: no forward round amid the test.
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), UnixPath: path, UDPAddr: "-",
		Interval: time.Hour, SocketCheck: check, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return srv, logs, stop
}

const (
	logRebound = "was removed while the relay ran"
	logNoBind  = "cannot be bound again"
	logTaken   = "now names another file"
)

// TestSocketRemovedIsRebound: the socket file removed while the relay
// runs, senders are refused until the check binds it again; then a sender
// that dials anew and the SDK's Sender dialled before reach the relay, the
// counts go on from where they were, one line says what happened, and the
// stop removes the new file.
func TestSocketRemovedIsRebound(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, logs, stop := startWatched(t, path, -1)
	defer stop()
	sdk, err := dgram.DialUnixgram(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if err := sdk.Write([]byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
	srv.CheckSocket()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 0")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := sendUnix(path, []byte{0xc1}); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("send with the file gone: %v, want ENOENT", err)
	}
	if err := sdk.Write([]byte{0xc1}); !errors.Is(err, dgram.ErrNoRelay) {
		t.Fatalf("SDK send with the file gone: %v, want ErrNoRelay", err)
	}
	srv.CheckSocket()
	if err := sendUnix(path, []byte{0xc1}); err != nil {
		t.Fatalf("send after the rebind: %v", err)
	}
	if err := sdk.Write([]byte{0xc1}); err != nil {
		t.Fatalf("SDK send after the rebind: %v", err)
	}
	waitFor(t, "the datagrams sent after the rebind", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 3 })
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != relay.DefaultSocketMode {
		t.Fatalf("rebound file %v, %v; want a socket of mode %o", fi, err, relay.DefaultSocketMode)
	}
	srv.CheckSocket() // the new file is the relay's own: nothing to do
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 1",
		"statsrelay_unix_socket_taken_total 0", `statsrelay_datagrams_received_total{transport="unix"} 3`)
	if n := logs.count(logRebound); n != 1 {
		t.Fatalf("%d lines %q, want 1; log:\n%s", n, logRebound, logs.String())
	}
	stop()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the stop the socket file is still there: %v", err)
	}
}

// TestSocketRebindRetries: with its directory gone the socket cannot be
// bound again; that is logged once, not at every check, /healthz fails
// meanwhile, and the first check after the directory is back binds it.
func TestSocketRebindRetries(t *testing.T) {
	dir := filepath.Join(sockdir.Dir(t), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "relay.sock")
	srv, logs, stop := startWatched(t, path, -1)
	defer stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	srv.CheckSocket()
	srv.CheckSocket()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 0", "statsrelay_unix_socket_rebinds_total 0")
	if n := logs.count(logNoBind); n != 1 {
		t.Fatalf("%d lines %q, want 1; log:\n%s", n, logNoBind, logs.String())
	}
	if code := healthz(srv); code != 503 {
		t.Fatalf("/healthz %d with the socket unbindable, want 503", code)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv.CheckSocket()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 1")
	if code := healthz(srv); code != 200 {
		t.Fatalf("/healthz %d with the socket bound again, want 200", code)
	}
	if err := sendUnix(path, []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
}

// listenAt binds another process's datagram socket at path, as a second
// relay started on it would.
func listenAt(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSocketTakenIsLeftAlone: another process's socket put at the path is
// not taken back, neither by the check nor by the stop; the metrics and
// one log line say so, and senders reach that socket.
func TestSocketTakenIsLeftAlone(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, logs, stop := startWatched(t, path, -1)
	defer stop()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other := listenAt(t, path)
	defer other.Close()
	theirs, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	srv.CheckSocket()
	srv.CheckSocket() // the same incident: counted and logged once
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 0", "statsrelay_unix_socket_rebinds_total 0",
		"statsrelay_unix_socket_taken_total 1")
	if n := logs.count(logTaken); n != 1 {
		t.Fatalf("%d lines %q, want 1; log:\n%s", n, logTaken, logs.String())
	}
	if code := healthz(srv); code != 200 { // restarted, each relay would take the path in turn
		t.Fatalf("/healthz %d with the path taken, want 200", code)
	}
	if err := sendUnix(path, []byte("to the other")); err != nil {
		t.Fatal(err)
	}
	other.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	if n, _, err := other.ReadFrom(buf); err != nil || string(buf[:n]) != "to the other" {
		t.Fatalf("the other socket read %q, %v", buf[:n], err)
	}
	stop()
	if now, err := os.Lstat(path); err != nil || !os.SameFile(theirs, now) {
		t.Fatalf("after the stop the other socket's file is %v, %v; want it untouched", now, err)
	}
	if got := srv.Relay().Stats().Datagrams[relay.Unix]; got != 0 {
		t.Fatalf("the relay read %d datagrams, want 0", got)
	}
}

// TestSocketTakenByDeadRelayIsRebound: a socket put at the path by another
// process is left alone while it receives; once that process is gone
// without removing its file (killed), nobody receives there and every
// sender is refused, so the next check binds the path again, logging it
// apart from a removal, and a sender reaches the relay.
func TestSocketTakenByDeadRelayIsRebound(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, logs, stop := startWatched(t, path, -1)
	defer stop()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other := listenAt(t, path)
	srv.CheckSocket()
	srv.CheckSocket() // live: left alone
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 0", "statsrelay_unix_socket_rebinds_total 0",
		"statsrelay_unix_socket_taken_total 1")
	other.Close() // leaves its file: a socket nobody receives on
	if err := sendUnix(path, []byte{0xc1}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("send to the dead socket: %v, want ECONNREFUSED", err)
	}
	srv.CheckSocket()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 1",
		"statsrelay_unix_socket_taken_total 1")
	if n := logs.count("nobody receives on"); n != 1 {
		t.Fatalf("%d lines saying nobody received there, want 1; log:\n%s", n, logs.String())
	}
	if err := sendUnix(path, []byte{0xc1}); err != nil {
		t.Fatalf("send after the rebind: %v", err)
	}
	waitFor(t, "the datagram at the relay", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
}

// TestSocketCheckTicks: with SocketCheck set, the relay finds the removed
// file by itself and a sender reaches it again.
func TestSocketCheckTicks(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, _, stop := startWatched(t, path, 5*time.Millisecond)
	defer stop()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a send to succeed", func() bool { return sendUnix(path, []byte{0xc1}) == nil })
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 1")
}

// TestSocketBoundWithCheckOff: with the check off (-socket-check 0) the
// gauge still says whether the path names the relay's socket: an alert on
// statsrelay_unix_socket_bound 0 must fire when the file is removed or
// taken, not read 1 for ever.
func TestSocketBoundWithCheckOff(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, _, stop := startWatched(t, path, -1)
	defer stop()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 0", "statsrelay_unix_socket_rebinds_total 0")
	other := listenAt(t, path)
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 0")
	other.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	srv.CheckSocket()
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 1")
}
