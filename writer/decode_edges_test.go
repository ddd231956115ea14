// This file tests the decoder at its edges: what the fast path for
// AppendSketch's layout refuses, exact limits and budgets, nil and empty
// values, and the envelope's 64-bit sequence.

package writer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// TestDecodeSketchRejectsCanonicalLayout: the fast path for AppendSketch's
// layout (the mapping as emptySketch writes it, then one positive store)
// refuses what the general decoder refuses; the cases of
// TestDecodeSketchRejects all carry an explicit offset and interpolation in
// their mapping, so they never reach it.
func TestDecodeSketchRejectsCanonicalLayout(t *testing.T) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	many := make([]float64, MaxDecodedBins+1)
	many[0] = 1
	var ascending [][]byte
	for i := range MaxDecodedBins + 1 {
		ascending = append(ascending, mapBin(i, 1))
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"contiguous bin above the mapping", join(emptySketch, pbBytes(2, packed(1), pbVarint(3, zigzag32(maxBinIndex+1)))), ErrMalformedSketch},
		{"contiguous bin below the mapping", join(emptySketch, pbBytes(2, packed(1), pbVarint(3, zigzag32(minBinIndex-1)))), ErrMalformedSketch},
		{"too many contiguous bins", join(emptySketch, pbBytes(2, packed(many...))), ErrTooManyBins},
		{"too many map bins", join(emptySketch, pbBytes(2, ascending...)), ErrTooManyBins},
		{"map key twice in a row", join(emptySketch, pbBytes(2, mapBin(500, 3), mapBin(500, 4))), ErrMalformedSketch},
		{"map bin above the mapping", join(emptySketch, pbBytes(2, mapBin(maxBinIndex+1, 1))), ErrMalformedSketch},
		{"count 2^54", join(emptySketch, pbBytes(2, packed(1<<54))), ErrBadCount},
		{"count 2^53+2", join(emptySketch, pbBytes(2, packed(1<<53+2))), ErrBadCount},
	}
	for _, tc := range cases {
		if !bytes.HasPrefix(tc.in, emptySketch) {
			t.Fatalf("%s: not in the canonical layout", tc.name)
		}
		into, before := sketchOf(42, 43), sketchOf(42, 43)
		if err := DecodeSketch(tc.in, into); !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodeSketch = %v, want %v", tc.name, err, tc.want)
		}
		if !sameSketch(into, before) {
			t.Errorf("%s: the sketch was modified by a rejected input", tc.name)
		}
		in := oneGroup(1, msgp.AppendBytes(mp(nil).key("OkSummary"), tc.in))
		dec := Decoder{WireSketches: true}
		if _, err := dec.Decode(in, 16); !errors.Is(err, tc.want) {
			t.Errorf("%s: Decode (WireSketches) = %v, want %v", tc.name, err, tc.want)
		}
	}
	// The limits themselves are accepted.
	ok := make([]float64, MaxDecodedBins)
	ok[0] = 1
	if err := DecodeSketch(join(emptySketch, pbBytes(2, packed(ok...))), nil); err != nil {
		t.Errorf("MaxDecodedBins contiguous bins: %v", err)
	}
	if err := DecodeSketch(join(emptySketch, pbBytes(2, ascending[:MaxDecodedBins]...)), nil); err != nil {
		t.Errorf("MaxDecodedBins map bins: %v", err)
	}
}

// wireOf decodes a one-group payload whose OkSummary is sk with a
// WireSketches Decoder and returns the summary.
func wireOf(t *testing.T, sk []byte) WireSketch {
	t.Helper()
	dec := Decoder{WireSketches: true}
	p, err := dec.Decode(oneGroup(1, msgp.AppendBytes(mp(nil).key("OkSummary"), sk)), 16)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	g := p.Buckets[0].Groups[0]
	if g.Wire == nil {
		t.Fatalf("no wire summary")
	}
	return g.Wire.Ok
}

// TestWireSketchBinsSkipZeroCountEntries: Bins is the range of the bins
// holding a value; a map entry of count 0 (which protobuf writers may
// emit) is not one of them.
func TestWireSketchBinsSkipZeroCountEntries(t *testing.T) {
	w := wireOf(t, bytes.Join([][]byte{emptySketch, pbBytes(2, mapBin(100, 0), mapBin(200, 5), mapBin(300, 0))}, nil))
	lo, hi, ok := w.Bins()
	if !ok || lo != 200 || hi != 200 || w.Count() != 5 {
		t.Fatalf("Bins = %d, %d, %v; Count = %d; want 200, 200, true; 5", lo, hi, ok, w.Count())
	}
}

// TestWireSketchCountSaturates: a summary of more than 2^64 values counts
// MaxUint64, as Sketch.Count does, rather than wrapping around.
func TestWireSketchCountSaturates(t *testing.T) {
	counts := make([]float64, 2049) // 2049 × 2^53 > 2^64
	for i := range counts {
		counts[i] = 1 << 53
	}
	sk := bytes.Join([][]byte{emptySketch, pbBytes(2, packed(counts...))}, nil)
	if w := wireOf(t, sk); w.Count() != math.MaxUint64 {
		t.Fatalf("Count = %d, want %d", w.Count(), uint64(math.MaxUint64))
	}
}

// TestDecodeZeroSummaryIsNil: a summary that decodes to no value (here a
// store of one zero count) is a nil sketch, as an empty one is.
func TestDecodeZeroSummaryIsNil(t *testing.T) {
	sk := bytes.Join([][]byte{emptySketch, pbBytes(2, packed(0))}, nil)
	in := oneGroup(2, msgp.AppendBytes(mp(msgp.AppendUint64(mp(nil).key("Hits"), 3)).key("OkSummary"), sk))
	p, err := DecodePayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Buckets[0].Groups[0]; g.Ok != nil || g.Hits != 3 {
		t.Fatalf("Ok = %v, Hits = %d; want nil, 3", g.Ok, g.Hits)
	}
	var dec Decoder
	if p, err = dec.Decode(in, 16); err != nil {
		t.Fatal(err)
	}
	if g := p.Buckets[0].Groups[0]; g.Ok != nil {
		t.Fatalf("Decoder: Ok = %v, want nil", g.Ok)
	}
}

// TestDecodeAllNilArrayIsNil: an array whose every element is nil (skipped)
// decodes as a nil slice, as an empty array does.
func TestDecodeAllNilArrayIsNil(t *testing.T) {
	nilBuckets := mp(nil).m(1).key("Stats").a(2).raw(0xc0, 0xc0)
	nilGroups := mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(3).raw(0xc0, 0xc0, 0xc0)
	var dec Decoder
	for name, decode := range map[string]func([]byte) (*Payload, error){
		"DecodePayload": DecodePayload,
		"Decoder":       func(b []byte) (*Payload, error) { return dec.Decode(b, 16) },
	} {
		p, err := decode(nilBuckets)
		if err != nil || p.Buckets != nil {
			t.Errorf("%s: nil buckets: %#v, %v; want nil Buckets", name, p, err)
		}
		p, err = decode(nilGroups)
		if err != nil || len(p.Buckets) != 1 || p.Buckets[0].Groups != nil {
			t.Errorf("%s: nil groups: %#v, %v; want one bucket with nil Groups", name, p, err)
		}
	}
}

// TestDecodeBucketLimits: a payload carries at most MaxBuckets buckets, and
// at most one per minWireBucketBytes of it (plus one).
func TestDecodeBucketLimits(t *testing.T) {
	buckets := func(n, pad int) []byte {
		b := mp(nil).m(2)
		b = msgp.AppendBytes(b.key("X"), make([]byte, pad))
		return b.key("Stats").a(uint32(n)).raw(bytes.Repeat([]byte{0x80}, n)...)
	}
	for _, tc := range []struct {
		name   string
		in     []byte
		exceed bool
	}{
		{"MaxBuckets", buckets(MaxBuckets, MaxBuckets*minWireBucketBytes), false},
		{"MaxBuckets+1", buckets(MaxBuckets+1, 2*MaxBuckets*minWireBucketBytes), true},
		{"100 one-byte buckets", buckets(100, 0), true},
		{"12 one-byte buckets in 104 bytes", buckets(12, 80), false},
	} {
		var dec Decoder
		for name, decode := range map[string]func() (*Payload, error){
			"DecodePayload": func() (*Payload, error) { return DecodePayload(tc.in) },
			"Decoder":       func() (*Payload, error) { return dec.Decode(tc.in, 16) },
		} {
			p, err := decode()
			if tc.exceed {
				if !errors.Is(err, msgp.ErrLimitExceeded) || p != nil {
					t.Errorf("%s %s: %v (nil payload %v), want nil, ErrLimitExceeded", name, tc.name, err, p == nil)
				}
			} else if err != nil {
				t.Errorf("%s %s: %v", name, tc.name, err)
			}
		}
	}
}

// TestDecodePayloadGroupBudgetIsExact: DecodePayload takes one group per
// MinWireGroupBytes of its input, plus 16, and not one more.
func TestDecodePayloadGroupBudgetIsExact(t *testing.T) {
	for n := 1; n <= 40; n++ {
		in := mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(uint32(n)).raw(bytes.Repeat([]byte{0x80}, n)...)
		_, err := DecodePayload(in)
		if over := n > len(in)/MinWireGroupBytes+16; over != errors.Is(err, msgp.ErrLimitExceeded) || (!over && err != nil) {
			t.Errorf("%d empty groups in %d bytes: %v (over the budget: %v)", n, len(in), err, over)
		}
	}
}

// TestDecodeStringLimits: an array carries at most MaxStrings strings, and
// the string budget (one per MinWireStringBytes) is the payload's, not each
// array's: repeated Tags keys share it.
func TestDecodeStringLimits(t *testing.T) {
	tags := func(n int) []byte {
		b := mp(nil).m(1).key("Tags").a(uint32(n))
		for range n {
			b = msgp.AppendString(b, "a:b")
		}
		return b
	}
	if p, err := DecodePayload(tags(MaxStrings)); err != nil || len(p.Tags) != MaxStrings {
		t.Errorf("MaxStrings tags: %v", err)
	}
	if _, err := DecodePayload(tags(MaxStrings + 1)); !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Errorf("MaxStrings+1 tags: %v, want ErrLimitExceeded", err)
	}
	// 8 arrays of 100 empty strings: each within the budget of the whole
	// (about 230), together far over it.
	b := mp(nil).m(8)
	for range 8 {
		b = b.key("Tags").a(100).raw(bytes.Repeat([]byte{0xa0}, 100)...)
	}
	for name, decode := range map[string]func() error{
		"DecodePayload": func() error { _, err := DecodePayload(b); return err },
		"Decoder":       func() error { var d Decoder; _, err := d.Decode(b, 16); return err },
	} {
		if err := decode(); !errors.Is(err, msgp.ErrLimitExceeded) {
			t.Errorf("%s: repeated Tags: %v, want ErrLimitExceeded", name, err)
		}
	}
}

// TestDecodeMalformedAfterBadCount: as TestDecodeMalformedAfterBadSketch,
// for a sketch with a fractional count: bytes that do not decode win.
func TestDecodeMalformedAfterBadCount(t *testing.T) {
	bad := bytes.Join([][]byte{emptySketch, pbBytes(2, packed(1.5))}, nil)
	good := oneGroup(2, msgp.AppendBytes(mp(nil).key("OkSummary"), bad))
	good = msgp.AppendUint64(append(good, "\xa4Hits"...), 1)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"whole", good, ErrBadCount},
		{"cut", good[:len(good)-1], msgp.ErrShortBytes},
	} {
		if _, err := DecodePayload(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodePayload = %v, want %v", tc.name, err, tc.want)
		}
		for _, wire := range []bool{false, true} {
			dec := Decoder{WireSketches: wire}
			if _, err := dec.Decode(tc.in, 16); !errors.Is(err, tc.want) {
				t.Errorf("%s: Decode (WireSketches %v) = %v, want %v", tc.name, wire, err, tc.want)
			}
		}
	}
}

// TestParseDatagramSequence64: the sequence is all 64 bits.
func TestParseDatagramSequence64(t *testing.T) {
	e := Envelope{Flags: FlagFinal, Sequence: 1<<40 + 3, DroppedPayloads: 7, DroppedSpans: 1 << 31}
	got, body, seq, err := ParseDatagram(AppendEnvelope(nil, e))
	if err != nil || !seq || len(body) != 0 || got != e {
		t.Fatalf("ParseDatagram = %+v, %x, %v, %v; want %+v", got, body, seq, err, e)
	}
}

// TestDecoderNilGroupsCannotAmplify: the group preallocation is bounded
// by the input over the whole payload, whatever maxGroups a caller passes:
// 40 buckets of 1000 nil groups (one byte each) must not preallocate 1000
// Groups per bucket.
func TestDecoderNilGroupsCannotAmplify(t *testing.T) {
	const m, k = 40, 1000
	b := mp(nil).m(1).key("Stats").a(m)
	for range m {
		b = b.m(1).key("Stats").a(k).raw(bytes.Repeat([]byte{0xc0}, k)...)
	}
	var err error
	var dec Decoder
	got := allocated(func() { _, err = dec.Decode(b, MaxGroups) })
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got > 32*uint64(len(b)) {
		t.Fatalf("a %d-byte payload of nil groups allocated %d bytes (%.0f×), bound 32×", len(b), got, float64(got)/float64(len(b)))
	}
}

// TestDecodePayloadAsAgentRefusesNil: as the agent, nil for a summary or a
// string array is refused (DecodePayload reads it as empty).
func TestDecodePayloadAsAgentRefusesNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"OkSummary", oneGroup(1, mp(nil).key("OkSummary").raw(0xc0))},
		{"ErrorSummary", oneGroup(1, mp(nil).key("ErrorSummary").raw(0xc0))},
		{"PeerTags", oneGroup(1, mp(nil).key("PeerTags").raw(0xc0))},
		{"Tags", mp(nil).m(1).key("Tags").raw(0xc0)},
	} {
		if _, err := DecodePayload(tc.in); err != nil {
			t.Errorf("%s: DecodePayload: %v", tc.name, err)
		}
		var te msgp.TypeError
		if _, err := DecodePayloadAsAgent(tc.in); !errors.As(err, &te) {
			t.Errorf("%s: DecodePayloadAsAgent = %v, want a msgp.TypeError", tc.name, err)
		}
	}
}

// TestDecoderBadSketchAtGroupBudget: a Decoder given exactly the groups a
// payload carries still names a sketch error (its second, lenient pass
// starts with the whole budget again).
func TestDecoderBadSketchAtGroupBudget(t *testing.T) {
	bad := bytes.Join([][]byte{pbMapping(1.05, 0, 0), pbBytes(2, packed(1))}, nil)
	b := mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(3)
	for range 2 {
		b = b.m(1).u64("Hits", 1)
	}
	in := append(b.m(1).key("OkSummary"), msgp.AppendBytes(nil, bad)...)
	for _, wire := range []bool{false, true} {
		dec := Decoder{WireSketches: wire}
		if _, err := dec.Decode(in, 3); !errors.Is(err, ErrMapping) {
			t.Errorf("Decode (WireSketches %v), maxGroups 3 = %v, want %v", wire, err, ErrMapping)
		}
	}
}

// TestDecodeSketchCanonicalMapEntryStrict: the fast path reads an entry
// exactly as AppendSketch writes it (key, value, nothing else); other
// entries are the general decoder's, as protobuf reads them.
func TestDecodeSketchCanonicalMapEntryStrict(t *testing.T) {
	// The last key wins, as in protobuf: bin 7, not 5.
	in := bytes.Join([][]byte{emptySketch, pbBytes(2, pbBytes(1, pbVarint(1, zigzag32(5)), pbDouble(2, 1), pbVarint(1, zigzag32(7))))}, nil)
	var s aggregate.Sketch
	if err := DecodeSketch(in, &s); err != nil {
		t.Fatal(err)
	}
	if lo, counts := s.Bins(); lo != 7 || len(counts) != 1 || counts[0] != 1 {
		t.Errorf("key twice in an entry: bins from %d: %v, want one value at 7", lo, counts)
	}
	// A 12-byte entry whose key varint is three bytes long: what follows
	// the key is not a value field.
	entry := []byte{tagBinCounts, 12, tagMapKey, 0x81, 0x80, tagMapValue}
	entry = binary.LittleEndian.AppendUint64(entry, math.Float64bits(1))
	in = bytes.Join([][]byte{emptySketch, pbBytes(2, entry)}, nil)
	if err := DecodeSketch(in, new(aggregate.Sketch)); !errors.Is(err, ErrMalformedSketch) {
		t.Errorf("three-byte key in a 12-byte entry: %v, want %v", err, ErrMalformedSketch)
	}
}

// TestDecodeSketchNegativeZeroCount: -0 is a count of zero, not a bad one.
func TestDecodeSketchNegativeZeroCount(t *testing.T) {
	negZero := math.Copysign(0, -1)
	for _, in := range [][]byte{
		bytes.Join([][]byte{emptySketch, pbBytes(2, packed(negZero, 2))}, nil),
		bytes.Join([][]byte{pbMapping(gamma, 0, 0), pbBytes(2, packed(negZero, 2))}, nil),
	} {
		var s aggregate.Sketch
		if err := DecodeSketch(in, &s); err != nil || s.Count() != 2 {
			t.Errorf("%x: %v, count %d; want nil, 2", in, err, s.Count())
		}
	}
}
