package writer

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/spanstats/spanstats/aggregate"
)

// Protobuf wire types (the three low bits of a field tag).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// Field tags (field number << 3 | wire type) of sketches-go's ddsketch.proto.
const (
	// DDSketch
	tagMapping   = 1<<3 | wireBytes   // IndexMapping mapping = 1
	tagPositive  = 2<<3 | wireBytes   // Store positiveValues = 2
	tagZeroCount = 4<<3 | wireFixed64 // double zeroCount = 4

	// IndexMapping
	tagGamma = 1<<3 | wireFixed64 // double gamma = 1

	// Store
	tagContiguous       = 2<<3 | wireBytes  // repeated double contiguousBinCounts = 2 [packed]
	tagContiguousOffset = 3<<3 | wireVarint // sint32 contiguousBinIndexOffset = 3
)

// Field numbers used by the decoder.
const (
	fieldMapping       = 1
	fieldPositive      = 2
	fieldNegative      = 3
	fieldZeroCount     = 4
	fieldGamma         = 1
	fieldIndexOffset   = 2
	fieldInterpolation = 3
	fieldBinCounts     = 1
	fieldContiguous    = 2
	fieldOffset        = 3
	fieldMapKey        = 1
	fieldMapValue      = 2
)

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

var (
	// gamma is the agent mapping's base, as sketches-go writes it.
	gamma float64
	// mappingField is the complete DDSketch.mapping field: {gamma}; index
	// offset 0 and interpolation NONE are proto3 defaults and not written.
	mappingField []byte
	// emptySketch is a complete empty DDSketch: just the mapping, so that
	// decoders which call sketches-go's FromProto never fail.
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
	b := []byte{tagMapping, 9, tagGamma}
	mappingField = binary.LittleEndian.AppendUint64(b, math.Float64bits(gamma))
	emptySketch = mappingField
	minBinIndex = m.Index(m.MinIndexableValue())
	maxBinIndex = m.Index(m.MaxIndexableValue())
}

// varintLen is the encoded length of v as a protobuf varint.
func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// zigzag32 is the sint32 encoding of i (which must fit an int32).
func zigzag32(i int) uint64 {
	v := int32(i)
	return uint64(uint32(v<<1) ^ uint32(v>>31))
}

// storeLen is the size of the positive Store message of n contiguous bins
// starting at index lo.
func storeLen(lo, n int) int {
	l := 1 + varintLen(uint64(8*n)) + 8*n
	if lo != 0 {
		l += 1 + varintLen(zigzag32(lo))
	}
	return l
}

// sketchLen is the size of the DDSketch message AppendSketch writes.
func sketchLen(lo, n int, zeros uint64) int {
	l := len(mappingField)
	if n > 0 {
		sl := storeLen(lo, n)
		l += 1 + varintLen(uint64(sl)) + sl
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
	b = append(b, mappingField...)
	if n > 0 {
		b = append(b, tagPositive)
		b = appendVarint(b, uint64(storeLen(lo, n)))
		b = append(b, tagContiguous)
		b = appendVarint(b, uint64(8*n))
		// The bins are most of the bytes: write them in place, no append per bin.
		at := len(b)
		b = b[:at+8*n]
		dst := b[at:]
		for _, c := range counts {
			binary.LittleEndian.PutUint64(dst, math.Float64bits(float64(c)))
			dst = dst[8:]
		}
		if lo != 0 {
			b = append(b, tagContiguousOffset)
			b = appendVarint(b, zigzag32(lo))
		}
	}
	if zeros != 0 {
		b = append(b, tagZeroCount)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(zeros)))
	}
	return b
}

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
// completely before anything is added.
func DecodeSketch(b []byte, into *aggregate.Sketch) error {
	if len(b) == 0 {
		return nil
	}
	var p sketchParser
	if err := p.message(b); err != nil {
		return err
	}
	if !p.hasMapping || p.interpolation != 0 || p.indexOffset != 0 ||
		!(math.Abs(p.gamma-gamma) <= 1e-9*gamma) {
		return ErrMapping
	}
	if into == nil {
		return nil
	}
	p = sketchParser{into: into}
	if err := p.message(b); err != nil {
		return err // unreachable: b was validated above
	}
	if p.zeros > 0 {
		into.AddZeros(p.zeros)
	}
	return nil
}

// sketchParser walks a DDSketch message. The first walk (into == nil)
// validates everything; the second adds the values to into.
type sketchParser struct {
	into *aggregate.Sketch

	bins          int // bin entries seen so far, over every store
	zeros         uint64
	hasMapping    bool
	gamma         float64
	indexOffset   float64
	interpolation uint64
}

// readVarint returns the varint at the start of b and its length, or n == 0
// when b does not start with a valid varint of at most 10 bytes.
func readVarint(b []byte) (v uint64, n int) {
	var shift uint
	for i, c := range b {
		if i == 9 && c > 1 {
			return 0, 0 // more than 64 bits
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// field reads the next field. It returns the field number, its wire type,
// the scalar value (the varint, or the 64- or 32-bit word), the payload (of a
// length-delimited field, or the 8 bytes of a 64-bit one) and the rest of b.
func field(b []byte) (num uint64, wt int, val uint64, data, rest []byte, err error) {
	tag, n := readVarint(b)
	if n == 0 {
		return 0, 0, 0, nil, nil, ErrMalformedSketch
	}
	b = b[n:]
	num, wt = tag>>3, int(tag&7)
	if num == 0 || num > 1<<29-1 { // protobuf field numbers are 1 … 2^29-1
		return 0, 0, 0, nil, nil, ErrMalformedSketch
	}
	switch wt {
	case wireVarint:
		val, n = readVarint(b)
		if n == 0 {
			return 0, 0, 0, nil, nil, ErrMalformedSketch
		}
		return num, wt, val, nil, b[n:], nil
	case wireFixed64:
		if len(b) < 8 {
			return 0, 0, 0, nil, nil, ErrMalformedSketch
		}
		return num, wt, binary.LittleEndian.Uint64(b), b[:8], b[8:], nil
	case wireFixed32:
		if len(b) < 4 {
			return 0, 0, 0, nil, nil, ErrMalformedSketch
		}
		return num, wt, uint64(binary.LittleEndian.Uint32(b)), nil, b[4:], nil
	case wireBytes:
		l, n := readVarint(b)
		if n == 0 || l > uint64(len(b)-n) {
			return 0, 0, 0, nil, nil, ErrMalformedSketch
		}
		b = b[n:]
		return num, wt, 0, b[:l], b[l:], nil
	default: // groups (3, 4) are not used by ddsketch.proto; 6, 7 do not exist
		return 0, 0, 0, nil, nil, ErrMalformedSketch
	}
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

func (p *sketchParser) message(b []byte) error {
	for len(b) > 0 {
		num, wt, val, data, rest, err := field(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case fieldMapping:
			if wt != wireBytes {
				return ErrMalformedSketch
			}
			if err := p.mapping(data); err != nil {
				return err
			}
		case fieldPositive, fieldNegative:
			if wt != wireBytes {
				return ErrMalformedSketch
			}
			if err := p.store(data, num == fieldNegative); err != nil {
				return err
			}
		case fieldZeroCount:
			if wt != wireFixed64 {
				return ErrMalformedSketch
			}
			z, err := count(val)
			if err != nil {
				return err
			}
			p.zeros = z // proto3 scalar: the last occurrence wins
		}
	}
	return nil
}

// mapping reads an IndexMapping; several occurrences merge field by field,
// as protobuf merges repeated message fields.
func (p *sketchParser) mapping(b []byte) error {
	p.hasMapping = true
	for len(b) > 0 {
		num, wt, val, _, rest, err := field(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case fieldGamma, fieldIndexOffset:
			if wt != wireFixed64 {
				return ErrMalformedSketch
			}
			if num == fieldGamma {
				p.gamma = math.Float64frombits(val)
			} else {
				p.indexOffset = math.Float64frombits(val)
			}
		case fieldInterpolation:
			if wt != wireVarint {
				return ErrMalformedSketch
			}
			p.interpolation = val
		}
	}
	return nil
}

// sint32 decodes a zigzag varint as protobuf does for sint32: the low 32 bits.
func sint32(v uint64) int {
	u := uint32(v)
	return int(int32(u>>1) ^ -int32(u&1))
}

func (p *sketchParser) addBins(n int) error {
	p.bins += n
	if p.bins > MaxDecodedBins {
		return ErrTooManyBins
	}
	return nil
}

// bin validates one bin of the map form and, in the adding walk, adds it.
func (p *sketchParser) bin(index int, bits uint64, negative bool) error {
	c, err := count(bits)
	if err != nil || c == 0 {
		return err
	}
	if negative {
		return ErrNegativeValues
	}
	if index < minBinIndex || index > maxBinIndex {
		return ErrMalformedSketch
	}
	if p.into != nil {
		p.into.AddIndex(index, c)
	}
	return nil
}

// store reads one Store message. In the validating walk it checks every
// field and count; in the adding walk it calls placeStore.
func (p *sketchParser) store(b []byte, negative bool) error {
	if p.into != nil {
		if !negative { // a validated negative store holds no values
			p.placeStore(b)
		}
		return nil
	}
	offset, n := 0, 0
	first, last := -1, -1 // positions of the first and last non-zero counts
	for len(b) > 0 {
		num, wt, val, data, rest, err := field(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case fieldBinCounts:
			if wt != wireBytes {
				return ErrMalformedSketch
			}
			if err := p.addBins(1); err != nil {
				return err
			}
			if err := p.mapEntry(data, negative); err != nil {
				return err
			}
		case fieldContiguous:
			// Packed (wireBytes) or one unpacked double (wireFixed64, whose
			// 8 bytes field returns as data too): the same loop reads both.
			if (wt != wireBytes && wt != wireFixed64) || len(data)%8 != 0 {
				return ErrMalformedSketch
			}
			if err := p.addBins(len(data) / 8); err != nil {
				return err
			}
			for i := 0; i < len(data); i += 8 {
				c, err := count(binary.LittleEndian.Uint64(data[i:]))
				if err != nil {
					return err
				}
				if c != 0 {
					if first < 0 {
						first = n
					}
					last = n
				}
				n++
			}
		case fieldOffset:
			if wt != wireVarint {
				return ErrMalformedSketch
			}
			offset = sint32(val)
		}
	}
	if first < 0 {
		return nil // no contiguous values
	}
	if negative {
		return ErrNegativeValues
	}
	if offset+first < minBinIndex || offset+last > maxBinIndex {
		return ErrMalformedSketch
	}
	return nil
}

// placeStore adds the values of a validated positive Store. Map entries are
// added as they are read. Contiguous counts are placed from the
// contiguousBinIndexOffset, which may come after them (the last one wins):
// the first walk finds the offset and the range of non-zero counts, the
// next ones place them.
func (p *sketchParser) placeStore(b []byte) {
	offset, n := 0, 0
	first, last := -1, -1
	for rest := b; len(rest) > 0; {
		num, _, val, data, r, _ := field(rest)
		rest = r
		switch num {
		case fieldBinCounts:
			_ = p.mapEntry(data, false)
		case fieldContiguous:
			for i := 0; i < len(data); i += 8 {
				if binary.LittleEndian.Uint64(data[i:]) != 0 {
					if first < 0 {
						first = n
					}
					last = n
				}
				n++
			}
		case fieldOffset:
			offset = sint32(val)
		}
	}
	if first < 0 {
		return
	}
	// The highest and the lowest bins first: the sketch then sizes its store
	// once for the whole range instead of growing bin by bin.
	p.place(b, offset, last, last, -1, -1)
	if first != last {
		p.place(b, offset, first, first, -1, -1)
	}
	p.place(b, offset, first, last, first, last)
}

// place adds the contiguous counts at positions lo..hi of a validated store,
// except those at positions skipA and skipB.
func (p *sketchParser) place(b []byte, offset, lo, hi, skipA, skipB int) {
	pos := 0 // position of the field's first count
	for len(b) > 0 && pos <= hi {
		num, _, _, data, rest, _ := field(b)
		b = rest
		if num != fieldContiguous {
			continue
		}
		k := len(data) / 8
		for i, end := max(lo-pos, 0), min(k, hi-pos+1); i < end; i++ {
			if q := pos + i; q != skipA && q != skipB {
				if c, _ := count(binary.LittleEndian.Uint64(data[8*i:])); c != 0 {
					p.into.AddIndex(offset+q, c)
				}
			}
		}
		pos += k
	}
}

// mapEntry reads one binCounts map entry {sint32 key = 1; double value = 2};
// a missing key or value is 0, as in protobuf.
func (p *sketchParser) mapEntry(b []byte, negative bool) error {
	var index int
	var bits uint64
	for len(b) > 0 {
		num, wt, val, _, rest, err := field(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case fieldMapKey:
			if wt != wireVarint {
				return ErrMalformedSketch
			}
			index = sint32(val)
		case fieldMapValue:
			if wt != wireFixed64 {
				return ErrMalformedSketch
			}
			bits = val
		}
	}
	return p.bin(index, bits, negative)
}
