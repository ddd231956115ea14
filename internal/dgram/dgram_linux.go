// This file holds the Linux side of the sockets: recvmmsg batches,
// sender credentials, SO_RXQ_OVFL drop counts, SO_RCVBUFFORCE,
// SO_REUSEPORT and MSG_DONTWAIT sends.

package dgram

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Control bytes offered per datagram. A Unix socket is offered exactly the
// credentials' space: a sender's SCM_RIGHTS then finds no room, and the
// kernel closes those descriptors instead of installing them in the relay.
var (
	ctrlUnixgram = unix.CmsgSpace(unix.SizeofUcred)
	ctrlUDP      = unix.CmsgSpace(4) // SO_RXQ_OVFL: a uint32
	ctrlSlot     = max(ctrlUnixgram, ctrlUDP)
)

// SharedUDP: ListenUDPShared works here (see dgram_other.go).
const SharedUDP = true

// abstractNames: a socket path starting with "@" names an abstract socket,
// which the net package binds without a file.
const abstractNames = true

// controlUnixgram runs before bind: the socket's mode set on its fd here is
// the one bind gives the file (less the umask), so the file never exists
// with more permissions than mode, whatever the process's umask.
func controlUnixgram(raw syscall.RawConn, mode os.FileMode) error {
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		err = unix.Fchmod(int(fd), uint32(mode.Perm()))
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("fchmod", err)
	}
	return setsockopt(raw, unix.SO_PASSCRED, 1)
}

// chmodSocket sets mode on the socket file bound at path and on nothing else:
// a path looked at again follows a link put in the socket's place since, so
// the file is opened without following links, checked to be the one bound,
// and changed through that descriptor.
func chmodSocket(path string, bound os.FileInfo, mode os.FileMode) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	was, ok := bound.Sys().(*syscall.Stat_t)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFSOCK || uint64(st.Dev) != uint64(was.Dev) || uint64(st.Ino) != uint64(was.Ino) {
		return fmt.Errorf("%s was replaced after bind", path)
	}
	// fchmodat2 (Linux 6.6) takes an O_PATH descriptor. Before it, or under
	// a seccomp filter that does not know it (EPERM in older container
	// runtimes), the descriptor's /proc link leads to that very file, as
	// glibc's lchmod does; without /proc, fchmodat2's error stands.
	perm := uint32(mode.Perm())
	if err = unix.Fchmodat(fd, "", perm, unix.AT_EMPTY_PATH); err != nil {
		if perr := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), perm); perr != unix.ENOENT {
			err = perr
		}
	}
	if err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// reportedPerGranted: Linux reports SO_RCVBUF at twice the size it granted.
const reportedPerGranted = 2

// controlUDP runs before bind: kernel drop counts, the port shared
// (ListenUDPShared), the receive buffer.
func controlUDP(raw syscall.RawConn, rcvbuf int, shared bool) error {
	if err := setsockopt(raw, unix.SO_RXQ_OVFL, 1); err != nil {
		return err
	}
	if shared {
		if err := setsockopt(raw, unix.SO_REUSEPORT, 1); err != nil {
			return err
		}
	}
	if rcvbuf <= 0 {
		return nil
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max but needs CAP_NET_ADMIN.
	if setsockopt(raw, unix.SO_RCVBUFFORCE, rcvbuf) == nil {
		return nil
	}
	return setsockopt(raw, unix.SO_RCVBUF, rcvbuf)
}

func setsockopt(raw syscall.RawConn, opt, value int) error {
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, value)
	}); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt", err)
}

type connSys struct {
	ctrlLen int
	// lastOvfl is the last value of the kernel's drop counter counted
	// (SO_RXQ_OVFL, SO_MEMINFO). Atomic: a drained ReadBatch reads inside
	// rc.Control, which takes no read lock, and a scrape polls, so
	// several may count at the same time.
	lastOvfl atomic.Uint32
	drops    atomic.Uint64
}

func (s *connSys) init(c *Conn) error {
	if c.path != "" {
		s.ctrlLen = ctrlUnixgram
		return nil
	}
	s.ctrlLen = ctrlUDP
	var n int
	var err error
	if cerr := c.rc.Control(func(fd uintptr) {
		n, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("getsockopt", err)
	}
	c.rcvbuf = n
	return nil
}

// KernelDrops returns how many datagrams the kernel dropped on this UDP
// socket: because its receive buffer was full, mostly (the counter also
// holds checksum failures and socket-filter drops). The kernel stamps its drop
// counter on each datagram it queues (SO_RXQ_OVFL), and KernelDrops also
// reads that counter from the socket (SO_MEMINFO): drops after the last
// datagram read (the end of a burst, the relay stopping) are counted
// without waiting for another datagram to carry them.
func (c *Conn) KernelDrops() uint64 {
	c.sys.pollDrops(c)
	return c.sys.drops.Load()
}

// refuseSenders makes the socket refuse new datagrams as Drain begins, so
// that a drained read that finds the queue empty leaves nothing for the
// close to drop; the queued datagrams are still read. A Unix socket is
// shut for reading: a sender connected to it, which the file's removal
// does not refuse, gets EPIPE (TestDrainRefusesConnectedSenders). A UDP
// socket is connected to its own address: the kernel delivers it nothing
// from anyone else, and answers a sender with port unreachable, which its
// next send reports (ECONNREFUSED: the SDK's ErrNoRelay), as once the
// socket is closed (TestDrainRefusesUDPSenders); in a -udp-reuseport
// group the other sockets take the port's datagrams. Linux only:
// FreeBSD's shutdown of an unconnected socket flushes its queue.
func (s *connSys) refuseSenders(c *Conn) {
	switch pc := c.pc.(type) {
	case *net.UnixConn:
		pc.CloseRead()
	case *net.UDPConn:
		a, ok := pc.LocalAddr().(*net.UDPAddr)
		if !ok {
			return
		}
		var sa unix.Sockaddr
		if ip4 := a.IP.To4(); ip4 != nil {
			sa4 := &unix.SockaddrInet4{Port: a.Port}
			copy(sa4.Addr[:], ip4)
			sa = sa4
		} else {
			sa6 := &unix.SockaddrInet6{Port: a.Port}
			copy(sa6.Addr[:], a.IP.To16())
			sa = sa6
		}
		c.rc.Control(func(fd uintptr) { unix.Connect(int(fd), sa) })
	}
}

// pollDrops counts the socket's drop counter as it stands now; nothing
// for a Unix socket (a full one drops nothing) or a closed one.
func (s *connSys) pollDrops(c *Conn) {
	if c.path != "" {
		return
	}
	var mi [unix.SK_MEMINFO_VARS]uint32
	var errno syscall.Errno
	if c.rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mi))
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	}) != nil || errno != 0 {
		return // closed; or a kernel before 4.6: the datagrams' stamps only
	}
	s.countDrops(mi[unix.SK_MEMINFO_DROPS])
}

// countDrops turns the kernel's cumulative uint32 counter into the total.
func (s *connSys) countDrops(v uint32) {
	for {
		last := s.lastOvfl.Load()
		d := v - last // modular: the counter wraps at 2^32
		if int32(d) <= 0 {
			return // the same value again (or one older): nothing new
		}
		if s.lastOvfl.CompareAndSwap(last, v) {
			s.drops.Add(uint64(d))
			return
		}
	}
}

type batchSys struct {
	iovs []unix.Iovec
	msgs []unix.Mmsghdr
	ctrl []byte
	// Set for one ReadBatch.
	c     *Conn
	errno syscall.Errno
	// recv is b.recvmmsg, bound once: a closure made per ReadBatch would
	// escape into the RawConn interface and allocate.
	recv func(fd uintptr) bool
}

func (s *batchSys) init(b *Batch) {
	n := len(b.dgrams)
	s.iovs = make([]unix.Iovec, n)
	s.msgs = make([]unix.Mmsghdr, n)
	s.ctrl = make([]byte, n*ctrlSlot)
	for i := range n {
		buf := b.slot(i)
		s.iovs[i].Base = &buf[0]
		s.iovs[i].SetLen(len(buf))
		h := &s.msgs[i].Hdr
		h.Iov = &s.iovs[i]
		h.SetIovlen(1)
		h.Control = &s.ctrl[i*ctrlSlot]
	}
	s.recv = b.recvmmsg
}

// BatchedReads: ReadBatch takes every queued datagram up to the batch's
// capacity in one call, so a read that returns fewer left the queue empty.
const BatchedReads = true

// unixQueueLenFile holds net.unix.max_dgram_qlen: how many datagrams a
// Unix datagram socket queues before its senders get EAGAIN.
const unixQueueLenFile = "/proc/sys/net/unix/max_dgram_qlen"

// UnixQueueLen is how many datagrams a Unix datagram socket queues before
// its senders get EAGAIN (net.unix.max_dgram_qlen), DefaultUnixQueueLen
// when it cannot be read.
func UnixQueueLen() int {
	b, err := os.ReadFile(unixQueueLenFile)
	if err != nil {
		return DefaultUnixQueueLen
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		return DefaultUnixQueueLen
	}
	return n
}

// ReadBatch waits for at least one datagram, then fills b with as many as
// are queued, up to b.Cap(), in one recvmmsg. It returns the number read
// (b.Datagrams()); after Close the error matches net.ErrClosed.
func (c *Conn) ReadBatch(b *Batch) (int, error) {
	b.n = 0
	s := &b.sys
	for i := range s.msgs {
		s.msgs[i].Hdr.SetControllen(c.sys.ctrlLen) // the kernel overwrote them with the lengths used
		s.msgs[i].Hdr.Flags = 0
	}
	s.c, s.errno = c, 0
	var err error
	if !c.draining.Load() {
		err = c.rc.Read(s.recv)
	}
	if c.draining.Load() && (err == nil && b.n == 0 && s.errno == 0 || c.drained(err)) {
		// Control skips the deadline Drain set: one non-blocking try.
		got := false
		if err = c.rc.Control(func(fd uintptr) { got = s.recv(fd) }); err == nil && !got {
			err = ErrDrained
		}
	}
	s.c = nil
	if err != nil {
		return 0, err
	}
	if s.errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", s.errno)
	}
	return b.n, nil
}

// recvmmsg runs inside RawConn.Read: returning false on EAGAIN parks the
// goroutine in the netpoller until the socket is readable (or closed).
func (b *Batch) recvmmsg(fd uintptr) bool {
	s := &b.sys
	for {
		// The fd is non-blocking, so after the first datagram the call takes
		// only what is queued; MSG_WAITFORONE says so even if it were not.
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(len(s.msgs)),
			// MSG_TRUNC: each length is the datagram's whole length, the
			// bytes a truncated one counts as received.
			unix.MSG_WAITFORONE|unix.MSG_CMSG_CLOEXEC|unix.MSG_TRUNC, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			b.fill(int(r))
		}
		s.errno = e
		return true
	}
}

// fill records the first n slots after a recvmmsg; it runs under the fd's
// read lock, so the drop counter sees the datagrams in queue order.
func (b *Batch) fill(n int) {
	s := &b.sys
	for i := range n {
		m := &s.msgs[i]
		ln := int(m.Len)
		d := &b.dgrams[i]
		slot := b.slot(i)
		d.Data = slot[:min(ln, len(slot))]
		d.Size = ln
		d.Truncated = ln > b.max || m.Hdr.Flags&unix.MSG_TRUNC != 0
		d.PID = 0
		ctrl := s.ctrl[i*ctrlSlot : i*ctrlSlot+int(m.Hdr.Controllen)]
		for len(ctrl) >= unix.CmsgLen(0) {
			h, data, rest, err := unix.ParseOneSocketControlMessage(ctrl)
			if err != nil {
				break
			}
			switch {
			case h.Level != unix.SOL_SOCKET:
			case h.Type == unix.SCM_CREDENTIALS && len(data) >= unix.SizeofUcred:
				d.PID = int32(binary.NativeEndian.Uint32(data)) // Ucred.Pid is its first field
			case h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
				s.c.sys.countDrops(binary.NativeEndian.Uint32(data))
			}
			ctrl = rest
		}
	}
	b.n = n
}

type senderSys struct {
	mu sync.Mutex // p and errno belong to one Write at a time
	// to is the relay's socket path for a Unix Sender: addressing each
	// datagram finds a relay that restarted since the dial. nil for UDP,
	// which sends on the connected socket.
	to    unix.Sockaddr
	p     []byte
	errno syscall.Errno
	send  func(fd uintptr) bool // s.sendto, bound once (see batchSys.recv)
}

func (s *senderSys) init(path string) {
	if path != "" {
		s.to = &unix.SockaddrUnix{Name: path}
	}
	s.send = s.sendto
}

// sendto runs inside RawConn.Write and always returns true: Write never waits
// for the socket to become writable.
//
// On UDP a port nobody listens on answers with an ICMP error the kernel
// keeps on the socket, and a send reports it only on the next send, which
// it fails unsent: a sender whose retry then succeeded would count every
// datagram sent into a relay that is gone. Over loopback the ICMP error is
// there as soon as the send returns, so the pending error is read at once
// and the datagram just sent is refused with it (TestUDPRelayGoneRefused);
// unless the host is so busy that the kernel defers it: that datagram then
// counts as sent, and the error fails the next (TestDatagramUDPRelayGone).
func (s *senderSys) sendto(fd uintptr) bool {
	for {
		err := unix.Sendto(int(fd), s.p, unix.MSG_DONTWAIT, s.to)
		if err == unix.EINTR {
			continue
		}
		s.errno, _ = err.(syscall.Errno)
		if err == nil && s.to == nil {
			if pending, gerr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); gerr == nil && pending != 0 {
				s.errno = syscall.Errno(pending)
			}
		}
		return true
	}
}

// Write sends b as one datagram without waiting. The error matches
// ErrWouldBlock when the send buffer or the relay's queue is full, ErrNoRelay
// when nothing listens at the relay's address, and net.ErrClosed after Close.
func (s *Sender) Write(b []byte) error {
	s.sys.mu.Lock()
	s.sys.p, s.sys.errno = b, 0
	err := s.rc.Write(s.sys.send)
	errno := s.sys.errno
	s.sys.p = nil
	s.sys.mu.Unlock()
	if err != nil {
		return err
	}
	return writeError(errno)
}

// WriteWithin is Write: here a write never waits, whatever wait allows.
func (s *Sender) WriteWithin(b []byte, _ time.Duration) error { return s.Write(b) }

// raiseSendBuffer sets conn's send buffer to n bytes unless it is that
// large already: lowering net.core.wmem_default (which an operator may
// have raised for bursts) would queue fewer datagrams before EAGAIN.
func raiseSendBuffer(conn bufferedConn, n int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	cur, gerr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { cur, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }); err != nil {
		return err
	}
	// Linux reports twice the value set (the other half is its bookkeeping).
	if gerr == nil && cur/2 >= n {
		return nil
	}
	return conn.SetWriteBuffer(n)
}
