// This file tests Sketch against the agent's sketch (sketches-go): bins,
// quantiles, merges, resets, saturation and clamping, and the memory its
// store takes.

package aggregate

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch"
)

var testQuantiles = []float64{0, 0.5, 0.9, 0.99, 1}

// refSketch is the agent's sketch: what Sketch must be equivalent to.
func refSketch(t testing.TB) *ddsketch.DDSketch {
	t.Helper()
	r, err := ddsketch.LogCollapsingLowestDenseDDSketch(RelativeAccuracy, MaxBins)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sketchBins returns the sketch's non-empty bins by index.
func sketchBins(s *Sketch) map[int]uint64 {
	m := map[int]uint64{}
	lo, counts := s.Bins()
	for i, c := range counts {
		if c != 0 {
			m[lo+i] = uint64(c)
		}
	}
	return m
}

func refBins(r *ddsketch.DDSketch) map[int]uint64 {
	m := map[int]uint64{}
	r.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		m[index] = uint64(count)
		return false
	})
	return m
}

// assertEquivalent checks per-index counts, totals and quantiles of s
// against the reference sketch.
func assertEquivalent(t *testing.T, s *Sketch, r *ddsketch.DDSketch) {
	t.Helper()
	if got, want := s.Count(), uint64(r.GetCount()); got != want {
		t.Fatalf("count = %d, sketches-go %d", got, want)
	}
	if got, want := s.ZeroCount(), uint64(r.GetZeroCount()); got != want {
		t.Fatalf("zero count = %d, sketches-go %d", got, want)
	}
	got, want := sketchBins(s), refBins(r)
	if len(got) != len(want) {
		t.Fatalf("%d non-empty bins, sketches-go %d", len(got), len(want))
	}
	for i, c := range want {
		if got[i] != c {
			t.Fatalf("bin %d = %d, sketches-go %v", i, got[i], c)
		}
	}
	if r.GetCount() == 0 {
		return
	}
	for _, q := range testQuantiles {
		w, err := r.GetValueAtQuantile(q)
		if err != nil {
			t.Fatal(err)
		}
		if g := s.Quantile(q); g != w {
			t.Fatalf("quantile %v = %v, sketches-go %v", q, g, w)
		}
	}
}

func logUniform(r *rand.Rand, n int, lo, hi float64) []float64 {
	a, b := math.Log(lo), math.Log(hi)
	v := make([]float64, n)
	for i := range v {
		v[i] = math.Exp(a + r.Float64()*(b-a))
	}
	return v
}

// storeSpan is the width of the reference's positive store in bins.
func storeSpan(r *ddsketch.DDSketch) int {
	st := r.GetPositiveValueStore()
	lo, err1 := st.MinIndex()
	hi, err2 := st.MaxIndex()
	if err1 != nil || err2 != nil {
		return 0
	}
	return hi - lo + 1
}

func TestSketchMatchesSketchesGo(t *testing.T) {
	type stream struct {
		name     string
		values   func(r *rand.Rand) []float64
		collapse bool // the stream spans more than MaxBins bins
	}
	sorted := func(f func(r *rand.Rand) []float64, desc bool) func(r *rand.Rand) []float64 {
		return func(r *rand.Rand) []float64 {
			v := f(r)
			slices.Sort(v)
			if desc {
				slices.Reverse(v)
			}
			return v
		}
	}
	ns := func(r *rand.Rand) []float64 { return logUniform(r, 5000, 1, 1e12) }
	wide := func(r *rand.Rand) []float64 { return logUniform(r, 5000, 1e-3, 1e18) }
	huge := func(r *rand.Rand) []float64 { return logUniform(r, 5000, 1e-300, 1e300) }
	streams := []stream{
		{name: "log-uniform 1ns..1e12ns", values: ns},
		{name: "ascending 1ns..1e12ns", values: sorted(ns, false)},
		{name: "descending 1ns..1e12ns", values: sorted(ns, true)},
		{name: "narrow 1ms..1.05ms", values: func(r *rand.Rand) []float64 { return logUniform(r, 5000, 1e6, 1.05e6) }},
		{name: "one value", values: func(*rand.Rand) []float64 { return slices.Repeat([]float64{12345}, 100) }},
		{name: "integer ns 1..1000", values: func(r *rand.Rand) []float64 {
			v := make([]float64, 5000)
			for i := range v {
				v[i] = float64(1 + r.IntN(1000))
			}
			return v
		}},
		{name: "wide random", values: wide, collapse: true},
		{name: "wide ascending", values: sorted(wide, false), collapse: true},
		{name: "wide descending", values: sorted(wide, true), collapse: true},
		{name: "huge random", values: huge, collapse: true},
		{name: "huge descending", values: sorted(huge, true), collapse: true},
		{name: "jump past every bin", values: func(r *rand.Rand) []float64 {
			// Each value is more than MaxBins bins above the last: every
			// collapse folds the whole store into one bin.
			v := []float64{1e-250}
			for v[len(v)-1] < 1e250 {
				v = append(v, v[len(v)-1]*1e30, v[len(v)-1]*2e30)
			}
			return v
		}, collapse: true},
		{name: "zeros and subnormals", values: func(r *rand.Rand) []float64 {
			v := logUniform(r, 1000, 1, 1e9)
			// Below MinIndexableValue: counted in the zero bucket.
			v = append(v, 0, 0, 5e-324, 1e-310, math.SmallestNonzeroFloat64)
			r.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
			return v
		}},
		{name: "collapse then grow both ways", values: func(r *rand.Rand) []float64 {
			v := logUniform(r, 2000, 1e-3, 1e18)
			v = append(v, logUniform(r, 2000, 1e-10, 1e3)...)
			v = append(v, logUniform(r, 2000, 1e10, 1e25)...)
			return v
		}, collapse: true},
	}
	for _, st := range streams {
		t.Run(st.name, func(t *testing.T) {
			for seed := range uint64(10) {
				r := rand.New(rand.NewPCG(seed, 42))
				values := st.values(r)
				var s Sketch
				ref := refSketch(t)
				for _, v := range values {
					s.Add(v)
					if err := ref.Add(v); err != nil {
						t.Fatal(err)
					}
				}
				if got := storeSpan(ref) >= MaxBins; got != st.collapse {
					t.Fatalf("stream collapses = %v, want %v", got, st.collapse)
				}
				if s.collapsed != st.collapse {
					t.Fatalf("Sketch.collapsed = %v, want %v", s.collapsed, st.collapse)
				}
				assertEquivalent(t, &s, ref)
				if s.Count() != uint64(len(values)) {
					t.Fatalf("count %d, added %d", s.Count(), len(values))
				}
				if lo, counts := s.Bins(); len(counts) > MaxBins || (len(counts) > 0 && (counts[0] == 0 || counts[len(counts)-1] == 0)) {
					t.Fatalf("Bins() = %d.. %d bins, want trimmed and at most %d", lo, len(counts), MaxBins)
				}
			}
		})
	}
}

func TestSketchZeroValues(t *testing.T) {
	var s Sketch
	min := Mapping().MinIndexableValue()
	for _, v := range []float64{0, min, math.NaN(), -1} {
		s.Add(v)
	}
	s.Add(math.Nextafter(min, 1))
	if s.ZeroCount() != 4 || s.Count() != 5 {
		t.Fatalf("zeros %d count %d, want 4 and 5", s.ZeroCount(), s.Count())
	}
	if q := s.Quantile(0.5); q != 0 {
		t.Fatalf("median of mostly zeros = %v, want 0", q)
	}
	if q := s.Quantile(1); q <= 0 {
		t.Fatalf("max = %v, want the indexable value", q)
	}
}

// TestSketchIndexExact checks the table-driven index against the mapping's
// own Index around every bin bound of [1, 2^63] and across random values.
func TestSketchIndexExact(t *testing.T) {
	b := binBounds()
	for k, x := range b.bounds {
		i := b.lo + k
		if got := Mapping().Index(x); got < i {
			t.Fatalf("bound of index %d: Index(%v) = %d", i, x, got)
		}
		if got := Mapping().Index(math.Nextafter(x, 0)); got >= i {
			t.Fatalf("bound of index %d not smallest: Index(prev) = %d", i, got)
		}
		bits := math.Float64bits(x)
		for d := uint64(0); d < 512; d++ { // ±256 ulps: where rounding could disagree
			y := math.Float64frombits(bits - 256 + d)
			if got, want := index(y), Mapping().Index(y); got != want {
				t.Fatalf("index(%v) = %d, Mapping().Index = %d", y, got, want)
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	check := func(v float64) {
		if got, want := index(v), Mapping().Index(v); got != want {
			t.Fatalf("index(%v) = %d, Mapping().Index = %d", v, got, want)
		}
	}
	for range 200_000 {
		check(float64(r.Int64()))
		check(float64(r.Int64N(1 << 40)))
		check(math.Exp(r.Float64()*1400 - 700))
	}
	for e := range 1100 {
		p := math.Ldexp(1, e-1000)
		check(p)
		check(math.Nextafter(p, 0))
		check(math.Nextafter(p, math.Inf(1)))
	}
	for i := range 63 << subBits { // every sub-bucket's edges
		start := math.Float64frombits(uint64(i+1023<<subBits) << (52 - subBits))
		check(start)
		check(math.Nextafter(start, 0))
		check(math.Nextafter(start, math.Inf(1)))
	}
	check(math.MaxInt64)
	check(math.MaxFloat64 / 4)
}

func TestSketchResetKeepsMemory(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	values := logUniform(r, 2000, 50e3, 2e9)
	var s Sketch
	for _, v := range values {
		s.Add(v)
	}
	size := s.MemSize()
	if size == 0 {
		t.Fatal("MemSize = 0 after adds")
	}
	s.Reset()
	if s.Count() != 0 || s.ZeroCount() != 0 || s.MemSize() != size {
		t.Fatalf("after Reset: count %d zeros %d mem %d, want 0 0 %d", s.Count(), s.ZeroCount(), s.MemSize(), size)
	}
	if _, counts := s.Bins(); len(counts) != 0 {
		t.Fatalf("after Reset: %d bins", len(counts))
	}
	if q := s.Quantile(0.5); !math.IsNaN(q) {
		t.Fatalf("Quantile of reset sketch = %v, want NaN", q)
	}
	// Refilled in another order, in other bins: no allocation once warm.
	slices.Sort(values)
	allocs := testing.AllocsPerRun(20, func() {
		s.Reset()
		for _, v := range values {
			s.Add(v)
		}
		slices.Reverse(values)
	})
	if allocs != 0 {
		t.Fatalf("Add after Reset allocates %v times per run", allocs)
	}
	if s.MemSize() != size {
		t.Fatalf("MemSize %d after refill, want %d", s.MemSize(), size)
	}
	ref := refSketch(t)
	for _, v := range values {
		_ = ref.Add(v)
	}
	assertEquivalent(t, &s, ref)
}

func TestSketchCollapsedReset(t *testing.T) {
	var s Sketch
	s.Add(1e-3)
	s.Add(1e18) // collapses
	if !s.collapsed {
		t.Fatal("not collapsed")
	}
	s.Reset()
	// A fresh sketch grows downwards again instead of folding into one bin.
	s.Add(1e6)
	s.Add(1)
	ref := refSketch(t)
	_ = ref.Add(1e6)
	_ = ref.Add(1)
	assertEquivalent(t, &s, ref)
}

func TestSketchMerge(t *testing.T) {
	gens := map[string]func(r *rand.Rand) []float64{
		"ns":     func(r *rand.Rand) []float64 { return logUniform(r, 3000, 1, 1e12) },
		"wide":   func(r *rand.Rand) []float64 { return logUniform(r, 3000, 1e-3, 1e18) },
		"low":    func(r *rand.Rand) []float64 { return logUniform(r, 3000, 1e-30, 1e-5) },
		"high":   func(r *rand.Rand) []float64 { return logUniform(r, 3000, 1e5, 1e30) },
		"zeros":  func(r *rand.Rand) []float64 { return append(logUniform(r, 100, 1, 10), 0, 0, 0) },
		"empty":  func(*rand.Rand) []float64 { return nil },
		"single": func(*rand.Rand) []float64 { return []float64{777} },
		"onlyz":  func(*rand.Rand) []float64 { return []float64{0, 0} },
	}
	for an, ga := range gens {
		for bn, gb := range gens {
			t.Run(an+"+"+bn, func(t *testing.T) {
				r := rand.New(rand.NewPCG(3, 4))
				a, b := ga(r), gb(r)
				var sa, sb, both Sketch
				ref := refSketch(t)
				for _, v := range a {
					sa.Add(v)
					both.Add(v)
					_ = ref.Add(v)
				}
				for _, v := range b {
					sb.Add(v)
					both.Add(v)
					_ = ref.Add(v)
				}
				sa.Merge(&sb)
				assertEquivalent(t, &sa, ref)
				assertEquivalent(t, &both, ref)
				if sa.Count() != uint64(len(a)+len(b)) {
					t.Fatalf("merged count %d, want %d", sa.Count(), len(a)+len(b))
				}
				// Merging the other way round gives the same bins.
				var sb2 Sketch
				for _, v := range b {
					sb2.Add(v)
				}
				var sa2 Sketch
				for _, v := range a {
					sa2.Add(v)
				}
				sb2.Merge(&sa2)
				assertEquivalent(t, &sb2, ref)
			})
		}
	}
	var s Sketch
	s.Add(10)
	s.Merge(nil)
	s.Merge(&Sketch{})
	if s.Count() != 1 {
		t.Fatalf("count %d after merging nil and empty, want 1", s.Count())
	}
}

func TestSketchAddIndexSaturates(t *testing.T) {
	var s Sketch
	s.AddIndex(100, math.MaxUint32-1)
	s.AddIndex(100, 5)
	s.AddIndex(101, 0) // no-op: must not extend the store
	lo, counts := s.Bins()
	if lo != 100 || len(counts) != 1 || counts[0] != math.MaxUint32 {
		t.Fatalf("Bins() = %d %v, want 100 [MaxUint32]", lo, counts)
	}
	if s.Count() != math.MaxUint32+4 {
		t.Fatalf("count %d, want %d", s.Count(), uint64(math.MaxUint32)+4)
	}
}

func TestSketchQuantile(t *testing.T) {
	var s Sketch
	for _, q := range []float64{0, 0.5, 1} {
		if v := s.Quantile(q); !math.IsNaN(v) {
			t.Fatalf("empty Quantile(%v) = %v, want NaN", q, v)
		}
	}
	values := make([]float64, 1000)
	for i := range values {
		values[i] = float64(i+1) * 1000
		s.Add(values[i])
	}
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if v := s.Quantile(q); !math.IsNaN(v) {
			t.Fatalf("Quantile(%v) = %v, want NaN", q, v)
		}
	}
	for _, q := range testQuantiles {
		want := values[int(q*float64(len(values)-1))]
		if got := s.Quantile(q); math.Abs(got-want) > RelativeAccuracy*want {
			t.Fatalf("Quantile(%v) = %v, want %v within 1%%", q, got, want)
		}
	}
}

// TestSketchClampsHugeValues: +Inf and values past the mapping's range land
// in the top indexable bin instead of corrupting the store.
func TestSketchClampsHugeValues(t *testing.T) {
	var s Sketch
	s.Add(1000)
	s.Add(math.Inf(1))
	s.Add(math.MaxFloat64)
	lo, counts := s.Bins()
	top := Mapping().Index(Mapping().MaxIndexableValue())
	if s.Count() != 3 || lo+len(counts)-1 != top || counts[len(counts)-1] != 2 || len(counts) > MaxBins {
		t.Fatalf("count %d, bins [%d, %d] (top bin %d) with %d in the top one", s.Count(), lo, lo+len(counts)-1, top, counts[len(counts)-1])
	}
}

// TestSketchRangeGrows: RangeGrows of the other sketch's bins predicts
// exactly whether Merge raises HeapBytes, and RangeGrowth bounds by how much, over sketches narrow and wide,
// empty, collapsed and reset (with a store larger than their values), and
// HeapBytes never exceeds MaxSketchBytes.
func TestSketchRangeGrows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ranges := [][2]float64{{1e6, 1.05e6}, {1e3, 1e6}, {1e6, 1e9}, {1, 1e12}, {1e-3, 1e18}, {1e9, 2e9}}
	randomSketch := func() *Sketch {
		s := new(Sketch)
		switch r.IntN(5) {
		case 0: // empty
		case 1: // reset: no values, a store kept
			for _, v := range logUniform(r, 1+r.IntN(50), 1, 1e12) {
				s.Add(v)
			}
			s.Reset()
		default:
			rg := ranges[r.IntN(len(ranges))]
			for _, v := range logUniform(r, 1+r.IntN(300), rg[0], rg[1]) {
				s.Add(v)
			}
			if r.IntN(4) == 0 {
				s.AddZeros(3)
			}
		}
		return s
	}
	grew := 0
	for i := range 20000 {
		s, o := randomSketch(), randomSketch()
		want := s.HeapBytes()
		lo, counts := o.Bins()
		predicted := len(counts) > 0 && s.RangeGrows(lo, lo+len(counts)-1)
		bound := 0
		if len(counts) > 0 {
			bound = s.RangeGrowth(lo, lo+len(counts)-1)
		}
		s.Merge(o)
		if got := s.HeapBytes() > want; got != predicted {
			t.Fatalf("case %d: RangeGrows = %v, HeapBytes %d -> %d", i, predicted, want, s.HeapBytes())
		}
		if grown := s.HeapBytes() - want; grown > bound || (bound > 0) != predicted {
			t.Fatalf("case %d: HeapBytes grew by %d, RangeGrowth said at most %d (RangeGrows %v)", i, grown, bound, predicted)
		}
		if s.HeapBytes() > MaxSketchBytes {
			t.Fatalf("case %d: HeapBytes %d > MaxSketchBytes %d", i, s.HeapBytes(), MaxSketchBytes)
		}
		if predicted {
			grew++
		}
	}
	if grew < 2000 || grew > 18000 {
		t.Fatalf("%d of 20000 merges grew: the cases do not cover both outcomes", grew)
	}
	if !new(Sketch).RangeGrows(7, 7) {
		t.Fatal("a first value does not grow an empty sketch")
	}
}

// TestStoreBytes: a new sketch given values in n contiguous bins, its ends
// first as a decoded summary adds them, takes at most StoreBytes(n) and no
// less than the bins themselves; zeros alone take StoreBytes(0).
func TestStoreBytes(t *testing.T) {
	for _, n := range []int{1, 2, 15, 16, 17, 100, MaxBins - 1, MaxBins, MaxBins + 1, 5000} {
		s := new(Sketch)
		s.AddIndex(1000+n-1, 1)
		s.AddIndex(1000, 1)
		for i := 1000 + 1; i < 1000+n-1; i++ {
			s.AddIndex(i, 1)
		}
		if got := s.HeapBytes(); got > StoreBytes(n) || got < int(unsafe.Sizeof(*s))+4*min(n, MaxBins) {
			t.Fatalf("%d bins: HeapBytes %d, StoreBytes %d", n, got, StoreBytes(n))
		}
	}
	var z Sketch
	z.AddZeros(3)
	if z.HeapBytes() != StoreBytes(0) {
		t.Fatalf("zeros only: HeapBytes %d, StoreBytes(0) %d", z.HeapBytes(), StoreBytes(0))
	}
}

// TestSketchMergeSizesOnce: merging a wide sketch into an empty one sizes
// the store once (the relay merges held groups so), instead of growing it
// by binSlack bins per reallocation and shifting it at every bin.
func TestSketchMergeSizesOnce(t *testing.T) {
	var wide Sketch
	for i := range MaxBins {
		wide.AddIndex(i-MaxBins/2, 1)
	}
	allocs := testing.AllocsPerRun(20, func() {
		var s Sketch
		s.Merge(&wide)
		if s.Count() != MaxBins {
			t.Fatalf("merged count %d, want %d", s.Count(), MaxBins)
		}
	})
	if allocs > 2 {
		t.Fatalf("Merge of %d bins into an empty sketch: %v allocations, want at most 2", MaxBins, allocs)
	}
}

// TestSketchReserve: Reserve then adds at both ends (and between) leave
// the sketch as the adds alone, highest first, do: the same bins, offset,
// count and collapse, for empty, reset, narrow and collapsed sketches and
// ranges inside, above, below and wider than MaxBins; and its store grows
// at most once, where RangeGrows says it does.
func TestSketchReserve(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	build := func(seed uint64, kind int) *Sketch {
		rs := rand.New(rand.NewPCG(seed, 1))
		s := new(Sketch)
		switch kind {
		case 0: // empty
		case 1: // reset: a store kept, no values
			for _, v := range logUniform(rs, 1+rs.IntN(50), 1, 1e12) {
				s.Add(v)
			}
			s.Reset()
		case 2: // collapsed
			for _, v := range logUniform(rs, 400, 1e-3, 1e18) {
				s.Add(v)
			}
		default:
			for _, v := range logUniform(rs, 1+rs.IntN(100), 1e3, 1e6) {
				s.Add(v)
			}
		}
		return s
	}
	grown := 0
	for i := range 20000 {
		seed, kind := r.Uint64(), r.IntN(4)
		want, got := build(seed, kind), build(seed, kind)
		lo := index(math.Exp(r.Float64()*45)) - 500 + r.IntN(1000)
		hi := lo + r.IntN(3*MaxBins)
		mid := lo + r.IntN(hi-lo+1)
		want.AddIndex(hi, 3)
		want.AddIndex(lo, 2)
		want.AddIndex(mid, 1)
		capBefore, predicted := cap(got.bins), got.RangeGrows(lo, hi)
		got.Reserve(lo, hi)
		if grew := cap(got.bins) != capBefore; grew != predicted {
			t.Fatalf("case %d: Reserve(%d, %d) grew %v, RangeGrows said %v", i, lo, hi, grew, predicted)
		}
		if predicted {
			grown++
		}
		capReserved := cap(got.bins)
		got.AddIndex(mid, 1)
		got.AddIndex(lo, 2)
		got.AddIndex(hi, 3)
		if cap(got.bins) != capReserved {
			t.Fatalf("case %d: the adds after Reserve(%d, %d) grew the store again", i, lo, hi)
		}
		wlo, wc := want.Bins()
		glo, gc := got.Bins()
		if wlo != glo || !slices.Equal(wc, gc) || want.Count() != got.Count() || want.collapsed != got.collapsed {
			t.Fatalf("case %d (kind %d, %d..%d): after Reserve offset %d, %d bins, count %d, collapsed %v; want %d, %d, %d, %v",
				i, kind, lo, hi, glo, len(gc), got.Count(), got.collapsed, wlo, len(wc), want.Count(), want.collapsed)
		}
	}
	if grown < 2000 || grown > 18000 {
		t.Fatalf("%d of 20000 reserves grew the store: the cases do not cover both outcomes", grown)
	}
	var s Sketch
	s.Reserve(10, 9)
	if lo, c := s.Bins(); len(c) != 0 || s.Count() != 0 {
		t.Fatalf("Reserve(10, 9) on an empty sketch: bins from %d, %d of them; want none", lo, len(c))
	}
}

// TestSketchMergeCountsSaturatedBins: a bin saturates at 2^32-1 but the
// sketch counts every value; merged, they all count too.
func TestSketchMergeCountsSaturatedBins(t *testing.T) {
	var full, into Sketch
	full.AddIndex(100, 1<<33)
	into.Add(42)
	into.Merge(&full)
	if got, want := into.Count(), uint64(1<<33+1); got != want {
		t.Fatalf("Count after Merge = %d, want %d", got, want)
	}
	lo, bins := into.Bins()
	if i := 100 - lo; i < 0 || i >= len(bins) || bins[i] != math.MaxUint32 {
		t.Fatalf("saturated bin not merged saturated: bins from %d: %v", lo, bins)
	}
}

// TestHeapBytesIsTheAllocation: a store's capacity is all of the memory the
// runtime gives it (its allocation rounded up to a size class), so
// HeapBytes and StoreBytes say what a sketch holds. A store of 1025 bins
// asked 4164 bytes and got 4864, which HeapBytes did not count. The
// process's allocations are counted: a goroutine of the runtime or of
// another test may add to one attempt, never take away, so the least of
// a few counts.
func TestHeapBytesIsTheAllocation(t *testing.T) {
	storeCaps() // probed once, allocating
	for _, n := range []int{17, 100, 500, 1025, 1500, 2000, MaxBins} {
		var s *Sketch
		got := math.MaxInt
		for range 5 {
			s = new(Sketch)
			s.AddIndex(0, 1)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s.AddIndex(n-1, 1) // one resize, to n bins
			runtime.ReadMemStats(&after)
			got = min(got, int(after.TotalAlloc-before.TotalAlloc))
		}
		if store := s.HeapBytes() - int(unsafe.Sizeof(*s)); got != store {
			t.Errorf("%d bins: the store's allocation took %d bytes, HeapBytes counts %d", n, got, store)
		}
		if got := StoreBytes(n); got != s.HeapBytes() {
			t.Errorf("%d bins: StoreBytes %d, HeapBytes %d", n, got, s.HeapBytes())
		}
	}
}

// TestStoreCapsAreSizeClasses: MaxSketchBytes is exact only if a store of
// MaxBins bins is a size class of its own.
func TestStoreCapsAreSizeClasses(t *testing.T) {
	if got := storeCap(MaxBins); got != MaxBins {
		t.Fatalf("a store of %d bins takes %d", MaxBins, got)
	}
	for _, c := range storeCaps() {
		if got := cap(slices.Grow([]uint32(nil), c)); got != c {
			t.Errorf("capacity %d is not a size class: an allocation of it gets %d", c, got)
		}
	}
}

// TestSketchMergeTwoBins: merging a sketch whose bins are two adjacent
// indexes keeps both bins' counts, not only the count in total.
func TestSketchMergeTwoBins(t *testing.T) {
	var o, s Sketch
	o.AddIndex(100, 1)
	o.AddIndex(101, 2)
	s.Merge(&o)
	lo, counts := s.Bins()
	if lo != 100 || !slices.Equal(counts, []uint32{1, 2}) || s.Count() != 3 {
		t.Fatalf("merged bins from %d: %v, count %d; want from 100: [1 2], count 3", lo, counts, s.Count())
	}
	// Into a sketch with bins of its own, on either side.
	var u Sketch
	u.AddIndex(99, 4)
	u.Merge(&o)
	lo, counts = u.Bins()
	if lo != 99 || !slices.Equal(counts, []uint32{4, 1, 2}) || u.Count() != 7 {
		t.Fatalf("merged bins from %d: %v, count %d; want from 99: [4 1 2], count 7", lo, counts, u.Count())
	}
}
