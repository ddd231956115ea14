// This file holds the relay datagram envelope: the 24-byte header an SDK
// puts before each payload (AppendEnvelope) and its parsing
// (ParseDatagram).

package writer

import (
	"encoding/binary"
	"errors"
)

// EnvelopeSize is the length of the datagram envelope that precedes a payload
// sent to the relay (cmd/statsrelay; see Envelope).
const EnvelopeSize = 24

// envelopeMagic opens every enveloped datagram: "SSR1".
const envelopeMagic = "SSR1"

// FlagFinal is the envelope flag of a sender's last datagram: it is stopping.
const FlagFinal = 1 << 0

// ErrNotDatagram: the bytes are neither an enveloped payload nor a bare
// msgpack map, or they hold the magic but not a whole envelope.
var ErrNotDatagram = errors.New("writer: not a stats datagram (no envelope and no msgpack map)")

// Envelope is the fixed header of a datagram sent to the relay.
type Envelope struct {
	// Flags: FlagFinal; other bits are reserved, written as given and
	// ignored by readers.
	Flags uint8
	// Sequence counts the sender's datagrams from 1.
	Sequence uint64
	// DroppedPayloads and DroppedSpans are what the sender dropped and had
	// not told yet (payloads, and the hits in them): since its previous
	// datagram, saturated at 32 bits; the SDK tells the rest on later ones.
	DroppedPayloads, DroppedSpans uint32
}

// Final reports whether the sender is stopping.
func (e Envelope) Final() bool { return e.Flags&FlagFinal != 0 }

// AppendEnvelope appends the 24-byte envelope e to b; the payload follows.
func AppendEnvelope(b []byte, e Envelope) []byte {
	b = append(b, envelopeMagic...)
	b = append(b, e.Flags, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, e.Sequence)
	b = binary.LittleEndian.AppendUint32(b, e.DroppedPayloads)
	return binary.LittleEndian.AppendUint32(b, e.DroppedSpans)
}

// ParseDatagram splits a received datagram into its envelope and its body.
// A datagram that starts with the magic has an envelope (sequenced is true);
// one that starts with a msgpack map header (fixmap, map16, map32) is a bare
// body, as another tracer would POST it (zero envelope, sequenced false).
// Anything else, or the magic followed by less than a whole envelope, is
// ErrNotDatagram. The body aliases b and is not decoded here.
func ParseDatagram(b []byte) (e Envelope, body []byte, sequenced bool, err error) {
	if len(b) >= len(envelopeMagic) && string(b[:len(envelopeMagic)]) == envelopeMagic {
		if len(b) < EnvelopeSize {
			return Envelope{}, nil, false, ErrNotDatagram
		}
		e = Envelope{
			Flags:           b[4], // b[5:8] reserved, ignored
			Sequence:        binary.LittleEndian.Uint64(b[8:]),
			DroppedPayloads: binary.LittleEndian.Uint32(b[16:]),
			DroppedSpans:    binary.LittleEndian.Uint32(b[20:]),
		}
		return e, b[EnvelopeSize:], true, nil
	}
	if len(b) > 0 && (b[0]&0xf0 == 0x80 || b[0] == 0xde || b[0] == 0xdf) {
		return Envelope{}, b, false, nil
	}
	return Envelope{}, nil, false, ErrNotDatagram
}
