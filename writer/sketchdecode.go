// This file holds DecodeSketch: a DDSketch message read back into a
// Sketch, and the checks that refuse impossible ones.

package writer

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spanstats/spanstats/aggregate"
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
	// ErrBadCount: a bin or zero count is NaN, infinite, negative, not a
	// whole number or above 2^53.
	ErrBadCount = errors.New("writer: sketch count is not a whole non-negative number")
	// ErrTooManyBins: more than MaxDecodedBins bin entries.
	ErrTooManyBins = errors.New("writer: sketch has too many bins")
	// ErrMalformedSketch: the bytes are not a well-formed DDSketch message
	// (bad varint, length past the end, packed doubles not a multiple of 8
	// bytes, a group or unknown wire type, a known field with the wrong wire
	// type, a bin index outside the mapping's indexable range, or more
	// than one positive store: protobuf would merge them into one, the
	// last offset for all their contiguous counts, which no writer means;
	// or a binCounts key given twice: protobuf keeps the last entry, where
	// adding both would count values the agent does not see).
	ErrMalformedSketch = errors.New("writer: malformed DDSketch protobuf")
)

// DecodeSketch decodes a protobuf DDSketch message and adds its values to
// into (it does not reset into first; a nil into only validates b). It reads
// what AppendSketch and sketches-go write: positive bins as contiguous counts
// (packed or not) and/or as the binCounts map, in any field order, with
// unknown fields skipped. Empty input is an empty sketch.
//
// It rejects a mapping other than the agent's (ErrMapping, also when the
// mapping is missing), a negative store with values (ErrNegativeValues),
// NaN, infinite, negative, fractional or huge counts (ErrBadCount), more than
// MaxDecodedBins bins (ErrTooManyBins) and malformed bytes
// (ErrMalformedSketch). On error into is left unchanged: b is validated
// completely before anything is added. It allocates nothing itself; into
// grows as AddIndex makes it.
//
// It reads the bytes with protowire rather than proto.Unmarshal into
// sketchpb.DDSketch: the latter, measured on BenchmarkDecodeSketch's sketch,
// allocated more than the input's size per sketch, and it takes a known
// field with the wrong wire type for an unknown one, which this decoder
// rejects.
func DecodeSketch(b []byte, into *aggregate.Sketch) error {
	var kept [mapBuffer]binCount
	return decodeSketch(b, into, &kept)
}

// decodeSketch is DecodeSketch with the scratch space of decodeCanonicalMap
// given: a Decoder's own, kept from one sketch to the next, spares zeroing
// 2 KiB of stack per sketch (BenchmarkAccept).
func decodeSketch(b []byte, into *aggregate.Sketch, kept *[mapBuffer]binCount) error {
	if len(b) == 0 || decodeCanonical(b, into, kept) {
		return nil
	}
	return decodeGeneral(b, into)
}

// decodeCanonical decodes b, if it is laid out exactly as AppendSketch
// writes it and valid, in one pass over its counts and without the field
// walks, and reports whether it did; on false into is unchanged and the
// general decoder decides (and names the error). It adds to into in the
// general decoder's order, so the two leave into alike (FuzzDecodeSketch
// compares them). It is most of what the relay decodes (BenchmarkAccept).
func decodeCanonical(b []byte, into *aggregate.Sketch, kept *[mapBuffer]binCount) bool {
	return canonical(b, into, kept, nil)
}

// summary is what readWire needs of a summary it does not decode: its
// count (saturating, as Sketch.Count) and the indexes of its lowest and
// highest bins with a count (hi < lo: none).
type summary struct {
	count   uint64
	lo, hi  int
	checked bool // laid out as AppendSketch writes it: addChecked may add it
}

// add counts c more values; bins lo to hi hold them when c > 0.
func (sm *summary) add(c uint64) {
	t, carry := bits.Add64(sm.count, c, 0)
	sm.count = t | -carry
}

// canonical is decodeCanonical; given sm (and a nil into) it also
// summarizes b, without a store: validating a summary this way, not by
// decoding it into a scratch sketch, is what keeps the relay's wire
// summaries as cheap as decoding them once (BenchmarkAcceptSketches in
// internal/relay).
func canonical(b []byte, into *aggregate.Sketch, kept *[mapBuffer]binCount, sm *summary) bool {
	rest, ok := bytes.CutPrefix(b, emptySketch)
	if !ok {
		return false
	}
	var counts []byte // the positive store's contiguous counts
	offset := 0
	if len(rest) > 0 && rest[0] == tagPositive {
		var store []byte
		if store, rest, ok = cutLen(rest[1:]); !ok || len(store) == 0 {
			return false
		}
		if store[0] == tagBinCounts {
			return decodeCanonicalMap(store, rest, into, kept, sm)
		}
		if store[0] != tagContiguous {
			return false
		}
		if counts, store, ok = cutLen(store[1:]); !ok || len(counts)%8 != 0 {
			return false
		}
		if len(store) > 0 {
			v, n := protowire.ConsumeVarint(store[1:])
			if store[0] != tagContiguousOffset || n < 0 || 1+n != len(store) {
				return false
			}
			offset = sint32(v)
		}
	}
	zeros, ok := canonicalZeros(rest)
	if !ok || len(counts)/8 > MaxDecodedBins {
		return false
	}
	// The scan of storeScan.field for one packed field, on a local: through
	// its pointer it was slower (BenchmarkDecodeSketch).
	st := storeScan{offset: offset, first: -1, last: -1}
	var total summary
	for i := 0; i < len(counts); i += 8 {
		bits := binary.LittleEndian.Uint64(counts[i:])
		if bits == 0 {
			continue
		}
		c, err := countSlow(bits)
		if err != nil {
			return false
		}
		if c > 0 {
			if st.first < 0 {
				st.first, st.firstBits = i/8, bits
			}
			st.last, st.lastBits = i/8, bits
			total.add(c)
		}
	}
	if st.first >= 0 && (offset+st.first < minBinIndex || offset+st.last > maxBinIndex) {
		return false
	}
	if into == nil {
		if sm != nil {
			total.add(zeros)
			total.lo, total.hi = offset+st.first, offset+st.last
			if st.first < 0 {
				total.lo, total.hi = 0, -1
			}
			total.checked = true
			*sm = total
		}
		return true
	}
	if st.first >= 0 {
		st.into = into
		st.addEnds()
		st.addInner(0, counts)
	}
	if zeros > 0 {
		into.AddZeros(zeros)
	}
	return true
}

// canonicalZeros reads what follows the positive store in AppendSketch's
// layout: nothing, or the zero count.
func canonicalZeros(rest []byte) (zeros uint64, ok bool) {
	switch {
	case len(rest) == 0:
		return 0, true
	case len(rest) != 9 || rest[0] != tagZeroCount:
		return 0, false
	}
	zeros, err := count(binary.LittleEndian.Uint64(rest[1:]))
	return zeros, err == nil
}

// decodeCanonicalMap is decodeCanonical for a positive store written as the
// binCounts map (store, its bytes; rest, what follows it): entries of key
// then value, each bin once, in ascending order, every count whole and not
// zero. It validates every entry, keeping up to mapBuffer of them, then adds
// the highest and the lowest first, as addEnds does (bin by bin, the sketch
// would grow its store at each: BenchmarkDecodePayload), then the rest in
// wire order.
func decodeCanonicalMap(store, rest []byte, into *aggregate.Sketch, kept *[mapBuffer]binCount, sm *summary) bool {
	zeros, ok := canonicalZeros(rest)
	if !ok {
		return false
	}
	n, prev := 0, minBinIndex-1
	var last uint64 // the highest bin's count
	total := summary{hi: -1}
	for b := store; len(b) > 0; n++ {
		i, bits, next, ok := canonicalMapEntry(b)
		if !ok || i <= prev || i > maxBinIndex || n >= MaxDecodedBins {
			return false
		}
		c, err := countSlow(bits)
		if err != nil || c == 0 {
			return false
		}
		if n < mapBuffer {
			kept[n] = binCount{i, c}
		}
		if n == 0 {
			total.lo = i
		}
		total.add(c)
		prev, last, b = i, c, next
	}
	if into == nil {
		if sm != nil {
			if n > 0 {
				total.hi = prev
			}
			total.add(zeros)
			total.checked = true
			*sm = total
		}
		return true
	}
	if n > 0 {
		into.AddIndex(prev, last)
		if n > 1 {
			into.AddIndex(kept[0].index, kept[0].c)
		}
	}
	switch {
	case n <= 2: // no bin between the ends
	case n <= mapBuffer:
		for _, e := range kept[1 : n-1] {
			into.AddIndex(e.index, e.c)
		}
	default:
		for k, b := 0, store; len(b) > 0; k++ {
			i, bits, next, _ := canonicalMapEntry(b)
			if k > 0 && k < n-1 {
				c, _ := countSlow(bits)
				into.AddIndex(i, c)
			}
			b = next
		}
	}
	if zeros > 0 {
		into.AddZeros(zeros)
	}
	return true
}

// addChecked adds to into the values of b, a sketch in AppendSketch's
// layout (either store form) that canonical summarized as sm and checked
// then: after growing the store once to the summary's bin range, one pass
// over the counts in wire order, none of them checked again
// (BenchmarkAcceptSketches in internal/relay).
func addChecked(b []byte, sm summary, into *aggregate.Sketch) {
	into.Reserve(sm.lo, sm.hi)
	rest := b[len(emptySketch):]
	if len(rest) > 0 && rest[0] == tagPositive {
		var store []byte
		store, rest, _ = cutLen(rest[1:])
		if store[0] == tagBinCounts {
			for e := store; len(e) > 0; {
				i, bits, next, _ := canonicalMapEntry(e)
				into.AddIndex(i, wholeCount(bits))
				e = next
			}
		} else {
			counts, tail, _ := cutLen(store[1:])
			offset := 0
			if len(tail) > 0 {
				v, _ := protowire.ConsumeVarint(tail[1:])
				offset = sint32(v)
			}
			for q := 0; 8*q < len(counts); q++ {
				if bits := binary.LittleEndian.Uint64(counts[8*q:]); bits != 0 {
					into.AddIndex(offset+q, wholeCount(bits))
				}
			}
		}
	}
	if zeros, _ := canonicalZeros(rest); zeros > 0 {
		into.AddZeros(zeros)
	}
}

// wholeCount is the count of a checked bin: a whole float64 of at most
// 2^53, which converts exactly.
func wholeCount(bits uint64) uint64 { return uint64(int64(math.Float64frombits(bits))) }

// mapBuffer is how many map entries decodeCanonicalMap keeps from its
// validating pass, to add them without parsing them again.
const mapBuffer = 128

// binCount is one decoded bin.
type binCount struct {
	index int
	c     uint64
}

// canonicalMapEntry reads the binCounts entry at the start of b as
// AppendSketch writes it: tag, length, key, value, nothing else.
func canonicalMapEntry(b []byte) (index int, bits uint64, rest []byte, ok bool) {
	// The usual entry, of a two-byte key (bins 64 to 8191: every duration
	// from 4 ns up), without the varint loop.
	if len(b) >= 14 && b[0] == tagBinCounts && b[1] == 12 && b[2] == tagMapKey && b[3] >= 0x80 && b[4] < 0x80 && b[5] == tagMapValue {
		v := uint64(b[3]&0x7f) | uint64(b[4])<<7
		return sint32(v), binary.LittleEndian.Uint64(b[6:]), b[14:], true
	}
	if len(b) < 2 || b[0] != tagBinCounts || int(b[1]) > len(b)-2 {
		return 0, 0, nil, false
	}
	e := b[2 : 2+int(b[1])]
	if len(e) < 1 || e[0] != tagMapKey {
		return 0, 0, nil, false
	}
	v, n := protowire.ConsumeVarint(e[1:])
	if n < 0 || v > math.MaxUint32 || len(e) != 1+n+9 || e[1+n] != tagMapValue {
		return 0, 0, nil, false
	}
	return sint32(v), binary.LittleEndian.Uint64(e[2+n:]), b[2+len(e):], true
}

// cutLen splits b after a varint length and that many bytes.
func cutLen(b []byte) (v, rest []byte, ok bool) {
	l, n := protowire.ConsumeVarint(b)
	if n < 0 || l > uint64(len(b)-n) {
		return nil, nil, false
	}
	return b[n : n+int(l)], b[n+int(l):], true
}

// decodeGeneral is DecodeSketch for any field order and form.
func decodeGeneral(b []byte, into *aggregate.Sketch) error {
	var r sketchReader
	if err := r.message(b); err != nil {
		return err
	}
	if r.invalid != nil {
		return r.invalid
	}
	if r.positives > 1 {
		return ErrMalformedSketch
	}
	if !r.hasMapping || r.interpolation != 0 || r.indexOffset != 0 ||
		!(math.Abs(r.gamma-gamma) <= 1e-9*gamma) {
		return ErrMapping
	}
	if into == nil {
		return nil
	}
	if st := &r.positive; r.positives == 1 && st.mapBins == 0 {
		// What AppendSketch and sketches-go write: one positive store of
		// contiguous counts, scanned already.
		if st.first >= 0 {
			st.into = into
			st.placeContiguous(r.positiveBytes)
		}
	} else {
		addPositives(b, into)
	}
	if r.zeros > 0 {
		into.AddZeros(r.zeros)
	}
	return nil
}

// sketchReader validates a DDSketch message.
type sketchReader struct {
	bins          int // bin entries seen so far, over every store
	zeros         uint64
	hasMapping    bool
	gamma         float64
	indexOffset   float64
	interpolation uint64

	positives     int       // positive stores
	positive      storeScan // the last one, validated
	positiveBytes []byte
	// invalid is the first ErrNegativeValues or ErrBadCount met: the walk
	// goes on, so that bytes that do not decode further on are
	// ErrMalformedSketch whatever came before them.
	invalid error
}

// invalidValues reports whether err is a well-formed sketch's error about
// its values (ErrNegativeValues, ErrBadCount), which a sketch malformed
// further on does not return.
func invalidValues(err error) bool { return err == ErrNegativeValues || err == ErrBadCount }

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

// walk calls each for every field of the message b, in order, until each
// returns an error.
func walk(b []byte, each func(f field) error) error {
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		if err := each(f); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// In the walks below, a field whose number is known but whose wire type is
// not the schema's falls to "case f.num <= …": it is rejected, where
// protobuf would keep it as an unknown field.

func (r *sketchReader) message(b []byte) error {
	return walk(b, func(f field) (err error) {
		switch {
		case f.num == fieldMapping && f.typ == protowire.BytesType:
			r.hasMapping = true
			err = walk(f.data, r.mapping) // occurrences merge field by field, as in protobuf
		case (f.num == fieldPositive || f.num == fieldNegative) && f.typ == protowire.BytesType:
			err = r.store(f.data, f.num == fieldNegative)
		case f.num == fieldZeroCount && f.typ == protowire.Fixed64Type:
			// proto3 scalar: the last occurrence wins
			if r.zeros, err = count(f.val); err != nil {
				r.invalid = cmp.Or(r.invalid, err)
				err = nil
			}
		case f.num <= fieldZeroCount:
			err = ErrMalformedSketch
		}
		return err
	})
}

// mapping reads one field of an IndexMapping.
func (r *sketchReader) mapping(f field) error {
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
	return nil
}

func (r *sketchReader) store(b []byte, negative bool) error {
	s := storeScan{negative: negative, first: -1, last: -1}
	err := s.scan(b)
	if err != nil && !invalidValues(err) {
		return err
	}
	if r.bins += s.bins; r.bins > MaxDecodedBins {
		return ErrTooManyBins
	}
	if err != nil {
		r.invalid = cmp.Or(r.invalid, err)
		return nil
	}
	if !negative {
		r.positives++
		r.positive, r.positiveBytes = s, b
	}
	return nil
}

// addPositives adds the bins of the positive stores of b, a validated
// DDSketch, to into: the highest and the lowest first, as addEnds does,
// then the others in wire order. In wire order alone, bins far apart (a map
// in descending order, a store per bin) grew the store a few bins at a
// time, copying it at each and allocating many times the input
// (TestGeneralSketchCannotAmplify).
func addPositives(b []byte, into *aggregate.Sketch) {
	type bin struct {
		index, ord int
		c          uint64
	}
	var lo, hi bin
	n := 0
	eachPositive(b, func(i int, c uint64) {
		if n == 0 || i < lo.index {
			lo = bin{i, n, c}
		}
		if n == 0 || i > hi.index {
			hi = bin{i, n, c}
		}
		n++
	})
	if n == 0 {
		return
	}
	into.AddIndex(hi.index, hi.c)
	if lo.ord != hi.ord {
		into.AddIndex(lo.index, lo.c)
	}
	n = 0
	eachPositive(b, func(i int, c uint64) {
		if n != lo.ord && n != hi.ord {
			into.AddIndex(i, c)
		}
		n++
	})
}

// eachPositive calls f with the index and count of every non-empty bin of
// the positive stores of b, a validated DDSketch, in wire order: each
// store's map entries, and its contiguous counts from its offset (the last
// one written, wherever it is, as storeScan reads it).
func eachPositive(b []byte, f func(index int, c uint64)) {
	_ = walk(b, func(fd field) error {
		if fd.num != fieldPositive || fd.typ != protowire.BytesType {
			return nil // a negative store holds no value: validated
		}
		offset := 0
		_ = walk(fd.data, func(sf field) error {
			if sf.num == fieldOffset {
				offset = sint32(sf.val)
			}
			return nil
		})
		pos := 0
		return walk(fd.data, func(sf field) error {
			switch sf.num {
			case fieldBinCounts:
				var e mapEntry
				_ = walk(sf.data, e.field)
				if c, _ := count(e.bits); c > 0 {
					f(e.index, c)
				}
			case fieldContiguous: // packed, or one double: validated
				for q := 0; q < len(sf.data); q, pos = q+8, pos+1 {
					if c, _ := count(binary.LittleEndian.Uint64(sf.data[q:])); c > 0 {
						f(offset+pos, c)
					}
				}
			}
			return nil
		})
	})
}

// storeScan walks a Store message.
type storeScan struct {
	negative bool              // the negative store: no value may be in it
	into     *aggregate.Sketch // where placeContiguous adds the counts

	bins        int    // bin entries: contiguous counts and map entries
	mapBins     int    // map entries with a count
	mapEntries  int    // map entries, with a count or not
	invalid     error  // the first ErrBadCount or ErrNegativeValues of a map entry or count
	offset      int    // contiguousBinIndexOffset: the last one written wins
	pos         int    // position of the next contiguous count
	first, last int    // positions of the first and last non-zero contiguous counts, -1 if none
	firstBits   uint64 // their counts as on the wire
	lastBits    uint64
}

// scan validates a Store message and finds its non-zero contiguous counts.
// Bytes that do not decode (ErrMalformedSketch) are reported before
// values that cannot be latencies (ErrBadCount, ErrNegativeValues),
// wherever they are in the store.
func (s *storeScan) scan(b []byte) error {
	if err := walk(b, s.field); err != nil {
		return err
	}
	switch {
	case s.first >= 0 && (s.offset+s.first < minBinIndex || s.offset+s.last > maxBinIndex):
		return ErrMalformedSketch
	case s.mapEntries > 1 && duplicateKeys(b):
		return ErrMalformedSketch
	case s.invalid != nil:
		return s.invalid
	case s.first >= 0 && s.negative:
		return ErrNegativeValues
	}
	return nil
}

func (s *storeScan) field(f field) error {
	switch {
	case f.num == fieldBinCounts && f.typ == protowire.BytesType:
		s.bins++
		var e mapEntry
		if err := walk(f.data, e.field); err != nil {
			return err
		}
		s.mapEntries++
		c, err := count(e.bits)
		switch {
		case err != nil:
			s.invalid = cmp.Or(s.invalid, err)
			return nil
		case c == 0:
			return nil
		case e.index < minBinIndex || e.index > maxBinIndex:
			return ErrMalformedSketch
		case s.negative:
			s.invalid = cmp.Or(s.invalid, ErrNegativeValues)
			return nil
		}
		s.mapBins++
	case f.num == fieldContiguous && len(f.data)%8 == 0 &&
		(f.typ == protowire.BytesType || f.typ == protowire.Fixed64Type):
		// Packed, or one unpacked double (whose 8 bytes are f.data too).
		// The loop works on locals: through s, every field would be
		// stored at every bin (BenchmarkDecodeSketch).
		s.bins += len(f.data) / 8
		pos, first, last, lastBits := s.pos, s.first, s.last, s.lastBits
		for i := 0; i < len(f.data); i, pos = i+8, pos+1 {
			bits := binary.LittleEndian.Uint64(f.data[i:])
			if bits == 0 {
				continue
			}
			c, err := countSlow(bits)
			if err != nil {
				s.invalid = cmp.Or(s.invalid, err)
				continue
			}
			if c == 0 {
				continue // -0
			}
			if first < 0 {
				first, s.firstBits = pos, bits
			}
			last, lastBits = pos, bits
		}
		s.pos, s.first, s.last, s.lastBits = pos, first, last, lastBits
	case f.num == fieldOffset && f.typ == protowire.VarintType:
		s.offset = sint32(f.val)
	case f.num <= fieldOffset:
		return ErrMalformedSketch
	}
	return nil
}

// placeContiguous adds the contiguous counts of a scanned Store from
// s.offset, which may come after them (hence the scan first).
func (s *storeScan) placeContiguous(b []byte) {
	s.addEnds()
	pos := 0
	_ = walk(b, func(f field) error {
		if f.num == fieldContiguous {
			s.addInner(pos, f.data)
			pos += len(f.data) / 8
		}
		return nil
	})
}

// addEnds adds the highest and the lowest non-zero counts, first: the
// sketch then sizes its store once for the whole range instead of growing
// bin by bin.
func (s *storeScan) addEnds() {
	c, _ := count(s.lastBits)
	s.into.AddIndex(s.offset+s.last, c)
	if s.first != s.last {
		c, _ := count(s.firstBits)
		s.into.AddIndex(s.offset+s.first, c)
	}
}

// addInner adds the counts strictly between the first and the last of
// data, whose first count is at position pos; zero counts are skipped.
func (s *storeScan) addInner(pos int, data []byte) {
	// Locals: through s, every field would be reloaded after each AddIndex.
	into, at := s.into, s.offset+pos
	lo, hi := max(s.first+1-pos, 0), min(s.last-pos, len(data)/8)
	for q := lo; q < hi; q++ {
		if bits := binary.LittleEndian.Uint64(data[8*q:]); bits != 0 {
			c, _ := countSlow(bits) // validated by the scan
			into.AddIndex(at+q, c)  // a no-op for a count rounded to 0
		}
	}
}

// duplicateKeys reports whether the binCounts map of the Store message b
// names an indexable bin twice. Only a store with several map entries pays
// for it (sketches-go writes contiguous counts; AppendSketch's maps have
// ascending keys, which the canonical fast path reads without this scan).
func duplicateKeys(b []byte) bool {
	sp := keySets.Get().(*[]uint64)
	set, dup := *sp, false
	_ = walk(b, func(f field) error {
		if f.num != fieldBinCounts || f.typ != protowire.BytesType {
			return nil
		}
		var e mapEntry
		if walk(f.data, e.field) != nil || e.index < minBinIndex || e.index > maxBinIndex {
			return nil // refused, or ignored (count 0), by the scan
		}
		i := uint(e.index - minBinIndex)
		dup = dup || set[i/64]&(1<<(i%64)) != 0
		set[i/64] |= 1 << (i % 64)
		return nil
	})
	clear(set)
	keySets.Put(sp)
	return dup
}

// keySets holds duplicateKeys' bitsets, a bit per indexable bin (9 KiB).
var keySets = sync.Pool{New: func() any {
	s := make([]uint64, (maxBinIndex-minBinIndex)/64+1)
	return &s
}}

// mapEntry is one binCounts map entry {sint32 key = 1; double value = 2};
// a missing key or value is 0, as in protobuf.
type mapEntry struct {
	index int
	bits  uint64
}

func (e *mapEntry) field(f field) error {
	switch {
	case f.num == fieldMapKey && f.typ == protowire.VarintType:
		e.index = sint32(f.val)
	case f.num == fieldMapValue && f.typ == protowire.Fixed64Type:
		e.bits = f.val
	case f.num <= fieldMapValue:
		return ErrMalformedSketch
	}
	return nil
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
	// A fraction of a span: no tracer counts so, and rounding would merge
	// a sketch other than the one sent.
	return 0, ErrBadCount
}
