// This file owns Sketch, the latency histogram laid out like the agent's.

package aggregate

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch/mapping"
)

const (
	// RelativeAccuracy is the agent's sketch accuracy: a quantile read back is
	// within 1 % of the value added. A table adds durations cut to ten
	// significant bits first, as the agent does (durationValue): within about
	// 1.2 % of the span's duration.
	RelativeAccuracy = 0.01
	// MaxBins is the agent's bin budget per store; beyond it the lowest bins
	// collapse into one, exactly as sketches-go's CollapsingLowestDenseStore.
	MaxBins = 2048
	// binSlack is the spare capacity added when a store grows, so a sketch
	// whose range creeps by one bin does not reallocate each time.
	binSlack = 16
)

// agentMapping is the agent's index mapping (γ = 1.0202…, index offset 0).
// Sharing it means the agent merges our sketches without re-mapping.
var agentMapping = mustMapping()

// The mapping's indexable range, read once: Add checks every value against
// it.
var (
	minIndexable = agentMapping.MinIndexableValue()
	maxIndexable = agentMapping.MaxIndexableValue()
)

func mustMapping() *mapping.LogarithmicMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic("BUG: agent sketch mapping: " + err.Error())
	}
	return m
}

// Mapping returns the index mapping every Sketch uses: sketches-go's
// logarithmic mapping at 1 % relative accuracy.
func Mapping() *mapping.LogarithmicMapping { return agentMapping }

// Sketch is a DDSketch latency histogram laid out exactly like the agent's
// (logarithmic mapping, collapsing-lowest dense store of at most MaxBins bins),
// storing counts as uint32 instead of float64: span counts are whole numbers,
// and half the bytes per bin halves a table's largest memory cost.
//
// The zero value is an empty sketch ready to use. Not safe for concurrent use.
type Sketch struct {
	bins      []uint32 // bins[i] counts index offset+i; len covers [offset, top]
	offset    int
	count     uint64
	zeros     uint64 // values too small to index (zero durations from merged input)
	collapsed bool
}

// Add records one value (a duration in nanoseconds).
func (s *Sketch) Add(v float64) {
	if i, zero := bin(v); zero {
		s.AddZeros(1)
	} else {
		s.AddIndex(i, 1)
	}
}

// durationValue is the value a span's duration (ns) adds to a sketch: as the
// agent's statsraw (v0.85.4, nsTimestampToFloat) has it, the float64 cut to
// ten significant bits, so that a duration near a bin bound lands in the
// agent's bin, not the next (TestRandomSpansMatchAgent in bench/peer).
func durationValue(d int64) float64 {
	return math.Float64frombits(math.Float64bits(float64(d)) &^ (1<<43 - 1))
}

// bin is where Add puts v: the mapping index of its bin, or zero for the
// zero bucket (v too small to index, or NaN). Values above the indexable
// range clamp to the top bin, +Inf included.
func bin(v float64) (i int, zero bool) {
	if v <= minIndexable || math.IsNaN(v) {
		return 0, true
	}
	return index(min(v, maxIndexable)), false
}

// binAt is the counter AddIndex(i, …) would increment, or nil when that
// would first grow or collapse the store. AddBatch prefetches it.
func (s *Sketch) binAt(i int) *uint32 {
	if j := uint(i - s.offset); j < uint(len(s.bins)) {
		return &s.bins[j]
	}
	return nil
}

// index is agentMapping.Index(v) for v > 0, without its math.Log (the
// costliest step of the table's hit path in a profile) for v in [1, 2^63),
// which holds every duration. The
// float's exponent and top subBits mantissa bits pick a sub-bucket of an
// octave narrower than a bin, so at most one bin bound falls inside it: a
// table holds the index of each sub-bucket's smallest value, and one
// comparison with the next bound (found with the mapping itself) finishes
// the job. TestSketchIndexExact checks ±256 ulps around every bound, and
// every sub-bucket's edges, against agentMapping.Index.
func index(v float64) int {
	bits := math.Float64bits(v)
	if uint(int(bits>>52)-1023) >= 63 { // v < 1, v >= 2^63
		return agentMapping.Index(v)
	}
	b := bounds.Load()
	if b == nil {
		b = binBounds()
		bounds.Store(b)
	}
	k := int(b.first[bits>>(52-subBits)-1023<<subBits])
	if v >= b.bounds[k+1] {
		k++
	}
	return b.lo + k
}

// subBits is how many of the mantissa's top bits split an octave: 64
// sub-buckets, each at most ln(1+2^-6)/ln(γ) ≈ 0.78 bins wide.
const subBits = 6

// indexBounds holds, for the indexes of [1, 2^63] and one more on each side,
// the smallest float64 that agentMapping.Index maps to each index or above.
type indexBounds struct {
	lo     int       // index of bounds[0]
	bounds []float64 // bounds[k]: smallest v with Index(v) >= lo+k
	// first[e<<subBits|m] is Index(v)-lo for the smallest v of
	// [2^e, 2^(e+1)) whose top mantissa bits are m.
	first []uint16
}

// bounds caches binBounds' result where index reads it with one load (the
// sync.OnceValue call is not inlined).
var bounds atomic.Pointer[indexBounds]

// binBounds builds the bounds on first use (about 2200 bisections and 4032
// Index calls) rather than at the start-up of every program that imports
// the package.
var binBounds = sync.OnceValue(func() *indexBounds {
	lo := agentMapping.Index(1) - 1
	hi := agentMapping.Index(1<<63) + 1
	b := &indexBounds{lo: lo, bounds: make([]float64, hi-lo+1), first: make([]uint16, 63<<subBits)}
	for k := range b.bounds {
		b.bounds[k] = lowestWithIndex(lo + k)
	}
	for i := range b.first {
		b.first[i] = uint16(agentMapping.Index(math.Float64frombits(uint64(i+1023<<subBits)<<(52-subBits))) - lo)
	}
	return b
})

// lowestWithIndex returns the smallest positive float64 that agentMapping
// maps to index i or above, by bisection over float64 bit patterns (which
// order positive floats like their values) around the bin's lower bound.
func lowestWithIndex(i int) float64 {
	idx := func(bits uint64) int { return agentMapping.Index(math.Float64frombits(bits)) }
	x := math.Float64bits(agentMapping.LowerBound(i))
	lo, hi := x, x // widen until idx(lo) < i <= idx(hi)
	for step := uint64(16); idx(hi) < i; step *= 2 {
		hi += step
	}
	for step := uint64(16); idx(lo) >= i; step *= 2 {
		lo -= step
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if idx(mid) >= i {
			hi = mid
		} else {
			lo = mid
		}
	}
	return math.Float64frombits(hi)
}

// AddIndex adds count to the bin of the given mapping index. It is how decoded
// sketches are merged; counts saturate at the uint32 range.
func (s *Sketch) AddIndex(index int, count uint64) {
	if count == 0 {
		return
	}
	if len(s.bins) == 0 {
		s.startAt(index)
	}
	j := index - s.offset
	switch {
	case j < 0:
		if !s.collapsed {
			s.growLow(index)
		}
		j = max(index-s.offset, 0)
	case j >= len(s.bins):
		s.growHigh(index)
		j = index - s.offset
	}
	s.bins[j] = satAdd(s.bins[j], count)
	s.count = satAdd64(s.count, count)
}

// Reserve grows the store to cover the bins lo to hi (lowest and highest
// index) as adding a value to hi then to lo would, without adding any: a
// caller about to add many bins in that range (a decoded sketch, in wire
// order) then grows the store once, not bin by bin. It leaves s as those
// two adds would, less their counts; lo > hi does nothing.
func (s *Sketch) Reserve(lo, hi int) {
	if lo > hi {
		return
	}
	if len(s.bins) == 0 {
		s.startAt(hi)
	}
	if hi-s.offset >= len(s.bins) {
		s.growHigh(hi)
	}
	if lo < s.offset && !s.collapsed {
		s.growLow(lo)
	}
}

// startAt gives an empty store its one bin, at index, keeping the memory
// a Reset left.
func (s *Sketch) startAt(index int) {
	if cap(s.bins) == 0 {
		s.bins = make([]uint32, 1, binSlack)
	} else {
		s.bins = s.bins[:1]
	}
	s.offset = index
}

// AddZeros adds count values that fall in the zero bucket.
func (s *Sketch) AddZeros(count uint64) {
	s.zeros = satAdd64(s.zeros, count)
	s.count = satAdd64(s.count, count)
}

func satAdd(c uint32, n uint64) uint32 {
	if t := uint64(c) + n; t <= math.MaxUint32 {
		return uint32(t)
	}
	return math.MaxUint32
}

// growHigh extends the store up to index, collapsing the lowest bins if the
// range would exceed MaxBins.
func (s *Sketch) growHigh(index int) {
	newLen := index - s.offset + 1
	if newLen > MaxBins {
		newOffset := index - MaxBins + 1
		drop := newOffset - s.offset // bins folded into the new lowest bin
		var folded uint64
		for i := 0; i < min(drop, len(s.bins)); i++ {
			folded += uint64(s.bins[i])
		}
		if drop < len(s.bins) {
			n := copy(s.bins, s.bins[drop:])
			clear(s.bins[n:])
		} else {
			clear(s.bins)
		}
		s.bins = s.resize(MaxBins, false)
		s.bins[0] = satAdd(s.bins[0], folded)
		s.offset = newOffset
		s.collapsed = true
		return
	}
	s.bins = s.resize(newLen, false)
}

// growLow extends the store down to index; if that would exceed MaxBins the
// store extends as far as allowed and becomes collapsed.
func (s *Sketch) growLow(index int) {
	top := s.offset + len(s.bins) - 1
	newOffset := index
	if top-index+1 > MaxBins {
		newOffset = top - MaxBins + 1
		s.collapsed = true
	}
	shift := s.offset - newOffset
	if shift <= 0 {
		return
	}
	old := len(s.bins)
	s.bins = s.resize(old+shift, true)
	s.offset = newOffset
}

// resize returns bins with length n, keeping counts; with shiftUp the old
// counts move to the top of the new range (the store grew downwards).
func (s *Sketch) resize(n int, shiftUp bool) []uint32 {
	old := len(s.bins)
	b := s.bins
	if cap(b) < n {
		nb := make([]uint32, n, storeCap(min(n+binSlack, MaxBins)))
		if shiftUp {
			copy(nb[n-old:], b)
		} else {
			copy(nb, b)
		}
		return nb
	}
	b = b[:n]
	if shiftUp {
		copy(b[n-old:], b[:old])
		clear(b[:n-old])
	} else {
		clear(b[old:])
	}
	return b
}

// MaxSketchBytes is the most a Sketch holds: the struct and a store of
// MaxBins bins (a size class of its own: TestStoreCapsAreSizeClasses). A
// holder that bounds its memory (the relay) can reserve it for a sketch
// whose growth it does not track.
const MaxSketchBytes = int(unsafe.Sizeof(Sketch{})) + 4*MaxBins

// storeCaps are the capacities, in bins, of the allocation size classes a
// store can take, probed on first use: the runtime rounds an allocation up
// to its size class, and a store whose capacity stopped short of it would
// hold up to 19 % more than HeapBytes says.
var storeCaps = sync.OnceValue(func() []int {
	var caps []int
	for c := binSlack; c <= MaxBins; c = caps[len(caps)-1] + 1 {
		caps = append(caps, cap(slices.Grow([]uint32(nil), c)))
	}
	return caps
})

// storeCap is the capacity of a store of at least c bins (at most MaxBins):
// all of the memory the runtime gives it.
func storeCap(c int) int {
	caps := storeCaps()
	i, _ := slices.BinarySearch(caps, c)
	return caps[i]
}

// HeapBytes is the memory s holds: the struct and its store's capacity.
func (s *Sketch) HeapBytes() int { return int(unsafe.Sizeof(*s)) + 4*cap(s.bins) }

// RangeGrows reports whether adding values to the bins lo to hi (lowest
// and highest index), in any order, would allocate a larger store, raising
// s.HeapBytes; adding to bins s covers costs no memory.
func (s *Sketch) RangeGrows(lo, hi int) bool { return s.binsAfter(lo, hi) > cap(s.bins) }

// RangeGrowth is at most what adding values to the bins lo to hi, in any
// order, would raise s.HeapBytes by: 0 where RangeGrows is false, else a
// new store of the range they leave (StoreBytes: each resize on the way
// allocates the range it needs and binSlack) less what s holds.
func (s *Sketch) RangeGrowth(lo, hi int) int {
	n := s.binsAfter(lo, hi)
	if n <= cap(s.bins) {
		return 0
	}
	return max(StoreBytes(n)-s.HeapBytes(), 0)
}

// binsAfter is the length of the store that adding values to the bins lo
// to hi leaves: up to the higher top, down to the lower bottom (a
// collapsed store folds lower bins into its lowest), never longer than
// MaxBins. Each resize on the way is shorter.
func (s *Sketch) binsAfter(lo, hi int) int {
	if len(s.bins) > 0 {
		hi = max(hi, s.offset+len(s.bins)-1)
		lo = min(lo, s.offset)
		if s.collapsed {
			lo = s.offset
		}
	}
	return min(hi-lo+1, MaxBins)
}

// StoreBytes is about what a new Sketch holding values in n contiguous
// bins takes (HeapBytes), its growth slack included: what a holder bounding
// its memory (the relay) charges before building one.
// A sketch of zeros only (n = 0) has no store.
func StoreBytes(n int) int {
	if n <= 0 {
		return int(unsafe.Sizeof(Sketch{}))
	}
	return int(unsafe.Sizeof(Sketch{})) + 4*storeCap(min(n+binSlack, MaxBins))
}

// Count is the number of values recorded.
func (s *Sketch) Count() uint64 { return s.count }

// ZeroCount is the number of values in the zero bucket.
func (s *Sketch) ZeroCount() uint64 { return s.zeros }

// Bins returns the lowest non-empty index and the contiguous counts from it
// to the highest non-empty index. The slice aliases the sketch; do not keep it.
func (s *Sketch) Bins() (minIndex int, counts []uint32) {
	lo, hi := 0, len(s.bins)
	for lo < hi && s.bins[lo] == 0 {
		lo++
	}
	for hi > lo && s.bins[hi-1] == 0 {
		hi--
	}
	return s.offset + lo, s.bins[lo:hi]
}

// Reset empties the sketch and keeps its memory for the next interval.
func (s *Sketch) Reset() {
	clear(s.bins)
	s.bins = s.bins[:0]
	s.offset, s.count, s.zeros, s.collapsed = 0, 0, 0, false
}

// Merge adds every value of o into s.
func (s *Sketch) Merge(o *Sketch) {
	if o == nil || o.count == 0 {
		return
	}
	// o counts every value, its bins only up to 2^32-1 each: the adds
	// below would count the saturated bins' values short. Count o's.
	count := satAdd64(s.count, o.count)
	s.AddZeros(o.zeros)
	lo, counts := o.Bins()
	// The highest bin, then the lowest, then the rest: the store is sized
	// once, not grown (and shifted) bin by bin (TestSketchMergeSizesOnce).
	// Where the bins land does not depend on the order of the adds.
	n := len(counts)
	if n == 0 { // zeros only
		s.count = count
		return
	}
	s.AddIndex(lo+n-1, uint64(counts[n-1]))
	if n > 1 {
		s.AddIndex(lo, uint64(counts[0]))
	}
	for i := n - 2; i > 0; i-- {
		s.AddIndex(lo+i, uint64(counts[i]))
	}
	s.count = count
}

// Quantile returns the value at quantile q in [0, 1], within the relative
// accuracy of the mapping; NaN when the sketch is empty or q is out of range.
func (s *Sketch) Quantile(q float64) float64 {
	if s.count == 0 || !(q >= 0 && q <= 1) { // NaN q fails both tests
		return math.NaN()
	}
	rank := uint64(q * float64(s.count-1))
	if rank < s.zeros {
		return 0
	}
	seen := s.zeros
	lo, counts := s.Bins()
	for i, c := range counts {
		seen += uint64(c)
		if seen > rank {
			return agentMapping.Value(lo + i)
		}
	}
	return agentMapping.Value(lo + len(counts) - 1)
}

// MemSize is the heap bytes held by the sketch's bins (for memory accounting).
func (s *Sketch) MemSize() int { return cap(s.bins) * 4 }
