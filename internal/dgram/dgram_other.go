//go:build !linux

// This file holds the portable fallback of the Linux-only parts: one
// datagram per read, no credentials or kernel drop counts.

package dgram

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// BatchedReads: ReadBatch reads one datagram per call, so its count says
// nothing of what is left queued.
const BatchedReads = false

// UnixQueueLen is DefaultUnixQueueLen: read only on Linux.
func UnixQueueLen() int { return DefaultUnixQueueLen }

// abstractNames: "@name" is a file here, as any other relative path.
const abstractNames = false

func controlUnixgram(_ syscall.RawConn, _ os.FileMode) error { return nil }

// chmodSocket changes the mode at path, as it finds it: unlike Linux's, it
// would follow a link put in the socket's place since bind.
func chmodSocket(path string, _ os.FileInfo, mode os.FileMode) error {
	return os.Chmod(path, mode)
}

func controlUDP(_ syscall.RawConn, _ int, shared bool) error {
	if shared {
		return errSharedUDP
	}
	return nil
}

// SharedUDP: ListenUDPShared needs Linux's SO_REUSEPORT, which spreads
// unicast datagrams over the sockets bound; the BSDs' gives them to one.
const SharedUDP = false

var errSharedUDP = errors.New("dgram: a shared UDP port (SO_REUSEPORT) is supported on Linux only")

// reportedPerGranted: ReadBuffer is the size taken (see connSys.init).
const reportedPerGranted = 1

type connSys struct{}

// unixRcvbuf is the receive buffer asked for a Unix socket. The BSDs' and
// macOS's default (16 KiB on FreeBSD, 4 KiB on macOS) must hold a whole
// datagram, or its send fails with ENOBUFS: the SDK's datagrams are up to
// 64 KiB, and this holds 16 of them (Linux queues them by count, see
// net.unix.max_dgram_qlen, with no such limit).
const unixRcvbuf = 1 << 20

func (s *connSys) init(c *Conn) error {
	if c.path != "" && c.rcvbuf <= 0 {
		// Asked on the relay's behalf, not the caller's: a platform that
		// refuses it keeps its default rather than failing the listen.
		c.rcvbuf = unixRcvbuf
		if err := s.setRcvbuf(c); err != nil {
			c.rcvbuf = 0
		}
		return nil
	}
	if c.rcvbuf <= 0 {
		return nil
	}
	return s.setRcvbuf(c)
}

// setRcvbuf asks c.rcvbuf, halving it while the kernel says ENOBUFS.
func (s *connSys) setRcvbuf(c *Conn) error {
	// Linux caps a larger request; the BSDs refuse it (ENOBUFS past
	// kern.ipc.maxsockbuf, 2 MiB by default on FreeBSD): halve it until
	// taken, as the kernel's cap would, and keep the size granted.
	for {
		err := c.pc.(interface{ SetReadBuffer(int) error }).SetReadBuffer(c.rcvbuf)
		if err == nil || !errors.Is(err, syscall.ENOBUFS) || c.rcvbuf <= 64<<10 {
			return err
		}
		c.rcvbuf /= 2
	}
}

// KernelDrops returns 0: only Linux reports the drops (SO_RXQ_OVFL).
func (c *Conn) KernelDrops() uint64 { return 0 }

func (s *connSys) pollDrops(*Conn) {}

// refuseSenders does nothing here: FreeBSD's shutdown of an unconnected
// socket flushes its queue, macOS refuses it (see the Linux one).
func (s *connSys) refuseSenders(*Conn) {}

type batchSys struct{}

func (s *batchSys) init(*Batch) {}

// ReadBatch waits for a datagram and reads it into b's first slot: one per
// call here (no recvmmsg), and no credentials (PID is 0). After Close the
// error matches net.ErrClosed.
func (c *Conn) ReadBatch(b *Batch) (int, error) {
	b.n = 0
	buf := b.slot(0)
	var n int
	for {
		polled := c.draining.Load()
		var since time.Time
		if polled {
			// Not Drain's deadline in the past: Go fails such a read
			// before it looks at the queue. A short one takes what is
			// queued and waits no longer.
			since = time.Now()
			c.pc.SetReadDeadline(since.Add(drainPoll))
		}
		var err error
		n, _, err = c.pc.ReadFrom(buf)
		if c.drained(err) {
			// Failed sooner than drainPoll: Drain's past deadline, set
			// after it raised the flag, replaced ours before the queue
			// was looked at.
			if polled && time.Since(since) >= drainPoll {
				return 0, ErrDrained
			}
			continue // Drain woke a waiting read: take what is queued
		}
		if err != nil && msgTooLong(err) {
			// Windows reports a datagram longer than buf as an error
			// (WSAEMSGSIZE), having taken it from the queue: a truncated
			// datagram, counted, and not a read error to back off from.
			n, err = len(buf), nil
		}
		if err != nil {
			return 0, err
		}
		break
	}
	// A datagram longer than buf is cut to len(buf) here (Windows: see
	// msgTooLong): n == max+1 is how the excess shows.
	b.dgrams[0] = Datagram{Data: buf[:n], Size: n, Truncated: n > b.max}
	b.n = 1
	return 1, nil
}

// drainPoll is how long a drained read waits for a datagram: the queue is
// already there, so this only needs to cover the read itself.
const drainPoll = 10 * time.Millisecond

// sendWait bounds a write on a full socket: without a deadline the net
// package would wait for room however long it takes, and the SDK's
// bounded patience (and Stop's deadline) would not hold.
const sendWait = 10 * time.Millisecond

type senderSys struct{}

func (s *senderSys) init(string) {}

// minSendWait is the least WriteWithin waits: a deadline already past
// fails the write untried, and a report out of patience still gets one try
// per datagram.
const minSendWait = 100 * time.Microsecond

// Write sends b as one datagram. Here it may wait up to sendWait while the
// socket's send buffer is full; the errors match ErrWouldBlock (EAGAIN,
// ENOBUFS: a full Unix datagram queue on the BSDs; a full buffer past
// sendWait), ErrNoRelay and net.ErrClosed as on Linux.
func (s *Sender) Write(b []byte) error { return s.WriteWithin(b, sendWait) }

// WriteWithin is Write waiting at most wait for room (sendWait at most,
// minSendWait at least), so that a caller's own bound holds.
func (s *Sender) WriteWithin(b []byte, wait time.Duration) error {
	s.conn.SetWriteDeadline(time.Now().Add(min(max(wait, minSendWait), sendWait)))
	_, err := s.conn.Write(b)
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrWouldBlock, err)
	}
	for i := range sendErrors {
		if errors.Is(err, sendErrors[i].errno) {
			return fmt.Errorf("%w: %w", sendErrors[i].kind, err)
		}
	}
	return err
}

// raiseSendBuffer sets conn's send buffer to n bytes (see the Linux one;
// elsewhere the default is not read).
func raiseSendBuffer(conn bufferedConn, n int) error { return conn.SetWriteBuffer(n) }
