// This file tests a Decoder's WireSketches option and AddSketch against a
// plain decode, its summaries written again, and benchmarks decoding small
// groups with it.

package writer

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// fromWire is pw (decoded with WireSketches by dec) with every group's
// summaries added by AddSketch to sketches of their own, as Decode without
// WireSketches would have decoded them; it fails t on a group whose Ok or
// Err is set, or whose WireSketch disagrees with its own sketch.
func fromWire(t *testing.T, dec *Decoder, pw *Payload) *Payload {
	t.Helper()
	c := *pw
	c.Buckets = slices.Clone(pw.Buckets)
	for i := range c.Buckets {
		gs := slices.Clone(c.Buckets[i].Groups)
		for j := range gs {
			g := &gs[j]
			if g.Ok != nil || g.Err != nil {
				t.Fatalf("group %d/%d: WireSketches left a decoded sketch", i, j)
			}
			if g.Wire == nil {
				continue
			}
			for _, p := range [...]struct {
				into **aggregate.Sketch
				w    *WireSketch
			}{{&g.Ok, &g.Wire.Ok}, {&g.Err, &g.Wire.Err}} {
				if p.w.Count() == 0 {
					if lo, hi, ok := p.w.Bins(); ok || p.w.HeapBytes() != 0 {
						t.Fatalf("group %d/%d: empty summary with bins %d..%d (%v), %d bytes", i, j, lo, hi, ok, p.w.HeapBytes())
					}
					continue
				}
				s := new(aggregate.Sketch)
				dec.AddSketch(s, p.w)
				lo, counts := s.Bins()
				wlo, whi, ok := p.w.Bins()
				// A sketch keeps at most MaxBins bins: its lowest collapse.
				if s.Count() != p.w.Count() || ok != (len(counts) > 0) || ok && (max(wlo, whi-aggregate.MaxBins+1) != lo || whi != lo+len(counts)-1) {
					t.Fatalf("group %d/%d: summary of count %d, bins %d..%d (%v); decoded: count %d, bins from %d, %d",
						i, j, p.w.Count(), wlo, whi, ok, s.Count(), lo, len(counts))
				}
				if s.HeapBytes() > p.w.HeapBytes() {
					t.Fatalf("group %d/%d: sketch of %d bytes, summary says about %d", i, j, s.HeapBytes(), p.w.HeapBytes())
				}
				*p.into = s
			}
			g.Wire = nil
		}
		c.Buckets[i].Groups = gs
	}
	return &c
}

// TestDecoderWireSketches: with WireSketches, a Decoder gives the payload
// a plain Decode gives, its summaries left on the wire and added by
// AddSketch to the same sketches, a wide one included, also after
// decoding another payload.
func TestDecoderWireSketches(t *testing.T) {
	e := goldenEntry
	e.Ok, e.Err = sketchOf(1, 1<<62), sketchOf(0, 0) // as wide as a store goes; zeros only
	wide := AppendPayload(nil, &testHeader, []Bucket{{Start: 1, Duration: 2, Groups: []*aggregate.Entry{&e}}})
	dec := Decoder{WireSketches: true}
	for _, b := range [][]byte{smallPayload(), wide, smallPayload()} {
		want, err := DecodePayload(b)
		if err != nil {
			t.Fatal(err)
		}
		pw, err := dec.Decode(b, MaxGroups)
		if err != nil {
			t.Fatal(err)
		}
		if got := fromWire(t, &dec, pw); !samePayload(got, want) {
			t.Fatalf("WireSketches: %+v; want %+v", got, want)
		}
	}
}

// minimalGroups is a payload of n groups holding only hits and a summary:
// about 60 bytes each, less than a Decoder preallocates for.
func minimalGroups(n int) []byte {
	summary := AppendSketch(nil, sketchOf(1, 1<<62))
	b := msgp.AppendMapHeader(nil, 1)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "Stats")
	b = msgp.AppendArrayHeader(b, uint32(n))
	for range n {
		b = msgp.AppendMapHeader(b, 2)
		b = msgp.AppendString(b, "Hits")
		b = msgp.AppendUint64(b, 2)
		b = msgp.AppendString(b, "OkSummary")
		b = msgp.AppendBytes(b, summary)
	}
	return b
}

// TestDecoderSmallGroupsReuse: a Decoder with WireSketches decodes a
// payload of groups smaller than it preallocates for, again and again,
// without allocating: its arenas keep the room the first Decode grew, and
// no summary builds a store.
func TestDecoderSmallGroupsReuse(t *testing.T) {
	b := minimalGroups(900)
	dec := Decoder{WireSketches: true}
	if _, err := dec.Decode(b, MaxGroups); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		p, err := dec.Decode(b, MaxGroups)
		if err != nil || len(p.Buckets[0].Groups) != 900 || p.Buckets[0].Groups[899].Wire.Ok.Count() != 2 {
			t.Fatalf("Decode = %v, %v", p, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Decode, want 0", allocs)
	}
}

// BenchmarkDecoderSmallGroups decodes minimalGroups(900) (wide
// summaries, ~60-byte groups) with a reused Decoder, summaries on the wire.
func BenchmarkDecoderSmallGroups(b *testing.B) {
	body := minimalGroups(900)
	dec := Decoder{WireSketches: true}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		sinkPayload, sinkErr = dec.Decode(body, MaxGroups)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// TestWireSummaryMatchesDecode: the one-scan summary of a summary laid
// out as AppendSketch writes it (contiguous or map, zeros or not, narrow
// or collapsed) has the count and bin range of the sketch it encodes.
func TestWireSummaryMatchesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	maps := 0
	for i := range 3000 {
		s := new(aggregate.Sketch)
		for range r.IntN(60) {
			s.Add(math.Exp(r.Float64() * float64(1+r.IntN(45))))
		}
		if r.IntN(4) == 0 {
			s.AddZeros(uint64(r.IntN(5)))
		}
		b := AppendSketch(nil, s)
		if len(b) > len(emptySketch) && b[len(emptySketch)] == tagPositive && b[len(emptySketch)+2] == tagBinCounts {
			maps++
		}
		var sm summary
		if !canonical(b, nil, new([mapBuffer]binCount), &sm) {
			t.Fatalf("case %d: AppendSketch's layout not read as canonical", i)
		}
		lo, counts := s.Bins()
		want := summary{count: s.Count(), lo: lo, hi: lo + len(counts) - 1}
		if len(counts) == 0 {
			want.lo, want.hi = 0, -1
		}
		if !sm.checked {
			t.Fatalf("case %d: summary of AppendSketch's bytes not marked checked", i)
		}
		sm.checked = false
		if sm != want {
			t.Fatalf("case %d: summary %+v, want %+v", i, sm, want)
		}
	}
	if maps < 300 || maps > 2700 {
		t.Fatalf("%d of 3000 summaries in map form: the cases do not cover both layouts", maps)
	}
}

// TestAddSketchMatchesDecodeSketch: AddSketch of a checked summary, in
// either layout (the map one added unchecked, in wire order), leaves a
// sketch that already holds values (none, narrow, reset, collapsed) as
// DecodeSketch of the same bytes does: bins, offset, count, zeros.
func TestAddSketchMatchesDecodeSketch(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	fill := func(seed uint64, kind int) *aggregate.Sketch {
		rs := rand.New(rand.NewPCG(seed, 2))
		s := new(aggregate.Sketch)
		switch kind {
		case 1:
			for range 1 + rs.IntN(40) {
				s.Add(math.Exp(rs.Float64() * 20))
			}
		case 2:
			for range 30 {
				s.Add(math.Exp(rs.Float64() * 40))
			}
			s.Reset()
		case 3:
			s.Add(1e-3)
			s.Add(1e18)
		}
		return s
	}
	var dec Decoder
	mapped := 0
	for i := range 3000 {
		s, n := new(aggregate.Sketch), r.IntN(60)
		if r.IntN(4) == 0 {
			n = r.IntN(300) // past mapBuffer map entries
		}
		scale := float64(1 + r.IntN(45))
		if r.IntN(2) == 0 {
			scale = 0.02 + r.Float64()/2 // clustered: contiguous counts
		}
		for range n {
			s.Add(math.Exp(r.Float64() * scale))
		}
		if r.IntN(4) == 0 {
			s.AddZeros(uint64(r.IntN(5)))
		}
		b := AppendSketch(nil, s)
		var sm summary
		if !canonical(b, nil, new([mapBuffer]binCount), &sm) {
			t.Fatalf("case %d: AppendSketch's layout not read as canonical", i)
		}
		if !sm.checked {
			t.Fatalf("case %d: summary of AppendSketch's bytes not marked checked", i)
		}
		if isMapLayout(b) {
			mapped++
		}
		w := WireSketch{b: b, count: sm.count, lo: int32(sm.lo), hi: int32(sm.hi), checked: true}
		seed, kind := r.Uint64(), r.IntN(4)
		got, want := fill(seed, kind), fill(seed, kind)
		dec.AddSketch(got, &w)
		if err := DecodeSketch(b, want); err != nil {
			t.Fatal(err)
		}
		glo, gc := got.Bins()
		wlo, wc := want.Bins()
		if glo != wlo || !slices.Equal(gc, wc) || got.Count() != want.Count() || got.ZeroCount() != want.ZeroCount() {
			t.Fatalf("case %d (map %v, into kind %d): AddSketch gave bins from %d (%d), count %d, zeros %d; DecodeSketch %d (%d), %d, %d",
				i, isMapLayout(b), kind, glo, len(gc), got.Count(), got.ZeroCount(), wlo, len(wc), want.Count(), want.ZeroCount())
		}
	}
	if mapped < 300 || mapped > 2700 {
		t.Fatalf("%d of 3000 summaries in map form: the cases do not cover both layouts", mapped)
	}
}

// isMapLayout reports whether b, a sketch as AppendSketch writes it, holds
// its positive store as the binCounts map.
func isMapLayout(b []byte) bool {
	if len(b) <= len(emptySketch) || b[len(emptySketch)] != tagPositive {
		return false
	}
	store, _, _ := cutLen(b[len(emptySketch)+1:])
	return len(store) > 0 && store[0] == tagBinCounts
}

// TestWireSketchesReencoded: a payload decoded with WireSketches (its
// groups' Ok and Err nil, their summaries in Wire) keeps both summaries
// when Payload.Append or a Packer writes it again, and Group.Size still
// bounds what Append writes.
func TestWireSketchesReencoded(t *testing.T) {
	e := &aggregate.Entry{Hits: 5, Errors: 2}
	e.Service, e.Name = "s", "n"
	e.Ok, e.Err = new(aggregate.Sketch), new(aggregate.Sketch)
	for i := range 3 {
		e.Ok.Add(float64(1000 * (i + 1)))
	}
	e.Err.Add(7e6)
	e.Err.Add(9e9)
	body := AppendPayload(nil, &testHeader, []Bucket{{Start: 1, Duration: 2, Groups: []*aggregate.Entry{e}}})
	dec := Decoder{WireSketches: true}
	pl, err := dec.Decode(body, 100)
	if err != nil {
		t.Fatal(err)
	}
	if g := &pl.Buckets[0].Groups[0]; g.Ok != nil || g.Wire == nil {
		t.Fatal("not decoded into Wire")
	}
	check := func(how string, b []byte) {
		back, err := DecodePayload(b)
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		g := &back.Buckets[0].Groups[0]
		if g.Ok == nil || g.Err == nil || g.Ok.Count() != 3 || g.Err.Count() != 2 ||
			g.Ok.Quantile(1) != e.Ok.Quantile(1) || g.Err.Quantile(1) != e.Err.Quantile(1) {
			t.Fatalf("%s: summaries %v %v, want the 3 and 2 values written", how, g.Ok, g.Err)
		}
	}
	g := &pl.Buckets[0].Groups[0]
	if n, got := g.Size(), len(g.Append(nil)); got > n {
		t.Fatalf("Group.Append wrote %d bytes, Size said at most %d", got, n)
	}
	check("Payload.Append", pl.Append(nil))
	var bodies [][]byte
	p := Packer{Limit: 1 << 20}
	p.PackPayload(pl, func(b []byte, hits uint64) { bodies = append(bodies, bytes.Clone(b)) })
	if len(bodies) != 1 {
		t.Fatalf("%d payloads", len(bodies))
	}
	check("Packer.PackPayload", bodies[0])
}

// TestEmptySummariesLeaveWireNil: with WireSketches, a group whose
// summaries are both empty (absent, nil, empty bins, or one emptied by a
// repeated key) has no Wire, and is written again with empty summaries,
// as the agent reads them; one summary with values gets a Wire.
func TestEmptySummariesLeaveWireNil(t *testing.T) {
	one := AppendSketch(nil, sketchOf(1))
	for _, tc := range []struct {
		name   string
		n      uint32
		fields mp
		wire   bool
	}{
		{"none", 1, mp(nil).u64("Hits", 1), false},
		{"nil", 2, mp(nil).key("OkSummary").raw(0xc0).key("ErrorSummary").raw(0xc0), false},
		{"empty bins", 2, mp(nil).key("OkSummary").raw(0xc4, 0).key("ErrorSummary").raw(0xc4, 0), false},
		{"empty sketches", 2, mp(nil).key("OkSummary").raw(msgp.AppendBytes(nil, emptySketch)...).
			key("ErrorSummary").raw(msgp.AppendBytes(nil, emptySketch)...), false},
		{"emptied by a repeated key", 3, mp(nil).u64("Hits", 1).key("OkSummary").raw(msgp.AppendBytes(nil, one)...).
			key("OkSummary").raw(0xc4, 0), false},
		{"ok only", 3, mp(nil).u64("Hits", 1).key("OkSummary").raw(msgp.AppendBytes(nil, one)...).
			key("ErrorSummary").raw(0xc4, 0), true},
		{"error only", 3, mp(nil).u64("Hits", 1).key("OkSummary").raw(0xc4, 0).
			key("ErrorSummary").raw(msgp.AppendBytes(nil, one)...), true},
	} {
		dec := Decoder{WireSketches: true}
		p, err := dec.Decode(oneGroup(tc.n, tc.fields), MaxGroups)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		g := &p.Buckets[0].Groups[0]
		if (g.Wire != nil) != tc.wire {
			t.Fatalf("%s: Wire %+v, want one: %v", tc.name, g.Wire, tc.wire)
		}
		back, err := DecodePayloadAsAgent(p.Append(nil))
		if err != nil {
			t.Fatalf("%s: written again: %v", tc.name, err)
		}
		count := func(s *aggregate.Sketch) uint64 { // nil: empty
			if s == nil {
				return 0
			}
			return s.Count()
		}
		bg := &back.Buckets[0].Groups[0]
		if tc.wire != (count(bg.Ok)+count(bg.Err) == 1) {
			t.Fatalf("%s: written again with summaries %v, %v", tc.name, bg.Ok, bg.Err)
		}
	}
}
