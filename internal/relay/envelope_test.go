// This file tests what the relay keeps of a rejected datagram's envelope.

package relay

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/spanstats/spanstats/writer"
)

// TestRejectedDatagramKeepsItsEnvelope: a sender reports the payloads it
// dropped once, in the header of its next datagram; when that datagram's
// body is rejected the report must still count. And a rejected datagram
// whose body names its sender is counted rejected, not a second time as a
// sequence gap.
func TestRejectedDatagramKeepsItsEnvelope(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.sock")
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
