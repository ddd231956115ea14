// This file tests DecodeSketch: sketches from sketches-go and from
// AppendSketch read back, impossible ones refused, and the fast path for
// AppendSketch's layout agreeing with the general one.

package writer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/aggregate"
)

func binsOf(s store.Store) map[int]float64 {
	m := map[int]float64{}
	s.ForEach(func(i int, c float64) bool {
		if c != 0 {
			m[i] = c
		}
		return false
	})
	return m
}

func sameBins(a, b store.Store) bool {
	ma, mb := binsOf(a), binsOf(b)
	if len(ma) != len(mb) {
		return false
	}
	for i, c := range ma {
		if mb[i] != c {
			return false
		}
	}
	return true
}

// refSketch builds a sketches-go sketch and the aggregate sketch of the
// same values.
func refSketch(t *testing.T, st func() store.Store, values ...float64) (*ddsketch.DDSketch, *aggregate.Sketch) {
	t.Helper()
	m, err := mapping.NewLogarithmicMapping(0.01)
	if err != nil {
		t.Fatal(err)
	}
	ref := ddsketch.NewDDSketch(m, st(), st())
	for _, v := range values {
		if err := ref.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	return ref, sketchOf(values...)
}

func TestDecodeSketchFromSketchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	values := []float64{0, 0}
	for range 300 {
		values = append(values, logUniform(r, 50e3, 2e9))
	}
	values = append(values, 0.3, 0.7) // below 1 ns: negative indices
	stores := map[string]func() store.Store{
		"dense":  func() store.Store { return store.NewDenseStore() },
		"sparse": func() store.Store { return store.NewSparseStore() }, // binCounts map form
		"collapsing": func() store.Store {
			return store.NewCollapsingLowestDenseStore(2048)
		},
	}
	for name, st := range stores {
		ref, want := refSketch(t, st, values...)
		// ToProto + proto.Marshal: packed contiguous counts, or the map.
		b, err := proto.Marshal(ref.ToProto())
		if err != nil {
			t.Fatal(err)
		}
		got := new(aggregate.Sketch)
		if err := DecodeSketch(b, got); err != nil {
			t.Fatalf("%s ToProto: DecodeSketch: %v", name, err)
		}
		if !sameSketch(got, want) {
			t.Errorf("%s ToProto: decoded sketch differs", name)
		}
		// EncodeProto: sketches-go's streaming builder writes unpacked doubles,
		// the offset after the counts and zeroCount before the stores.
		var buf bytes.Buffer
		ref.EncodeProto(&buf)
		got = new(aggregate.Sketch)
		if err := DecodeSketch(buf.Bytes(), got); err != nil {
			t.Fatalf("%s EncodeProto: DecodeSketch: %v", name, err)
		}
		if !sameSketch(got, want) {
			t.Errorf("%s EncodeProto: decoded sketch differs", name)
		}
	}
}

func TestDecodeSketchRoundTrip(t *testing.T) {
	for name, s := range testSketches() {
		got := new(aggregate.Sketch)
		if err := DecodeSketch(AppendSketch(nil, s), got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !sameSketch(got, s) {
			t.Errorf("%s: round trip differs", name)
		}
	}
}

func TestDecodeSketchMergesIntoExisting(t *testing.T) {
	into := sketchOf(100, 200, 0)
	if err := DecodeSketch(AppendSketch(nil, sketchOf(100, 5e6, 0)), into); err != nil {
		t.Fatal(err)
	}
	if want := sketchOf(100, 200, 0, 100, 5e6, 0); !sameSketch(into, want) {
		t.Error("DecodeSketch did not add to the existing values")
	}
}

func TestDecodeSketchEmptyInput(t *testing.T) {
	s := new(aggregate.Sketch)
	if err := DecodeSketch(nil, s); err != nil || s.Count() != 0 {
		t.Errorf("DecodeSketch(nil) = %v, count %d; want nil, 0", err, s.Count())
	}
	if err := DecodeSketch(AppendSketch(nil, sketchOf(5)), nil); err != nil {
		t.Errorf("DecodeSketch(valid, nil into) = %v, want nil", err)
	}
}

// Protobuf building blocks for hand-made sketches.
func pbTag(num protowire.Number, wt protowire.Type) []byte { return protowire.AppendTag(nil, num, wt) }

func pbDouble(num protowire.Number, f float64) []byte {
	return protowire.AppendFixed64(pbTag(num, protowire.Fixed64Type), math.Float64bits(f))
}

func pbVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(pbTag(num, protowire.VarintType), v)
}

func pbBytes(num protowire.Number, parts ...[]byte) []byte {
	return protowire.AppendBytes(pbTag(num, protowire.BytesType), bytes.Join(parts, nil))
}

func pbMapping(g, off float64, interp uint64) []byte {
	return pbBytes(1, pbDouble(1, g), pbDouble(2, off), pbVarint(3, interp))
}

func packed(counts ...float64) []byte {
	var b []byte
	for _, c := range counts {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c))
	}
	return pbBytes(2, b)
}

func TestDecodeSketchAccepts(t *testing.T) {
	g := gamma
	okMapping := pbMapping(g, 0, 0)
	cases := []struct {
		name  string
		in    []byte
		count uint64
		zeros uint64
		bins  map[int]uint32
	}{
		{"unknown fields of every wire type skipped", bytes.Join([][]byte{
			pbVarint(9, 1), pbDouble(10, 1), pbBytes(11, []byte("x")),
			protowire.AppendFixed32(pbTag(12, protowire.Fixed32Type), 7),
			okMapping,
			pbBytes(2, packed(1, 2), pbVarint(3, zigzag32(10)), pbVarint(15, 3)),
		}, nil), 3, 0, map[int]uint32{10: 1, 11: 2}},
		{"empty negative store", bytes.Join([][]byte{okMapping, pbBytes(3), pbBytes(2, packed(4))}, nil),
			4, 0, map[int]uint32{0: 4}},
		{"negative store with zero counts", bytes.Join([][]byte{okMapping, pbBytes(3, packed(0, 0))}, nil),
			0, 0, nil},
		{"gamma within 1e-9 relatively", bytes.Join([][]byte{pbMapping(g*(1+1e-12), 0, 0), pbBytes(2, packed(1))}, nil),
			1, 0, map[int]uint32{0: 1}},
		{"offset before counts, mixed packed and unpacked", bytes.Join([][]byte{okMapping,
			pbBytes(2, pbVarint(3, zigzag32(-5)), pbDouble(2, 1), packed(0, 2), pbDouble(2, 3))}, nil),
			6, 0, map[int]uint32{-5: 1, -3: 2, -2: 3}},
		{"last offset wins", bytes.Join([][]byte{okMapping,
			pbBytes(2, pbVarint(3, zigzag32(1)), packed(1), pbVarint(3, zigzag32(7)))}, nil),
			1, 0, map[int]uint32{7: 1}},
		{"map form, missing key is index 0", bytes.Join([][]byte{okMapping,
			pbBytes(2, pbBytes(1, pbVarint(1, zigzag32(-3)), pbDouble(2, 2)), pbBytes(1, pbDouble(2, 5)))}, nil),
			7, 0, map[int]uint32{-3: 2, 0: 5}},
		{"map keys once each, with a contiguous count at one (added, as FromProto adds)", bytes.Join([][]byte{okMapping,
			pbBytes(2, mapBin(500, 3), mapBin(501, 4), packed(2), pbVarint(3, zigzag32(500)))}, nil),
			9, 0, map[int]uint32{500: 5, 501: 4}},
		{"mapping fields merge over two occurrences", bytes.Join([][]byte{
			pbBytes(1, pbDouble(1, 3)), pbBytes(1, pbDouble(1, g)), pbBytes(2, packed(1))}, nil),
			1, 0, map[int]uint32{0: 1}},
		{"sint32 offset from a 64-bit zigzag", bytes.Join([][]byte{okMapping,
			pbBytes(2, packed(1), pbVarint(3, uint64(1<<32|zigzag32(-2))))}, nil),
			1, 0, map[int]uint32{-2: 1}},
	}
	for _, tc := range cases {
		s := new(aggregate.Sketch)
		if err := DecodeSketch(tc.in, s); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := map[int]uint32{}
		lo, counts := s.Bins()
		for i, c := range counts {
			if c != 0 {
				got[lo+i] = c
			}
		}
		if s.Count() != tc.count || s.ZeroCount() != tc.zeros || len(got) != len(tc.bins) {
			t.Errorf("%s: count %d zeros %d bins %v; want %d %d %v", tc.name, s.Count(), s.ZeroCount(), got, tc.count, tc.zeros, tc.bins)
			continue
		}
		for i, c := range tc.bins {
			if got[i] != c {
				t.Errorf("%s: bins %v, want %v", tc.name, got, tc.bins)
				break
			}
		}
	}
}

func TestDecodeSketchRejects(t *testing.T) {
	g := gamma
	okMapping := pbMapping(g, 0, 0)
	bins := pbBytes(2, packed(1, 2))
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"other gamma", join(pbMapping(1.05, 0, 0), bins), ErrMapping},
		{"gamma off by 1e-8", join(pbMapping(g*(1+1e-8), 0, 0), bins), ErrMapping},
		{"index offset", join(pbMapping(g, 1, 0), bins), ErrMapping},
		{"linear interpolation", join(pbMapping(g, 0, 1), bins), ErrMapping},
		{"no mapping", bins, ErrMapping},
		{"NaN gamma", join(pbMapping(math.NaN(), 0, 0), bins), ErrMapping},
		{"negative values", join(okMapping, bins, pbBytes(3, packed(0, 1))), ErrNegativeValues},
		{"negative values in map form", join(okMapping, pbBytes(3, pbBytes(1, pbVarint(1, 2), pbDouble(2, 1)))), ErrNegativeValues},
		{"NaN count", join(okMapping, pbBytes(2, packed(math.NaN()))), ErrBadCount},
		{"infinite count", join(okMapping, pbBytes(2, packed(math.Inf(1)))), ErrBadCount},
		{"negative count", join(okMapping, pbBytes(2, packed(-1))), ErrBadCount},
		{"huge count", join(okMapping, pbBytes(2, packed(1e300))), ErrBadCount},
		{"negative zero count", join(okMapping, pbDouble(4, -2)), ErrBadCount},
		{"fractional zero count", join(pbDouble(4, 2.6), okMapping), ErrBadCount},
		{"fractional bin count", join(okMapping, pbBytes(2, packed(1, 1.5))), ErrBadCount},
		{"fractional count below one", join(okMapping, pbBytes(2, packed(0.4))), ErrBadCount},
		{"fractional count in map", join(okMapping, pbBytes(2, pbBytes(1, pbVarint(1, 2), pbDouble(2, 0.5)))), ErrBadCount},
		{"NaN count in map", join(okMapping, pbBytes(2, pbBytes(1, pbDouble(2, math.NaN())))), ErrBadCount},
		{"too many bins", join(okMapping, pbBytes(2, packed(make([]float64, MaxDecodedBins+1)...))), ErrTooManyBins},
		{"too many bins over two stores", join(okMapping, pbBytes(2, packed(make([]float64, MaxDecodedBins)...)),
			pbBytes(3, packed(0))), ErrTooManyBins},
		// Protobuf merges a repeated store into one: the agent would read
		// these bins at the last store's offset.
		{"two positive stores", join(okMapping, pbBytes(2, packed(1, 2)), pbBytes(2, packed(3), pbVarint(3, zigzag32(100)))), ErrMalformedSketch},
		{"bin index beyond the mapping", join(okMapping, pbBytes(2, packed(1), pbVarint(3, zigzag32(1<<30)))), ErrMalformedSketch},
		{"map bin index beyond the mapping", join(okMapping, pbBytes(2, pbBytes(1, pbVarint(1, zigzag32(-1<<30)), pbDouble(2, 1)))), ErrMalformedSketch},
		// protobuf keeps the last entry of a key (the agent: 4, or 0), not 7.
		{"map key twice", join(okMapping, pbBytes(2, mapBin(500, 3), mapBin(501, 1), mapBin(500, 4))), ErrMalformedSketch},
		{"map key twice, the last count 0", join(okMapping, pbBytes(2, mapBin(-2, 3), mapBin(-2, 0))), ErrMalformedSketch},
		{"truncated varint", join(okMapping, []byte{0x18, 0x80}), ErrMalformedSketch},
		{"11-byte varint", join(okMapping, []byte{0x18}, bytes.Repeat([]byte{0xff}, 10), []byte{1}), ErrMalformedSketch},
		{"length past the end", join(okMapping, []byte{0x12, 0x10, 0x11}), ErrMalformedSketch},
		{"packed length not a multiple of 8", join(okMapping, pbBytes(2, pbBytes(2, make([]byte, 12)))), ErrMalformedSketch},
		{"truncated double", join(okMapping, []byte{0x21, 0, 0}), ErrMalformedSketch},
		{"group wire type", join(okMapping, []byte{0x0b, 0x0c}), ErrMalformedSketch},
		{"wire type 7", join(okMapping, []byte{0x0f}), ErrMalformedSketch},
		{"field number 0", join(okMapping, []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0}), ErrMalformedSketch},
		{"field number 2^29", join(okMapping, protowire.AppendVarint(nil, 1<<29<<3), []byte{0}), ErrMalformedSketch},
		{"mapping as varint", join([]byte{0x08, 0x01}, bins), ErrMalformedSketch},
		{"gamma as varint", join(pbBytes(1, pbVarint(1, 2)), bins), ErrMalformedSketch},
		{"offset as double", join(okMapping, pbBytes(2, packed(1), pbDouble(3, 2))), ErrMalformedSketch},
		{"zero count as varint", join(okMapping, pbVarint(4, 1)), ErrMalformedSketch},
		{"store as double", join(okMapping, pbDouble(2, 1)), ErrMalformedSketch},
		// Bytes that do not decode win over values that do but cannot be
		// latencies, wherever they come: the relay counts the first
		// malformed, the second invalid.
		{"negative values, then a truncated varint", join(okMapping, pbBytes(3, packed(1)), []byte{0x18, 0x80}), ErrMalformedSketch},
		{"negative map values, then a truncated varint", join(okMapping, pbBytes(3, pbBytes(1, pbVarint(1, 2), pbDouble(2, 1))), []byte{0x18, 0x80}), ErrMalformedSketch},
		{"NaN count, then a wire type 7 in its store", join(okMapping, pbBytes(2, packed(math.NaN()), []byte{0x0f})), ErrMalformedSketch},
		{"fractional map count, then a truncated double", join(okMapping, pbBytes(2, pbBytes(1, pbVarint(1, 2), pbDouble(2, 0.5))), []byte{0x21, 0, 0}), ErrMalformedSketch},
		{"negative zero count, then a group wire type", join(okMapping, pbDouble(4, -2), []byte{0x0b, 0x0c}), ErrMalformedSketch},
		{"negative values beyond the mapping", join(okMapping, pbBytes(3, packed(1), pbVarint(3, zigzag32(1<<30)))), ErrMalformedSketch},
		{"NaN count, then too many bins", join(okMapping, pbBytes(2, packed(math.NaN())), pbBytes(2, packed(make([]float64, MaxDecodedBins)...))), ErrTooManyBins},
	}
	for _, tc := range cases {
		into := sketchOf(42, 43)
		before := sketchOf(42, 43)
		err := DecodeSketch(tc.in, into)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodeSketch = %v, want %v", tc.name, err, tc.want)
		}
		if !sameSketch(into, before) {
			t.Errorf("%s: the sketch was modified by a rejected input", tc.name)
		}
	}
}

func FuzzDecodeSketch(f *testing.F) {
	for _, s := range testSketches() {
		f.Add(AppendSketch(nil, s))
	}
	// Every prefix of a valid sketch: each decodes or fails, none panics.
	b := AppendSketch(nil, testSketches()["with zeros"])
	for n := range len(b) {
		f.Add(b[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Where the canonical fast path takes the input, the general
		// decoder accepts it and leaves its sketch alike.
		fast, general := new(aggregate.Sketch), new(aggregate.Sketch)
		if decodeCanonical(b, fast, new([mapBuffer]binCount)) {
			if err := decodeGeneral(b, general); err != nil {
				t.Fatalf("the fast path took what the general decoder rejects: %v", err)
			}
			if !sameWire(fast, general) || fast.Count() != general.Count() {
				t.Fatalf("fast path: %d values, general: %d, or other bins", fast.Count(), general.Count())
			}
		} else if fast.Count() != 0 {
			t.Fatal("the fast path declined the input but modified the sketch")
		}
		s := new(aggregate.Sketch)
		err := DecodeSketch(b, s)
		// A nil sketch only validates, with the same verdict; a sketch
		// holding values already is left as it was by a reject, and has
		// the input's values added by an accept.
		if errNil := DecodeSketch(b, nil); (err == nil) != (errNil == nil) || err != nil && err.Error() != errNil.Error() {
			t.Fatalf("DecodeSketch into nil = %v, into a sketch = %v", errNil, err)
		}
		held := sketchOf(42, 43e6, 0)
		errHeld := DecodeSketch(b, held)
		if (err == nil) != (errHeld == nil) || err != nil && err.Error() != errHeld.Error() {
			t.Fatalf("DecodeSketch into a sketch with values = %v, into an empty one = %v", errHeld, err)
		}
		want := sketchOf(42, 43e6, 0)
		if err == nil {
			want.Merge(s)
		}
		if !sameSketch(held, want) {
			t.Fatalf("into a sketch with values (err %v): %d values, want %d, or other bins", err, held.Count(), want.Count())
		}
		if err != nil {
			if s.Count() != 0 {
				t.Fatal("rejected input modified the sketch")
			}
			return
		}
		// What decodes re-encodes to bytes that decode to the same bins.
		// (Bins, not Count: aggregate.Sketch saturates a bin at 2^32-1 but
		// counts every value, and AppendSketch writes the values past its
		// bins on the lowest saturated one, exact only up to 2^53.)
		again := new(aggregate.Sketch)
		if err := DecodeSketch(AppendSketch(nil, s), again); err != nil {
			t.Fatal(err)
		}
		if !sameWire(s, again) {
			t.Fatal("re-encoded sketch differs")
		}
	})
}

// TestDecodeCanonicalTakesAppendSketch: every sketch AppendSketch writes
// goes through the fast path (not only the general decoder) and decodes
// to its bins, and a store whose fields come in another order does not.
func TestDecodeCanonicalTakesAppendSketch(t *testing.T) {
	for name, s := range testSketches() {
		b := AppendSketch(nil, s)
		got := new(aggregate.Sketch)
		if !decodeCanonical(b, got, new([mapBuffer]binCount)) {
			t.Errorf("%s: the fast path declined AppendSketch's bytes", name)
			continue
		}
		if !sameWire(got, s) {
			t.Errorf("%s: decoded bins differ", name)
		}
		if !decodeCanonical(b, nil, new([mapBuffer]binCount)) {
			t.Errorf("%s: the fast path declined to validate AppendSketch's bytes", name)
		}
	}
	// The offset before the counts: valid, but not AppendSketch's order.
	store := protowire.AppendTag(nil, fieldOffset, protowire.VarintType)
	store = protowire.AppendVarint(store, protowire.EncodeZigZag(700))
	store = protowire.AppendTag(store, fieldContiguous, protowire.BytesType)
	store = protowire.AppendBytes(store, binary.LittleEndian.AppendUint64(nil, math.Float64bits(2)))
	b := protowire.AppendTag(append([]byte(nil), emptySketch...), fieldPositive, protowire.BytesType)
	b = protowire.AppendBytes(b, store)
	if decodeCanonical(b, new(aggregate.Sketch), new([mapBuffer]binCount)) {
		t.Error("the fast path took a store with its offset first")
	}
	got := new(aggregate.Sketch)
	if err := DecodeSketch(b, got); err != nil || got.Count() != 2 {
		t.Errorf("offset first: %v, %d values, want 2", err, got.Count())
	}
	if lo, _ := got.Bins(); lo != 700 {
		t.Errorf("offset first: lowest bin %d, want 700", lo)
	}
}

// TestCanonicalAgreesWithGeneral: over random sketches in both store forms
// (few or many bins, negative and positive indices, more than mapBuffer map
// entries, zero counts) and single-byte corruptions of some of them,
// where the fast path takes the bytes the general decoder takes them too
// and both decode the same bins; AppendSketch's own bytes always take the
// fast path. FuzzDecodeSketch checks this property on fuzzed input.
func TestCanonicalAgreesWithGeneral(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	forms := map[bool]int{}
	longMaps := 0
	for n := range 400 {
		s := new(aggregate.Sketch)
		values := 1 + r.IntN(300)
		lo, hi := []float64{0.01, 1, 5e4, 1e9}[r.IntN(4)], []float64{2, 1e6, 1e10}[r.IntN(3)]
		for range values {
			s.Add(logUniform(r, lo, max(hi, 2*lo)))
		}
		if r.IntN(4) == 0 {
			s.AddZeros(uint64(1 + r.IntN(5)))
		}
		b := AppendSketch(nil, s)
		_, counts := s.Bins()
		isMap := len(b) < sketchLen(storeLen(0, len(counts)), s.ZeroCount())
		forms[isMap]++
		if isMap && nonEmpty(counts) > mapBuffer {
			longMaps++
		}
		fast := new(aggregate.Sketch)
		if !decodeCanonical(b, fast, new([mapBuffer]binCount)) || !sameWire(fast, s) {
			t.Fatalf("sketch %d (%d values): the fast path declined or misread AppendSketch's bytes", n, values)
		}
		if n%40 != 0 {
			continue
		}
		for i := 0; i < len(b); i += max(1, len(b)/512) { // at most ~512 positions a sketch
			for _, delta := range []byte{1, 0x80, 0xff} {
				m := slices.Clone(b)
				m[i] += delta
				fast, general := new(aggregate.Sketch), new(aggregate.Sketch)
				if !decodeCanonical(m, fast, new([mapBuffer]binCount)) {
					continue
				}
				if err := decodeGeneral(m, general); err != nil {
					t.Fatalf("sketch %d byte %d +%#x: the fast path took what the general decoder rejects: %v", n, i, delta, err)
				}
				if !sameWire(fast, general) || fast.Count() != general.Count() {
					t.Fatalf("sketch %d byte %d +%#x: fast and general decoders disagree", n, i, delta)
				}
			}
		}
	}
	// Maps of one, two and three entries (AppendSketch writes a single bin
	// contiguous, but a sender may not), and one of more than mapBuffer.
	for _, bins := range [][]int{{700}, {3, 700}, {-5, 0, 900}, {0}} {
		for _, extra := range []int{0, mapBuffer} {
			store := []byte(nil)
			idx := slices.Clone(bins)
			for q := range extra {
				idx = append(idx, 1000+q)
			}
			for _, i := range idx {
				var e []byte
				e = protowire.AppendTag(e, fieldMapKey, protowire.VarintType)
				e = protowire.AppendVarint(e, protowire.EncodeZigZag(int64(i)))
				e = protowire.AppendTag(e, fieldMapValue, protowire.Fixed64Type)
				e = protowire.AppendFixed64(e, math.Float64bits(float64(1+i%3+3)))
				store = protowire.AppendTag(store, fieldBinCounts, protowire.BytesType)
				store = protowire.AppendBytes(store, e)
			}
			b := protowire.AppendTag(slices.Clone(emptySketch), fieldPositive, protowire.BytesType)
			b = protowire.AppendBytes(b, store)
			fast, general := new(aggregate.Sketch), new(aggregate.Sketch)
			if !decodeCanonical(b, fast, new([mapBuffer]binCount)) {
				t.Fatalf("bins %v (+%d): the fast path declined a canonical map", bins, extra)
			}
			if err := decodeGeneral(b, general); err != nil || !sameWire(fast, general) || fast.Count() != general.Count() {
				t.Fatalf("bins %v (+%d): general decoder %v, or the two disagree", bins, extra, err)
			}
		}
	}
	if forms[true] < 50 || forms[false] < 50 || longMaps < 10 {
		t.Errorf("store forms: %d maps (%d of more than %d entries), %d contiguous; want each exercised",
			forms[true], longMaps, mapBuffer, forms[false])
	}
}

func nonEmpty(counts []uint32) (n int) {
	for _, c := range counts {
		if c != 0 {
			n++
		}
	}
	return n
}

// TestGeneralSketchCannotAmplify: bins far apart that the general decoder
// adds in wire order (a map in descending order, not AppendSketch's
// layout) size the sketch's store once, as
// the fast path does, rather than growing it a few bins at a time: a
// 28 KB summary of 2048 bins allocated 535 KB, 18 times its size, and
// copied its store at every bin, on the relay's path (Decoder.AddSketch).
func TestGeneralSketchCannotAmplify(t *testing.T) {
	const n = aggregate.MaxBins
	entry := func(i int) []byte {
		return pbBytes(fieldBinCounts, pbVarint(fieldMapKey, zigzag32(i)), pbDouble(fieldMapValue, float64(1+i%3)))
	}
	var descending []byte // bins 1000+n-1 down to 1000
	for k := range n {
		descending = append(descending, entry(1000+n-1-k)...)
	}
	lowest := len(descending) - len(entry(1000))
	// The lowest bin as a contiguous count, after the map entries.
	mixed := append(descending[:lowest:lowest], packed(float64(1+1000%3))...)
	mixed = append(mixed, pbVarint(fieldOffset, zigzag32(1000))...)
	want := new(aggregate.Sketch)
	for k := range n {
		want.AddIndex(1000+k, uint64(1+(1000+k)%3))
	}
	for name, b := range map[string][]byte{
		"descending map":    append(pbMapping(gamma, 0, 0), pbBytes(fieldPositive, descending)...),
		"map and counts":    append(pbMapping(gamma, 0, 0), pbBytes(fieldPositive, mixed)...),
		"map, then mapping": append(pbBytes(fieldPositive, descending), pbMapping(gamma, 0, 0)...),
	} {
		got := new(aggregate.Sketch)
		var err error
		a := allocated(func() { err = DecodeSketch(b, got) })
		if err != nil || !sameWire(got, want) || got.Count() != want.Count() {
			t.Fatalf("%s: %v, or other bins than %d from 1000", name, err, n)
		}
		if a > uint64(len(b)) {
			t.Errorf("%s: a %d-byte summary allocated %d bytes (%.1f×), bound 1×", name, len(b), a, float64(a)/float64(len(b)))
		}
	}
}

// mapBin is one binCounts map entry {index: count}.
func mapBin(index int, count float64) []byte {
	return pbBytes(1, pbVarint(1, zigzag32(index)), pbDouble(2, count))
}
