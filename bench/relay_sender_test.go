//go:build linux

// This file holds the sender process of the relay benchmarks: a datagram
// written to the relay's socket at a fixed rate or as fast as it goes, and
// the benchmarks' handle on that process.

package bench

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/writer"
)

// The relay benchmarks' sender runs in its own process (this test binary,
// re-executed into TestRelaySender) so that it does not share the receiver's
// Go scheduler, and so that getrusage(RUSAGE_SELF) in the benchmark is the
// receiver's CPU alone. It writes with blocking sendmmsg(2): a Unix sender
// sleeps in the kernel while the receiver's queue is full, a UDP sender
// outruns a receiver that decodes and the kernel drops the excess (of 1 KiB
// datagrams, not always one that only reads: bench/run marks those cells
// sender-bound).

// senderEnv holds "network address datagram-file rate" for TestRelaySender:
// rate is the datagrams per second it offers (0: as fast as the socket
// takes them).
const senderEnv = "SPANSTATS_BENCH_RELAY_SENDER"

// senderBatch is the datagrams per sendmmsg: the sender must outrun any
// receiver measured here, so it pays as few syscalls as the receiver does.
const senderBatch = 16

// senderProc is the benchmark's handle on a sender process: commands go to
// its stdin ("go", "pause"), replies come back on its fd 3.
type senderProc struct {
	cmd   *exec.Cmd
	ctl   *os.File
	reply *bufio.Reader
	rfile *os.File
}

// startSender starts a sender process writing datagram d to the socket
// network ("unixgram" or "udp") at addr, rate datagrams a second (0: as
// fast as the socket takes them); it waits, paused, until resume.
func startSender(b *testing.B, network, addr string, d []byte, rate int) *senderProc {
	b.Helper()
	file := fmt.Sprintf("%s/datagram-%d", b.TempDir(), len(d))
	if err := os.WriteFile(file, d, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelaySender$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d", senderEnv, network, addr, file, rate))
	cmd.Stderr = os.Stderr // a file: no copying goroutine; errors come back on fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdin = ctlR
	cmd.ExtraFiles = []*os.File{replyW}
	err = cmd.Start()
	ctlR.Close()
	replyW.Close()
	if err != nil {
		b.Fatal(err)
	}
	s := &senderProc{cmd: cmd, ctl: ctlW, reply: bufio.NewReader(replyR), rfile: replyR}
	if line := s.read(b); line != "ready" {
		b.Fatalf("sender process: %s", line)
	}
	return s
}

func (s *senderProc) read(b *testing.B) string {
	line, err := s.reply.ReadString('\n')
	if err != nil {
		b.Fatalf("sender process: no reply: %v", err)
	}
	return strings.TrimSpace(line)
}

func (s *senderProc) resume(b *testing.B) {
	if _, err := s.ctl.WriteString("go\n"); err != nil {
		b.Fatal(err)
	}
}

// pause stops the sender and returns how many datagrams it has sent and the
// CPU it has used so far.
func (s *senderProc) pause(b *testing.B) (sent uint64, cpu time.Duration) {
	if _, err := s.ctl.WriteString("pause\n"); err != nil {
		b.Fatal(err)
	}
	line := s.read(b)
	if _, err := fmt.Sscan(line, &sent, &cpu); err != nil {
		b.Fatalf("sender process: %s", line)
	}
	return sent, cpu
}

// close ends the sender (its stdin closes) and waits for it.
func (s *senderProc) close(b *testing.B) {
	s.ctl.Close()
	if err := s.cmd.Wait(); err != nil {
		b.Errorf("sender process: %v", err)
	}
	s.rfile.Close()
}

// TestRelaySender is the sender process of the relay benchmarks; run on its
// own, it skips.
func TestRelaySender(t *testing.T) {
	spec := os.Getenv(senderEnv)
	if spec == "" {
		t.Skip("the relay benchmarks' sender process: runs only when they start it")
	}
	reply := os.NewFile(3, "reply")
	defer reply.Close()
	if err := runSender(spec, reply); err != nil {
		fmt.Fprintf(reply, "error: %v\n", err)
		t.Fatal(err)
	}
}

func runSender(spec string, reply *os.File) error {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return fmt.Errorf("%s=%q: want network, address, datagram file, rate", senderEnv, spec)
	}
	rate, err := strconv.Atoi(f[3])
	if err != nil || rate < 0 {
		return fmt.Errorf("%s=%q: rate %q", senderEnv, spec, f[3])
	}
	d, err := os.ReadFile(f[2])
	if err != nil {
		return err
	}
	fd, err := dialBlocking(f[0], f[1])
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	m := newMmsgs(d)
	var paused atomic.Bool
	start := make(chan struct{})
	done := make(chan sendResult)
	go func() {
		var r sendResult
		for range start {
			if rate == 0 {
				for r.err == nil && !paused.Load() {
					var n int
					n, r.err = m.send(fd, senderBatch)
					r.sent += uint64(n)
				}
			} else {
				r = m.sendPaced(fd, rate, &paused, r)
			}
			done <- r
		}
		close(done)
	}()
	defer func() {
		paused.Store(true)
		close(start)
		for range done {
		}
	}()
	fmt.Fprintln(reply, "ready")
	var last sendResult
	running := false
	cmds := bufio.NewScanner(os.Stdin)
	for cmds.Scan() {
		switch cmds.Text() {
		case "go":
			if !running {
				paused.Store(false)
				start <- struct{}{}
				running = true
			}
		case "pause": // also when paused: it reports the totals
			if running {
				paused.Store(true)
				last, running = <-done, false
			}
			if last.err != nil {
				return last.err
			}
			fmt.Fprintln(reply, last.sent, int64(cputime.Process()))
		}
	}
	return cmds.Err()
}

// sendResult is what a sender has sent since it started, and the error
// that stopped it.
type sendResult struct {
	sent uint64
	err  error
}

// dialBlocking returns a blocking datagram socket connected to addr.
func dialBlocking(network, addr string) (int, error) {
	var sa unix.Sockaddr
	family := unix.AF_UNIX
	switch network {
	case "unixgram":
		sa = &unix.SockaddrUnix{Name: addr}
	case "udp":
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().Is4() {
			return -1, fmt.Errorf("udp address %q: want IPv4 host:port", addr)
		}
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		family = unix.AF_INET
	default:
		return -1, fmt.Errorf("network %q", network)
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %s %s: %w", network, addr, err)
	}
	return fd, nil
}

// mmsgs is senderBatch copies of one datagram, each sent with its own
// sequence number, as one sender's successive reports would be.
type mmsgs struct {
	hdrs [senderBatch]unix.Mmsghdr
	iovs [senderBatch]unix.Iovec
	bufs [senderBatch][]byte
	seq  uint64
	// enveloped: the datagram starts with the envelope, whose sequence
	// send renews; a rejecting datagram is sent as is, so that it stays
	// rejected at its first byte.
	enveloped bool
}

func newMmsgs(d []byte) *mmsgs {
	_, _, sequenced, err := writer.ParseDatagram(d)
	m := &mmsgs{enveloped: sequenced && err == nil}
	for i := range m.hdrs {
		m.bufs[i] = append([]byte(nil), d...)
		m.iovs[i].Base = &m.bufs[i][0]
		m.iovs[i].SetLen(len(d))
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.SetIovlen(1)
	}
	return m
}

// sendPaced offers rate datagrams a second until paused: every
// millisecond (or as finely as the Go timer wakes it) what is due since it
// started, in sendmmsg batches, as a host's SDKs send in bursts.
func (m *mmsgs) sendPaced(fd, rate int, paused *atomic.Bool, r sendResult) sendResult {
	t0, sent := time.Now(), uint64(0)
	for r.err == nil && !paused.Load() {
		due := uint64(time.Since(t0).Seconds() * float64(rate))
		for r.err == nil && sent < due {
			var n int
			n, r.err = m.send(fd, int(min(due-sent, senderBatch)))
			sent += uint64(n)
			r.sent += uint64(n)
		}
		time.Sleep(time.Millisecond)
	}
	return r
}

// send writes the first k datagrams of the batch with one sendmmsg,
// blocking while the socket is full, and returns how many went.
func (m *mmsgs) send(fd, k int) (int, error) {
	for i := range m.bufs[:k] {
		if !m.enveloped {
			break
		}
		m.seq++
		writer.AppendEnvelope(m.bufs[i][:0], writer.Envelope{Sequence: m.seq}) // in place
	}
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(k), 0, 0, 0)
	runtime.KeepAlive(m)
	if errno != 0 {
		return 0, fmt.Errorf("sendmmsg: %w", errno)
	}
	if m.enveloped && int(n) < k {
		m.seq -= uint64(k - int(n)) // unsent: their numbers go again
	}
	return int(n), nil
}

// relayDatagram returns an enveloped report of at most size bytes, as an
// SDK sends one process's interval: a header and one bucket starting at
// start of as many groups as fit (50 spans each, one an error, latencies
// 4–4.6 ms: a handful of sketch bins), with the group and span counts.
func relayDatagram(size int, start time.Time) (d []byte, groups int, spans uint64) {
	h := writer.Header{Hostname: "bench-host", Env: "prod", Version: "1.4.2", Lang: "go",
		TracerVersion: "v2.3.0", RuntimeID: "2f0c5d2e-6b1e-4c4e-9f53-5d7d3b9a1c01", Service: "checkout",
		Tags: []string{"region:eu-west-1", "team:payments"}}
	bk := writer.Bucket{Start: uint64(start.UnixNano()), Duration: uint64(10 * time.Second)}
	for {
		e := &aggregate.Entry{Key: aggregate.Key{Service: "checkout", Name: "http.request",
			Resource: fmt.Sprintf("GET /cart/items/%d", len(bk.Groups)), SpanKind: "server",
			HTTPMethod: "GET", HTTPStatusCode: 200, PeerTags: []string{"peer.service:cart-db"}},
			Ok: new(aggregate.Sketch), Err: new(aggregate.Sketch)}
		for i := range 50 {
			lat := uint64(4e6 + i*i*250) // 4 ms to 4.6 ms: a handful of sketch bins
			e.Hits++
			e.TopLevelHits++
			e.Duration += lat
			if i == 49 {
				e.Errors++
				e.Err.Add(float64(lat))
			} else {
				e.Ok.Add(float64(lat))
			}
		}
		bk.Groups = append(bk.Groups, e)
		next := encode(&h, bk)
		if len(next) > size {
			bk.Groups = bk.Groups[:len(bk.Groups)-1]
			break
		}
		d, groups, spans = next, len(bk.Groups), spans+e.Hits
	}
	if groups == 0 {
		panic(fmt.Sprintf("BUG: bench: one group does not fit in a %d-byte datagram", size))
	}
	// A tag fills the room left, so that the datagram is size bytes or
	// within a byte or two of it (msgpack's string headers grow in steps).
	tags := h.Tags
	for pad := size - len(d) - 2; pad > 0; pad-- {
		h.Tags = append(tags[:len(tags):len(tags)], "pad:"+strings.Repeat("x", pad))
		if next := encode(&h, bk); len(next) <= size {
			return next, groups, spans
		}
	}
	return d, groups, spans
}

func encode(h *writer.Header, bk writer.Bucket) []byte {
	return writer.AppendPayload(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), h, []writer.Bucket{bk})
}
