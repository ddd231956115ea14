// This file tests the Linux side of the sockets: batched reads, sender
// credentials, kernel drop counts, full queues, and the socket file's mode
// and what the listen does to files at its path.

package dgram

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spanstats/spanstats/internal/sockdir"
)

func TestReadBatchReadsQueuedDatagramsAtOnce(t *testing.T) {
	r := listenUnixgram(t)
	const n = 8 // under net.unix.max_dgram_qlen's default of 10
	for i := range n {
		if err := r.send.Write(payload(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatch(16, 1024)
	got, err := r.conn.ReadBatch(b)
	if err != nil || got != n {
		t.Fatalf("ReadBatch = %d, %v; want all %d queued datagrams in one call", got, err, n)
	}
}

func TestReadBatchPID(t *testing.T) {
	r := listenUnixgram(t)
	if err := r.send.Write([]byte("who")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, r.conn, NewBatch(2, 64), 1)[0]; d.PID != int32(os.Getpid()) {
		t.Errorf("PID %d, want os.Getpid() = %d", d.PID, os.Getpid())
	}
	u := listenUDP(t, 0)
	if err := u.send.Write([]byte("who")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, u.conn, NewBatch(2, 64), 1)[0]; d.PID != 0 {
		t.Errorf("UDP datagram has PID %d, want 0 (unknown)", d.PID)
	}
}

// A sender's SCM_RIGHTS must not install descriptors in the relay.
func TestPassedDescriptorsAreNotInstalled(t *testing.T) {
	r := listenUnixgram(t)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	before := openFDs(t)
	rights := unix.UnixRights(0, 1, 2)
	if err := unix.Sendmsg(fd, []byte("fds"), rights, &unix.SockaddrUnix{Name: r.path}, 0); err != nil {
		t.Fatal(err)
	}
	d := readAll(t, r.conn, NewBatch(2, 64), 1)[0]
	if string(d.Data) != "fds" || d.PID != int32(os.Getpid()) {
		t.Errorf("read %q from pid %d", d.Data, d.PID)
	}
	if after := openFDs(t); after != before {
		t.Errorf("open descriptors %d before the read, %d after", before, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// KernelDrops must equal exactly what the kernel dropped: flood a small
// receive buffer without reading, drain it, then read one more datagram,
// which carries the drop counter as it stood when it was queued.
func TestKernelDropsExact(t *testing.T) {
	r := listenUDP(t, 4096)
	const flood = 300 // under net.core.netdev_max_backlog, so no drop happens before the socket
	for i := range flood {
		if err := r.send.Write(payload(i, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatch(8, 2048)
	received := 0
	for {
		n, err := r.conn.ReadBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		received += n
		if queued(t, r.conn) == 0 {
			break
		}
	}
	if err := r.send.Write([]byte("marker")); err != nil {
		t.Fatal(err)
	}
	sent := flood + 1
	for last := ""; last != "marker"; {
		got := readAll(t, r.conn, b, 1)
		received += len(got)
		last = string(got[len(got)-1].Data)
	}
	drops := r.conn.KernelDrops()
	t.Logf("rcvbuf %d: sent %d, received %d, kernel drops %d", r.conn.ReadBuffer(), sent, received, drops)
	if drops == 0 || drops != uint64(sent-received) {
		t.Errorf("KernelDrops %d, want sent %d - received %d = %d (and > 0)", drops, sent, received, sent-received)
	}
}

// TestKernelDropsWithoutLaterDatagram: a burst overflows the buffer and
// nothing follows it (the end of an interval's burst, the relay
// stopping). The datagrams read were queued before the drops, so they
// carry none: KernelDrops reads the socket's counter itself, and Close
// reads it one last time for a total asked after it.
func TestKernelDropsWithoutLaterDatagram(t *testing.T) {
	for _, afterClose := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_close=%v", afterClose), func(t *testing.T) {
			r := listenUDP(t, 4096)
			const flood = 300 // under net.core.netdev_max_backlog, as in TestKernelDropsExact
			for i := range flood {
				if err := r.send.Write(payload(i, 1024)); err != nil {
					t.Fatal(err)
				}
			}
			b := NewBatch(8, 2048)
			received := 0
			for queued(t, r.conn) != 0 {
				n, err := r.conn.ReadBatch(b)
				if err != nil {
					t.Fatal(err)
				}
				received += n
			}
			if afterClose {
				r.conn.Close()
			}
			drops := r.conn.KernelDrops()
			t.Logf("rcvbuf %d: sent %d, received %d, kernel drops %d", r.conn.ReadBuffer(), flood, received, drops)
			if drops == 0 || drops != uint64(flood-received) {
				t.Errorf("KernelDrops %d, want sent %d - received %d = %d (and > 0)", drops, flood, received, flood-received)
			}
		})
	}
}

// queued returns the length of the next queued UDP datagram, 0 if none.
func queued(t *testing.T, c *Conn) int {
	t.Helper()
	var n int
	var err error
	c.rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCountDropsWraps(t *testing.T) {
	var s connSys
	for _, v := range []uint32{5, 5, 3, 1 << 31, 1<<32 - 2, 4} {
		s.countDrops(v)
	}
	// 5, +0 (the same), ignored (older), +(2^31-5), +(2^31-2), +6 across the wrap
	if got, want := s.drops.Load(), uint64(1<<32+4); got != want {
		t.Errorf("drops %d, want %d", got, want)
	}
}

func TestSenderWouldBlockWhenRelayQueueFull(t *testing.T) {
	r := listenUnixgram(t)
	qlen := maxDgramQlen(t)
	sent := 0
	var err error
	for ; sent < 1000; sent++ {
		if err = r.send.Write(payload(sent, 512)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrWouldBlock) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("after %d writes: %v, want ErrWouldBlock (EAGAIN)", sent, err)
	}
	// The kernel refuses once the queue holds more than max_dgram_qlen.
	if sent != qlen+1 {
		t.Errorf("queue took %d datagrams, want max_dgram_qlen+1 = %d", sent, qlen+1)
	}
	got := readAll(t, r.conn, NewBatch(64, 1024), sent)
	if len(got) != sent {
		t.Fatalf("read %d, want %d", len(got), sent)
	}
	if err := r.send.Write([]byte("room again")); err != nil {
		t.Errorf("write after the relay read its queue: %v", err)
	}
}

func maxDgramQlen(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/unix/max_dgram_qlen")
	if err != nil {
		t.Skip(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReadBatchAndWriteDoNotAllocate(t *testing.T) {
	for _, r := range []relay{listenUnixgram(t), listenUDP(t, 0)} {
		b := NewBatch(8, 1024)
		p := payload(1, 512)
		allocs := testing.AllocsPerRun(200, func() {
			for range 4 {
				if err := r.send.Write(p); err != nil {
					t.Fatal(err)
				}
			}
			for got := 0; got < 4; {
				n, err := r.conn.ReadBatch(b)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per 4 writes and their reads, want 0", r.name, allocs)
		}
	}
}

func TestListenUDPReadBuffer(t *testing.T) {
	const want = 8 << 20 // beyond the default net.core.rmem_max of 208 KiB
	r := listenUDP(t, want)
	got := r.conn.ReadBuffer()
	if os.Geteuid() == 0 && got != 2*want {
		t.Errorf("ReadBuffer %d as root, want the kernel's doubled %d (SO_RCVBUFFORCE)", got, 2*want)
	}
	if got <= 0 {
		t.Errorf("ReadBuffer %d", got)
	}
}

// fillQueue writes to r until the relay's queue refuses.
func fillQueue(t *testing.T, r relay) {
	t.Helper()
	for i := range 1000 {
		if err := r.send.Write(payload(i, 256)); errors.Is(err, ErrWouldBlock) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the queue never filled")
}

// TestWriteFullQueue: on a full queue Write returns ErrWouldBlock at once;
// once the relay reads, the next Write goes through.
func TestWriteFullQueue(t *testing.T) {
	r := listenUnixgram(t)
	fillQueue(t, r)
	start := time.Now()
	if err := r.send.Write([]byte("late")); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("Write on a full queue: %v, want ErrWouldBlock", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("Write on a full queue took %s: it waited", d)
	}
	b := NewBatch(64, 1024)
	if _, err := r.conn.ReadBatch(b); err != nil {
		t.Fatal(err)
	}
	if err := r.send.Write([]byte("after")); err != nil {
		t.Fatalf("Write after the relay read: %v", err)
	}
	for !slices.ContainsFunc(b.Datagrams(), func(d Datagram) bool { return string(d.Data) == "after" }) {
		readAll(t, r.conn, b, 1)
	}
}

// TestDrain: after Drain, ReadBatch returns ErrDrained without waiting; a
// ReadBatch already waiting is woken; a datagram sent after it is refused
// (ErrNoRelay: the sender retries elsewhere or counts its drop), what was
// queued before it is read (TestDrainRefusesConnectedSenders).
func TestDrain(t *testing.T) {
	r := listenUnixgram(t)
	b := NewBatch(4, 1024)
	woken := make(chan error, 1)
	go func() { _, err := r.conn.ReadBatch(b); woken <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := r.conn.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := <-woken; !errors.Is(err, ErrDrained) {
		t.Fatalf("a waiting ReadBatch after Drain: %v, want ErrDrained", err)
	}
	if err := r.send.Write(payload(0, 100)); !errors.Is(err, ErrNoRelay) {
		t.Fatalf("a send after Drain: %v, want ErrNoRelay", err)
	}
	if n, err := r.conn.ReadBatch(b); n != 0 || !errors.Is(err, ErrDrained) {
		t.Fatalf("ReadBatch after Drain of an empty socket: %d, %v; want 0, ErrDrained", n, err)
	}
}

// TestSocketNeverWiderThanMode: with the process's umask at 0, the socket
// file is never seen with more permissions than the mode asked, not even
// between bind and the chmod after it (a world-writable moment let any
// local user send), and it ends with exactly that mode.
func TestSocketNeverWiderThanMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := sockdir.Path(t, "relay.sock")
	const mode = 0o660
	var wider os.FileMode
	for range 200 {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if fi, err := os.Lstat(path); err == nil && fi.Mode().Perm()&^mode != 0 {
					wider = fi.Mode().Perm()
					return
				}
			}
		}()
		c, err := ListenUnixgram(path, mode)
		close(stop)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("socket mode %v (%v), want %v", fi.Mode().Perm(), err, os.FileMode(mode))
		}
		c.Close()
		if wider != 0 {
			t.Fatalf("socket seen with mode %v, wider than %v", wider, os.FileMode(mode))
		}
	}
}

// TestPrivateSocketNeverWiderThanMode: the socket is bound at a private
// name and linked at the path only once its mode is right, so a watcher of
// the path (TestSocketNeverWiderThanMode) cannot see the bind's own mode.
// This looks at the private file itself, just after the bind (at the chmod
// or, when none is needed, the link): with the umask at 0, a bind that
// did not first narrow the socket (fchmod) leaves it 0777 there, and a
// sender that connects in that moment keeps sending after the chmod.
func TestPrivateSocketNeverWiderThanMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := sockdir.Path(t, "relay.sock")
	const mode = 0o660
	var modes []os.FileMode
	testHook = func(stage string) {
		if stage != "chmod" && stage != "link" {
			return
		}
		names, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
		for _, n := range names {
			if fi, err := os.Lstat(n); err == nil && fi.Mode().Type() == fs.ModeSocket {
				modes = append(modes, fi.Mode().Perm())
			}
		}
	}
	defer func() { testHook = nil }()
	c, err := ListenUnixgram(path, mode)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(modes) == 0 {
		t.Fatal("no private socket file seen after the bind")
	}
	for _, m := range modes {
		if m != mode {
			t.Fatalf("private socket file seen with mode %v after the bind, want %v", m, os.FileMode(mode))
		}
	}
}

// TestUDPRelayGoneRefused: once the relay's UDP socket is closed, every
// Write to its port is refused (ErrNoRelay), not one in two: the kernel's
// port-unreachable for a datagram is read when it is sent, so a retry does
// not count a datagram sent into nothing.
func TestUDPRelayGoneRefused(t *testing.T) {
	c, err := ListenUDP("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DialUDP(c.LocalAddr().(*net.UDPAddr).AddrPort(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write([]byte("there")); err != nil {
		t.Fatalf("write to a listening relay: %v", err)
	}
	c.Close()
	for i := range 6 {
		if err := s.Write([]byte("gone")); !errors.Is(err, ErrNoRelay) {
			t.Fatalf("write %d after the relay closed: %v, want ErrNoRelay", i+1, err)
		}
	}
	// A relay back on the port is written to again.
	c2, err := ListenUDP(c.LocalAddr().String(), 0)
	if err != nil {
		t.Skipf("port taken again meanwhile: %v", err)
	}
	defer c2.Close()
	if err := s.Write([]byte("back")); err != nil {
		t.Fatalf("write to the relay back on its port: %v", err)
	}
}

// TestListenUDPShared: two shared sockets bind one port, where a plain
// ListenUDP is refused; senders' datagrams reach one socket or the other,
// each exactly once, and once one socket closes they all reach the other.
func TestListenUDPShared(t *testing.T) {
	const senders = 16
	a, err := ListenUDPShared("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addr := a.LocalAddr().(*net.UDPAddr)
	b, err := ListenUDPShared(addr.String(), 0)
	if err != nil {
		t.Fatalf("a second shared socket on %s: %v", addr, err)
	}
	defer b.Close()
	if c, err := ListenUDP(addr.String(), 0); !errors.Is(err, syscall.EADDRINUSE) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a plain socket on the shared port: %v, want EADDRINUSE", err)
	}
	snd := make([]*Sender, senders)
	for i := range snd {
		if snd[i], err = DialUDP(addr.AddrPort(), 0); err != nil {
			t.Fatal(err)
		}
		defer snd[i].Close()
	}
	round := func(conns ...*Conn) map[string]int {
		t.Helper()
		for i, s := range snd {
			if err := s.Write([]byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]int{}
		bt := NewBatch(16, 64)
		for n, deadline := 0, time.Now().Add(5*time.Second); n < senders && time.Now().Before(deadline); {
			for _, c := range conns {
				c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				k, err := c.ReadBatch(bt)
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal(err)
				}
				for _, d := range bt.Datagrams()[:k] {
					got[string(d.Data)]++
				}
				n += k
			}
		}
		return got
	}
	got := round(a, b)
	if len(got) != senders {
		t.Fatalf("both sockets read %d distinct datagrams (%v); want the %d sent", len(got), got, senders)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("datagram %s read %d times", k, n)
		}
	}
	a.Close()
	if got := round(b); len(got) != senders {
		t.Fatalf("after the first socket closed, the other read %d distinct datagrams (%v); want all %d", len(got), got, senders)
	}
}

// listenUnix binds a socket of type typ at path and listens with backlog.
func listenUnix(t *testing.T, path string, typ, backlog int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestListenUnixgramKeepsLiveSocketsItCannotProbe: a live listening socket
// whose probe fails for another reason than "nobody listens" (a stream
// socket whose backlog is full, a seqpacket socket) is another service's
// and stays.
func TestListenUnixgramKeepsLiveSocketsItCannotProbe(t *testing.T) {
	dir := sockdir.Dir(t)
	busy := filepath.Join(dir, "busy.sock")
	listenUnix(t, busy, unix.SOCK_STREAM, 0)
	// Backlog 0 holds one connection: the second is refused with EAGAIN.
	c, err := net.Dial("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c, err := net.Dial("unix", busy); err == nil {
		c.Close()
		t.Skip("the backlog did not fill")
	}
	seq := filepath.Join(dir, "seq.sock")
	listenUnix(t, seq, unix.SOCK_SEQPACKET, 16)
	for _, path := range []string{busy, seq} {
		if c, err := ListenUnixgram(path, 0o600); err == nil {
			c.Close()
			t.Errorf("%s: ListenUnixgram replaced a live socket", filepath.Base(path))
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("%s: the socket file is gone (%v)", filepath.Base(path), err)
		}
	}
}

// TestKernelDropsExactWithConcurrentDrainedReaders: after Drain, ReadBatch
// reads outside the fd's read lock, so readers of one Conn may count the
// kernel's drop counter at the same time; the total stays exact.
func TestKernelDropsExactWithConcurrentDrainedReaders(t *testing.T) {
	r := listenUDP(t, 4096)
	// Drain's way of reading without its refusal of new datagrams: the
	// readers drain while the flood goes on.
	r.conn.draining.Store(true)
	if err := r.conn.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	const flood = 20000
	var received atomic.Int64
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			b := NewBatch(1, 512)
			for {
				n, err := r.conn.ReadBatch(b)
				received.Add(int64(n))
				switch {
				case errors.Is(err, ErrDrained):
					select {
					case <-done:
						return
					default:
					}
				case err != nil:
					t.Error(err)
					return
				}
			}
		})
	}
	sent, start := 0, time.Now()
	for i := range flood {
		if err := r.send.Write(payload(i, 256)); err != nil {
			t.Fatal(err)
		}
		sent++
		if i%256 == 255 {
			// Under net.core.netdev_max_backlog, whose drops happen
			// before the socket and so are not its drops.
			time.Sleep(200 * time.Microsecond)
		}
	}
	close(done)
	readers.Wait()
	// The drops after the last datagram read show with the next one: a
	// marker, sent again until one finds room behind the flood's tail.
	b := NewBatch(8, 512)
	for last := ""; last != "marker"; {
		if time.Since(start) > 10*time.Second {
			t.Fatal("no marker came through")
		}
		if err := r.send.Write([]byte("marker")); err != nil {
			t.Fatal(err)
		}
		sent++
		time.Sleep(time.Millisecond) // loopback may queue it just after the send
		for {
			n, err := r.conn.ReadBatch(b)
			if errors.Is(err, ErrDrained) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			received.Add(int64(n))
			last = string(b.Datagrams()[n-1].Data)
		}
	}
	drops := r.conn.KernelDrops()
	t.Logf("sent %d, received %d, kernel drops %d", sent, received.Load(), drops)
	if want := uint64(sent) - uint64(received.Load()); drops == 0 || drops != want {
		t.Errorf("KernelDrops %d, want sent %d - received %d = %d (and > 0)", drops, sent, received.Load(), want)
	}
}

// TestCountDropsConcurrent: readers counting the same stamps at once count
// each drop once.
func TestCountDropsConcurrent(t *testing.T) {
	var s connSys
	const top = 100000
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for v := uint32(1); v <= top; v++ {
				s.countDrops(v)
			}
		})
	}
	wg.Wait()
	if got := s.drops.Load(); got != top {
		t.Errorf("drops %d, want %d", got, top)
	}
}

// TestChmodNeverThroughLinkPutInPlace: when the umask made the chmod after
// bind needed, a link put in the socket's place in between is not followed:
// the file it points to keeps its mode, and the start fails.
func TestChmodNeverThroughLinkPutInPlace(t *testing.T) {
	old := syscall.Umask(0o022) // takes 0o044 from the mode: a chmod follows bind
	defer syscall.Umask(old)
	dir := sockdir.Dir(t)
	path := filepath.Join(dir, "relay.sock")
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	testHook = func(stage string) {
		if stage != "chmod" {
			return
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Error(err)
		}
		if err := os.Rename(link, path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHook = nil }()
	if c, err := ListenUnixgram(path, 0o666); err == nil {
		c.Close()
		t.Error("ListenUnixgram succeeded with a link in its socket's place")
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the link's target: %v, %v; want mode 0600", fi.Mode().Perm(), err)
	}
}

// TestListenUnixgramRefusesAbstractName: "@name" is an abstract socket on
// Linux, which has no file for the mode to guard: the listen is refused
// saying so, and nothing is bound at that name.
func TestListenUnixgramRefusesAbstractName(t *testing.T) {
	name := "@spanstats-test-" + strconv.Itoa(os.Getpid())
	c, err := ListenUnixgram(name, 0o600)
	if err == nil {
		c.Close()
		t.Fatal("ListenUnixgram bound an abstract socket name")
	}
	if !strings.Contains(err.Error(), "abstract") || !strings.Contains(err.Error(), name) {
		t.Errorf("ListenUnixgram(%q): %v; want an error naming it an abstract socket name", name, err)
	}
	if s, err := DialUnixgram(name, 0); !errors.Is(err, ErrNoRelay) {
		if err == nil {
			s.Close()
		}
		t.Errorf("DialUnixgram(%q) after the refused listen: %v; want ErrNoRelay", name, err)
	}
}

// TestBindKnowsItsOwnFile: a relay that binds the path in the moment
// between this bind and its file's appearance at the path (a successor
// taking it over, or one rebinding) is never taken for this socket: Rebind
// leaves its file alone and says the path is taken; ListenUnixgram takes
// it over as it takes over any live socket, and knows its own file, which
// its Close removes and nothing else. Before, the file was found by
// looking at the path after the bind, where the successor's could be.
func TestBindKnowsItsOwnFile(t *testing.T) {
	old := syscall.Umask(0o022) // takes 0o044 from the mode: a chmod follows bind
	defer syscall.Umask(old)
	for _, rebind := range []bool{true, false} {
		path := sockdir.Path(t, "relay.sock")
		var successor *net.UnixConn
		testHook = func(stage string) {
			if stage != "link" || successor != nil {
				return
			}
			var err error
			if successor, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"}); err != nil {
				t.Error(err)
			}
		}
		var c *Conn
		var err error
		if rebind {
			c, err = RebindUnixgram(path, 0o666)
		} else {
			c, err = ListenUnixgram(path, 0o666)
		}
		testHook = nil
		if successor == nil {
			t.Fatal("no successor bound")
		}
		if rebind {
			if !errors.Is(err, ErrPathTaken) || c != nil {
				t.Fatalf("Rebind with a successor at the path: %v, want ErrPathTaken", err)
			}
			s, err := DialUnixgram(path, 0)
			if err != nil {
				t.Fatalf("dialing the successor: %v", err)
			}
			if err := s.Write([]byte("still here")); err != nil {
				t.Fatalf("writing to the successor: %v", err)
			}
			s.Close()
			buf := make([]byte, 64)
			successor.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, _, err := successor.ReadFrom(buf); err != nil || string(buf[:n]) != "still here" {
				t.Errorf("the successor read %q, %v; want \"still here\"", buf[:n], err)
			}
		} else {
			if err != nil || !c.TookOver() {
				t.Fatalf("ListenUnixgram with a successor at the path: %v (took over: %v), want it taken over", err, err == nil && c.TookOver())
			}
			if fi, err := os.Lstat(path); err != nil || !os.SameFile(fi, c.bound) || fi.Mode().Perm() != 0o666 {
				t.Fatalf("the file at the path (%v) is not the listener's own with mode 0666", err)
			}
			if st, _ := c.CheckFile(); st != FileBound {
				t.Fatalf("CheckFile = %v, want FileBound", st)
			}
			c.Close()
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Close left the path: %v", err)
			}
		}
		successor.Close()
		if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(m) != 0 {
			t.Fatalf("private names left behind: %v", m)
		}
	}
}

// TestDialOnlyRaisesSendBuffer: the buffer asked of DialUnixgram and
// DialUDP is a floor for the datagrams it must hold. One under the
// socket's default (net.core.wmem_default, which an operator may have
// raised for bursts) used to lower it, so fewer datagrams waited in the
// relay's queue before the sender got EAGAIN; one over it is granted (over
// UDP too, where macOS and FreeBSD start at 9 216 bytes and refuse a
// longer datagram).
func TestDialOnlyRaisesSendBuffer(t *testing.T) {
	u, p := listenUnixgram(t), listenUDP(t, 0)
	for _, kind := range []struct {
		name string
		dial func(n int) (*Sender, error)
	}{
		{"unixgram", func(n int) (*Sender, error) { return DialUnixgram(u.path, n) }},
		{"udp", func(n int) (*Sender, error) { return DialUDP(p.conn.LocalAddr().(*net.UDPAddr).AddrPort(), n) }},
	} {
		sndbuf := func(n int) int {
			t.Helper()
			s, err := kind.dial(n)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var v int
			var gerr error
			if err := s.rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }); err != nil || gerr != nil {
				t.Fatal(err, gerr)
			}
			return v
		}
		def := sndbuf(0)
		if got := sndbuf(def / 4); got < def {
			t.Errorf("%s: dial(%d): SO_SNDBUF %d, under the default %d", kind.name, def/4, got, def)
		}
		// Linux doubles the value set (for its bookkeeping) and reports that.
		if got := sndbuf(def); got < 2*def {
			t.Errorf("%s: dial(%d): SO_SNDBUF %d, want at least %d", kind.name, def, got, 2*def)
		}
	}
}

// TestListenUnixgramRefusesLinksAndFIFOs: "any other kind of file" at the
// path includes a FIFO and a symbolic link, even one to a stale socket:
// replacing the link would delete what an operator put there, and
// following it would take over a socket elsewhere.
func TestListenUnixgramRefusesLinksAndFIFOs(t *testing.T) {
	dir := sockdir.Dir(t)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: stale, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close() // a UnixConn leaves its socket file behind: a relay that died
	link, dangling := filepath.Join(dir, "link"), filepath.Join(dir, "dangling")
	if err := os.Symlink(stale, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "none"), dangling); err != nil {
		t.Fatal(err)
	}
	for path, typ := range map[string]os.FileMode{fifo: os.ModeNamedPipe, link: os.ModeSymlink, dangling: os.ModeSymlink} {
		if c, err := ListenUnixgram(path, 0o600); err == nil || !strings.Contains(err.Error(), "is not a socket") {
			if c != nil {
				c.Close()
			}
			t.Errorf("ListenUnixgram(%s): %v, want an error saying it is not a socket", path, err)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != typ {
			t.Errorf("%s after ListenUnixgram: %v, %v; want it left a %v", path, fi, err, typ)
		}
	}
	if fi, err := os.Lstat(stale); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the link's target after ListenUnixgram: %v, %v; want the socket left", fi, err)
	}
}

// TestPrivateNameLengths: the private name beside a socket path is hidden,
// in the same directory, random, and within the path limit, for a short
// name, a long one and one whose directory leaves little room.
func TestPrivateNameLengths(t *testing.T) {
	long := "/tmp/" + strings.Repeat("s", MaxUnixPath-5)
	for _, path := range []string{"/run/r.sock", "/run/" + strings.Repeat("r", 90) + ".sock", long} {
		a, err := privateName(path)
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		b, _ := privateName(path)
		if filepath.Dir(a) != filepath.Dir(path) || !strings.HasPrefix(filepath.Base(a), ".") || len(a) > MaxUnixPath || a == b {
			t.Errorf("%q: private names %q and %q", path, a, b)
		}
	}
	if _, err := privateName("/" + strings.Repeat("d", MaxUnixPath-5) + "/x"); err == nil {
		t.Error("a directory leaving no room: no error")
	}
}

// TestDrainRefusesConnectedSenders: a sender that connected to the Unix
// socket (another tracer, a net.Dial client; the SDK names the path in each
// send) is not refused by the socket file's removal. Drain refuses it
// (EPIPE), so that once a drained read finds the queue empty nothing more
// can arrive: what the kernel took before Drain is read, what comes after
// is refused where the sender sees it, and nothing is taken and then
// dropped by the close.
func TestDrainRefusesConnectedSenders(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if _, err := s.Write(payload(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	c.Unlink()
	if err := c.Drain(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(payload(3, 100)); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a connected sender's write after Drain: %v, want EPIPE", err)
	}
	if got := readDrained(t, c, nil); got != 3 {
		t.Fatalf("drained %d datagrams, want the 3 sent before Drain", got)
	}
}

// readDrained reads c, drained, until it says so, handing each datagram
// and its index to each (if any), and returns how many it read.
func readDrained(t *testing.T, c *Conn, each func(i int, d Datagram)) int {
	t.Helper()
	b, got := NewBatch(DefaultBatchSize, 1024), 0
	for {
		n, err := c.ReadBatch(b)
		for _, d := range b.Datagrams()[:n] {
			if each != nil {
				each(got, d)
			}
			got++
		}
		if errors.Is(err, ErrDrained) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrainRefusesUDPSenders: after Drain a UDP socket takes no new
// datagram (the sender is answered port unreachable, as by a closed port),
// and still hands out what the kernel queued before: a datagram sent
// between the drained read that finds the queue empty and the close was
// freed by the close, uncounted on either side.
func TestDrainRefusesUDPSenders(t *testing.T) {
	r := listenUDP(t, 1<<20)
	for i := range 3 {
		if err := r.send.Write(payload(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // loopback delivers at once; leave it time all the same
	if err := r.conn.Drain(); err != nil {
		t.Fatal(err)
	}
	refused := false
	for i := range 5 {
		err := r.send.Write(payload(10+i, 100))
		refused = refused || errors.Is(err, ErrNoRelay)
		time.Sleep(5 * time.Millisecond) // the port unreachable answer reaches the sender
	}
	if !refused {
		t.Error("no send after Drain was refused (ErrNoRelay)")
	}
	got := readDrained(t, r.conn, func(i int, d Datagram) {
		if d.Data[0] != payload(i, 1)[0] {
			t.Errorf("datagram %d read after Drain is not one sent before it", i)
		}
	})
	if got != 3 {
		t.Fatalf("drained %d datagrams, want the 3 sent before Drain", got)
	}
}

// TestBatchReuseClearsPID: a Batch that read a Unix datagram (PID set) and
// then reads a UDP one into the same slot reports PID 0 for it.
func TestBatchReuseClearsPID(t *testing.T) {
	r := listenUnixgram(t)
	u := listenUDP(t, 0)
	b := NewBatch(2, 64)
	if err := r.send.Write([]byte("unix")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, r.conn, b, 1)[0]; d.PID != int32(os.Getpid()) {
		t.Fatalf("Unix datagram PID %d, want %d", d.PID, os.Getpid())
	}
	if err := u.send.Write([]byte("udp")); err != nil {
		t.Fatal(err)
	}
	if d := readAll(t, u.conn, b, 1)[0]; string(d.Data) != "udp" || d.PID != 0 {
		t.Errorf("UDP datagram %q read into the reused Batch: PID %d, want 0", d.Data, d.PID)
	}
}

// socketDrops reads the socket's drop counter (SO_MEMINFO) without
// counting it into c.
func socketDrops(t *testing.T, c *Conn) uint32 {
	t.Helper()
	var mi [unix.SK_MEMINFO_VARS]uint32
	var errno syscall.Errno
	c.rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mi))
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	})
	if errno != 0 {
		t.Skipf("SO_MEMINFO: %v", errno)
	}
	return mi[unix.SK_MEMINFO_DROPS]
}

// TestKernelDropsCountedFromStamps: the drop counter a datagram carries
// (SO_RXQ_OVFL) is counted as ReadBatch reads it, before any poll of the
// socket (KernelDrops, Close): a datagram queued after drops carries at
// least the drops counted before it was sent.
func TestKernelDropsCountedFromStamps(t *testing.T) {
	r := listenUDP(t, 4096)
	const flood = 300 // as in TestKernelDropsExact
	for i := range flood {
		if err := r.send.Write(payload(i, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatch(8, 2048)
	for {
		if _, err := r.conn.ReadBatch(b); err != nil {
			t.Fatal(err)
		}
		if queued(t, r.conn) == 0 {
			break
		}
	}
	before := socketDrops(t, r.conn)
	if before == 0 {
		t.Fatal("the flood dropped nothing")
	}
	if err := r.send.Write([]byte("marker")); err != nil {
		t.Fatal(err)
	}
	for last := ""; last != "marker"; {
		got := readAll(t, r.conn, b, 1)
		last = string(got[len(got)-1].Data)
	}
	stamped := r.conn.sys.drops.Load() // read, not polled: KernelDrops would poll
	if stamped < uint64(before) {
		t.Errorf("drops counted from the datagrams' stamps: %d; the socket had dropped %d before the marker was sent", stamped, before)
	}
	if total := r.conn.KernelDrops(); stamped > total {
		t.Errorf("stamped drops %d exceed KernelDrops %d", stamped, total)
	}
}

// TestReadBatchReturnsSocketError: an error the kernel holds on the socket
// (here ECONNREFUSED from a port unreachable) is ReadBatch's error, not an
// empty batch.
func TestReadBatchReturnsSocketError(t *testing.T) {
	u, err := ListenUDP("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := dead.LocalAddr().(*net.UDPAddr).Port
	dead.Close() // nobody listens there now
	b := NewBatch(2, 64)
	var n int
	// Sent again should the port-unreachable answer be lost (the kernel's
	// global ICMP limit, under a busy host).
	for try := 0; ; try++ {
		var serr error
		if err := u.rc.Control(func(fd uintptr) {
			if serr = unix.Connect(int(fd), &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); serr == nil {
				_, serr = unix.Write(int(fd), []byte("to nobody"))
			}
		}); err != nil || serr != nil {
			t.Fatalf("send to a closed port: %v, %v", err, serr)
		}
		u.SetReadDeadline(time.Now().Add(2 * time.Second)) // the error wakes the read long before
		n, err = u.ReadBatch(b)
		if !errors.Is(err, os.ErrDeadlineExceeded) || try == 4 {
			break
		}
	}
	var se *os.SyscallError
	if n != 0 || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &se) || se.Syscall != "recvmmsg" {
		t.Fatalf("ReadBatch = %d, %v; want 0 and recvmmsg's ECONNREFUSED", n, err)
	}
	if len(b.Datagrams()) != 0 {
		t.Errorf("Datagrams after a failed ReadBatch: %d, want 0", len(b.Datagrams()))
	}
}

// TestGrantedBufferIsHalfTheReported: Linux reports SO_RCVBUF doubled;
// GrantedBuffer gives the size in the terms it was asked.
func TestGrantedBufferIsHalfTheReported(t *testing.T) {
	const want = 64 << 10 // under the default net.core.rmem_max (208 KiB)
	r := listenUDP(t, want)
	if got, rep := r.conn.GrantedBuffer(), r.conn.ReadBuffer(); rep <= 0 || got*2 != rep {
		t.Errorf("GrantedBuffer %d, ReadBuffer %d; want half of it", got, rep)
	}
	if os.Geteuid() == 0 {
		if got := r.conn.GrantedBuffer(); got != want {
			t.Errorf("GrantedBuffer %d as root, want %d (SO_RCVBUFFORCE)", got, want)
		}
	}
}

// TestCountDropsConcurrentStrict: readers counting the same stamps at once
// from a common start count each drop once (the counter's last value is
// taken by compare-and-swap, not stored over another reader's).
func TestCountDropsConcurrentStrict(t *testing.T) {
	var s connSys
	const top = 1 << 20
	procs := max(2, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range procs {
		wg.Go(func() {
			<-start
			for v := uint32(1); v <= top; v++ {
				s.countDrops(v)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := s.drops.Load(); got != top {
		t.Errorf("drops %d, want %d", got, top)
	}
}

// TestListenUnixgramStreamSockets: a stream socket bound but listened on by
// nobody (connect refused) is stale and replaced; one a process listens on
// is refused, saying so.
func TestListenUnixgramStreamSockets(t *testing.T) {
	path := sockdir.Path(t, "bound.socket")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatalf("a stream socket nobody listens on: %v, want it replaced", err)
	}
	if c.TookOver() {
		t.Error("TookOver after replacing a stream socket nobody listens on")
	}
	c.Close()

	lpath := sockdir.Path(t, "apm.socket")
	ln, err := net.Listen("unix", lpath)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if c, err := ListenUnixgram(lpath, 0o600); err == nil {
		c.Close()
		t.Fatal("ListenUnixgram replaced a live stream socket")
	} else if !strings.Contains(err.Error(), "stream socket a process listens on") {
		t.Errorf("ListenUnixgram at a live stream socket: %v; want it named a stream socket a process listens on", err)
	}
}

// TestUnixQueueLen: the queue length read is the kernel's
// net.unix.max_dgram_qlen, as the relay's coalescing sizes its pauses by it.
func TestUnixQueueLen(t *testing.T) {
	b, err := os.ReadFile(unixQueueLenFile)
	if err != nil {
		t.Skipf("%s unreadable here: %v", unixQueueLenFile, err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || want < 1 {
		t.Skipf("%s holds %q", unixQueueLenFile, b)
	}
	if got := UnixQueueLen(); got != want {
		t.Fatalf("UnixQueueLen() = %d, want %d (%s)", got, want, unixQueueLenFile)
	}
}
