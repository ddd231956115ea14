// This file owns the key bytes: how a span's key is encoded, hashed and
// decoded back into an entry's Key.

package aggregate

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// seedLen is the length of the per-process seed that prefixes the hashed key
// bytes, so keys cannot be pre-computed to collide.
const seedLen = 8

// appendField appends s with a uvarint length prefix: unlike a separator, a
// prefix makes the key bytes injective, so equal bytes mean equal fields.
func appendField(b []byte, s string) []byte {
	if len(s) < 0x80 {
		b = append(b, byte(len(s)))
	} else {
		b = binary.AppendUvarint(b, uint64(len(s)))
	}
	return append(b, s...)
}

// encodeKey writes the span's key bytes after the seed prefix of t.keyBuf and
// returns them (seed included). The bytes are injective in the key fields,
// so one byte comparison replaces a comparison per field.
func (t *Table) encodeKey(s *Record, peers []string) []byte {
	// Unrolled, as admit (see BenchmarkConsumer/HighCardinalityResource).
	l := (*[9]string)(s.labels())
	b := t.keyBuf[:seedLen]
	b = appendField(b, l[0])
	b = appendField(b, l[1])
	b = appendField(b, l[2])
	b = appendField(b, l[3])
	b = appendField(b, l[4])
	b = appendField(b, l[5])
	b = appendField(b, l[6])
	b = appendField(b, l[7])
	b = appendField(b, l[8])
	b = binary.LittleEndian.AppendUint32(b, s.HTTPStatusCode)
	b = append(b, s.flags())
	b = binary.AppendUvarint(b, uint64(len(peers)))
	for _, p := range peers {
		b = appendField(b, p)
	}
	t.keyBuf = b
	return b
}

// hash is xxhash of the key bytes behind the per-process seed: one pass over
// contiguous bytes beats a digest call per field, and the one-shot Sum64
// skips the streaming Digest's buffering.
func hash(b []byte) uint64 { return xxhash.Sum64(b) }

// matches reports whether e holds the key encoded in b (without the seed).
func (e *Entry) matches(key []byte) bool { return e.key == string(key) }

// setKey gives e the key encoded in key. One string holds every field and
// the fields are substrings of it: the entry owns its memory (it never pins a
// tracer's larger buffers) for one allocation per new key.
func (e *Entry) setKey(key []byte) {
	e.key = string(key)
	d := keyDecoder{s: e.key}
	k := &e.Key
	labels := k.labels()
	for f := range labels {
		v := d.field()
		if v == BlockedValue {
			// The constant itself: comparing a collapsed span with the
			// entry then short-circuits on equal pointers.
			v = BlockedValue
		}
		labels[f] = v
	}
	k.HTTPStatusCode = d.uint32()
	flags := d.byte()
	k.IsTraceRoot = Trilean(flags & 3)
	k.Synthetics = flags&4 != 0
	// Cleared to its capacity: tags past the new key's, from earlier keys of
	// a recycled entry, alias their key strings and would keep them alive.
	clear(k.PeerTags[:cap(k.PeerTags)])
	k.PeerTags = k.PeerTags[:0]
	for n := d.uvarint(); n > 0; n-- {
		k.PeerTags = append(k.PeerTags, d.field())
	}
	if len(k.PeerTags) == 0 {
		k.PeerTags = nil
	}
	if d.i != len(d.s) {
		panic("BUG: aggregate: key bytes not fully decoded")
	}
}

// keyDecoder reads back the fields encodeKey wrote.
type keyDecoder struct {
	s string
	i int
}

func (d *keyDecoder) byte() byte {
	c := d.s[d.i]
	d.i++
	return c
}

func (d *keyDecoder) uvarint() uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := d.byte()
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

func (d *keyDecoder) field() string {
	n := int(d.uvarint())
	f := d.s[d.i : d.i+n]
	d.i += n
	return f
}

func (d *keyDecoder) uint32() uint32 {
	s := d.s[d.i : d.i+4]
	d.i += 4
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
