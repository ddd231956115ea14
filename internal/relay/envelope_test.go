// This file tests how the relay reads a datagram's envelope: its flags
// (unknown ones and the reserved bytes ignored, a header-only final
// datagram) and what it keeps of a rejected datagram's.

package relay

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/writer"
)

// TestRejectedDatagramKeepsItsEnvelope: a sender reports the payloads it
// dropped once, in the header of its next datagram; when that datagram's
// body is rejected the report must still count. And a rejected datagram
// whose body names its sender is counted rejected, not a second time as a
// sequence gap.
func TestRejectedDatagramKeepsItsEnvelope(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	s := runServer(t, ServerConfig{UnixPath: path, UDPAddr: "-"})
	conn, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	start := uint64(time.Now().Truncate(10*time.Second).UnixNano()) - 10*sec
	h := header("rid-1")
	enveloped := func(e writer.Envelope, body []byte) []byte {
		return append(writer.AppendEnvelope(nil, e), body...)
	}
	valid := writer.AppendPayload(nil, &h, []writer.Bucket{bucket(start, 10*sec, entry(key("/a"), 2, 0))})
	invalid := writer.AppendPayload(nil, &h, []writer.Bucket{bucket(start, 10*sec, entry(key("/a"), 2, 5))}) // errors > hits
	for _, d := range [][]byte{
		enveloped(writer.Envelope{Sequence: 1}, valid),
		enveloped(writer.Envelope{Sequence: 2, DroppedPayloads: 3, DroppedSpans: 40}, invalid),
		enveloped(writer.Envelope{Sequence: 3}, valid),
		enveloped(writer.Envelope{Sequence: 4, DroppedPayloads: 1, DroppedSpans: 5}, []byte{0xc1}), // not msgpack
	} {
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.relay.Stats().Datagrams[Unix] < 4 {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not read the 4 datagrams")
		}
		time.Sleep(time.Millisecond)
	}
	// Two harvests: a hole still open at the second counts as gaps.
	s.relay.Harvest(time.Unix(0, 0))
	s.relay.Harvest(time.Unix(0, 0))
	st := s.relay.Stats()
	if st.Rejected[Invalid] != 1 || st.Rejected[Malformed] != 1 {
		t.Fatalf("rejected %v; want 1 invalid and 1 malformed", st.Rejected)
	}
	if st.SenderDroppedPayloads != 4 || st.SenderDroppedSpans != 45 {
		t.Errorf("sender-reported drops: %d payloads, %d spans; want 4 and 45 (the rejected datagrams' headers)",
			st.SenderDroppedPayloads, st.SenderDroppedSpans)
	}
	if st.SeqGaps != 0 || st.SeqLate != 0 {
		t.Errorf("sequence gaps %d, late %d; want 0 and 0: sequence 2 arrived, and is counted rejected", st.SeqGaps, st.SeqLate)
	}
}

// TestTruncatedAndMalformedKeepTheirEnvelope: the report of a sender's drops
// in the envelope counts whatever rejects the body after it: a datagram
// over the limit (its envelope read all the same) and a body that starts
// as a map and then does not decode.
func TestTruncatedAndMalformedKeepTheirEnvelope(t *testing.T) {
	ok := datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 2, 0)))
	r := newTestRelay(Config{MaxDatagram: len(ok)})
	enveloped := func(seq uint64, body []byte) []byte {
		return append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: seq, DroppedPayloads: 2, DroppedSpans: 7}), body...)
	}
	for _, d := range [][]byte{
		enveloped(1, append(bytes.Clone(ok[writer.EnvelopeSize:]), 0xc0)), // one byte over the limit
		enveloped(2, []byte{0x81, 0xc1}),                                  // a map header, then no msgpack
	} {
		var rej *RejectError
		if err := r.Accept(d, 0, UDP); !errors.As(err, &rej) {
			t.Fatalf("Accept = %v, want a rejection", err)
		}
	}
	s := checkAccounting(t, r)
	if s.Rejected != [NumReasons]uint64{Truncated: 1, Malformed: 1} || s.SenderDroppedPayloads != 4 || s.SenderDroppedSpans != 14 {
		t.Fatalf("rejected %v, sender-reported drops %d payloads, %d spans; want 1 truncated, 1 malformed, 4 and 14",
			s.Rejected, s.SenderDroppedPayloads, s.SenderDroppedSpans)
	}
}

// TestUnknownFlagsAndReservedIgnored: envelope bits other than final, and
// the reserved bytes, change nothing: a later sender may set them.
func TestUnknownFlagsAndReservedIgnored(t *testing.T) {
	r := newTestRelay(Config{})
	now := t0
	r.now = func() time.Time { return now }
	send := func(seq uint64, flags uint8) {
		t.Helper()
		d := datagram(seq, header("a"), bucket(w0, 10*sec, entry(key("r"), 3, 0)))
		d[4] = flags
		d[5], d[6], d[7] = 0xff, 0x01, 0x80
		mustAccept(t, r, d, 0, Unix)
	}
	send(1, 0xfe) // every bit but final
	send(2, 0x02)
	r.Harvest(now.Add(10 * time.Second))
	now = now.Add(10 * time.Second)
	if s := checkAccounting(t, r); s.SpansReceived != 6 || s.Senders != 1 || s.SeqGaps != 0 || s.Rejected != [NumReasons]uint64{} {
		t.Fatalf("not final: %d spans, %d senders, %d gaps, rejected %v; want 6 1 0 none", s.SpansReceived, s.Senders, s.SeqGaps, s.Rejected)
	}
	send(3, 0xff) // final, with the unknown bits
	r.Harvest(now.Add(10 * time.Second))
	if s := checkAccounting(t, r); s.SpansReceived != 9 || s.Senders != 0 || s.SeqGaps != 0 {
		t.Fatalf("final: %d spans, %d senders, %d gaps; want 9 0 0", s.SpansReceived, s.Senders, s.SeqGaps)
	}
}

// TestHeaderOnlyFinal: the SDK's last datagram when Stop has no group left
// to send (a Flush just before): the header alone, flagged final. It is
// accepted, merges nothing, holds no group, and its sender is forgotten at
// the next harvest with no gap counted.
func TestHeaderOnlyFinal(t *testing.T) {
	r := newTestRelay(Config{})
	now := t0
	r.now = func() time.Time { return now }
	h := header("a")
	d := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	mustAccept(t, r, writer.AppendPayload(d, &h, []writer.Bucket{bucket(w0, 10*sec, entry(key("r"), 4, 0))}), 0, Unix)
	d = writer.AppendEnvelope(nil, writer.Envelope{Sequence: 2, Flags: writer.FlagFinal})
	mustAccept(t, r, writer.AppendPayload(d, &h, nil), 0, Unix)
	s := checkAccounting(t, r)
	if s.SpansReceived != 4 || s.Groups != 1 || s.Senders != 1 || s.Datagrams[Unix] != 2 {
		t.Fatalf("received %d spans, %d groups, %d senders, %d datagrams; want 4 1 1 2", s.SpansReceived, s.Groups, s.Senders, s.Datagrams[Unix])
	}
	r.Harvest(now.Add(10 * time.Second))
	if s = checkAccounting(t, r); s.Senders != 0 || s.SeqGaps != 0 {
		t.Fatalf("after a harvest: %d senders, %d gaps; want 0 0", s.Senders, s.SeqGaps)
	}
}
