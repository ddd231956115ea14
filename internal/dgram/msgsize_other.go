//go:build !linux && !windows

// This file holds msgTooLong where a UDP read cuts a datagram longer than
// the buffer without an error (the BSDs, macOS): the length shows it.

package dgram

// msgTooLong reports whether a read failed because its datagram was longer
// than the buffer: never here.
func msgTooLong(error) bool { return false }
