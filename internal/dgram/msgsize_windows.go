// This file holds msgTooLong for Windows, whose UDP reads report a
// datagram longer than the buffer as an error.

package dgram

import (
	"errors"

	"golang.org/x/sys/windows"
)

// msgTooLong reports whether a read failed because its datagram was longer
// than the buffer (WSAEMSGSIZE): the datagram was taken, cut.
func msgTooLong(err error) bool { return errors.Is(err, windows.WSAEMSGSIZE) }
