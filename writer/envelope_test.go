// This file tests the relay datagram envelope: its bytes, and its parsing.

package writer

import (
	"bytes"
	"errors"
	"testing"
)

func TestAppendEnvelopeBytes(t *testing.T) {
	got := AppendEnvelope([]byte{0xee}, Envelope{
		Flags: FlagFinal, Sequence: 0x0102030405060708, DroppedPayloads: 0x0a0b0c0d, DroppedSpans: 0x11223344,
	})
	want := []byte{
		0xee, // existing content kept
		'S', 'S', 'R', '1',
		0x01, 0, 0, 0,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x0d, 0x0c, 0x0b, 0x0a,
		0x44, 0x33, 0x22, 0x11,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendEnvelope = % x\nwant              % x", got, want)
	}
	if len(got)-1 != EnvelopeSize {
		t.Fatalf("envelope is %d bytes, want %d", len(got)-1, EnvelopeSize)
	}
}

func TestParseDatagram(t *testing.T) {
	env := AppendEnvelope(nil, Envelope{Sequence: 7, DroppedPayloads: 2, DroppedSpans: 90})
	withFlags := append([]byte(nil), env...)
	withFlags[4], withFlags[5], withFlags[6], withFlags[7] = 0xff, 1, 2, 3 // unknown bits, reserved
	for _, tc := range []struct {
		name      string
		in        []byte
		want      Envelope
		body      []byte
		sequenced bool
		err       error
	}{
		{"envelope+body", append(env, 0x80), Envelope{Sequence: 7, DroppedPayloads: 2, DroppedSpans: 90}, []byte{0x80}, true, nil},
		{"envelope, empty body", env, Envelope{Sequence: 7, DroppedPayloads: 2, DroppedSpans: 90}, []byte{}, true, nil},
		{"unknown flags and reserved ignored", append(withFlags, 0x81),
			Envelope{Flags: 0xff, Sequence: 7, DroppedPayloads: 2, DroppedSpans: 90}, []byte{0x81}, true, nil},
		{"fixmap", []byte{0x8f, 1}, Envelope{}, []byte{0x8f, 1}, false, nil},
		{"map16", []byte{0xde, 0, 16}, Envelope{}, []byte{0xde, 0, 16}, false, nil},
		{"map32", []byte{0xdf, 0, 0, 0, 1}, Envelope{}, []byte{0xdf, 0, 0, 0, 1}, false, nil},
		{"short envelope", env[:23], Envelope{}, nil, false, ErrNotDatagram},
		{"magic only", []byte("SSR1"), Envelope{}, nil, false, ErrNotDatagram},
		{"other magic", []byte("SSR2\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), Envelope{}, nil, false, ErrNotDatagram},
		{"fixarray", []byte{0x90}, Envelope{}, nil, false, ErrNotDatagram},
		{"nil", []byte{0xc0}, Envelope{}, nil, false, ErrNotDatagram},
		{"empty", nil, Envelope{}, nil, false, ErrNotDatagram},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, body, seq, err := ParseDatagram(tc.in)
			if !errors.Is(err, tc.err) || e != tc.want || seq != tc.sequenced || !bytes.Equal(body, tc.body) || (body == nil) != (tc.body == nil) {
				t.Fatalf("ParseDatagram = %+v, % x, %v, %v; want %+v, % x, %v, %v",
					e, body, seq, err, tc.want, tc.body, tc.sequenced, tc.err)
			}
		})
	}
	if e, _, _, _ := ParseDatagram(withFlags); !e.Final() {
		t.Fatal("Final() = false with flag bit 0 set")
	}
}

func FuzzParseDatagram(f *testing.F) {
	f.Add(AppendEnvelope(nil, Envelope{Sequence: 1}))
	f.Add([]byte{0x80})
	f.Add([]byte("SSR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, body, seq, err := ParseDatagram(b)
		// What the datagram layout (DESIGN §8) says of b: an envelope
		// after the magic, or a bare body starting with a map header;
		// anything else rejected.
		enveloped := len(b) >= EnvelopeSize && string(b[:4]) == "SSR1"
		bare := len(b) > 0 && (b[0]&0xf0 == 0x80 || b[0] == 0xde || b[0] == 0xdf)
		if (err == nil) != (enveloped || bare) || err == nil && seq != enveloped {
			t.Fatalf("ParseDatagram(% x) = sequenced %v, %v; enveloped %v, bare %v", b, seq, err, enveloped, bare)
		}
		if err != nil && !errors.Is(err, ErrNotDatagram) {
			t.Fatalf("error %v is not ErrNotDatagram", err)
		}
		switch {
		case err != nil:
			if body != nil || seq || e != (Envelope{}) {
				t.Fatalf("error %v with a result", err)
			}
		case seq:
			// Re-encoding the envelope gives the input's bytes but the reserved ones.
			re := AppendEnvelope(nil, e)
			in := append([]byte(nil), b[:EnvelopeSize]...)
			in[5], in[6], in[7] = 0, 0, 0
			if !bytes.Equal(re, in) || !bytes.Equal(body, b[EnvelopeSize:]) {
				t.Fatalf("round trip: % x vs % x", re, in)
			}
		default:
			if !bytes.Equal(body, b) {
				t.Fatal("bare body differs from input")
			}
		}
	})
}
