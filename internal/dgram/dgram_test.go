// This file tests the portable part of the sockets: reading batches,
// listening at a path (stale, live or other files there), closing, Drain,
// and the errors a Sender meets.

package dgram

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/sockdir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// relay is a receiving socket and a Sender to it, closed at the test's end.
type relay struct {
	name string
	conn *Conn
	path string // "" for UDP
	send *Sender
}

func listenUnixgram(t testing.TB) relay {
	t.Helper()
	path := sockdir.Path(t, "relay.sock")
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := DialUnixgram(path, 1<<17)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return relay{"unixgram", c, path, s}
}

func listenUDP(t testing.TB, rcvbuf int) relay {
	t.Helper()
	c, err := ListenUDP("127.0.0.1:0", rcvbuf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := DialUDP(c.LocalAddr().(*net.UDPAddr).AddrPort(), 1<<17)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return relay{"udp", c, "", s}
}

// payload returns n bytes that differ per datagram i and per offset.
func payload(i, n int) []byte {
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i*7 + j)
	}
	return p
}

// readAll reads until want datagrams arrived (5 s at most) and returns copies.
func readAll(t *testing.T, c *Conn, b *Batch, want int) []Datagram {
	t.Helper()
	var got []Datagram
	deadline := time.Now().Add(5 * time.Second)
	c.pc.SetReadDeadline(deadline)
	defer c.pc.SetReadDeadline(time.Time{})
	for len(got) < want {
		if _, err := c.ReadBatch(b); err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(got), want, err)
		}
		for _, d := range b.Datagrams() {
			d.Data = bytes.Clone(d.Data)
			got = append(got, d)
		}
	}
	return got
}

func TestReadBatchBytes(t *testing.T) {
	for _, r := range []relay{listenUnixgram(t), listenUDP(t, 0)} {
		t.Run(r.name, func(t *testing.T) {
			const n = 8
			for i := range n {
				if err := r.send.Write(payload(i, 1+i*100)); err != nil {
					t.Fatal(err)
				}
			}
			got := readAll(t, r.conn, NewBatch(16, 1024), n)
			if len(got) != n {
				t.Fatalf("got %d datagrams, want %d", len(got), n)
			}
			for i, d := range got {
				if want := payload(i, 1+i*100); !bytes.Equal(d.Data, want) || d.Truncated || d.Size != len(want) {
					t.Errorf("datagram %d: %d bytes (truncated %v), want %d bytes % x…", i, len(d.Data), d.Truncated, len(want), want[:min(4, len(want))])
				}
			}
		})
	}
}

func TestOversizedDatagramIsTruncated(t *testing.T) {
	const max = 1024
	for _, r := range []relay{listenUnixgram(t), listenUDP(t, 1<<20)} {
		largest := 65536 // with DialUnixgram's send buffer of 128 KiB
		if r.path == "" {
			largest = 65507 // the largest UDP payload over IPv4
		}
		for _, tc := range []struct {
			size      int
			truncated bool
		}{{max, false}, {max + 1, true}, {largest, true}, {1, false}} {
			if err := r.send.Write(payload(tc.size, tc.size)); err != nil {
				t.Fatalf("%s: write %d bytes: %v", r.name, tc.size, err)
			}
			d := readAll(t, r.conn, NewBatch(4, max), 1)[0]
			want := payload(tc.size, tc.size)[:min(tc.size, max+1)]
			if d.Truncated != tc.truncated || !bytes.Equal(d.Data, want) {
				t.Errorf("%s: %d-byte datagram: truncated %v with %d bytes, want %v with %d", r.name, tc.size, d.Truncated, len(d.Data), tc.truncated, len(want))
			}
			// Its whole length where the kernel gives it (recvmmsg with
			// MSG_TRUNC), else what was read.
			if wantSize := map[bool]int{true: tc.size, false: len(want)}[runtime.GOOS == "linux"]; d.Size != wantSize {
				t.Errorf("%s: %d-byte datagram: Size %d, want %d", r.name, tc.size, d.Size, wantSize)
			}
		}
	}
}

func TestListenUnixgramReplacesStaleSocket(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close() // a UnixConn leaves its socket file behind: a relay that died
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket file: %v, %v", fi, err)
	}
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.TookOver() {
		t.Error("TookOver after replacing a socket nobody received on")
	}
	s, err := DialUnixgram(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, c, NewBatch(1, 64), 1)[0]; string(d.Data) != "hello" {
		t.Fatalf("read %q", d.Data)
	}
}

// TestListenUnixgramRefusesLiveStreamSocket: a stream socket a process
// listens on (the agent's apm.socket at a mistyped path) is refused and
// left in place; a stale one is replaced.
func TestListenUnixgramRefusesLiveStreamSocket(t *testing.T) {
	path := sockdir.Path(t, "apm.socket")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if c, err := ListenUnixgram(path, 0o600); err == nil {
		c.Close()
		t.Fatal("ListenUnixgram replaced a live stream socket")
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the stream socket's clients after the refusal: %v", err)
	} else {
		c.Close()
	}
	ln.Close() // its file stays: stale now
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatalf("a stale stream socket file: %v", err)
	}
	c.Close()
}

// TestListenUnixgramTakesOverLiveSocket: the socket of a receiver still
// running is replaced too, and TookOver says so; senders that dial the
// path now reach the new socket.
func TestListenUnixgramTakesOverLiveSocket(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	old, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.TookOver() || old.TookOver() {
		t.Fatalf("TookOver: new %v, old %v; want true, false", c.TookOver(), old.TookOver())
	}
	s, err := DialUnixgram(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write([]byte("to the new one")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, c, NewBatch(1, 64), 1)[0]; string(d.Data) != "to the new one" {
		t.Fatalf("read %q", d.Data)
	}
}

func TestListenUnixgramRefusesOtherFiles(t *testing.T) {
	dir := sockdir.Dir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, sub} {
		if c, err := ListenUnixgram(path, 0o600); err == nil {
			c.Close()
			t.Errorf("ListenUnixgram(%s) succeeded over a non-socket", path)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file after ListenUnixgram: %q, %v", b, err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("directory after ListenUnixgram: %v, %v", fi, err)
	}
}

func TestListenUnixgramMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o620, 0o666} {
		path := sockdir.Path(t, "relay.sock")
		c, err := ListenUnixgram(path, mode)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != mode {
			t.Errorf("mode %v: socket file has %v", mode, fi.Mode())
		}
	}
}

func TestCloseRemovesOnlyItsSocketFile(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	first, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ListenUnixgram(path, 0o600) // replaces first's file
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("closing the replaced Conn removed its successor's socket: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if err := second.Close(); err == nil {
		t.Error("second Close returned nil")
	}
}

func TestCloseUnblocksReadBatch(t *testing.T) {
	for _, r := range []relay{listenUnixgram(t), listenUDP(t, 0)} {
		done := make(chan error)
		go func() {
			_, err := r.conn.ReadBatch(NewBatch(4, 64))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // let it park in the netpoller
		r.conn.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s: ReadBatch after Close: %v, want net.ErrClosed", r.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadBatch still blocked 5 s after Close", r.name)
		}
	}
}

func TestSenderNoRelay(t *testing.T) {
	dir := sockdir.Dir(t)
	missing := filepath.Join(dir, "missing.sock")
	if _, err := DialUnixgram(missing, 0); !errors.Is(err, ErrNoRelay) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dial a missing path: %v, want ErrNoRelay and ENOENT", err)
	}

	stale := filepath.Join(dir, "stale.sock")
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: stale, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	if _, err := DialUnixgram(stale, 0); !errors.Is(err, ErrNoRelay) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial a stale socket: %v, want ErrNoRelay and ECONNREFUSED", err)
	}

	// A file where the socket should be: refused as a stale socket is, and
	// the error names it.
	plain := filepath.Join(dir, "plain.sock")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := DialUnixgram(plain, 0); !errors.Is(err, ErrNoRelay) || !strings.Contains(err.Error(), plain+" exists and is not a socket") {
		t.Errorf("dial a regular file: %v, want ErrNoRelay naming %s as not a socket", err, plain)
	}

	// The relay stops after the dial, then a new one starts at the same path.
	r := listenUnixgram(t)
	r.conn.Close()
	if err := r.send.Write([]byte("x")); !errors.Is(err, ErrNoRelay) {
		t.Errorf("write after the relay stopped: %v, want ErrNoRelay", err)
	}
	c, err := ListenUnixgram(r.path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = r.send.Write([]byte("again"))
	if errors.Is(err, ErrNoRelay) && runtime.GOOS != "linux" { // Linux addresses the path with each datagram
		// A connected socket stays tied to the relay that went away: the
		// caller dials again on ErrNoRelay (the SDK does), and reaches it.
		r.send.Close()
		if r.send, err = DialUnixgram(r.path, 0); err == nil {
			err = r.send.Write([]byte("again"))
		}
	}
	if err != nil {
		t.Fatalf("write to the restarted relay: %v", err)
	}
	if d := readAll(t, c, NewBatch(1, 64), 1)[0]; string(d.Data) != "again" {
		t.Fatalf("restarted relay read %q", d.Data)
	}

	// UDP: the port unreachable comes back on a later write.
	u := listenUDP(t, 0)
	u.conn.Close()
	err = nil
	for i := 0; i < 50 && !errors.Is(err, ErrNoRelay); i++ {
		err = u.send.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, ErrNoRelay) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("udp write to a closed port: %v, want ErrNoRelay and ECONNREFUSED", err)
	}
}

func TestSenderClosed(t *testing.T) {
	r := listenUnixgram(t)
	r.send.Close()
	if err := r.send.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v, want net.ErrClosed", err)
	}
}

// TestSetReadDeadline: a ReadBatch on an empty socket returns at the
// deadline with os.ErrDeadlineExceeded, reads again once it is cleared, and
// a deadline set after Drain does not undo the drain's wake-up.
func TestSetReadDeadline(t *testing.T) {
	r := listenUnixgram(t)
	b := NewBatch(4, 1024)
	start := time.Now()
	if err := r.conn.SetReadDeadline(start.Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.conn.ReadBatch(b); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("empty socket past the deadline: ReadBatch = %d, %v; want 0, os.ErrDeadlineExceeded", n, err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("ReadBatch returned after %v, before the 20ms deadline", waited)
	}
	if err := r.conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(30*time.Millisecond, func() { r.send.Write(payload(1, 100)) })
	if n, err := r.conn.ReadBatch(b); n != 1 || err != nil {
		t.Fatalf("deadline cleared: ReadBatch = %d, %v; want the datagram sent 30ms later", n, err)
	}

	if err := r.conn.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := r.conn.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.conn.ReadBatch(b); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrDrained) {
			t.Fatalf("after Drain and a later deadline: ReadBatch = %v, want ErrDrained", err)
		}
	case <-time.After(5 * time.Second):
		r.conn.Close()
		<-done
		t.Fatal("a deadline set after Drain made ReadBatch wait: the drain was undone")
	}
}

// TestUnixPathTooLong: listening or dialing at a path longer than a Unix
// socket takes fails saying so, and leaves no file behind.
func TestUnixPathTooLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("s", MaxUnixPath))
	_, err := ListenUnixgram(path, 0o600)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxUnixPath)) {
		t.Fatalf("ListenUnixgram: %v, want the path limit", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file was left at the path: %v", err)
	}
	if _, err := DialUnixgram(path, 0); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxUnixPath)) {
		t.Fatalf("DialUnixgram: %v, want the path limit", err)
	}
}

// TestDialStreamSocket: dialing a stream socket (the agent's apm.socket
// given for the relay's) fails saying which scheme is for which.
func TestDialStreamSocket(t *testing.T) {
	path := sockdir.Path(t, "apm.socket")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = DialUnixgram(path, 0)
	if !errors.Is(err, syscall.EPROTOTYPE) || errors.Is(err, ErrNoRelay) || !strings.Contains(err.Error(), "unixgram:// is for statsrelay's socket") {
		t.Fatalf("DialUnixgram to a stream socket: %v", err)
	}
}

// TestListenUDPRefusesHugeReadBuffer: past MaxRcvBuf the int32 the kernel
// takes would wrap negative and leave a buffer of a few KiB; ListenUDP
// refuses it instead, and takes MaxRcvBuf itself.
func TestListenUDPRefusesHugeReadBuffer(t *testing.T) {
	for _, n64 := range []int64{MaxRcvBuf + 1, 1 << 31, 1<<32 + 4096} {
		if n64 > math.MaxInt {
			continue // a 32-bit int cannot hold it
		}
		n := int(n64)
		if c, err := ListenUDP("127.0.0.1:0", n); err == nil {
			got := c.ReadBuffer()
			c.Close()
			t.Errorf("ListenUDP(rcvbuf %d) = nil error, buffer %d bytes; want an error", n, got)
		}
	}
	c, err := ListenUDP("127.0.0.1:0", MaxRcvBuf)
	if err != nil {
		t.Fatalf("ListenUDP(MaxRcvBuf): %v", err)
	}
	c.Close()
}

// TestDrainTakesEveryQueuedDatagram: Drain called while ReadBatch works
// through a full queue ends the reading only once the queue is empty,
// whichever step of Drain the reader's loop falls between (the fallback
// sets its own short deadline, which Drain's past one may replace).
func TestDrainTakesEveryQueuedDatagram(t *testing.T) {
	const n = 200
	for round := range 20 {
		r := listenUDP(t, 1<<20)
		for i := range n {
			if err := r.send.Write(payload(i, 64)); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan int)
		go func() {
			b, k := NewBatch(DefaultBatchSize, 1024), 0
			for {
				m, err := r.conn.ReadBatch(b)
				if err != nil {
					got <- k
					return
				}
				k += m
			}
		}()
		time.Sleep(time.Duration(round) * 20 * time.Microsecond)
		if err := r.conn.Drain(); err != nil {
			t.Fatal(err)
		}
		if k := <-got; k != n {
			t.Fatalf("round %d: ReadBatch took %d of %d queued datagrams before it ended", round, k, n)
		}
	}
}

// TestListenUnixgramKeepsFilePutInPlaceOfStaleSocket: a file put at the path
// while the stale socket there is probed is not the socket probed: it is
// neither removed nor replaced.
func TestListenUnixgramKeepsFilePutInPlaceOfStaleSocket(t *testing.T) {
	dir := sockdir.Dir(t)
	path := filepath.Join(dir, "relay.sock")
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close() // stale
	testHook = func(stage string) {
		if stage != "remove" {
			return
		}
		// Another process's file, renamed over the stale socket.
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte("keep"), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHook = nil }()
	if c, err := ListenUnixgram(path, 0o600); err == nil {
		c.Close()
		t.Error("ListenUnixgram succeeded over the file put in the stale socket's place")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep" {
		t.Errorf("the file put at the path: %q, %v; want \"keep\"", b, err)
	}
}

// TestCloseKeepsSuccessorReusingInode: a relay that binds the path as this
// one closes may get the inode number just freed (ext4 hands it out again
// at once); Close must still not take that socket file for its own.
func TestCloseKeepsSuccessorReusingInode(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	first, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var second *Conn
	testHook = func(stage string) {
		if stage != "close" || second != nil {
			return
		}
		if second, err = ListenUnixgram(path, 0o600); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHook = nil }()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if second == nil {
		t.Fatal("no successor bound")
	}
	defer second.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the successor's socket file after the first Conn's Close: %v", err)
	}
	first.Unlink() // after Close, never the file of another socket
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the successor's socket file after the closed Conn's Unlink: %v", err)
	}
}

// TestWriteErrorKinds: the errnos a send can meet map to what the SDK acts
// on: a full queue (EAGAIN, and ENOBUFS, which no test socket can be made
// to return) is waited for, a missing relay redialed; the errno stays
// visible for the message; anything else is neither.
func TestWriteErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		kind  error
	}{
		{syscall.EAGAIN, ErrWouldBlock},
		{syscall.ENOBUFS, ErrWouldBlock},
		{syscall.ECONNREFUSED, ErrNoRelay},
		{syscall.ENOENT, ErrNoRelay},
		{syscall.ECONNRESET, ErrNoRelay},
		{syscall.ENOTCONN, ErrNoRelay},
		{syscall.EMSGSIZE, nil},
	} {
		err := writeError(tc.errno)
		if !errors.Is(err, tc.errno) {
			t.Errorf("writeError(%v) = %v, does not match the errno", tc.errno, err)
		}
		for _, kind := range []error{ErrWouldBlock, ErrNoRelay} {
			if errors.Is(err, kind) != (kind == tc.kind) {
				t.Errorf("writeError(%v) = %v: errors.Is %v is %v", tc.errno, err, kind, errors.Is(err, kind))
			}
		}
	}
	if err := writeError(0); err != nil {
		t.Errorf("writeError(0) = %v, want nil", err)
	}
}

// TestNewBatchBounds: a batch of 0 slots takes the default; a maximum
// datagram size below 1 is a programming error, and panics.
func TestNewBatchBounds(t *testing.T) {
	if b := NewBatch(0, 64); b.Cap() != DefaultBatchSize || b.MaxDatagram() != 64 {
		t.Errorf("NewBatch(0, 64): Cap %d, MaxDatagram %d; want %d, 64", b.Cap(), b.MaxDatagram(), DefaultBatchSize)
	}
	for _, size := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewBatch(1, %d) did not panic", size)
				}
			}()
			NewBatch(1, size)
		}()
	}
}

// TestCheckUnixPathExactLimit: a path of exactly MaxUnixPath bytes fits;
// one more byte does not.
func TestCheckUnixPathExactLimit(t *testing.T) {
	if err := CheckUnixPath(strings.Repeat("s", MaxUnixPath)); err != nil {
		t.Errorf("a path of MaxUnixPath = %d bytes: %v, want it taken", MaxUnixPath, err)
	}
	if err := CheckUnixPath(strings.Repeat("s", MaxUnixPath+1)); err == nil {
		t.Errorf("a path of %d bytes taken", MaxUnixPath+1)
	}
}

// TestTookOverSurvivesRetry: ListenUnixgram removed a live socket, then
// found a stale one put at the path in its window and bound on its second
// attempt: it still took over the live receiver's path.
func TestTookOverSurvivesRetry(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	running, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	put := false
	testHook = func(stage string) {
		if stage != "bind" || put {
			return
		}
		put = true
		old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Errorf("the stale socket: %v", err)
			return
		}
		old.Close() // its file stays: stale
	}
	defer func() { testHook = nil }()
	c, err := ListenUnixgram(path, 0o600)
	testHook = nil
	if !put {
		t.Fatal("the hook did not run")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.TookOver() {
		t.Error("TookOver false: the first attempt removed a live receiver's socket")
	}
	if st, err := c.CheckFile(); st != FileBound || err != nil {
		t.Errorf("CheckFile %v, %v; want FileBound", st, err)
	}
}
