//go:build !linux

package dgram

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

func controlUnixgram(_ syscall.RawConn, _ os.FileMode) error { return nil }

func controlUDP(_ syscall.RawConn, _ int) error { return nil }

type connSys struct{}

func (s *connSys) init(c *Conn) error {
	if c.rcvbuf > 0 {
		return c.pc.(*net.UDPConn).SetReadBuffer(c.rcvbuf)
	}
	return nil
}

// KernelDrops returns 0: only Linux reports the drops (SO_RXQ_OVFL).
func (c *Conn) KernelDrops() uint64 { return 0 }

type batchSys struct{}

func (s *batchSys) init(*Batch) {}

// ReadBatch waits for a datagram and reads it into b's first slot: one per
// call here (no recvmmsg), and no credentials (PID is 0). After Close the
// error matches net.ErrClosed.
func (c *Conn) ReadBatch(b *Batch) (int, error) {
	b.n = 0
	buf := b.slot(0)
	if c.draining.Load() {
		// A deadline set after Drain must not make a drained read wait.
		c.pc.SetReadDeadline(time.Unix(1, 0))
	}
	n, _, err := c.pc.ReadFrom(buf)
	if c.drained(err) {
		return 0, ErrDrained // here Drain loses what is queued: no non-blocking read
	}
	if err != nil {
		return 0, err
	}
	// A datagram longer than buf is cut to len(buf) here (or reported as an
	// error, which is returned): n == max+1 is how the excess shows.
	b.dgrams[0] = Datagram{Data: buf[:n], Truncated: n > b.max}
	b.n = 1
	return 1, nil
}

type senderSys struct{}

func (s *senderSys) init(string) {}

// Write sends b as one datagram. Here it may wait while the socket's send
// buffer is full; the errors match ErrWouldBlock (EAGAIN, ENOBUFS: a full
// Unix datagram queue on the BSDs), ErrNoRelay and net.ErrClosed as on Linux.
func (s *Sender) Write(b []byte) error {
	_, err := s.conn.Write(b)
	if err == nil {
		return nil
	}
	for i := range sendErrors {
		if errors.Is(err, sendErrors[i].errno) {
			return fmt.Errorf("%w: %w", sendErrors[i].kind, err)
		}
	}
	return err
}
