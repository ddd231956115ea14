// This file tests what a datagram is rejected for, and that hostile ones
// cannot make the decode allocate far more than they weigh.

package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"

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
	badSketch := func() []byte { // the ok sketch's first byte an invalid protobuf wire type
		d := withSketch(1, 5)
		i := bytes.Index(d, []byte("OkSummary"))
		if i < 0 || d[i+len("OkSummary")] != 0xc4 {
			t.Fatal("no bin8 OkSummary in the datagram")
		}
		d[i+len("OkSummary")+2] = 0xff
		return d
	}
	grp := func(mod func(e *aggregate.Entry)) []byte {
		e := entry(key("r"), 2, 0)
		mod(e)
		return datagram(1, header("a"), bucket(w0, 10*sec, e))
	}
	future := uint64(t0.Add(MaxClockSkew).UnixNano()) + 1
	hdr := func(mod func(h *writer.Header)) []byte {
		h := header("a")
		mod(&h)
		return datagram(1, h, bucket(w0, 10*sec, entry(key("r"), 1, 0)))
	}
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
		// Another tracer's body must start as a map; an array is neither.
		{"body not a map", append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), 0x91, 0x80), Malformed, errNotMap},
		{"bare array", []byte{0x91, 0x80}, Malformed, writer.ErrNotDatagram},
		{"sketch that does not decode", badSketch(), Malformed, writer.ErrMalformedSketch},
		{"trailing bytes", append(bytes.Clone(ok), 0xc0), Malformed, writer.ErrTrailingBytes},
		{"huge declared map", append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), 0xdf, 0xff, 0xff, 0xff, 0xff), Malformed, nil},
		{"errors > hits", grp(func(e *aggregate.Entry) { e.Errors = 3 }), Invalid, errErrorsGtHits},
		{"top-level > hits", grp(func(e *aggregate.Entry) { e.TopLevelHits = 3 }), Invalid, errTopGtHits},
		{"sketch > hits", withSketch(2, 5, 5, 5), Invalid, errSketchGtHits},
		// Each summary within the hits, their sum above: "adding up".
		{"ok + error sketches > hits", grp(func(e *aggregate.Entry) {
			e.Errors, e.Ok, e.Err = 1, new(aggregate.Sketch), new(aggregate.Sketch)
			e.Ok.Add(5e6)
			e.Ok.Add(5e6)
			e.Err.Add(5e6)
		}), Invalid, errSketchGtHits},
		{"hits over the payload bound", grp(func(e *aggregate.Entry) { e.Hits = maxPayloadHits + 1 }), Invalid, errTooManyHits},
		{"other mapping", otherGamma(), Invalid, writer.ErrMapping},
		// Invalid is for what decodes: a payload that does not, after a
		// sketch of another mapping, is malformed.
		{"other mapping, then cut", func() []byte { d := otherGamma(); return d[:len(d)-3] }(), Malformed, msgp.ErrShortBytes},
		{"other mapping, then trailing bytes", append(otherGamma(), 0xc0), Malformed, writer.ErrTrailingBytes},
		{"zero duration", datagram(1, header("a"), bucket(w0, 0, entry(key("r"), 1, 0))), Invalid, errZeroDuration},
		{"absurd duration", datagram(1, header("a"), bucket(w0, uint64(MaxBucketDuration)+1, entry(key("r"), 1, 0))), Invalid, errLongBucket},
		{"future", datagram(1, header("a"), bucket(future, 10*sec, entry(key("r"), 1, 0))), Invalid, errFutureBucket},
		// Sent on as HTTP headers: net/http would refuse every request.
		{"CR LF in Lang", hdr(func(h *writer.Header) { h.Lang = "go\r\nX-Injected: 1" }), Invalid, errHeaderValue},
		{"NUL in TracerVersion", hdr(func(h *writer.Header) { h.TracerVersion = "v1\x00" }), Invalid, errHeaderValue},
		{"LF in ContainerID", hdr(func(h *writer.Header) { h.ContainerID = "abc\n" }), Invalid, errHeaderValue},
		{"DEL in Lang", hdr(func(h *writer.Header) { h.Lang = "go\x7f" }), Invalid, errHeaderValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRelay(Config{MaxDatagram: len(ok) + 64})
			err := r.Accept(tc.d, 0, UDP)
			var rej *RejectError
			if !errors.As(err, &rej) || rej.Reason != tc.reason || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("Accept = %v, want a %v rejection (%v)", err, tc.reason, tc.err)
			}
			s := checkAccounting(t, r)
			// A body that decodes but is invalid still names its sender,
			// whose sequence is then tracked: the reject is no gap
			// (TestRejectedDatagramKeepsItsEnvelope).
			senders := 0
			if tc.reason == Invalid && !errors.Is(tc.err, writer.ErrMapping) {
				senders = 1
			}
			if s.Rejected[tc.reason] != 1 || s.Datagrams[UDP] != 1 || s.Bytes[UDP] != uint64(len(tc.d)) ||
				s.SpansReceived != 0 || s.Groups != 0 || s.Senders != senders {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	// The limit counts the whole datagram, envelope included: one byte
	// over it is truncated before anything else is looked at.
	t.Run("at the limit", func(t *testing.T) {
		r := newTestRelay(Config{MaxDatagram: len(ok)})
		mustAccept(t, r, ok, 0, UDP)
		err := r.Accept(append(bytes.Clone(ok), 0xc0), 0, UDP)
		if !errors.Is(err, errTooLong) {
			t.Fatalf("one byte over: %v, want truncated", err)
		}
		if s := checkAccounting(t, r); s.Rejected != [NumReasons]uint64{Truncated: 1} || s.SpansReceived != 2 {
			t.Fatalf("stats %+v", s)
		}
	})
	// The hits bound is the payload's: two groups each within it, their
	// sum above it.
	t.Run("hits over the payload bound in two groups", func(t *testing.T) {
		r := newTestRelay(Config{})
		d := datagram(1, header("a"), bucket(w0, 10*sec,
			entry(key("r1"), maxPayloadHits/2+1, 0), entry(key("r2"), maxPayloadHits/2+1, 0)))
		if err := r.Accept(d, 0, UDP); !errors.Is(err, errTooManyHits) {
			t.Fatalf("Accept = %v, want an invalid rejection (%v)", err, errTooManyHits)
		}
		if s := checkAccounting(t, r); s.Rejected != [NumReasons]uint64{Invalid: 1} || s.SpansReceived != 0 || s.Groups != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	// A tab is the one control character net/http sends in a header value.
	t.Run("tab in TracerVersion", func(t *testing.T) {
		r := newTestRelay(Config{})
		mustAccept(t, r, hdr(func(h *writer.Header) { h.TracerVersion = "v1\t2" }), 0, UDP)
		if s := checkAccounting(t, r); s.Rejected != [NumReasons]uint64{} || s.SpansReceived != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
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

// groupsDatagram is a datagram of one bucket up to the header of its
// array of n groups, which the caller appends.
func groupsDatagram(start, dur uint64, n int) []byte {
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendMapHeader(b, 3)
	b = msgp.AppendString(b, "Start")
	b = msgp.AppendUint64(b, start)
	b = msgp.AppendString(b, "Duration")
	b = msgp.AppendUint64(b, dur)
	b = msgp.AppendString(b, "Stats")
	return msgp.AppendArrayHeader(b, uint32(n))
}

// acceptAllocated is r.Accept(b) and the bytes it allocated.
func acceptAllocated(r *Relay, b []byte) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := r.Accept(b, 0, UDP)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// hitsGroups appends n groups of hits each, one more error than hits in the
// last with invalidLast, and a third field written by field.
func hitsGroups(b []byte, n int, hits uint64, invalidLast bool, field func([]byte) []byte) []byte {
	for i := range n {
		errs := uint64(0)
		if invalidLast && i == n-1 {
			errs = hits + 1
		}
		b = msgp.AppendMapHeader(b, 3)
		b = msgp.AppendString(b, "Hits")
		b = msgp.AppendUint64(b, hits)
		b = msgp.AppendString(b, "Errors")
		b = msgp.AppendUint64(b, errs)
		b = field(b)
	}
	return b
}

// budgetDatagram is a datagram of DefaultMaxDatagram bytes whose buckets
// (one or more) hold as many copies of group as the decoder's budget lets
// through, one per writer.MinWireGroupBytes, its Hostname padding the rest.
func budgetDatagram(group []byte, buckets int) []byte {
	n := (DefaultMaxDatagram-writer.EnvelopeSize)/writer.MinWireGroupBytes + 1
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = msgp.AppendMapHeader(b, 2)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, uint32(buckets))
	for i := range buckets {
		k := n / buckets
		if i < n%buckets {
			k++
		}
		b = msgp.AppendMapHeader(b, 3)
		b = msgp.AppendString(b, "Start")
		b = msgp.AppendUint64(b, w0)
		b = msgp.AppendString(b, "Duration")
		b = msgp.AppendUint64(b, 10*sec)
		b = msgp.AppendString(b, "Stats")
		b = msgp.AppendArrayHeader(b, uint32(k))
		for range k {
			b = append(b, group...)
		}
	}
	b = msgp.AppendString(b, "Hostname")
	pad := DefaultMaxDatagram - len(b) - 5
	b = append(b, 0xdb, byte(pad>>24), byte(pad>>16), byte(pad>>8), byte(pad)) // str32
	return append(b, make([]byte, pad)...)
}

// TestEmptyGroupsCannotAmplify: a datagram of 20 000 one-byte groups (empty
// maps) would decode into 20 000 Groups of a few hundred bytes each; it is
// rejected as malformed having allocated a small multiple of its size. A
// full datagram of groups within the decoder's budget, each one or a few
// keys and the Hostname padding the rest, is accepted having allocated
// about a Group per writer.MinWireGroupBytes (7×): the slice is allocated
// once, at its length, and an empty summary costs nothing; a summary with
// a value adds its GroupSketches, a second bucket an arena twice the
// first's.
func TestEmptyGroupsCannotAmplify(t *testing.T) {
	over := groupsDatagram(w0, 10*sec, 20000)
	for range 20000 {
		over = msgp.AppendMapHeader(over, 0)
	}
	var one aggregate.Sketch
	one.Add(1)
	empty := msgp.AppendMapHeader(nil, 0)
	hits := msgp.AppendUint64(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "Hits"), 1)
	emptySummary := msgp.AppendBytes(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "OkSummary"), nil)
	twoEmpty := msgp.AppendBytes(msgp.AppendString(msgp.AppendMapHeader(nil, 2), "OkSummary"), nil)
	twoEmpty = msgp.AppendBytes(msgp.AppendString(twoEmpty, "ErrorSummary"), nil)
	summary := msgp.AppendUint64(msgp.AppendString(msgp.AppendMapHeader(nil, 2), "Hits"), 1)
	summary = msgp.AppendBytes(msgp.AppendString(summary, "OkSummary"), writer.AppendSketch(nil, &one))
	// Bounds: the Groups' 7×, up to 3× for the merge and the rest of
	// Accept; GroupSketches 3× more, a second bucket 4×.
	for _, tc := range []struct {
		name   string
		d      []byte
		accept bool
		bound  float64 // allocated per datagram byte
	}{
		{"20 000 empty maps", over, false, 1}, // refused before anything is allocated
		{"empty maps", budgetDatagram(empty, 1), true, 10},
		{"hits 1", budgetDatagram(hits, 1), true, 10},
		{"an empty summary", budgetDatagram(emptySummary, 1), true, 10},
		{"two empty summaries", budgetDatagram(twoEmpty, 1), true, 10},
		{"hits 1, a summary of 1", budgetDatagram(summary, 1), true, 13},
		{"empty maps, two buckets", budgetDatagram(empty, 2), true, 14},
		{"hits 1, a summary of 1, two buckets", budgetDatagram(summary, 2), true, 16},
	} {
		r := newTestRelay(Config{})
		grew, err := acceptAllocated(r, tc.d)
		if tc.accept {
			if err != nil {
				t.Fatalf("%s: Accept = %v", tc.name, err)
			}
		} else if re := (*RejectError)(nil); !errors.As(err, &re) || re.Reason != Malformed {
			t.Fatalf("%s: Accept = %v, want a malformed reject", tc.name, err)
		}
		t.Logf("%s: a %d-byte datagram allocated %d bytes (%.1f×)", tc.name, len(tc.d), grew, float64(grew)/float64(len(tc.d)))
		if float64(grew) > tc.bound*float64(len(tc.d)) {
			t.Errorf("%s: a %d-byte datagram allocated %d bytes (%.1f×), bound %.0f×",
				tc.name, len(tc.d), grew, float64(grew)/float64(len(tc.d)), tc.bound)
		}
	}
}

// TestEmptyBucketsCannotAmplify: a datagram of writer.MaxBuckets one-byte
// buckets (empty maps) would decode into 4096 buckets of 48 bytes; it is
// rejected as malformed having allocated a small multiple of its size.
func TestEmptyBucketsCannotAmplify(t *testing.T) {
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, writer.MaxBuckets)
	for range writer.MaxBuckets {
		b = msgp.AppendMapHeader(b, 0)
	}
	r := New(Config{})
	grew, err := acceptAllocated(r, b)
	if grew > 16*uint64(len(b)) {
		t.Fatalf("a %d-byte datagram allocated %d bytes (%.0f×), bound 16×", len(b), grew, float64(grew)/float64(len(b)))
	}
	var re *RejectError
	if !errors.As(err, &re) || re.Reason != Malformed {
		t.Fatalf("Accept = %v, want a malformed reject", err)
	}
}

// TestDeepNestingCannotAmplify: an unknown key whose value is 65 000
// nested one-element arrays is skipped without a stack frame per level
// (msgp.Skip's recursion grew the decoding goroutine's stack by 4 MiB).
func TestDeepNestingCannotAmplify(t *testing.T) {
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "X")
	b = append(b, bytes.Repeat([]byte{0x91}, DefaultMaxDatagram-len(b)-1)...)
	b = append(b, 0xc0)
	r := newTestRelay(Config{})
	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan error)
	go func() { // a fresh goroutine: its stack starts small
		err := r.Accept(b, 0, UDP)
		runtime.ReadMemStats(&during)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if grew := int64(during.StackInuse) - int64(before.StackInuse); grew > 16*int64(len(b)) {
		t.Fatalf("a %d-byte datagram grew the stacks by %d bytes (%.0f×), bound 16×", len(b), grew, float64(grew)/float64(len(b)))
	}
}

// wideSketchDatagram is a datagram of n minimal groups (hits 1 and an ok
// summary, no labels: all one key) whose summaries hold two values at the
// ends of the indexable range: a ~45-byte sparse summary whose decoded
// store spans MaxBins bins (8 KiB). With invalidLast, the last group has
// more errors than hits, so the datagram is rejected after every summary
// is read.
func wideSketchDatagram(n int, invalidLast bool) []byte {
	var s aggregate.Sketch
	s.Add(1)
	s.Add(1 << 62)
	summary := writer.AppendSketch(nil, &s)
	b := hitsGroups(groupsDatagram(w0, 10*sec, n), n, 2, invalidLast, func(b []byte) []byte {
		return msgp.AppendBytes(msgp.AppendString(b, "OkSummary"), summary)
	})
	return b
}

// TestWideSketchesCannotAmplify: summaries of a few dozen bytes each
// decode into stores of 8 KiB; a datagram of 900 of them, merged
// into one group or rejected at its last group, costs a small multiple
// of its size, not a store per summary (8 MiB).
func TestWideSketchesCannotAmplify(t *testing.T) {
	const n = 900
	for _, invalid := range []bool{false, true} {
		b := wideSketchDatagram(n, invalid)
		if len(b) > DefaultMaxDatagram {
			t.Fatalf("datagram of %d bytes, want at most %d", len(b), DefaultMaxDatagram)
		}
		r := newTestRelay(Config{})
		grew, err := acceptAllocated(r, b)
		if invalid {
			var re *RejectError
			if !errors.As(err, &re) || re.Reason != Invalid {
				t.Fatalf("Accept = %v, want an invalid reject", err)
			}
		} else if err != nil {
			t.Fatalf("Accept: %v", err)
		}
		t.Logf("invalid=%v: %d-byte datagram allocated %d bytes (%.1f×)", invalid, len(b), grew, float64(grew)/float64(len(b)))
		if grew > 16*uint64(len(b)) {
			t.Fatalf("invalid=%v: a %d-byte datagram allocated %d bytes (%.0f×), bound 16×", invalid, len(b), grew, float64(grew)/float64(len(b)))
		}
		if invalid {
			continue
		}
		s := checkAccounting(t, r)
		if s.Groups != 1 || s.SpansReceived != 2*n {
			t.Fatalf("held %d groups, %d spans; want 1 group of %d", s.Groups, s.SpansReceived, 2*n)
		}
		var want aggregate.Sketch
		for range n {
			want.Add(1)
			want.Add(1 << 62)
		}
		g := harvestAll(t, r)[0].Buckets[0].Groups[0]
		for _, q := range []float64{0, 0.5, 1} {
			if g.Ok.Count() != want.Count() || g.Ok.Quantile(q) != want.Quantile(q) {
				t.Fatalf("merged sketch: count %d, q%v %v; want %d, %v", g.Ok.Count(), q, g.Ok.Quantile(q), want.Count(), want.Quantile(q))
			}
		}
	}
}

// TestFractionalCountIsInvalid: a sketch bin holding a fraction of a span
// is rejected as invalid, not rounded into a sketch other than the one sent
// (1.5 would become 2, 0.4 would vanish).
func TestFractionalCountIsInvalid(t *testing.T) {
	for _, c := range []float64{1.5, 0.4} {
		d := datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 2, 0, 5)))
		one := binary.LittleEndian.AppendUint64(nil, math.Float64bits(1))
		i := bytes.Index(d, one)
		if i < 0 || bytes.Count(d, one) != 1 {
			t.Fatal("count 1.0 not found once in the encoded sketch")
		}
		binary.LittleEndian.PutUint64(d[i:], math.Float64bits(c))
		r := newTestRelay(Config{MaxDatagram: len(d) + 64})
		err := r.Accept(d, 0, UDP)
		var rej *RejectError
		if !errors.As(err, &rej) || rej.Reason != Invalid {
			t.Errorf("count %v: Accept = %v, want an invalid rejection", c, err)
		}
		if n := r.Stats().Rejected[Invalid]; n != 1 {
			t.Errorf("count %v: %d invalid rejections counted, want 1", c, n)
		}
	}
}

// peerTagsDatagram is a datagram of n groups, each with k empty peer tags
// (one byte each on the wire, a 16-byte string decoded); with invalidLast
// the last group has more errors than hits.
func peerTagsDatagram(n, k int, invalidLast bool) []byte {
	return hitsGroups(groupsDatagram(w0, 10*sec, n), n, 1, invalidLast, func(b []byte) []byte {
		b = msgp.AppendArrayHeader(msgp.AppendString(b, "PeerTags"), uint32(k))
		for range k {
			b = msgp.AppendString(b, "")
		}
		return b
	})
}

// TestEmptyStringsCannotAmplify: a datagram of 800 groups of 40 empty peer
// tags, or one group of 60 000, would decode into 16 bytes (and an arena
// doubling) per byte received; it is rejected as malformed (past one
// string-array element per writer.MinWireStringBytes) having allocated at
// most 16× its size. A full datagram of as many groups of 15 empty peer
// tags as the group budget lets through, the Hostname padding the rest,
// reaches the string budget four fifths of the way in, having allocated
// its Groups (7×, see TestEmptyGroupsCannotAmplify) and the strings up to
// the budget (4×) from arenas of at most a few thousand strings.
func TestEmptyStringsCannotAmplify(t *testing.T) {
	peers := msgp.AppendArrayHeader(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "PeerTags"), 15)
	for range 15 {
		peers = msgp.AppendString(peers, "")
	}
	for _, tc := range []struct {
		name  string
		d     []byte
		bound uint64 // allocated per datagram byte
	}{
		{"800 groups × 40 empty peer tags, the last invalid", peerTagsDatagram(800, 40, true), 16},
		{"800 groups × 40 empty peer tags", peerTagsDatagram(800, 40, false), 16},
		{"1 group × 60 000 empty peer tags", peerTagsDatagram(1, 60000, false), 16},
		{"groups × 15 empty peer tags at the group budget", budgetDatagram(peers, 1), 13},
	} {
		b := tc.d
		if len(b) > DefaultMaxDatagram {
			t.Fatalf("%s: datagram of %d bytes, want at most %d", tc.name, len(b), DefaultMaxDatagram)
		}
		r := newTestRelay(Config{})
		grew, err := acceptAllocated(r, b)
		var re *RejectError
		if !errors.As(err, &re) || re.Reason != Malformed {
			t.Errorf("%s: Accept = %v, want a malformed reject", tc.name, err)
		}
		t.Logf("%s: a %d-byte datagram allocated %d bytes (%.1f×)", tc.name, len(b), grew, float64(grew)/float64(len(b)))
		if grew > tc.bound*uint64(len(b)) {
			t.Errorf("%s: a %d-byte datagram allocated %d bytes (%.1f×), bound %d×",
				tc.name, len(b), grew, float64(grew)/float64(len(b)), tc.bound)
		}
	}
}
