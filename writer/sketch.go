package writer

import (
	"math"

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

// sketchLen is the size of the DDSketch message AppendSketch writes.
func sketchLen(lo, n int, zeros uint64) int {
	l := len(emptySketch)
	if n > 0 {
		l += 1 + protowire.SizeBytes(storeLen(lo, n))
	}
	if zeros != 0 {
		l += 1 + 8
	}
	return l
}

// SketchSize is the exact number of bytes AppendSketch appends for s.
func SketchSize(s *aggregate.Sketch) int {
	if s == nil || s.Count() == 0 {
		return len(emptySketch)
	}
	lo, counts := s.Bins()
	return sketchLen(lo, len(counts), s.ZeroCount())
}

// AppendSketch appends s as a protobuf sketches-go DDSketch message: the
// agent's mapping, the positive store as contiguous bin counts from the
// lowest non-empty index, the zero count when not zero, no negative store.
// A nil or empty sketch is written as an empty DDSketch that still carries
// the mapping. It allocates only when b lacks SketchSize(s) spare capacity.
func AppendSketch(b []byte, s *aggregate.Sketch) []byte {
	if s == nil || s.Count() == 0 {
		return append(b, emptySketch...)
	}
	lo, counts := s.Bins()
	return appendSketch(b, lo, counts, s.ZeroCount())
}

func appendSketch(b []byte, lo int, counts []uint32, zeros uint64) []byte {
	n := len(counts)
	b = grow(b, sketchLen(lo, n, zeros))
	b = append(b, emptySketch...)
	if n > 0 {
		b = append(b, tagPositive)
		b = protowire.AppendVarint(b, uint64(storeLen(lo, n)))
		b = append(b, tagContiguous)
		b = protowire.AppendVarint(b, uint64(8*n))
		for _, c := range counts {
			b = protowire.AppendFixed64(b, math.Float64bits(float64(c)))
		}
		if lo != 0 {
			b = append(b, tagContiguousOffset)
			b = protowire.AppendVarint(b, zigzag32(lo))
		}
	}
	if zeros != 0 {
		b = append(b, tagZeroCount)
		b = protowire.AppendFixed64(b, math.Float64bits(float64(zeros)))
	}
	return b
}
