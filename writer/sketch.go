// This file holds AppendSketch: a sketch as the protobuf DDSketch message
// the agent reads, contiguous counts or a bin map, whichever is shorter.

package writer

import (
	"encoding/binary"
	"math"
	"math/bits"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spanstats/spanstats/aggregate"
)

// Field numbers of sketches-go's ddsketch.proto.
const (
	// DDSketch
	fieldMapping   = 1 // IndexMapping mapping
	fieldPositive  = 2 // Store positiveValues
	fieldNegative  = 3 // Store negativeValues
	fieldZeroCount = 4 // double zeroCount

	// IndexMapping
	fieldGamma         = 1 // double gamma
	fieldIndexOffset   = 2 // double indexOffset
	fieldInterpolation = 3 // enum interpolation

	// Store
	fieldBinCounts  = 1 // map<sint32, double> binCounts
	fieldContiguous = 2 // repeated double contiguousBinCounts [packed]
	fieldOffset     = 3 // sint32 contiguousBinIndexOffset

	// binCounts map entry
	fieldMapKey   = 1
	fieldMapValue = 2
)

// The one-byte tags AppendSketch writes.
const (
	tagPositive         = byte(fieldPositive<<3 | protowire.BytesType)
	tagZeroCount        = byte(fieldZeroCount<<3 | protowire.Fixed64Type)
	tagContiguous       = byte(fieldContiguous<<3 | protowire.BytesType)
	tagContiguousOffset = byte(fieldOffset<<3 | protowire.VarintType)
	tagBinCounts        = byte(fieldBinCounts<<3 | protowire.BytesType)
	tagMapKey           = byte(fieldMapKey<<3 | protowire.VarintType)
	tagMapValue         = byte(fieldMapValue<<3 | protowire.Fixed64Type)
)

var (
	// gamma is the agent mapping's base, as sketches-go writes it.
	gamma float64
	// emptySketch is a complete empty DDSketch: just the mapping field
	// {gamma} (index offset 0 and interpolation NONE are proto3 defaults and
	// not written), so that decoders which call sketches-go's FromProto never
	// fail. Every sketch AppendSketch writes starts with these bytes.
	emptySketch []byte
	// minBinIndex and maxBinIndex bound the indices the mapping can produce.
	minBinIndex, maxBinIndex int
)

func init() {
	m := aggregate.Mapping()
	pb := m.ToProto() // sketches-go's own view of the mapping: no drift possible
	if pb.IndexOffset != 0 || pb.Interpolation != 0 {
		panic("BUG: writer: the aggregate mapping is not a plain logarithmic mapping with offset 0")
	}
	gamma = pb.Gamma
	mapping := protowire.AppendTag(nil, fieldGamma, protowire.Fixed64Type)
	mapping = protowire.AppendFixed64(mapping, math.Float64bits(gamma))
	emptySketch = protowire.AppendTag(nil, fieldMapping, protowire.BytesType)
	emptySketch = protowire.AppendBytes(emptySketch, mapping)
	minBinIndex = m.Index(m.MinIndexableValue())
	maxBinIndex = m.Index(m.MaxIndexableValue())
}

// zigzag32 is the sint32 encoding of i (which must fit an int32).
func zigzag32(i int) uint64 { return protowire.EncodeZigZag(int64(int32(i))) }

// storeLen is the size of the positive Store message of n contiguous bins
// starting at index lo.
func storeLen(lo, n int) int {
	l := 1 + protowire.SizeBytes(8*n)
	if lo != 0 {
		l += 1 + protowire.SizeVarint(zigzag32(lo))
	}
	return l
}

// mapEntryLen is the size of the binCounts map entry of bin i, its field
// tag and length included (an entry is at most 15 bytes: a one-byte length).
func mapEntryLen(i int) int { return 2 + 1 + protowire.SizeVarint(zigzag32(i)) + 1 + 8 }

// positiveLen is the size of the positive Store message AppendSketch writes
// for the bins counts from index lo (0 for none), and whether it is the
// binCounts map rather than contiguous counts: whichever is shorter. A
// contiguous bin takes 8 bytes, empty or not; a map entry about 13, for
// non-empty bins only. A group of a few spans spread over hundreds of
// bins, the common case in a 10 s bucket, thus takes a tenth of the bytes
// as a map, and a well-filled sketch stays contiguous (TestSketchLayout).
// Both are sketches-go's Store message, which the agent's FromProto reads.
//
// It leaves in m the non-empty bins, for sketchLayout.append.
func positiveLen(lo int, counts []uint32, m *binMask) (n int, sparse bool) {
	if len(counts) == 0 {
		return 0, false
	}
	dense := storeLen(lo, len(counts))
	if len(counts) > len(m)*64 {
		return dense, false // more than a sketch holds (aggregate.MaxBins)
	}
	k := m.set(counts)
	hi := lo + len(counts) - 1
	if e := mapEntryLen(lo); (lo >= 0 || hi < 0) && e == mapEntryLen(hi) {
		n = k * e // every entry the same size: indices of one sign and varint length
	} else {
		m.each(len(counts), func(i int) { n += mapEntryLen(lo + i) })
	}
	if n >= dense {
		return dense, false
	}
	return n, true
}

// binMask has bit i set for each non-empty bin i of a sketch's counts: the
// map form is written by walking its bits, without a branch per bin on
// whether it is empty, which mispredicts on the scattered bins of a sparse
// sketch (BenchmarkAppendSketch).
type binMask [aggregate.MaxBins / 64]uint64

// set fills m from counts (at most len(m)*64 of them) and returns how many
// are not zero.
func (m *binMask) set(counts []uint32) (k int) {
	for w := range m {
		var word uint64 // in a register: through m, each bin waits on the last
		if lo := w * 64; lo < len(counts) {
			block := counts[lo:min(lo+64, len(counts))]
			// Four bins a step, shifted by constants: one bin at a time,
			// by its position, the scan took a third longer
			// (BenchmarkAppendSketch).
			j := 0
			for ; j+4 <= len(block); j += 4 {
				q := block[j : j+4 : j+4]
				word = word>>4 | nonZero(q[0])<<60 | nonZero(q[1])<<61 | nonZero(q[2])<<62 | nonZero(q[3])<<63
			}
			for ; j < len(block); j++ {
				word = word>>1 | nonZero(block[j])<<63
			}
			word >>= 64 - len(block) // bin lo+i at bit i
		}
		m[w] = word
		k += bits.OnesCount64(word)
	}
	return k
}

// nonZero is 1 if c is not zero, else 0, without a branch.
func nonZero(c uint32) uint64 { return uint64((c | -c) >> 31) }

// each calls f with each set bit of m below n, in ascending order.
func (m *binMask) each(n int, f func(i int)) {
	for w, word := range m[:(n+63)/64] {
		for ; word != 0; word &= word - 1 {
			f(w*64 + bits.TrailingZeros64(word))
		}
	}
}

// sketchLen is the size of the DDSketch message of a positive store of
// store bytes (0: none) and zeros zero values.
func sketchLen(store int, zeros uint64) int {
	l := len(emptySketch)
	if store > 0 {
		l += 1 + protowire.SizeBytes(store)
	}
	if zeros != 0 {
		l += 1 + 8
	}
	return l
}

// sketchLayout is how AppendSketch writes one sketch: its bins and zero
// count, and its positive store's size and form as positiveLen chose them
// (m, the non-empty bins it found). Sizing and writing share it, so the
// bins are scanned once.
type sketchLayout struct {
	lo     int
	counts []uint32
	zeros  uint64
	store  int // bytes of the positive store, 0 for none
	sparse bool
	m      binMask
	// lost is what the sketch counts beyond its bins and zeros: the
	// values bins saturated at the uint32 range did not keep (a relay's
	// merge of many senders' bins). It is written on the bin lostAt, the
	// lowest saturated one, as far as a count converts exactly, so that
	// the message counts every value the sketch does.
	lost   uint64
	lostAt int
}

// plan lays out s; a nil or empty sketch has no store and no zeros.
func (l *sketchLayout) plan(s *aggregate.Sketch) {
	l.lost, l.lostAt = 0, -1
	if s == nil || s.Count() == 0 {
		l.lo, l.counts, l.zeros, l.store, l.sparse = 0, nil, 0, 0, false
		return
	}
	l.lo, l.counts = s.Bins()
	l.zeros = s.ZeroCount()
	l.store, l.sparse = positiveLen(l.lo, l.counts, &l.m)
	if s.Count()-l.zeros >= math.MaxUint32 { // else no bin can have saturated
		l.saturated(s.Count() - l.zeros)
	}
}

// saturated finds lost and lostAt for binned values in the bins.
func (l *sketchLayout) saturated(binned uint64) {
	var sum uint64
	for i, c := range l.counts {
		sum += uint64(c)
		if c == math.MaxUint32 && l.lostAt < 0 {
			l.lostAt = i
		}
	}
	if binned > sum && l.lostAt >= 0 {
		l.lost = binned - sum
	}
}

// countBits is the wire count of bin i, c: c and what l lost on it.
func (l *sketchLayout) countBits(i int, c uint32) uint64 {
	if i == l.lostAt {
		return math.Float64bits(float64(min(uint64(c)+l.lost, maxCount)))
	}
	return math.Float64bits(float64(c))
}

// size is the length of the DDSketch message append writes.
func (l *sketchLayout) size() int { return sketchLen(l.store, l.zeros) }

// SketchSize is the exact number of bytes AppendSketch appends for s.
func SketchSize(s *aggregate.Sketch) int {
	var l sketchLayout
	l.plan(s)
	return l.size()
}

// AppendSketch appends s as a protobuf sketches-go DDSketch message: the
// agent's mapping, the positive store from the lowest non-empty index as
// contiguous bin counts or as the binCounts map, whichever is shorter (see
// positiveLen), the zero count when not zero, no negative store. A nil or
// empty sketch is written as an empty DDSketch that still carries the
// mapping. It allocates only when b lacks SketchSize(s) spare capacity.
func AppendSketch(b []byte, s *aggregate.Sketch) []byte {
	var l sketchLayout
	l.plan(s)
	return l.append(b)
}

// append appends the sketch as l lays it out.
func (l *sketchLayout) append(b []byte) []byte {
	lo, counts, zeros, store := l.lo, l.counts, l.zeros, l.store
	b = grow(b, l.size())
	b = append(b, emptySketch...)
	switch {
	case store == 0:
	case l.sparse:
		b = append(b, tagPositive)
		b = protowire.AppendVarint(b, uint64(store))
		// Written in place, grow having made room: with an append per
		// field it took a third longer (BenchmarkAppendSketch).
		at := len(b)
		b = b[:at+store]
		for w, word := range l.m[:(len(counts)+63)/64] {
			for ; word != 0; word &= word - 1 {
				i := w*64 + bits.TrailingZeros64(word)
				n := binary.PutUvarint(b[at+3:], zigzag32(lo+i)) // protobuf's varint
				b[at], b[at+1], b[at+2] = tagBinCounts, byte(1+n+9), tagMapKey
				b[at+3+n] = tagMapValue
				binary.LittleEndian.PutUint64(b[at+4+n:], l.countBits(i, counts[i]))
				at += 4 + n + 8
			}
		}
	default:
		n := len(counts)
		b = append(b, tagPositive)
		b = protowire.AppendVarint(b, uint64(store))
		b = append(b, tagContiguous)
		b = protowire.AppendVarint(b, uint64(8*n))
		for i, c := range counts {
			b = protowire.AppendFixed64(b, l.countBits(i, c))
		}
		if lo != 0 {
			b = append(b, tagContiguousOffset)
			b = protowire.AppendVarint(b, zigzag32(lo))
		}
	}
	if zeros != 0 {
		b = append(b, tagZeroCount)
		// Capped as the bins are: a relay's sum of senders' zero counts can
		// pass what DecodeSketch (and so Split) reads back.
		b = protowire.AppendFixed64(b, math.Float64bits(float64(min(zeros, maxCount))))
	}
	return b
}
