package aggregate

import (
	"fmt"
	"slices"
	"testing"
)

func touchedByResource(t *Table) map[string]*Entry {
	m := map[string]*Entry{}
	for _, e := range t.Touched(nil) {
		m[e.Service+"|"+e.Resource+"|"+fmt.Sprint(e.PeerTags)] = e
	}
	return m
}

func TestBudgetCollapsesOnlyTheOverBudgetField(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 3})
	for i := range 5 {
		for range 2 {
			tb.Add(&Span{Service: "svc", Name: "op", Resource: fmt.Sprint("r", i), Duration: 10})
		}
	}
	got := touchedByResource(tb)
	for _, k := range []string{"svc|r0|[]", "svc|r1|[]", "svc|r2|[]"} {
		if e := got[k]; e == nil || e.Hits != 2 {
			t.Fatalf("%s: %+v, want 2 hits", k, e)
		}
	}
	blocked := got["svc|"+BlockedValue+"|[]"]
	if blocked == nil || blocked.Hits != 4 || blocked.Name != "op" || blocked.Duration != 40 {
		t.Fatalf("collapsed group = %+v, want 4 hits with service and name kept", blocked)
	}
	if len(got) != 4 {
		t.Fatalf("%d groups, want 4", len(got))
	}
	if tb.Collapsed(FieldResource) != 4 || tb.CollapsedSpans() != 4 || tb.Collapsed(FieldService) != 0 {
		t.Fatalf("collapsed resource %d spans %d service %d, want 4 4 0",
			tb.Collapsed(FieldResource), tb.CollapsedSpans(), tb.Collapsed(FieldService))
	}
}

func TestBudgetResetsEachInterval(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 2})
	add := func(r string) { tb.Add(&Span{Service: "s", Resource: r, Duration: 1}) }
	add("a")
	add("b")
	add("c") // collapsed
	tb.Rotate()
	add("c") // a new interval: c is admitted now
	add("d")
	add("a") // over budget in this interval
	got := touchedByResource(tb)
	if got["s|c|[]"] == nil || got["s|d|[]"] == nil || got["s|"+BlockedValue+"|[]"].Hits != 1 {
		t.Fatalf("second interval groups: %v", keys(got))
	}
}

func keys(m map[string]*Entry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestBudgetReadmitAllocs: values seen in the previous interval are admitted
// again without allocating.
func TestBudgetReadmitAllocs(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	spans := make([]Span, 50)
	for i := range spans {
		spans[i] = Span{Service: "s", Name: "op", Resource: fmt.Sprint("r", i), SpanKind: "client", Duration: 100}
		spans[i].SetPeerTags([]string{"peer.hostname:h" + fmt.Sprint(i), "db.system:pg"})
	}
	for i := range spans {
		tb.Add(&spans[i])
	}
	allocs := testing.AllocsPerRun(20, func() {
		tb.Rotate()
		for i := range spans {
			tb.Add(&spans[i])
		}
	})
	if allocs != 0 {
		t.Fatalf("re-admitting known values allocates %.1f times per interval", allocs)
	}
	if tb.CollapsedSpans() != 0 {
		t.Fatalf("CollapsedSpans = %d under budget", tb.CollapsedSpans())
	}
}

func TestBudgetPeerTagsPerKey(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{PeerTag: 2})
	for i := range 4 {
		s := Span{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
		s.SetPeerTags([]string{fmt.Sprint("peer.hostname:h", i), "db.system:pg"})
		tb.Add(&s)
	}
	got := touchedByResource(tb)
	want := []string{
		"s|r|[db.system:pg peer.hostname:h0]",
		"s|r|[db.system:pg peer.hostname:h1]",
		"s|r|[db.system:pg peer.hostname:" + BlockedValue + "]",
	}
	if !slices.Equal(keys(got), want) {
		t.Fatalf("groups %v, want %v", keys(got), want)
	}
	if e := got[want[2]]; e.Hits != 2 {
		t.Fatalf("collapsed peer group hits %d, want 2", e.Hits)
	}
	if tb.Collapsed(FieldPeerTags) != 2 {
		t.Fatalf("Collapsed(peer) = %d, want 2", tb.Collapsed(FieldPeerTags))
	}
}

func TestBudgetUnlimited(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: -1})
	for i := range 3000 {
		tb.Add(&Span{Resource: fmt.Sprint(i), Duration: 1})
	}
	if tb.CollapsedSpans() != 0 {
		t.Fatalf("unlimited resource collapsed %d spans", tb.CollapsedSpans())
	}
}

// TestBudgetMemoryBounded: a value stream that never repeats keeps the
// remembered sets bounded.
func TestBudgetMemoryBounded(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 10})
	for iv := range 50 {
		for i := range 100 {
			tb.Add(&Span{Resource: fmt.Sprint(iv, "-", i), Duration: 1})
		}
		tb.Rotate()
	}
	if n := len(tb.budgets.fields[FieldResource].seen); n > 4*10+64+10 {
		t.Fatalf("resource set holds %d values", n)
	}
}

func TestSetPeerTagKeysFilters(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{"peer.service", "db.instance"})
	s := Span{Resource: "r", SpanKind: "client", Duration: 1}
	s.SetPeerTags([]string{"db.instance:i1", "noise:x", "peer.service:users", "nocolon"})
	tb.Add(&s)
	e := tb.Touched(nil)[0]
	if !slices.Equal(e.PeerTags, []string{"db.instance:i1", "peer.service:users"}) {
		t.Fatalf("kept peer tags %v", e.PeerTags)
	}
	tb.SetPeerTagKeys(nil)
	tb.Add(&s)
	if n := len(tb.Touched(nil)); n != 2 {
		t.Fatalf("%d groups after un-filtering, want 2", n)
	}
}
