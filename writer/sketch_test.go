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
	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/aggregate"
)

// logUniform draws a duration in ns, log-uniformly between lo and hi ns.
func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
}

// sketchOf returns an aggregate sketch holding values.
func sketchOf(values ...float64) *aggregate.Sketch {
	s := new(aggregate.Sketch)
	for _, v := range values {
		s.Add(v)
	}
	return s
}

// sameSketch reports whether a and b hold the same values, a nil sketch
// being the same as an empty one.
func sameSketch(a, b *aggregate.Sketch) bool {
	count := func(s *aggregate.Sketch) uint64 {
		if s == nil {
			return 0
		}
		return s.Count()
	}
	return count(a) == count(b) && sameWire(a, b)
}

// sameWire reports whether a and b have the same bins and zero count: what
// the wire carries (a nil sketch is empty).
func sameWire(a, b *aggregate.Sketch) bool {
	if a == nil {
		a = new(aggregate.Sketch)
	}
	if b == nil {
		b = new(aggregate.Sketch)
	}
	alo, ac := a.Bins()
	blo, bc := b.Bins()
	return a.ZeroCount() == b.ZeroCount() && slices.Equal(ac, bc) && (len(ac) == 0 || alo == blo)
}

// testSketches covers the encoder's branches: empty, zero counts only,
// a single bin, negative and zero lowest indices, wide ranges, a collapsed store.
func testSketches() map[string]*aggregate.Sketch {
	r := rand.New(rand.NewPCG(1, 2))
	realistic := new(aggregate.Sketch)
	for range 100 {
		realistic.Add(logUniform(r, 50e3, 2e9))
	}
	collapsed := new(aggregate.Sketch)
	for i := range 5000 {
		collapsed.Add(math.Pow(1.03, float64(i%3000)))
	}
	indexZero := new(aggregate.Sketch)
	indexZero.AddIndex(0, 3)
	indexZero.AddIndex(2, 1)
	return map[string]*aggregate.Sketch{
		"nil":        nil,
		"empty":      new(aggregate.Sketch),
		"zeros only": sketchOf(0, 0, 0),
		"one value":  sketchOf(1500),
		"sub-ns":     sketchOf(0.25, 0.5, 3),
		"index 0":    indexZero,
		"with zeros": sketchOf(0, 10, 1e6, 1e9),
		"realistic":  realistic,
		"collapsed":  collapsed,
		"huge count": func() *aggregate.Sketch { s := new(aggregate.Sketch); s.AddIndex(700, 1<<31); return s }(),
	}
}

func TestSketchSizeIsExact(t *testing.T) {
	for name, s := range testSketches() {
		b := AppendSketch([]byte("prefix"), s)
		if got, want := len(b)-len("prefix"), SketchSize(s); got != want {
			t.Errorf("%s: AppendSketch wrote %d bytes, SketchSize says %d", name, got, want)
		}
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Errorf("%s: AppendSketch overwrote the buffer's existing bytes", name)
		}
	}
}

// The bytes must be exactly what protobuf-go marshals for the same message:
// the fields in number order, proto3 defaults left out, packed doubles.
func TestAppendSketchEqualsProtoMarshal(t *testing.T) {
	g := aggregate.Mapping().ToProto().Gamma
	for name, s := range testSketches() {
		msg := &sketchpb.DDSketch{Mapping: &sketchpb.IndexMapping{Gamma: g}}
		if s != nil && s.Count() > 0 {
			lo, counts := s.Bins()
			if len(counts) > 0 {
				f := make([]float64, len(counts))
				for i, c := range counts {
					f[i] = float64(c)
				}
				msg.PositiveValues = &sketchpb.Store{ContiguousBinCounts: f, ContiguousBinIndexOffset: int32(lo)}
			}
			msg.ZeroCount = float64(s.ZeroCount())
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendSketch(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got % x\nwant % x", name, got, want)
		}
	}
}

func TestEmptySketchIsValidForFromProto(t *testing.T) {
	for _, s := range []*aggregate.Sketch{nil, new(aggregate.Sketch)} {
		var pb sketchpb.DDSketch
		if err := proto.Unmarshal(AppendSketch(nil, s), &pb); err != nil {
			t.Fatal(err)
		}
		sk, err := ddsketch.FromProto(&pb)
		if err != nil {
			t.Fatalf("FromProto(empty sketch) = %v", err)
		}
		if !sk.IsEmpty() {
			t.Errorf("empty sketch decoded with count %v", sk.GetCount())
		}
	}
}

// The agent decodes OkSummary with proto.Unmarshal and ddsketch.FromProto:
// our bytes must give the sketch sketches-go itself builds from the values.
func TestSketchBytesDecodeWithSketchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 3, 100, 1000, 20000} {
		ref, err := ddsketch.LogCollapsingLowestDenseDDSketch(0.01, 2048)
		if err != nil {
			t.Fatal(err)
		}
		ours := new(aggregate.Sketch)
		for i := range n {
			v := logUniform(r, 50e3, 2e9)
			if i%97 == 5 {
				v = 0 // zero bucket
			}
			if n == 20000 {
				v = logUniform(r, 1e-3, 1e18) // ~2390 bins wide: collapses
			}
			ours.Add(v)
			if err := ref.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		var pb sketchpb.DDSketch
		if err := proto.Unmarshal(AppendSketch(nil, ours), &pb); err != nil {
			t.Fatalf("n=%d: proto.Unmarshal: %v", n, err)
		}
		got, err := ddsketch.FromProto(&pb)
		if err != nil {
			t.Fatalf("n=%d: FromProto: %v", n, err)
		}
		if got.GetCount() != ref.GetCount() || got.GetCount() != float64(n) {
			t.Errorf("n=%d: count %v, sketches-go %v", n, got.GetCount(), ref.GetCount())
		}
		if got.GetZeroCount() != ref.GetZeroCount() {
			t.Errorf("n=%d: zero count %v, sketches-go %v", n, got.GetZeroCount(), ref.GetZeroCount())
		}
		for _, q := range []float64{0, 0.5, 0.75, 0.99, 1} {
			gv, err1 := got.GetValueAtQuantile(q)
			rv, err2 := ref.GetValueAtQuantile(q)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if gv != rv {
				t.Errorf("n=%d: p%v = %v, sketches-go %v", n, q*100, gv, rv)
			}
			if ov := ours.Quantile(q); ov != rv {
				t.Errorf("n=%d: aggregate p%v = %v, sketches-go %v", n, q*100, ov, rv)
			}
		}
		if !sameBins(got.GetPositiveValueStore(), ref.GetPositiveValueStore()) {
			t.Errorf("n=%d: bins differ from sketches-go's", n)
		}
	}
}

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
		{"zero count only, fractional rounded", bytes.Join([][]byte{pbDouble(4, 2.6), okMapping}, nil),
			3, 3, nil},
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
		{"NaN count in map", join(okMapping, pbBytes(2, pbBytes(1, pbDouble(2, math.NaN())))), ErrBadCount},
		{"too many bins", join(okMapping, pbBytes(2, packed(make([]float64, MaxDecodedBins+1)...))), ErrTooManyBins},
		{"too many bins over two stores", join(okMapping, pbBytes(2, packed(make([]float64, MaxDecodedBins)...)),
			pbBytes(3, packed(0))), ErrTooManyBins},
		{"bin index beyond the mapping", join(okMapping, pbBytes(2, packed(1), pbVarint(3, zigzag32(1<<30)))), ErrMalformedSketch},
		{"map bin index beyond the mapping", join(okMapping, pbBytes(2, pbBytes(1, pbVarint(1, zigzag32(-1<<30)), pbDouble(2, 1)))), ErrMalformedSketch},
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

// Every prefix of a valid sketch either decodes or fails; none panics.
func TestDecodeSketchPrefixes(t *testing.T) {
	b := AppendSketch(nil, testSketches()["with zeros"])
	for n := range len(b) {
		_ = DecodeSketch(b[:n], new(aggregate.Sketch))
	}
}

func TestAppendSketchAllocs(t *testing.T) {
	s := testSketches()["realistic"]
	buf := make([]byte, 0, SketchSize(s))
	if n := testing.AllocsPerRun(100, func() { _ = AppendSketch(buf[:0], s) }); n != 0 {
		t.Errorf("AppendSketch into a sized buffer: %v allocs, want 0", n)
	}
}

func FuzzDecodeSketch(f *testing.F) {
	for _, s := range testSketches() {
		f.Add(AppendSketch(nil, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := new(aggregate.Sketch)
		if err := DecodeSketch(b, s); err != nil {
			if s.Count() != 0 {
				t.Fatal("rejected input modified the sketch")
			}
			return
		}
		// What decodes re-encodes to bytes that decode to the same bins. (Not
		// always the same Count: aggregate.Sketch saturates a bin at 2^32-1
		// but counts every value, and the wire carries only the bins.)
		again := new(aggregate.Sketch)
		if err := DecodeSketch(AppendSketch(nil, s), again); err != nil {
			t.Fatal(err)
		}
		if !sameWire(s, again) {
			t.Fatal("re-encoded sketch differs")
		}
	})
}
