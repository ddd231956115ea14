//go:build unix

// This file holds shrinkSendBuffer and sendBuffer, which set and read a
// Unix sender's socket buffer for the tests of datagrams over it.

package stats

import (
	"syscall"
	"testing"

	"github.com/spanstats/spanstats/internal/dgram"
)

// shrinkSendBuffer sets s's send buffer to n bytes: DialUnixgram only
// raises it, and a test stands for a net.core.wmem_max below the limit.
func shrinkSendBuffer(t *testing.T, s *dgram.Sender, n int) {
	t.Helper()
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// sendBuffer returns s's SO_SNDBUF as the kernel reports it (Linux: twice
// what was set).
func sendBuffer(t *testing.T, s *dgram.Sender) int {
	t.Helper()
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var serr error
	if err := rc.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return n
}
