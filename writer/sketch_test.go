// This file tests AppendSketch: its size, its bytes against protobuf-go's,
// and its decoding by sketches-go as the agent decodes it.

package writer

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/pb/sketchpb"
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

// The bytes must be exactly what protobuf-go marshals for the same message
// (the fields in number order, proto3 defaults left out, packed doubles, map
// entries by key), with the positive store in the shorter of its two forms:
// contiguous counts, or the binCounts map (contiguous on a tie).
func TestAppendSketchEqualsProtoMarshal(t *testing.T) {
	g := aggregate.Mapping().ToProto().Gamma
	var sawMap, sawContiguous bool
	for name, s := range testSketches() {
		dense := &sketchpb.DDSketch{Mapping: &sketchpb.IndexMapping{Gamma: g}}
		sparse := &sketchpb.DDSketch{Mapping: &sketchpb.IndexMapping{Gamma: g}}
		if s != nil && s.Count() > 0 {
			lo, counts := s.Bins()
			if len(counts) > 0 {
				f := make([]float64, len(counts))
				m := map[int32]float64{}
				for i, c := range counts {
					f[i] = float64(c)
					if c != 0 {
						m[int32(lo+i)] = float64(c)
					}
				}
				dense.PositiveValues = &sketchpb.Store{ContiguousBinCounts: f, ContiguousBinIndexOffset: int32(lo)}
				sparse.PositiveValues = &sketchpb.Store{BinCounts: m}
			}
			dense.ZeroCount = float64(s.ZeroCount())
			sparse.ZeroCount = dense.ZeroCount
		}
		wantDense, err := proto.MarshalOptions{Deterministic: true}.Marshal(dense)
		if err != nil {
			t.Fatal(err)
		}
		wantSparse, err := proto.MarshalOptions{Deterministic: true}.Marshal(sparse)
		if err != nil {
			t.Fatal(err)
		}
		want := wantDense
		if len(wantSparse) < len(wantDense) {
			want = wantSparse
			sawMap = true
		} else if dense.PositiveValues != nil {
			sawContiguous = true
		}
		if got := AppendSketch(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%s (contiguous %d bytes, map %d):\n got % x\nwant % x", name, len(wantDense), len(wantSparse), got, want)
		}
	}
	if !sawMap || !sawContiguous {
		t.Errorf("the test sketches took one store form only (map %v, contiguous %v)", sawMap, sawContiguous)
	}
}

// TestSketchLayout: what the shorter form saves on sketches of a 10 s
// bucket's group: a few spans spread over hundreds of bins go as a map of
// a tenth the size, a sketch filling most of its range stays contiguous.
func TestSketchLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		n          int
		maxBytes   int // the map's size, with slack
		contiguous bool
	}{
		{n: 1, maxBytes: 26, contiguous: true}, // one bin: 8 bytes of count beat a 13-byte entry
		{n: 10, maxBytes: 160},                 // contiguous, ≈ 3.7 KB over 50 µs – 2 s
		{n: 30, maxBytes: 440},
		{n: 5000, maxBytes: 4300, contiguous: true}, // ≈ 530 bins, all filled
	} {
		s := new(aggregate.Sketch)
		for range tc.n {
			s.Add(logUniform(r, 50e3, 2e9))
		}
		lo, counts := s.Bins()
		b := AppendSketch(nil, s)
		if len(b) > tc.maxBytes || len(b) > sketchLen(storeLen(lo, len(counts)), 0) {
			t.Errorf("%d values over %d bins: %d bytes, want at most %d and at most the contiguous form's %d",
				tc.n, len(counts), len(b), tc.maxBytes, sketchLen(storeLen(lo, len(counts)), 0))
		}
		var pb sketchpb.DDSketch
		if err := proto.Unmarshal(b, &pb); err != nil {
			t.Fatal(err)
		}
		if contiguous := len(pb.GetPositiveValues().GetContiguousBinCounts()) > 0; contiguous != tc.contiguous {
			t.Errorf("%d values over %d bins: contiguous %v, want %v", tc.n, len(counts), contiguous, tc.contiguous)
		}
		sk, err := ddsketch.FromProto(&pb) // as the agent reads it
		if err != nil || sk.GetCount() != float64(tc.n) {
			t.Fatalf("%d values: FromProto = %v, count %v", tc.n, err, sk.GetCount())
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

func TestAppendSketchAllocs(t *testing.T) {
	s := testSketches()["realistic"]
	buf := make([]byte, 0, SketchSize(s))
	if n := testing.AllocsPerRun(100, func() { _ = AppendSketch(buf[:0], s) }); n != 0 {
		t.Errorf("AppendSketch into a sized buffer: %v allocs, want 0", n)
	}
}

// TestAppendSketchCountsSaturatedBins: a sketch whose bins saturated at the
// uint32 range (merged bins of many senders, in the relay) still counts
// every value; so must the message it is written as, in either store form,
// the lost values on the lowest saturated bin.
func TestAppendSketchCountsSaturatedBins(t *testing.T) {
	for _, sparse := range []bool{false, true} {
		part := new(aggregate.Sketch)
		part.AddIndex(1000, math.MaxUint32)
		if sparse {
			part.AddIndex(1200, 3)
		} else {
			for i := 1001; i < 1005; i++ {
				part.AddIndex(i, 5)
			}
		}
		part.AddZeros(7)
		s := new(aggregate.Sketch)
		s.Merge(part)
		s.Merge(part)
		s.Merge(part)
		var pb sketchpb.DDSketch
		if err := proto.Unmarshal(AppendSketch(nil, s), &pb); err != nil {
			t.Fatal(err)
		}
		if got := len(pb.GetPositiveValues().GetBinCounts()) > 0; got != sparse {
			t.Fatalf("sparse %v: wrote the other store form", sparse)
		}
		sk, err := ddsketch.FromProto(&pb) // as the agent reads it
		if err != nil || sk.GetCount() != float64(s.Count()) {
			t.Errorf("sparse %v: FromProto = %v, count %v, want %d", sparse, err, sk.GetCount(), s.Count())
		}
		var back aggregate.Sketch
		if err := DecodeSketch(AppendSketch(nil, s), &back); err != nil || back.Count() != s.Count() {
			t.Errorf("sparse %v: DecodeSketch = %v, count %d, want %d", sparse, err, back.Count(), s.Count())
		}
	}
}

// TestAppendSketchCapsZeroCount: a zero count past maxCount (a relay's sum
// of senders' zero counts, each within it) is written at maxCount, as a
// saturated bin is, so the writer reads back what it wrote.
func TestAppendSketchCapsZeroCount(t *testing.T) {
	var s aggregate.Sketch
	s.AddZeros(maxCount + 2)
	s.AddIndex(1000, 3)
	var back aggregate.Sketch
	if err := DecodeSketch(AppendSketch(nil, &s), &back); err != nil {
		t.Fatalf("the writer's own sketch does not decode: %v", err)
	}
	if back.ZeroCount() != maxCount || back.Count() != maxCount+3 {
		t.Errorf("read back %d zeros of %d values, want %d of %d", back.ZeroCount(), back.Count(), uint64(maxCount), uint64(maxCount+3))
	}
}
