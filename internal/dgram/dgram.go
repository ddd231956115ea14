// This file holds the portable part of the sockets: Conn (listening on a
// Unix datagram socket or UDP, reading in batches), Batch and Datagram, and
// Sender, the SDK's non-blocking sending socket.

package dgram

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultBatchSize is the number of datagrams NewBatch(0, …) holds; chosen by
// BenchmarkRelayBatch (bench/relay_test.go: the drain and the relay's receive
// path by slots, 1 and 16 KiB datagrams) and BenchmarkBatchSize here.
const DefaultBatchSize = 16

// DefaultUnixQueueLen is Linux's default net.unix.max_dgram_qlen.
const DefaultUnixQueueLen = 10

// slotAlign is the alignment of a Batch's slots: a cache line.
const slotAlign = 64

var (
	// ErrWouldBlock: the datagram was not sent because the socket's send
	// buffer or the relay's receive queue is full (EAGAIN, ENOBUFS).
	ErrWouldBlock = errors.New("dgram: send queue full")
	// ErrNoRelay: nothing listens at the relay's address (ENOENT,
	// ECONNREFUSED), or the relay there is stopping (EPIPE).
	ErrNoRelay = errors.New("dgram: no relay listening")
	// ErrDrained: after Drain, the socket holds no more datagrams.
	ErrDrained = errors.New("dgram: socket drained")
)

// sendError is a Sender's answer to a condition the caller acts on; the
// values are built once (sendErrors) so a full queue costs no allocation.
type sendError struct {
	kind  error
	errno syscall.Errno
}

func (e *sendError) Error() string        { return e.kind.Error() + ": " + e.errno.Error() }
func (e *sendError) Is(target error) bool { return target == e.kind }
func (e *sendError) Unwrap() error        { return e.errno }

var sendErrors = [...]sendError{
	{ErrWouldBlock, syscall.EAGAIN},
	{ErrWouldBlock, syscall.ENOBUFS},
	{ErrNoRelay, syscall.ECONNREFUSED},
	{ErrNoRelay, syscall.ENOENT},
	// A connected socket (the BSDs, macOS) whose relay went away: its
	// next writes fail so, and only dialing again reaches a new relay.
	{ErrNoRelay, syscall.ECONNRESET},
	{ErrNoRelay, syscall.ENOTCONN},
	// A relay stopping: its socket is shut for reading (Conn.Drain)
	// before it closes.
	{ErrNoRelay, syscall.EPIPE},
}

// writeError maps the errno of one send to what Write returns.
func writeError(errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	for i := range sendErrors {
		if sendErrors[i].errno == errno {
			return &sendErrors[i]
		}
	}
	return os.NewSyscallError("sendto", errno)
}

// Datagram is one received datagram, as it sits in a Batch.
type Datagram struct {
	// Data is the datagram, in the Batch's buffer: valid until the next
	// ReadBatch into that Batch. When Truncated it holds the first
	// MaxDatagram()+1 bytes, or fewer if the kernel cut it there.
	Data []byte
	// Size is the datagram's length as sent: len(Data), or more for a
	// Truncated one where the kernel gives its whole length (Linux).
	Size int
	// Truncated: the datagram was longer than the Batch's MaxDatagram.
	Truncated bool
	// PID is the sender's process id from its credentials (Unix socket on
	// Linux, in the relay's pid namespace); 0 when unknown.
	PID int32
}

// Batch is a reusable set of datagram buffers that ReadBatch fills.
type Batch struct {
	max    int
	stride int    // bytes from one slot to the next: max+1, cache-line aligned
	bufs   []byte // len(dgrams) slots of max+1 bytes, stride apart
	dgrams []Datagram
	n      int
	sys    batchSys
}

// NewBatch returns a Batch of n slots (DefaultBatchSize if n <= 0), each
// receiving datagrams of up to maxDatagram bytes.
func NewBatch(n, maxDatagram int) *Batch {
	if n <= 0 {
		n = DefaultBatchSize
	}
	if maxDatagram <= 0 {
		panic(fmt.Sprintf("dgram: NewBatch: maxDatagram %d is not positive", maxDatagram))
	}
	// Slots start on a cache line: the kernel's copy into a misaligned
	// slot is slower, and max+1 alone would misalign every slot but the
	// first (BenchmarkRelayBatch).
	stride := (maxDatagram + 1 + slotAlign - 1) &^ (slotAlign - 1)
	b := &Batch{max: maxDatagram, stride: stride, bufs: make([]byte, n*stride), dgrams: make([]Datagram, n)}
	b.sys.init(b)
	return b
}

// Datagrams returns the datagrams of the last ReadBatch, in arrival order.
func (b *Batch) Datagrams() []Datagram { return b.dgrams[:b.n] }

// Cap returns the number of slots.
func (b *Batch) Cap() int { return len(b.dgrams) }

// MaxDatagram returns the largest datagram a slot holds without Truncated.
func (b *Batch) MaxDatagram() int { return b.max }

// slot returns slot i's buffer, capped so an append cannot reach slot i+1.
func (b *Batch) slot(i int) []byte {
	off := i * b.stride
	return b.bufs[off : off+b.max+1 : off+b.max+1]
}

// Conn is a receiving datagram socket: a Unix datagram socket
// (ListenUnixgram) or a UDP socket (ListenUDP).
type Conn struct {
	pc     net.PacketConn
	rc     syscall.RawConn // kept: SyscallConn allocates on every call
	path   string          // the socket file ListenUnixgram bound; "" for UDP
	bound  os.FileInfo     // that file, so Close removes it and not a successor's
	file   sync.Mutex      // orders Unlink and Close
	closed bool            // by Close: bound's inode may be a successor's now
	rcvbuf int
	sys    connSys
	// draining: ReadBatch takes only what is queued (Drain).
	draining atomic.Bool
	// tookOver: the path held the socket of a live receiver (TookOver).
	tookOver bool
}

// MaxUnixPath is the longest path a Unix socket can be bound or connected
// at: the kernel's sockaddr_un path less its terminating NUL (107 bytes on
// Linux).
var MaxUnixPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// CheckUnixPath says, before the kernel's bare "invalid argument", that path
// is too long for a Unix socket, and, before every connect is refused, that
// it ends in "/", so names a directory, never a socket.
func CheckUnixPath(path string) error {
	if len(path) > MaxUnixPath {
		return fmt.Errorf("socket path %q is %d bytes; a Unix socket path holds at most %d", path, len(path), MaxUnixPath)
	}
	if strings.HasSuffix(path, "/") {
		return fmt.Errorf("socket path %q ends in \"/\": it names a directory, not a socket file", path)
	}
	if strings.IndexByte(path, 0) >= 0 {
		// The kernel reads the path up to it: another socket would be
		// addressed, or at the start a Linux abstract name.
		return fmt.Errorf("socket path %q holds a NUL byte", path)
	}
	return nil
}

// IsAbstractName says whether the net package takes path as a Linux
// abstract socket name ("@name", on Linux only), which ListenUnixgram
// refuses: a sender given one would never reach a relay.
func IsAbstractName(path string) bool {
	return abstractNames && strings.HasPrefix(path, "@")
}

// ListenUnixgram binds a Unix datagram socket at path with permissions mode.
// An existing socket file at path (a relay that did not stop cleanly, or
// one being taken over: see TookOver) is replaced; any other kind of file
// there is an error and is left alone.
// Close removes the socket file. A Linux abstract socket name ("@name") is
// refused: it has no file, so mode could not limit who sends.
func ListenUnixgram(path string, mode os.FileMode) (*Conn, error) {
	if err := CheckUnixPath(path); err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	if IsAbstractName(path) {
		return nil, fmt.Errorf("dgram: %s is a Linux abstract socket name, which is not supported: "+
			"it has no file, so its mode cannot limit who sends (give a file path; ./%s for a file of that name)", path, path)
	}
	tookOver := false
	for attempt := 0; ; attempt++ {
		live, err := removeSocket(path, true)
		if err != nil {
			return nil, err
		}
		tookOver = tookOver || live
		if testHook != nil {
			testHook("bind")
		}
		c, err := bindUnixgram(path, mode)
		// Once more if the relay whose socket was just removed bound it
		// again in between (its check, RebindUnixgram): take that over too.
		if attempt == 0 && errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err == nil {
			c.tookOver = tookOver
		}
		return c, err
	}
}

// bindUnixgram binds at path, where any existing file is refused
// (EADDRINUSE), and gives the socket file mode. The socket is bound at a
// private name beside path, which only this call uses, and hard-linked to
// path: its file is known by that name, not by looking at path after the
// bind, where another relay taking the path over in between would put its
// own file, which Close would then delete (TestBindKnowsItsOwnFile).
func bindUnixgram(path string, mode os.FileMode) (*Conn, error) {
	tmp, err := privateName(path)
	if err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, raw syscall.RawConn) error { return controlUnixgram(raw, mode) }}
	pc, err := lc.ListenPacket(context.Background(), "unixgram", tmp)
	if err != nil {
		// Named by the path asked for: the private name is new each time,
		// and an error repeated at each check must read the same.
		if oe := (*net.OpError)(nil); errors.As(err, &oe) {
			oe.Addr = &net.UnixAddr{Name: path, Net: "unixgram"}
		}
		return nil, err
	}
	// bind created the file with mode less the umask (Linux: see
	// controlUnixgram); chmodSocket gives back what the umask took.
	bound, err := os.Lstat(tmp)
	switch {
	case err != nil:
	case bound.Mode().Type() != fs.ModeSocket:
		err = fmt.Errorf("%s was replaced by a %v after bind", tmp, bound.Mode().Type())
	case bound.Mode().Perm() != mode.Perm():
		if testHook != nil {
			testHook("chmod")
		}
		err = chmodSocket(tmp, bound, mode)
	}
	if err == nil {
		if testHook != nil {
			testHook("link")
		}
		if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
			// As a bind at path would say.
			err = &net.OpError{Op: "listen", Net: "unixgram", Addr: &net.UnixAddr{Name: path, Net: "unixgram"},
				Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
		}
	}
	if bound != nil && bound.Mode().Type() == fs.ModeSocket {
		removeBound(tmp, bound)
	}
	if err != nil {
		pc.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
		return nil, fmt.Errorf("dgram: %w", err)
	}
	return newConn(pc, path, bound, 0)
}

// privateName is a name beside path for bindUnixgram's bind: hidden, random,
// as long as path's name (at least 12 bytes, at most 65) where the path
// limit allows.
func privateName(path string) (string, error) {
	dir, base := filepath.Split(path)
	n := min(max(len(base), 12), 65) // "." and up to 64 hex digits
	if len(dir)+n > MaxUnixPath {
		n = MaxUnixPath - len(dir)
	}
	if n < 8 {
		return "", fmt.Errorf("socket path %q leaves no room for a temporary name beside it", path)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return dir + "." + hex.EncodeToString(b[:])[:n-1], nil
}

// removeSocket removes the socket file at path, if any, and says whether a
// process was still receiving on it (a connect succeeded): a relay taking
// over from one that has not stopped, or a mistyped path. With takeLive
// false such a socket stays. A stream socket a process listens on, or one
// it cannot probe, is an error and stays.
func removeSocket(path string, takeLive bool) (live bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("dgram: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return false, fmt.Errorf("dgram: %s exists and is not a socket (mode %v); not replacing it", path, fi.Mode())
	}
	switch probe, err := net.Dial("unixgram", path); {
	case err == nil:
		probe.Close()
		live = true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fs.ErrNotExist):
		// Stale: nobody receives on it.
	case errors.Is(err, syscall.EPROTOTYPE):
		// A stream socket: another service's (the agent's apm.socket?),
		// never taken over while it listens. Only ECONNREFUSED says nobody
		// does: a full backlog (EAGAIN) or a seqpacket socket is live too.
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return false, fmt.Errorf("dgram: %s is a stream socket a process listens on; not replacing it", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return false, fmt.Errorf("dgram: %s: cannot tell whether a process listens on this socket (%v); not replacing it", path, err)
		}
	default:
		return false, fmt.Errorf("dgram: %s: cannot tell whether a process receives on this socket (%v); not replacing it", path, err)
	}
	if live && !takeLive {
		return true, nil
	}
	if testHook != nil {
		testHook("remove")
	}
	// The probe took time: remove only the socket it probed, not a file put
	// in its place since (which leaves a window of two calls, not a dial).
	switch now, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
		return live, nil
	case err != nil:
		return live, fmt.Errorf("dgram: %w", err)
	case !os.SameFile(fi, now):
		return live, fmt.Errorf("dgram: %s was replaced while probed (mode %v now); not replacing it", path, now.Mode())
	}
	if err := os.Remove(path); err != nil {
		return live, fmt.Errorf("dgram: replacing socket: %w", err)
	}
	return live, nil
}

// testHook, set by tests only, runs where another process could put
// something else at the socket path: before the old socket's removal
// ("remove"), before the new socket's chmod ("chmod") and once Close has
// closed the socket ("close"); and between the removal and the bind
// ("bind").
var testHook func(stage string)

// TookOver reports that ListenUnixgram replaced the socket of a process
// still receiving on it: that process's senders now reach this socket,
// and it no longer receives.
func (c *Conn) TookOver() bool { return c.tookOver }

// MaxRcvBuf is the largest receive buffer ListenUDP takes: the kernel caps
// SO_RCVBUF at INT_MAX/2 (and doubles it), and a larger int would wrap to a
// negative int32 that the kernel reads as its minimum, a few KiB.
const MaxRcvBuf = math.MaxInt32 / 2

// ListenUDP binds a UDP socket at addr ("host:port") with a receive buffer of
// rcvbuf bytes (the system default if rcvbuf <= 0; more than MaxRcvBuf is an
// error); see ReadBuffer for the size the kernel granted.
func ListenUDP(addr string, rcvbuf int) (*Conn, error) { return listenUDPOn(addr, rcvbuf, false) }

// ListenUDPShared is ListenUDP with SO_REUSEPORT: other sockets of the same
// user that set it too may bind addr while this one is open, and the kernel
// spreads the senders between them, each sender's datagrams to one socket
// while the group stays as it is. A relay taking over from another binds
// its port so, and the other then drains and closes. Linux only: elsewhere
// SO_REUSEPORT does not spread unicast datagrams, and this is an error.
func ListenUDPShared(addr string, rcvbuf int) (*Conn, error) { return listenUDPOn(addr, rcvbuf, true) }

func listenUDPOn(addr string, rcvbuf int, shared bool) (*Conn, error) {
	if rcvbuf > MaxRcvBuf {
		return nil, fmt.Errorf("dgram: receive buffer of %d bytes: at most %d", rcvbuf, MaxRcvBuf)
	}
	lc := net.ListenConfig{Control: func(_, _ string, raw syscall.RawConn) error {
		return controlUDP(raw, rcvbuf, shared)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, err
	}
	return newConn(pc, "", nil, rcvbuf)
}

func newConn(pc net.PacketConn, path string, bound os.FileInfo, rcvbuf int) (*Conn, error) {
	rc, err := pc.(syscall.Conn).SyscallConn()
	if err != nil {
		pc.Close()
		return nil, err
	}
	c := &Conn{pc: pc, rc: rc, path: path, bound: bound, rcvbuf: rcvbuf}
	if err := c.sys.init(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// LocalAddr returns the address the socket is bound to: for a Unix socket,
// the path it was listened on (bound at a private name, linked there).
func (c *Conn) LocalAddr() net.Addr {
	if c.path != "" {
		return &net.UnixAddr{Name: c.path, Net: "unixgram"}
	}
	return c.pc.LocalAddr()
}

// ReadBuffer returns the socket's receive buffer size as the kernel reports
// it (Linux reports twice the request: the other half is its bookkeeping);
// where the platform cannot tell, the size requested (0: the default).
func (c *Conn) ReadBuffer() int { return c.rcvbuf }

// GrantedBuffer returns the receive buffer granted, in the terms ListenUDP
// asked for it: ReadBuffer less the kernel's bookkeeping half on Linux. A
// request above it was capped (net.core.rmem_max, without CAP_NET_ADMIN).
func (c *Conn) GrantedBuffer() int { return c.rcvbuf / reportedPerGranted }

// Drain makes ReadBatch stop waiting: it returns what the socket already
// holds, then ErrDrained. A stopping reader takes the datagrams the kernel
// queued before the socket closes; on Linux the socket refuses new ones
// from then on: a Unix one is shut for reading (connected senders get
// EPIPE), a UDP one connected to itself (senders get ECONNREFUSED; the
// other sockets of a reuseport group take the port). It is safe to call while a
// ReadBatch waits (that call then drains too).
func (c *Conn) Drain() error {
	// Before the flag: a ReadBatch that sees it finds the socket refusing
	// senders already (on Linux: refuseSenders).
	c.sys.refuseSenders(c)
	c.draining.Store(true)
	return c.pc.SetReadDeadline(time.Unix(1, 0)) // wakes a waiting ReadBatch
}

// Draining reports whether Drain was called.
func (c *Conn) Draining() bool { return c.draining.Load() }

// SetReadDeadline makes a ReadBatch that would wait past t return an error
// matching os.ErrDeadlineExceeded instead; the zero t waits for ever. The
// reading goroutine sets it between its ReadBatch calls: ReadBatch looks at
// Drain before it waits, so no deadline can undo a Drain.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.pc.SetReadDeadline(t) }

// drained maps the wake-up Drain causes to ErrDrained.
func (c *Conn) drained(err error) bool {
	return c.draining.Load() && errors.Is(err, os.ErrDeadlineExceeded)
}

// Close closes the socket, which wakes a blocked ReadBatch with an error
// matching net.ErrClosed, and removes the Unix socket file if it is still the
// one this Conn bound.
func (c *Conn) Close() error {
	// Unlinked first: while the socket is open its file's inode is not
	// freed, so a successor's socket file cannot have its number (ext4
	// reuses one at once) and pass for this Conn's.
	c.file.Lock()
	if !c.closed {
		c.unlink()
		c.closed = true
	}
	c.file.Unlock()
	c.sys.pollDrops(c) // the drops since the last datagram read, while it can
	err := c.pc.Close()
	if testHook != nil {
		testHook("close")
	}
	return err
}

// Unlink removes the Unix socket file if it is still the one this Conn
// bound (nothing for UDP). The socket stays open with what it holds, but a
// sender that addresses the path with each datagram (the SDK's on Linux)
// gets ErrNoRelay from then on instead of writing into a socket about to
// close: a stopping relay unlinks before it drains. After Close it does
// nothing.
func (c *Conn) Unlink() {
	c.file.Lock()
	defer c.file.Unlock()
	if !c.closed {
		c.unlink()
	}
}

func (c *Conn) unlink() {
	if c.path != "" {
		removeBound(c.path, c.bound)
	}
}

// removeBound removes the file at path if it is bound, the socket file of a
// socket still open (so that no other file can have its inode number).
func removeBound(path string, bound os.FileInfo) {
	if fi, err := os.Lstat(path); err == nil && os.SameFile(fi, bound) {
		os.Remove(path)
	}
}

// Sender is the SDK's socket to the relay. On Linux Write never waits;
// elsewhere it may wait up to sendWait for room in a full send buffer.
type Sender struct {
	conn net.Conn
	rc   syscall.RawConn
	sys  senderSys
}

// DialUnixgram returns a Sender to the relay's Unix datagram socket at path,
// with a send buffer of at least sndbuf bytes (a datagram larger than the
// send buffer cannot be sent; a larger default is kept). The error matches ErrNoRelay
// when nothing listens at path.
func DialUnixgram(path string, sndbuf int) (*Sender, error) {
	if err := CheckUnixPath(path); err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		// A connect to a file that is no socket fails as one to a socket
		// nobody reads (Linux: ECONNREFUSED; EACCES first if it is not
		// writable) or as ENOTSOCK (BSDs): name the file, which statsrelay
		// will not replace, so that the operator finds it.
		if fi, serr := os.Stat(path); serr == nil && fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%w: %s exists and is not a socket (mode %v; statsrelay will not start while it is there): %w",
				ErrNoRelay, path, fi.Mode(), err)
		}
		return nil, dialError(err)
	}
	if sndbuf > 0 {
		if err := raiseSendBuffer(conn, sndbuf); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return newSender(conn, path)
}

// DialUDP returns a Sender to the relay's UDP socket at addr. It takes an
// address, not a name: a lookup here would wait on DNS for as long as the
// resolver's timeout, so the caller resolves within its own bound.
// UDP cannot tell at dial time whether a relay listens: a Write matches
// ErrNoRelay once the kernel has seen the port unreachable, on Linux that
// very Write when the relay is on the same host (the kernel's answer is
// there when the send returns), else the next one.
//
// Its send buffer is set to at least sndbuf bytes, as DialUnixgram's (on
// Linux a larger default is kept):
// macOS and FreeBSD start a UDP socket at 9 216 bytes
// (net.inet.udp.maxdgram) and refuse a longer datagram with EMSGSIZE.
func DialUDP(addr netip.AddrPort, sndbuf int) (*Sender, error) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, dialError(err)
	}
	if sndbuf > 0 {
		if err := raiseSendBuffer(conn, sndbuf); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return newSender(conn, "")
}

// bufferedConn is a socket whose send buffer raiseSendBuffer sets.
type bufferedConn interface {
	SyscallConn() (syscall.RawConn, error)
	SetWriteBuffer(int) error
}

func dialError(err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: %w", ErrNoRelay, err)
	case errors.Is(err, syscall.EPROTOTYPE):
		// The likely mistake: the agent's apm.socket given for the relay's.
		return fmt.Errorf("dgram: not a datagram socket (a stream socket such as the agent's apm.socket?); "+
			"unixgram:// is for statsrelay's socket, unix:// for the agent's: %w", err)
	}
	return err
}

func newSender(conn net.Conn, path string) (*Sender, error) {
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &Sender{conn: conn, rc: rc}
	s.sys.init(path)
	return s, nil
}

// Close closes the socket.
func (s *Sender) Close() error { return s.conn.Close() }

// SyscallConn returns the socket, for options the Sender leaves alone
// (tests shrink its send buffer, as a low net.core.wmem_max would).
func (s *Sender) SyscallConn() (syscall.RawConn, error) { return s.rc, nil }
