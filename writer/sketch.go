package writer

import (
	"encoding/binary"
	"errors"
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

// MaxDecodedBins is the most bin entries (contiguous counts plus map entries,
// over both stores) DecodeSketch accepts in one sketch: four times what a
// store of aggregate.MaxBins bins ever writes.
const MaxDecodedBins = 4 * aggregate.MaxBins

// maxCount is the largest count DecodeSketch accepts: above 2^53 a float64
// no longer holds every whole number, so such a count cannot be a span count.
const maxCount = 1 << 53

// Errors of DecodeSketch (and of DecodePayload, wrapped with the field path).
var (
	// ErrMapping: the sketch's index mapping is missing or is not the agent's
	// (gamma differs from aggregate.Mapping's by more than 1e-9 relatively,
	// index offset not 0, or interpolation not NONE). Its bins would land on
	// the wrong values.
	ErrMapping = errors.New("writer: sketch index mapping is not the agent's logarithmic 1% mapping")
	// ErrNegativeValues: the sketch's negative store holds values; latencies
	// are never negative.
	ErrNegativeValues = errors.New("writer: sketch has negative values")
	// ErrBadCount: a bin or zero count is NaN, infinite, negative or above 2^53.
	ErrBadCount = errors.New("writer: sketch count is not a finite non-negative number")
	// ErrTooManyBins: more than MaxDecodedBins bin entries.
	ErrTooManyBins = errors.New("writer: sketch has too many bins")
	// ErrMalformedSketch: the bytes are not a well-formed DDSketch message
	// (bad varint, length past the end, packed doubles not a multiple of 8
	// bytes, a group or unknown wire type, a known field with the wrong wire
	// type, or a bin index outside the mapping's indexable range).
	ErrMalformedSketch = errors.New("writer: malformed DDSketch protobuf")
)

// DecodeSketch decodes a protobuf DDSketch message and adds its values to
// into (it does not reset into first; a nil into only validates b). It reads
// what AppendSketch and sketches-go write: positive bins as contiguous counts
// (packed or not) and/or as the binCounts map, in any field order, with
// unknown fields skipped. Empty input is an empty sketch. Fractional counts
// are rounded to the nearest whole number.
//
// It rejects a mapping other than the agent's (ErrMapping, also when the
// mapping is missing), a negative store with values (ErrNegativeValues),
// NaN, infinite, negative or huge counts (ErrBadCount), more than
// MaxDecodedBins bins (ErrTooManyBins) and malformed bytes
// (ErrMalformedSketch). On error into is left unchanged: b is validated
// completely before anything is added. It allocates nothing itself; into
// grows as AddIndex makes it.
//
// It reads the bytes with protowire rather than proto.Unmarshal into
// sketchpb.DDSketch: the latter allocates about the input's size per sketch
// (BenchmarkDecodeSketch) and takes a known field with the wrong wire type
// for an unknown one, which this decoder rejects.
func DecodeSketch(b []byte, into *aggregate.Sketch) error {
	if len(b) == 0 {
		return nil
	}
	var r sketchReader
	if err := r.message(b); err != nil {
		return err
	}
	if !r.hasMapping || r.interpolation != 0 || r.indexOffset != 0 ||
		!(math.Abs(r.gamma-gamma) <= 1e-9*gamma) {
		return ErrMapping
	}
	if into == nil {
		return nil
	}
	r = sketchReader{into: into}
	_ = r.message(b) // validated above: cannot fail
	if r.zeros > 0 {
		into.AddZeros(r.zeros)
	}
	return nil
}

// sketchReader walks a DDSketch message. The first walk (into == nil)
// validates everything; the second adds the values to into.
type sketchReader struct {
	into *aggregate.Sketch

	bins          int // bin entries seen so far, over every store
	zeros         uint64
	hasMapping    bool
	gamma         float64
	indexOffset   float64
	interpolation uint64
}

// field is one field of a protobuf message: the value of a varint or fixed
// field, the bytes of a length-delimited or 64-bit one.
type field struct {
	num  protowire.Number
	typ  protowire.Type
	val  uint64
	data []byte
}

// nextField reads the field at the start of b and returns the rest of b.
func nextField(b []byte) (f field, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > protowire.MaxValidNumber {
		return f, nil, ErrMalformedSketch
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.val, n = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		if f.val, n = protowire.ConsumeFixed64(b); n > 0 {
			f.data = b[:8]
		}
	case protowire.Fixed32Type:
		var v uint32
		v, n = protowire.ConsumeFixed32(b)
		f.val = uint64(v)
	case protowire.BytesType:
		f.data, n = protowire.ConsumeBytes(b)
	default: // groups are not used by ddsketch.proto
		n = -1
	}
	if n < 0 {
		return f, nil, ErrMalformedSketch
	}
	return f, b[n:], nil
}

// In the message walks below, a field whose number is known but whose wire
// type is not the schema's falls to "case f.num <= …": it is rejected, where
// protobuf would keep it as an unknown field.

func (r *sketchReader) message(b []byte) error {
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == fieldMapping && f.typ == protowire.BytesType:
			err = r.mapping(f.data)
		case (f.num == fieldPositive || f.num == fieldNegative) && f.typ == protowire.BytesType:
			err = r.store(f.data, f.num == fieldNegative)
		case f.num == fieldZeroCount && f.typ == protowire.Fixed64Type:
			r.zeros, err = count(f.val) // proto3 scalar: the last occurrence wins
		case f.num <= fieldZeroCount:
			err = ErrMalformedSketch
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mapping reads an IndexMapping; several occurrences merge field by field,
// as protobuf merges repeated message fields.
func (r *sketchReader) mapping(b []byte) error {
	r.hasMapping = true
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == fieldGamma && f.typ == protowire.Fixed64Type:
			r.gamma = math.Float64frombits(f.val)
		case f.num == fieldIndexOffset && f.typ == protowire.Fixed64Type:
			r.indexOffset = math.Float64frombits(f.val)
		case f.num == fieldInterpolation && f.typ == protowire.VarintType:
			r.interpolation = f.val
		case f.num <= fieldInterpolation:
			return ErrMalformedSketch
		}
	}
	return nil
}

func (r *sketchReader) store(b []byte, negative bool) error {
	s, err := scanStore(b, negative, r.into)
	if err != nil {
		return err
	}
	if r.bins += s.bins; r.bins > MaxDecodedBins {
		return ErrTooManyBins
	}
	if r.into != nil && s.first >= 0 {
		placeContiguous(b, &s, r.into)
	}
	return nil
}

// storeScan is what one walk of a Store message finds.
type storeScan struct {
	bins        int // bin entries: contiguous counts and map entries
	offset      int // contiguousBinIndexOffset: the last one written wins
	first, last int // positions of the first and last non-zero contiguous counts, -1 if none
	firstCount  uint64
	lastCount   uint64
}

// scanStore validates a Store message and finds its non-zero contiguous
// counts. Given into (b then is validated) it adds the map-form bins to it.
func scanStore(b []byte, negative bool, into *aggregate.Sketch) (s storeScan, err error) {
	s.first, s.last = -1, -1
	pos := 0 // position of the next contiguous count
	for len(b) > 0 {
		var f field
		if f, b, err = nextField(b); err != nil {
			return s, err
		}
		switch {
		case f.num == fieldBinCounts && f.typ == protowire.BytesType:
			s.bins++
			var index int
			var c uint64
			if index, c, err = mapEntry(f.data); err != nil || c == 0 {
				break // err is returned below
			}
			if negative {
				return s, ErrNegativeValues
			}
			if index < minBinIndex || index > maxBinIndex {
				return s, ErrMalformedSketch
			}
			if into != nil {
				into.AddIndex(index, c)
			}
		case f.num == fieldContiguous && len(f.data)%8 == 0 &&
			(f.typ == protowire.BytesType || f.typ == protowire.Fixed64Type):
			// Packed, or one unpacked double (whose 8 bytes are f.data too).
			s.bins += len(f.data) / 8
			for i := 0; i < len(f.data); i, pos = i+8, pos+1 {
				var c uint64
				if c, err = count(binary.LittleEndian.Uint64(f.data[i:])); err != nil {
					return s, err
				}
				if c != 0 {
					if s.first < 0 {
						s.first, s.firstCount = pos, c
					}
					s.last, s.lastCount = pos, c
				}
			}
		case f.num == fieldOffset && f.typ == protowire.VarintType:
			s.offset = sint32(f.val)
		case f.num <= fieldOffset:
			return s, ErrMalformedSketch
		}
		if err != nil {
			return s, err
		}
	}
	if s.first < 0 {
		return s, nil
	}
	if negative {
		return s, ErrNegativeValues
	}
	if s.offset+s.first < minBinIndex || s.offset+s.last > maxBinIndex {
		return s, ErrMalformedSketch
	}
	return s, nil
}

// placeContiguous adds the contiguous counts of a validated Store from
// s.offset, which may come after them (hence the scan first). The highest
// and the lowest bins go first: the sketch then sizes its store once for
// the whole range instead of growing bin by bin.
func placeContiguous(b []byte, s *storeScan, into *aggregate.Sketch) {
	into.AddIndex(s.offset+s.last, s.lastCount)
	if s.first != s.last {
		into.AddIndex(s.offset+s.first, s.firstCount)
	}
	pos := 0
	for len(b) > 0 && pos < s.last {
		f, rest, _ := nextField(b)
		b = rest
		if f.num != fieldContiguous {
			continue
		}
		for i := 0; i < len(f.data); i, pos = i+8, pos+1 {
			if pos > s.first && pos < s.last {
				c, _ := count(binary.LittleEndian.Uint64(f.data[i:]))
				into.AddIndex(s.offset+pos, c)
			}
		}
	}
}

// mapEntry reads one binCounts map entry {sint32 key = 1; double value = 2};
// a missing key or value is 0, as in protobuf.
func mapEntry(b []byte) (index int, c uint64, err error) {
	for len(b) > 0 {
		var f field
		if f, b, err = nextField(b); err != nil {
			return 0, 0, err
		}
		switch {
		case f.num == fieldMapKey && f.typ == protowire.VarintType:
			index = sint32(f.val)
		case f.num == fieldMapValue && f.typ == protowire.Fixed64Type:
			c = f.val // bits; converted below, as the last value wins
		case f.num <= fieldMapValue:
			return 0, 0, ErrMalformedSketch
		}
	}
	c, err = count(c)
	return index, c, err
}

// sint32 decodes a zigzag varint as protobuf does for sint32: the low 32 bits.
func sint32(v uint64) int {
	return int(int32(protowire.DecodeZigZag(v & math.MaxUint32)))
}

// count converts a wire count to a whole number of values. Zero, the most
// common count in contiguous bins, takes an inlined fast path.
func count(bits uint64) (uint64, error) {
	if bits == 0 {
		return 0, nil
	}
	return countSlow(bits)
}

func countSlow(bits uint64) (uint64, error) {
	f := math.Float64frombits(bits)
	if !(f >= 0 && f <= maxCount) { // also false for NaN
		return 0, ErrBadCount
	}
	// f <= 2^53 fits an int64, whose conversion is one instruction on amd64
	// (uint64's is not).
	if u := int64(f); float64(u) == f {
		return uint64(u), nil // a whole number: every count sketches-go or we write
	}
	return uint64(int64(math.Round(f))), nil
}
