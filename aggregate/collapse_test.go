// This file tests the collapsed-key path: only the over-budget field
// collapses, the attack state follows the last span, and collapses are
// counted per field.

package aggregate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestBudgetCollapsesOnlyTheOverBudgetField(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 3})
	for i := range 5 {
		for range 2 {
			tb.Add(&Record{Service: "svc", Name: "op", Resource: fmt.Sprint("r", i), Duration: 10})
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

// TestCollapsedKeepsFlagsAndStatus: a collapsed key replaces only the
// over-budget field; the span's Synthetics, TraceRoot and HTTP status code
// stay part of it (DESIGN §5), so synthetic and real traffic over a budget
// are still told apart.
func TestCollapsedKeepsFlagsAndStatus(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 1})
	tb.Add(&Record{Service: "svc", Name: "op", Resource: "r0", Duration: 1})
	tb.Add(&Record{Service: "svc", Name: "op", Resource: "r1", Duration: 1, Synthetics: true})
	tb.Add(&Record{Service: "svc", Name: "op", Resource: "r2", Duration: 1, TraceRoot: true})
	tb.Add(&Record{Service: "svc", Name: "op", Resource: "r3", Duration: 1, HTTPStatusCode: 500})
	tb.Add(&Record{Service: "svc", Name: "op", Resource: "r4", Duration: 1})
	got := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		if e.Resource == BlockedValue {
			got[fmt.Sprintf("synthetics=%v root=%d code=%d", e.Synthetics, e.IsTraceRoot, e.HTTPStatusCode)] += e.Hits
		}
	}
	want := map[string]uint64{
		fmt.Sprintf("synthetics=true root=%d code=0", False):    1,
		fmt.Sprintf("synthetics=false root=%d code=0", True):    1,
		fmt.Sprintf("synthetics=false root=%d code=500", False): 1,
		fmt.Sprintf("synthetics=false root=%d code=0", False):   1,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("collapsed groups %v, want %v", got, want)
	}
}

func TestAttackedFollowsTheLastSpan(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 1})
	add := func(res string) {
		s := Record{Service: "svc", Name: "op", Resource: res, SpanKind: "server", Duration: 1}
		tb.Add(&s)
	}
	if tb.Attacked() {
		t.Fatal("a new table reports an attack")
	}
	add("r0") // admitted: the budget's one value
	if tb.Attacked() {
		t.Fatal("attacked after a span within budget")
	}
	add("r1") // over budget
	if !tb.Attacked() {
		t.Fatal("not attacked after a collapsed span")
	}
	add("r2")
	if !tb.Attacked() {
		t.Fatal("not attacked after a second collapsed span")
	}
	add("r0") // within budget (and in the recent-span cache): the attack state ends
	if tb.Attacked() {
		t.Fatal("still attacked after a span within budget")
	}
	add("r3")
	add(strings.Clone("r0")) // equal bytes elsewhere: decided by the budgets
	if tb.Attacked() {
		t.Fatal("still attacked after a span within budget")
	}
	if tb.CollapsedSpans() != 3 || tb.Collapsed(FieldResource) != 3 {
		t.Fatalf("collapsed spans %d, resources %d, want 3 and 3", tb.CollapsedSpans(), tb.Collapsed(FieldResource))
	}
}

// Collapses are counted per field whatever the order in which the sets of
// over-budget fields follow each other (admit counts runs of one set).
func TestCollapsedCountsPerFieldAcrossRuns(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 1, Service: 1, Operation: 1, PeerTag: 1})
	first := Record{Service: "s", Name: "o", Resource: "r", SpanKind: "client", Duration: 1}
	first.SetPeerTags([]string{"peer.hostname:h"})
	tb.Add(&first) // fills every budget
	want := map[Field]uint64{}
	r := rand.New(rand.NewPCG(3, 3))
	var spans uint64
	for i := range 2000 {
		s := Record{Service: "s", Name: "o", Resource: "r", SpanKind: "client", Duration: 1}
		over := r.IntN(8) // which of resource, service, operation go over
		if r.IntN(4) == 0 {
			over = 7 // runs of one set, as under attack
		}
		for bit, f := range []Field{FieldResource, FieldService, FieldOperation} {
			if over&(1<<bit) != 0 {
				want[f]++
			}
		}
		if over&1 != 0 {
			s.Resource = fmt.Sprint("r", i)
		}
		if over&2 != 0 {
			s.Service = fmt.Sprint("s", i)
		}
		if over&4 != 0 {
			s.Name = fmt.Sprint("o", i)
		}
		if i%5 == 0 {
			s.SetPeerTags([]string{fmt.Sprint("peer.hostname:h", i)})
			want[FieldPeerTags]++
		}
		if over != 0 || i%5 == 0 {
			spans++
		}
		tb.Add(&s)
		if i%97 == 0 { // reading mid-run must not change the counts
			tb.Collapsed(FieldResource)
		}
	}
	for _, f := range []Field{FieldResource, FieldService, FieldOperation, FieldType, FieldPeerTags} {
		if got := tb.Collapsed(f); got != want[f] {
			t.Errorf("Collapsed(%v) = %d, want %d", f, got, want[f])
		}
	}
	if tb.CollapsedSpans() != spans {
		t.Errorf("CollapsedSpans = %d, want %d", tb.CollapsedSpans(), spans)
	}
}

// TestCollapsedKindNotCachedAsRaw: an internal span whose span kind goes
// over budget keeps its lone _dd.base_service tag (outside the key list)
// only because its own kind is internal; a raw span whose kind reads
// tracer_blocked_value, with the same tag, keeps none. Their records read
// alike, so the recent-span cache by contents must not hand one the
// other's entry, in either order: the caches change no outcome (as
// TestCachesMatchFullPath checks on random workloads).
func TestCollapsedKindNotCachedAsRaw(t *testing.T) {
	mk := func(kind string, tags ...string) *Record {
		s := &Record{Service: "web", Name: "op", Resource: "r", SpanKind: kind, Duration: 10}
		s.SetPeerTags(tags)
		return s
	}
	for name, tc := range map[string]struct {
		limit       int
		before      []*Record // the last one's key stays in the caches
		after       *Record
		wantEntries int
	}{
		"collapsed first": {1, []*Record{mk("client"), mk("internal", "_dd.base_service:web"), mk("client")},
			mk(strings.Clone(BlockedValue), strings.Clone("_dd.base_service:web")), 3},
		"raw first": {2, []*Record{mk(strings.Clone(BlockedValue), strings.Clone("_dd.base_service:web")), mk("client")},
			mk("internal", "_dd.base_service:web"), 3},
	} {
		run := func(viaCache bool) string {
			tb := NewTable(0)
			tb.SetLimits(Limits{SpanKind: tc.limit})
			tb.SetPeerTagKeys([]string{"peer.service"})
			for _, s := range tc.before {
				tb.Add(s)
			}
			if !viaCache {
				forgetAll(tb)
			}
			tb.Add(tc.after)
			var out []string
			for _, e := range tb.Touched(nil) {
				out = append(out, fmt.Sprintf("{kind=%s peers=%v hits=%d}", e.SpanKind, e.PeerTags, e.Hits))
			}
			slices.Sort(out)
			return strings.Join(out, " ")
		}
		got, want := run(true), run(false)
		if got != want || strings.Count(want, "{") != tc.wantEntries {
			t.Errorf("%s: with the caches\n  %s\nfull path (want %d entries)\n  %s", name, got, tc.wantEntries, want)
		}
	}
}

// TestEmptyQuantizedPeerNotCachedAsRaw: a collapsed span's tag
// "peer.hostname:," quantizes to "peer.hostname:", kept as the agent keeps
// it; a raw span whose resource reads tracer_blocked_value and whose tag is
// "peer.hostname:" itself (no value: dropped) reads alike, so the cache by
// contents must not hand it the collapsed span's entry.
func TestEmptyQuantizedPeerNotCachedAsRaw(t *testing.T) {
	mk := func(res string, tags ...string) *Record {
		s := &Record{Service: "web", Name: "op", Resource: res, SpanKind: "client", Duration: 10}
		s.SetPeerTags(tags)
		return s
	}
	run := func(viaCache bool) string {
		tb := NewTable(0)
		tb.SetLimits(Limits{Resource: 1})
		tb.Add(mk("r1", "peer.hostname:h"))
		tb.Add(mk("r2", "peer.hostname:,")) // resource collapsed
		tb.Add(mk("r1", "peer.hostname:h")) // within budget: off the attack path
		if !viaCache {
			forgetAll(tb)
		}
		tb.Add(mk(strings.Clone(BlockedValue), strings.Clone("peer.hostname:")))
		var out []string
		for _, e := range tb.Touched(nil) {
			out = append(out, fmt.Sprintf("{res=%s peers=%q hits=%d}", e.Resource, e.PeerTags, e.Hits))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	want := `{res=r1 peers=["peer.hostname:h"] hits=2} {res=tracer_blocked_value peers=["peer.hostname:"] hits=1} {res=tracer_blocked_value peers=[] hits=1}`
	if got, full := run(true), run(false); got != want || full != want {
		t.Errorf("with the caches\n  %s\nfull path\n  %s\nwant\n  %s", got, full, want)
	}
}

// TestLiteralBlockedValueNeverCounts: a span that carries the sentinel
// itself (a tracer that collapsed it already) joins the collapsed group
// without being counted as collapsed, whatever the span before it: it used
// to count only after a collapsed span, which checks the budgets first.
func TestLiteralBlockedValueNeverCounts(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 1})
	add := func(res string) {
		tb.Add(&Record{Service: "svc", Name: "op", Resource: res, SpanKind: "server", Duration: 1})
	}
	add("r0")         // the budget's one value
	add("r1")         // collapsed: 1
	add(BlockedValue) // after a collapsed span
	add("r0")
	add(BlockedValue) // after an admitted one
	if n := tb.Collapsed(FieldResource); n != 1 || tb.CollapsedSpans() != 1 {
		t.Fatalf("collapsed resource %d spans %d, want 1 and 1: the literal sentinel is no collapse", n, tb.CollapsedSpans())
	}
	if e := touchedByResource(tb)["svc|"+BlockedValue+"|[]"]; e == nil || e.Hits != 3 {
		t.Fatalf("the collapsed group holds %+v, want the collapsed span and both sentinel ones", e)
	}
}
