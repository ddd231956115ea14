// This file tests what the relay says when the kernel caps its UDP receive
// buffer: Linux-only, as it drops a capability from one thread.

package relay

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUDPRcvBufCappedIsTold: without CAP_NET_ADMIN the kernel caps
// SO_RCVBUF at net.core.rmem_max and says nothing; the relay warns at start,
// naming what was asked and granted, and /metrics shows the size granted.
func TestUDPRcvBufCappedIsTold(t *testing.T) {
	rmem, err := readSysctl("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skip(err)
	}
	asked := 2 * rmem
	if asked > MaxUDPRcvBuf {
		t.Skipf("net.core.rmem_max %d: no request above it is taken", rmem)
	}
	type result struct {
		s   *Server
		err error
	}
	var log bytes.Buffer
	done := make(chan result)
	go func() {
		// Capabilities are per thread: this one drops CAP_NET_ADMIN and is
		// never handed back (the goroutine ends locked, so it exits).
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- result{err: err}
			return
		}
		data[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- result{err: err}
			return
		}
		s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", UDPRcvBuf: asked, AgentURL: "http://127.0.0.1:1",
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		done <- result{s, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.s.closeConns()
	if got := r.s.conns[UDP].GrantedBuffer(); got != rmem {
		t.Fatalf("granted %d bytes, want net.core.rmem_max %d (is CAP_NET_ADMIN still effective?)", got, rmem)
	}
	for _, want := range []string{"net.core.rmem_max", "asked=" + strconv.Itoa(asked), "granted=" + strconv.Itoa(rmem)} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("start log %q does not contain %q", log.String(), want)
		}
	}
	rec := httptest.NewRecorder()
	r.s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := "statsrelay_udp_receive_buffer_bytes " + strconv.Itoa(rmem) + "\n"; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestUDPRcvBufGrantedIsQuiet: a buffer granted as asked says nothing.
// It asks no more than net.core.rmem_max: a process without CAP_NET_ADMIN
// (CI runs tests unprivileged) is granted that much on any kernel, where
// the distribution's default rmem_max (212992) is below 256 KiB.
func TestUDPRcvBufGrantedIsQuiet(t *testing.T) {
	asked := 256 << 10
	if rmem, err := readSysctl("/proc/sys/net/core/rmem_max"); err == nil {
		asked = min(asked, rmem)
	}
	var log bytes.Buffer
	s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", UDPRcvBuf: asked, AgentURL: "http://127.0.0.1:1",
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeConns()
	if got := s.conns[UDP].GrantedBuffer(); got != asked {
		t.Fatalf("granted %d, want %d", got, asked)
	}
	if strings.Contains(log.String(), "rmem_max") {
		t.Fatalf("warned of a cap on a buffer granted as asked: %s", log.String())
	}
}

func readSysctl(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
