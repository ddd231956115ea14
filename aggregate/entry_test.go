// This file tests an entry's values: the counts and sketches spans add to
// it, merges into it, and sums that saturate instead of wrapping.

package aggregate

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestTableValues(t *testing.T) {
	tb := NewTable(0)
	var hits, errs, top, dur uint64
	r := rand.New(rand.NewPCG(5, 5))
	for i := range 1000 {
		s := baseSpan()
		s.Duration = 1 + r.Int64N(5e9)
		s.Error = i%7 == 0
		s.TopLevel = i%3 == 0
		tb.Add(&s)
		hits++
		dur += uint64(s.Duration)
		if s.Error {
			errs++
		}
		if s.TopLevel {
			top++
		}
	}
	got := tb.Touched(nil)
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	e := got[0]
	if e.Hits != hits || e.Errors != errs || e.TopLevelHits != top || e.Duration != dur {
		t.Fatalf("hits %d errors %d top %d duration %d, want %d %d %d %d",
			e.Hits, e.Errors, e.TopLevelHits, e.Duration, hits, errs, top, dur)
	}
	if e.Ok.Count() != hits-errs || e.Err.Count() != errs {
		t.Fatalf("ok sketch %d err sketch %d, want %d %d", e.Ok.Count(), e.Err.Count(), hits-errs, errs)
	}
}

// TestTableErrSketchLazy: a table's entry has both sketches from its
// creation (next to it, see tableEntry), empty, and an entry without
// errors pays nothing for the error sketch's bins.
func TestTableErrSketchLazy(t *testing.T) {
	tb := NewTable(0)
	s := baseSpan()
	for range 5 {
		tb.Add(&s)
	}
	e := tb.Touched(nil)[0]
	if e.Err == nil || e.Err.Count() != 0 || e.Err.bins != nil {
		t.Fatalf("Err sketch before the first error: %+v, want empty, without bins", e.Err)
	}
	if e.Ok == nil || e.Ok.Count() != 5 {
		t.Fatalf("Ok sketch %v, want 5 values", e.Ok)
	}
	if te := (*tableEntry)(unsafe.Pointer(e)); e.Ok != &te.ok || e.Err != &te.err {
		t.Fatal("a table entry's sketches are not its own tableEntry's")
	}
	s.Error = true
	s.Duration = 7e6
	tb.Add(&s)
	if e.Err.Count() != 1 || e.Err.bins == nil || e.Ok.Count() != 5 || e.Errors != 1 {
		t.Fatalf("after one error: Err %v Ok %d Errors %d", e.Err, e.Ok.Count(), e.Errors)
	}
	// Only errors: the ok sketch stays without bins.
	only := baseSpan()
	only.Resource, only.Error = "only-errors", true
	tb.Add(&only)
	if e2 := find(tb, &only); e2.Ok.Count() != 0 || e2.Ok.bins != nil || e2.Err.Count() != 1 {
		t.Fatalf("error-only entry: Ok %v Err %d", e2.Ok, e2.Err.Count())
	}
}

// count is a sketch's count, 0 for a sketch not allocated yet.
func count(s *Sketch) uint64 {
	if s == nil {
		return 0
	}
	return s.Count()
}

func TestEntryMerge(t *testing.T) {
	var a, b Entry
	a.record(100, false, true)
	b.record(200, true, false)
	b.record(300, false, true)
	a.Merge(&b)
	if a.Hits != 3 || a.Errors != 1 || a.TopLevelHits != 2 || a.Duration != 600 {
		t.Fatalf("merged %d/%d/%d/%d, want 3/1/2/600", a.Hits, a.Errors, a.TopLevelHits, a.Duration)
	}
	if a.Ok.Count() != 2 || a.Err.Count() != 1 {
		t.Fatalf("merged sketches ok %d err %d, want 2 1", a.Ok.Count(), a.Err.Count())
	}
	var c Entry
	c.Merge(&Entry{Hits: 1, Ok: &Sketch{}, Err: &Sketch{}})
	if c.Ok != nil || c.Err != nil || c.Hits != 1 {
		t.Fatal("merging empty sketches allocated sketches")
	}
}

// TestEntrySaturates: sums stop at math.MaxUint64 instead of wrapping —
// three spans of math.MaxInt64 ns through the table, then merges of
// decoded groups at the bound — and the sketch still counts every span.
func TestEntrySaturates(t *testing.T) {
	tb := NewTable(0)
	for i := range 3 {
		s := baseSpan()
		s.Duration = math.MaxInt64
		s.Error, s.TopLevel = i == 0, true
		tb.Add(&s)
	}
	got := tb.Touched(nil)
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	e := got[0]
	if e.Hits != 3 || e.Errors != 1 || e.TopLevelHits != 3 || e.Duration != math.MaxUint64 {
		t.Fatalf("hits %d errors %d top %d duration %d, want 3 1 3 %d", e.Hits, e.Errors, e.TopLevelHits, e.Duration, uint64(math.MaxUint64))
	}
	if e.Ok.Count() != 2 || e.Err.Count() != 1 {
		t.Fatalf("sketch counts ok %d err %d, want 2 1", e.Ok.Count(), e.Err.Count())
	}
	if q := e.Ok.Quantile(1); math.Abs(q-math.MaxInt64)/math.MaxInt64 > 0.01 {
		t.Fatalf("ok sketch max %g, want %g within 1 %%", q, float64(math.MaxInt64))
	}

	full := Entry{Hits: math.MaxUint64, Errors: math.MaxUint64, TopLevelHits: math.MaxUint64, Duration: math.MaxUint64 - 1}
	full.Merge(&Entry{Hits: 1, Errors: 1, TopLevelHits: 1, Duration: 2})
	if full.Hits != math.MaxUint64 || full.Errors != math.MaxUint64 || full.TopLevelHits != math.MaxUint64 || full.Duration != math.MaxUint64 {
		t.Fatalf("merged at the bound: %d/%d/%d/%d, want all %d", full.Hits, full.Errors, full.TopLevelHits, full.Duration, uint64(math.MaxUint64))
	}
	var sk Sketch
	sk.AddZeros(math.MaxUint64 - 1)
	sk.AddIndex(10, 5)
	if sk.Count() != math.MaxUint64 {
		t.Fatalf("sketch count %d, want it saturated at %d", sk.Count(), uint64(math.MaxUint64))
	}
}

// TestNonPositiveDurationAddsNothing: a record of a negative duration,
// which Publish never passes but a Table user may, adds nothing to its
// group's Duration rather than wrapping it to MaxUint64.
func TestNonPositiveDurationAddsNothing(t *testing.T) {
	tb := NewTable(0)
	for _, d := range []int64{1000, -1, 0} {
		s := Record{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Duration: d}
		tb.Add(&s)
	}
	if e := tb.Touched(nil)[0]; e.Hits != 3 || e.Duration != 1000 {
		t.Fatalf("hits %d, duration %d after spans of 1000, -1 and 0 ns; want 3, 1000", e.Hits, e.Duration)
	}
}
