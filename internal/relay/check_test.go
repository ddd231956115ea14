package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
	"github.com/tinylib/msgp/msgp"
)

func TestRejectReasons(t *testing.T) {
	ok := datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 2, 0, 5)))
	payload := ok[writer.EnvelopeSize:]
	withSketch := func(hits uint64, durs ...float64) []byte {
		e := entry(key("r"), hits, 0, durs...)
		return datagram(1, header("a"), bucket(w0, 10*sec, e))
	}
	otherGamma := func() []byte { // the agent's gamma replaced by 1.05 in the sketch's mapping
		d := withSketch(1, 5)
		g := binary.LittleEndian.AppendUint64(nil, math.Float64bits(aggregate.Mapping().ToProto().Gamma))
		i := bytes.Index(d, g)
		if i < 0 {
			t.Fatal("gamma not found in the encoded sketch")
		}
		binary.LittleEndian.PutUint64(d[i:], math.Float64bits(1.05))
		return d
	}
	grp := func(mod func(e *aggregate.Entry)) []byte {
		e := entry(key("r"), 2, 0)
		mod(e)
		return datagram(1, header("a"), bucket(w0, 10*sec, e))
	}
	future := uint64(t0.Add(MaxClockSkew).UnixNano()) + 1
	for _, tc := range []struct {
		name   string
		d      []byte
		reason Reason
		err    error
	}{
		{"over MaxDatagram", append(bytes.Clone(ok), make([]byte, 65)...), Truncated, errTooLong},
		{"random bytes", []byte{0x01, 0x02, 0x03}, Malformed, writer.ErrNotDatagram},
		{"short envelope", ok[:20], Malformed, writer.ErrNotDatagram},
		{"envelope, no body", ok[:writer.EnvelopeSize], Malformed, nil},
		{"cut payload", ok[:len(ok)-5], Malformed, nil},
		{"trailing bytes", append(bytes.Clone(ok), 0xc0), Malformed, writer.ErrTrailingBytes},
		{"huge declared map", append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), 0xdf, 0xff, 0xff, 0xff, 0xff), Malformed, nil},
		{"errors > hits", grp(func(e *aggregate.Entry) { e.Errors = 3 }), Invalid, errErrorsGtHits},
		{"top-level > hits", grp(func(e *aggregate.Entry) { e.TopLevelHits = 3 }), Invalid, errTopGtHits},
		{"sketch > hits", withSketch(2, 5, 5, 5), Invalid, errSketchGtHits},
		{"hits over the payload bound", grp(func(e *aggregate.Entry) { e.Hits = maxPayloadHits + 1 }), Invalid, errTooManyHits},
		{"other mapping", otherGamma(), Invalid, writer.ErrMapping},
		{"zero duration", datagram(1, header("a"), bucket(w0, 0, entry(key("r"), 1, 0))), Invalid, errZeroDuration},
		{"absurd duration", datagram(1, header("a"), bucket(w0, uint64(MaxBucketDuration)+1, entry(key("r"), 1, 0))), Invalid, errLongBucket},
		{"future", datagram(1, header("a"), bucket(future, 10*sec, entry(key("r"), 1, 0))), Invalid, errFutureBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRelay(Config{MaxDatagram: len(ok) + 64})
			err := r.Accept(tc.d, 0, UDP)
			var rej *RejectError
			if !errors.As(err, &rej) || rej.Reason != tc.reason || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("Accept = %v, want a %v rejection (%v)", err, tc.reason, tc.err)
			}
			s := checkAccounting(t, r)
			if s.Rejected[tc.reason] != 1 || s.Datagrams[UDP] != 1 || s.Bytes[UDP] != uint64(len(tc.d)) ||
				s.SpansReceived != 0 || s.Groups != 0 || s.Senders != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	t.Run("valid and bare", func(t *testing.T) {
		r := newTestRelay(Config{})
		mustAccept(t, r, ok, 0, UDP)
		mustAccept(t, r, payload, 0, UDP) // a bare body: unsequenced
		// Unaligned, ending in the future within a bucket's length, starting
		// within the skew: all valid.
		mustAccept(t, r, datagram(2, header("a"), bucket(uint64(t0.UnixNano())+7, 10*sec, entry(key("r"), 1, 0))), 0, UDP)
		s := checkAccounting(t, r)
		if s.Rejected != [NumReasons]uint64{} || s.SpansReceived != 5 || s.Unsequenced != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestSequences(t *testing.T) {
	r := newTestRelay(Config{})
	send := func(id string, e writer.Envelope) {
		t.Helper()
		d := writer.AppendEnvelope(nil, e)
		h := header(id)
		mustAccept(t, r, writer.AppendPayload(d, &h, []writer.Bucket{bucket(w0, 10*sec, entry(key("r"), 1, 0))}), 0, Unix)
	}
	send("a", writer.Envelope{Sequence: 1})
	send("a", writer.Envelope{Sequence: 2})
	send("a", writer.Envelope{Sequence: 5, DroppedPayloads: 2, DroppedSpans: 40}) // 3, 4 lost; 2 reported dropped
	send("b", writer.Envelope{Sequence: 9})                                       // first seen mid-stream: no reference, no gap
	send("b", writer.Envelope{Sequence: 10, DroppedPayloads: 1, DroppedSpans: 2})
	s := checkAccounting(t, r)
	if s.SeqGaps != 2 || s.SeqRestarts != 0 || s.Senders != 2 || s.SenderDroppedPayloads != 3 || s.SenderDroppedSpans != 42 {
		t.Fatalf("gaps %d restarts %d senders %d dropped %d/%d", s.SeqGaps, s.SeqRestarts, s.Senders, s.SenderDroppedPayloads, s.SenderDroppedSpans)
	}
	send("a", writer.Envelope{Sequence: 1})                          // restarted
	send("a", writer.Envelope{Sequence: 2, Flags: writer.FlagFinal}) // and stops: forgotten
	s = checkAccounting(t, r)
	if s.SeqGaps != 2 || s.SeqRestarts != 1 || s.Senders != 1 || s.SpansReceived != 7 {
		t.Fatalf("gaps %d restarts %d senders %d received %d", s.SeqGaps, s.SeqRestarts, s.Senders, s.SpansReceived)
	}
	// Idle senders are forgotten at a harvest.
	now := t0
	r.now = func() time.Time { return now }
	now = t0.Add(SenderIdle)
	r.Harvest(t0)
	if s := r.Stats(); s.Senders != 0 {
		t.Fatalf("%d senders after %v idle", s.Senders, SenderIdle)
	}
}

// TestEmptyGroupsCannotAmplify: a datagram of 20 000 one-byte groups (empty
// maps) would decode into 20 000 Groups of a few hundred bytes each; it is
// rejected as malformed having allocated a small multiple of its size.
func TestEmptyGroupsCannotAmplify(t *testing.T) {
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendMapHeader(b, 3)
	b = msgp.AppendString(b, "Start")
	b = msgp.AppendUint64(b, uint64(time.Now().UnixNano()))
	b = msgp.AppendString(b, "Duration")
	b = msgp.AppendUint64(b, 1e9)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, 20000)
	for range 20000 {
		b = msgp.AppendMapHeader(b, 0)
	}
	r := New(Config{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := r.Accept(b, 0, UDP)
	runtime.ReadMemStats(&after)
	var re *RejectError
	if !errors.As(err, &re) || re.Reason != Malformed {
		t.Fatalf("Accept = %v, want a malformed reject", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16*uint64(len(b)) {
		t.Fatalf("a %d-byte datagram allocated %d bytes (%.0f×), bound 16×", len(b), grew, float64(grew)/float64(len(b)))
	}
}
