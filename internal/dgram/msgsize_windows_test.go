// This file tests msgTooLong on Windows: the error a UDP read returns for a
// datagram longer than its buffer, as the net package wraps it.

package dgram

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/windows"
)

func TestMsgTooLong(t *testing.T) {
	wrap := func(e error) error {
		return &net.OpError{Op: "read", Net: "udp", Err: os.NewSyscallError("wsarecvfrom", e)}
	}
	if !msgTooLong(wrap(windows.WSAEMSGSIZE)) {
		t.Error("WSAEMSGSIZE from a read is not taken for a datagram too long")
	}
	if msgTooLong(wrap(windows.WSAECONNRESET)) {
		t.Error("WSAECONNRESET is taken for a datagram too long")
	}
}
