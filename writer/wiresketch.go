// This file owns WireSketch: a group's summary validated but left in its
// wire bytes, for a receiver that adds it to sketches it already holds.

package writer

import (
	"bytes"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// WireSketch is one summary of a decoded group, validated but left as it
// came on the wire: what a Decoder with WireSketches set hands out instead
// of a Sketch. Its values go straight into a sketch the caller holds
// (Decoder.AddSketch), so decoding builds no store per summary: a summary
// of a few dozen bytes with values at both ends of the range decodes into
// an 8 KiB store, and a datagram of them into megabytes
// (TestWideSketchesCannotAmplify in internal/relay). Its bytes alias the
// decoded input. The zero value is an empty summary.
type WireSketch struct {
	b       []byte
	count   uint64
	lo, hi  int32 // lowest and highest index with a count (none: hi < lo, or count 0)
	checked bool  // b is in AppendSketch's layout and was checked: AddSketch trusts it
}

// GroupSketches are the two summaries of a group on the wire.
type GroupSketches struct{ Ok, Err WireSketch }

// Count is the number of values in the summary, as Sketch.Count of it
// decoded.
func (w *WireSketch) Count() uint64 { return w.count }

// Bins returns the lowest and highest bin index holding a value (a Sketch
// of them keeps at most aggregate.MaxBins: its lowest bins collapse); ok is
// false when it holds none (it is empty, or holds only zeros).
func (w *WireSketch) Bins() (lo, hi int, ok bool) {
	return int(w.lo), int(w.hi), w.count > 0 && w.hi >= w.lo
}

// HeapBytes is about what a new Sketch takes once the summary is added to
// it (see aggregate.StoreBytes); 0 for an empty summary.
func (w *WireSketch) HeapBytes() int {
	if w.count == 0 {
		return 0
	}
	return aggregate.StoreBytes(int(w.hi) - int(w.lo) + 1)
}

// AddSketch adds the values of w, a summary of the payload the last Decode
// returned, to into, as merging its decoded sketch would.
func (dec *Decoder) AddSketch(into *aggregate.Sketch, w *WireSketch) {
	if w.count == 0 {
		return
	}
	if w.checked {
		addChecked(w.b, summary{lo: int(w.lo), hi: int(w.hi)}, into)
		return
	}
	if err := decodeSketch(w.b, into, &dec.kept); err != nil {
		panic("BUG: writer: a summary that validated does not decode: " + err.Error())
	}
}

// readWire reads a summary as readSummary does, into g.Wire's Ok (or Err,
// with isErr) as a WireSketch: validated and summarized (count, bin range)
// in one scan of its counts when laid out as AppendSketch writes, else
// decoded into the decoder's scratch sketch, which then empties. g.Wire
// stays nil while both summaries are empty.
func (d *decoder) readWire(b []byte, g *Group, isErr bool) ([]byte, error) {
	var w WireSketch
	var err error
	if msgp.IsNil(b) {
		b = b[1:]
	} else {
		var v []byte
		if v, b, err = readBytes(b); err != nil {
			return b, err
		}
		if len(v) > 0 && !bytes.Equal(v, emptySketch) {
			var sm summary
			if !canonical(v, nil, d.kept, &sm) {
				// Another layout than AppendSketch's: decoded in the
				// scratch sketch to validate and summarize it.
				s := d.scratch
				if err = decodeGeneral(v, s); d.lenient && invalidSketch(err) {
					err = nil // read as empty: s is as it was, empty
				}
				sm = summary{count: s.Count(), hi: -1}
				if lo, counts := s.Bins(); len(counts) > 0 {
					sm.lo, sm.hi = lo, lo+len(counts)-1
				}
				s.Reset()
			}
			if err == nil && sm.count > 0 {
				w = WireSketch{b: v, count: sm.count, lo: int32(sm.lo), hi: int32(sm.hi), checked: sm.checked}
			}
		}
	}
	if g.Wire == nil {
		if w.count == 0 {
			// Carved only for values: groups of empty summaries, a few
			// bytes each, would cost a GroupSketches more
			// (TestEmptyGroupsCannotAmplify in internal/relay).
			return b, err
		}
		ws := carve(d.wireArena, 1, maxKeptGroups)[:1]
		ws[0] = GroupSketches{}
		g.Wire = &ws[0]
	}
	if isErr {
		g.Wire.Err = w
	} else {
		g.Wire.Ok = w
	}
	if g.Wire.Ok.count == 0 && g.Wire.Err.count == 0 {
		g.Wire = nil // a repeated key emptied it
	}
	return b, err
}
