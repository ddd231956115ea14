// This file holds the bounds-checked msgpack reads the payload decoder is
// built on: every length-prefixed value is checked against the input first.

package writer

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"
)

// fits returns msgp.ErrShortBytes if the str32, bin32 or ext32 at the start
// of b declares more bytes than b holds. msgp converts such a length to int,
// which on 32-bit platforms is negative from 2 GiB up, and slices with it:
// a crafted payload would panic the decoder there. Every length-prefixed read
// below goes through fits first.
func fits(b []byte) error {
	if len(b) >= 5 {
		switch b[0] {
		case 0xdb, 0xc6, 0xc9: // str32, bin32, ext32
			if uint64(binary.BigEndian.Uint32(b[1:])) > uint64(len(b)-5) {
				return msgp.ErrShortBytes
			}
		}
	}
	return nil
}

// readString reads a str, a copy or (alias) a view of b.
func (d *decoder) readString(b []byte) (string, []byte, error) {
	if !d.alias {
		return readString(b)
	}
	if v, rest, ok := shortStr(b); ok {
		return msgp.UnsafeString(v), rest, nil
	}
	if err := fits(b); err != nil {
		return "", b, err
	}
	v, b, err := msgp.ReadStringZC(b)
	return msgp.UnsafeString(v), b, err
}

// readMapKey reads a map key that is not the one expected next (see
// decodeMap). An empty key is refused, as the agent's decoder refuses it
// (msgp's ReadMapKeyPtr): the relay must not forward what the agent
// answers with a 400.
func readMapKey(b []byte) ([]byte, []byte, error) {
	if v, rest, ok := shortStr(b); ok && len(v) > 0 {
		return v, rest, nil
	}
	if err := fits(b); err != nil {
		return nil, b, err
	}
	v, rest, err := msgp.ReadMapKeyZC(b)
	if err == nil && len(v) == 0 {
		return nil, b, ErrEmptyKey
	}
	return v, rest, err
}

// shortStr reads a whole fixstr at the start of b, what every key and
// most labels are, without msgp's general path (BenchmarkAccept); ok is
// false for anything else, which the caller reads the general way. Small
// enough to be inlined.
func shortStr(b []byte) (v, rest []byte, ok bool) {
	if len(b) > 0 && b[0]&0xe0 == 0xa0 {
		if end := 1 + int(b[0]&0x1f); end <= len(b) {
			return b[1:end], b[end:], true
		}
	}
	return nil, b, false
}

func readBytes(b []byte) ([]byte, []byte, error) {
	if err := fits(b); err != nil {
		return nil, b, err
	}
	return msgp.ReadBytesZC(b)
}

// skip skips one object of b (the value of an unknown key), counting the
// objects still to skip instead of recursing as msgp.Skip does: a datagram
// of nested one-element arrays would grow the goroutine's stack by about
// 64 bytes per input byte (TestDeepNestingCannotAmplify in internal/relay).
// Every string, bin and ext inside goes through fits, which msgp.Skip's
// uintptr size sums skip: on a 32-bit platform they wrap around for 4 GiB
// lengths rather than go negative.
func skip(b []byte) ([]byte, error) {
	for left := uint64(1); left > 0; left-- { // each object takes a byte at least: ends with b
		var n uint32
		var err error
		switch msgp.NextType(b) {
		case msgp.ArrayType:
			n, b, err = msgp.ReadArrayHeaderBytes(b)
			left += uint64(n)
		case msgp.MapType:
			n, b, err = msgp.ReadMapHeaderBytes(b)
			left += 2 * uint64(n)
		default:
			if err = fits(b); err == nil {
				b, err = msgp.Skip(b) // a scalar: nothing nested
			}
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}
