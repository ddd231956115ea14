// This file tests the cardinality budgets: what each field and peer-tag key
// admits per interval, the cap on peer-tag keys, the memory the admitted
// sets take, and the default limits.

package aggregate

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBudgetResetsEachInterval(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 2})
	add := func(r string) { tb.Add(&Record{Service: "s", Resource: r, Duration: 1}) }
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

// TestBudgetReadmitAllocs: values seen in the previous interval are admitted
// again without allocating.
func TestBudgetReadmitAllocs(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	spans := make([]Record, 50)
	for i := range spans {
		spans[i] = Record{Service: "s", Name: "op", Resource: fmt.Sprint("r", i), SpanKind: "client", Duration: 100}
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
		s := Record{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
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

// TestCollapsedPeerTagsCountsSpans: a span with several peer tags over
// their budgets counts once in Collapsed(FieldPeerTags), as a span counts
// once per other field, so the count stays within CollapsedSpans (Health
// says each field's count is part of it).
func TestCollapsedPeerTagsCountsSpans(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{PeerTag: 1})
	for i := range 3 {
		s := Record{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
		s.SetPeerTags([]string{fmt.Sprint("a:", i), fmt.Sprint("b:", i), fmt.Sprint("c:", i)})
		tb.Add(&s)
	}
	if spans, peer := tb.CollapsedSpans(), tb.Collapsed(FieldPeerTags); spans != 2 || peer != 2 {
		t.Fatalf("CollapsedSpans %d, Collapsed(peer tags) %d; want 2, 2 (the last two spans, each with 3 tags over)", spans, peer)
	}
}

// TestBudgetPeerKeysPerInterval: peer-tag keys beyond maxPeerTagKeys
// collapse for the rest of their interval only: 64 junk keys in one
// interval do not make a real key's values tracer_blocked_value in the
// next (the key budget is per interval, as the value budgets are).
func TestBudgetPeerKeysPerInterval(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	add := fillPeerTagKeys(tb)
	add("peer.hostname:db1") // the 65th key of the interval: blocked
	if got := touchedByResource(tb); got["s|r|["+BlockedValue+"]"] == nil {
		t.Fatalf("a key past %d in one interval was not collapsed: %v", maxPeerTagKeys, keys(got))
	}
	tb.Rotate()
	add("peer.hostname:db1")
	want := []string{"s|r|[peer.hostname:db1]"}
	if got := keys(touchedByResource(tb)); !slices.Equal(got, want) {
		t.Fatalf("the next interval's groups %v, want %v", got, want)
	}
}

func TestBudgetUnlimited(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: -1})
	for i := range 3000 {
		tb.Add(&Record{Resource: fmt.Sprint(i), Duration: 1})
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
			tb.Add(&Record{Resource: fmt.Sprint(iv, "-", i), Duration: 1})
		}
		tb.Rotate()
	}
	if rs := tb.budgets.fields[FieldResource]; rs.used > rs.remember+10 || len(rs.slots) > 256 {
		t.Fatalf("resource set holds %d values in %d slots", rs.used, len(rs.slots))
	}
}

// TestBudgetMatchesModel drives random spans (small value domains, small
// budgets, peer tags, random interval ends, bursts of attack) through a
// table and through a plain model of the budget rule — a value is kept if it
// was kept earlier in the interval or fewer than limit values were — and
// requires the same groups with the same hits every interval. It covers the
// lookup-first path, the admit-first path under attack, and their switches.
func TestBudgetMatchesModel(t *testing.T) {
	type modelKey struct{ svc, op, res, host string }
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		limits := Limits{Service: 1 + r.IntN(3), Operation: 1 + r.IntN(4), Resource: 1 + r.IntN(6), PeerTag: 1 + r.IntN(3)}
		tb := NewTable(1024) // above the ≤ 560 keys the budgets allow: no overflow here
		tb.SetLimits(limits)
		admitted := map[string]map[string]bool{}
		admit := func(field, v string, limit int) string {
			set := admitted[field]
			if set == nil {
				set = map[string]bool{}
				admitted[field] = set
			}
			if set[v] || len(set) < limit {
				set[v] = true
				return v
			}
			return BlockedValue
		}
		want := map[modelKey]uint64{}
		interned := map[string]string{}
		for step := range 3000 {
			domain := 3
			if (step/200)%2 == 1 { // alternate calm and attack phases
				domain = 40
			}
			// Values are interned (one string per value, like a tracer's
			// constants: the identity fast paths hit) or built afresh
			// (equal bytes at a new address: they must not), at random.
			pick := func(prefix string) string {
				v := fmt.Sprint(prefix, r.IntN(domain))
				if r.IntN(2) == 0 {
					if w, ok := interned[v]; ok {
						return w
					}
					interned[v] = v
				}
				return v
			}
			svc, op, res := pick("s"), pick("o"), pick("r")
			s := Record{Service: svc, Name: op, Resource: res, SpanKind: "client", Duration: 1}
			hostTag := pick("peer.hostname:h")
			host := strings.TrimPrefix(hostTag, "peer.hostname:")
			s.SetPeerTags([]string{hostTag, "db.system:pg"})
			tb.Add(&s)
			mh := admit("host", host, limits.PeerTag)
			k := modelKey{admit("svc", svc, limits.Service), admit("op", op, limits.Operation), admit("res", res, limits.Resource), mh}
			admit("db", "pg", limits.PeerTag)
			want[k]++
			if r.IntN(150) == 0 || step == 2999 {
				got := map[modelKey]uint64{}
				for _, e := range tb.Touched(nil) {
					host := ""
					for _, p := range e.PeerTags {
						if v, ok := strings.CutPrefix(p, "peer.hostname:"); ok {
							host = v
						}
					}
					got[modelKey{e.Service, e.Name, e.Resource, host}] += e.Hits
				}
				if tb.Overflowed() != 0 {
					t.Fatalf("seed %d: %d spans overflowed", seed, tb.Overflowed())
				}
				if !maps.Equal(got, want) {
					t.Fatalf("seed %d step %d: table %v, model %v", seed, step, got, want)
				}
				tb.Rotate()
				admitted = map[string]map[string]bool{}
				want = map[modelKey]uint64{}
			}
		}
	}
}

// A full set turns away values it never held on its filter bit, and keeps
// admitting the values it holds, in this interval and, once re-admitted, in
// the next; the filter is cleared with the slots.
func TestBudgetFilter(t *testing.T) {
	s := newValueSet(1024, BlockedValue, maphash.MakeSeed())
	held := make([]string, 1024)
	for i := range held {
		held[i] = fmt.Sprint("GET /api/v1/items/", 1_000_000+i)
		if !s.within(held[i], 1) {
			t.Fatalf("value %d of 1024 refused", i)
		}
	}
	passed := 0
	for i := range 100_000 {
		v := fmt.Sprint("GET /api/v1/items/", 2_000_000+i) // differs from a held one in one digit
		if w, bit := s.filterBit(s.sample(v)); s.filter[w]&bit != 0 {
			passed++
		}
		if s.within(v, 1) {
			t.Fatalf("fresh value %d admitted over the budget", i)
		}
	}
	// 1024 values in 4096 slots: 1024 of 16384 filter bits set.
	if rate := float64(passed) / 100_000; rate > 0.10 {
		t.Errorf("%.1f %% of values never held passed the filter, want about 6 %%", 100*rate)
	}
	for ep := uint32(1); ep <= 2; ep++ {
		for i, v := range held {
			if !s.within(v, ep) {
				t.Fatalf("held value %d refused in interval %d", i, ep)
			}
		}
	}
	// Epoch 2 holds all 1024 again: full. A wrap of the 16-bit stamp clears
	// slots and filter, and there is room again.
	if s.within("fresh-x", 2) {
		t.Fatal("fresh value admitted in a full interval")
	}
	if !s.within("fresh-x", 1<<slotEpochBits+2) {
		t.Fatal("fresh value refused after the reset")
	}
	if n := bitsSet(s.filter); n != 1 {
		t.Fatalf("%d filter bits set after the reset and one insert, want 1", n)
	}
}

// Values that differ only outside the sampled words share a sample: the
// filter cannot tell them apart, and the full hash decides each, exactly.
func TestBudgetSampleCollisions(t *testing.T) {
	s := newValueSet(4, BlockedValue, maphash.MakeSeed())
	// 40 bytes: the sample reads bytes 0-7, 16-23 and 32-39; these differ in
	// bytes 10-11 only.
	v := func(i int) string { return fmt.Sprintf("SELECT * F%02dOM users WHERE id = $1 LIMIT", i) }
	if len(v(0)) != 40 || s.sample(v(0)) != s.sample(v(99)) {
		t.Fatalf("the test's values do not share a sample (len %d)", len(v(0)))
	}
	for i := range 4 {
		if !s.within(v(i), 1) {
			t.Fatalf("value %d of 4 refused", i)
		}
	}
	for i := 4; i < 100; i++ {
		if s.within(v(i), 1) {
			t.Fatalf("value %d admitted over the budget of 4", i)
		}
	}
	for i := range 4 {
		if !s.within(v(i), 1) {
			t.Fatalf("held value %d refused", i)
		}
	}
}

// The sample reads every length without reading past the value, and
// values that differ in a sampled byte or in length get different samples.
func TestBudgetSample(t *testing.T) {
	s := newValueSet(16, BlockedValue, maphash.MakeSeed())
	seen := map[uint64]string{}
	base := "0123456789abcdefghijklmnopqrstuvwxyz"
	for n := 0; n <= len(base); n++ {
		v := base[:n]
		if w, ok := seen[s.sample(v)]; ok {
			t.Fatalf("%q and %q share a sample", v, w)
		}
		seen[s.sample(v)] = v
		if n > 0 {
			b := []byte(v)
			b[n-1] ^= 1 // the last byte is always sampled
			if s.sample(string(b)) == s.sample(v) {
				t.Fatalf("%q and %q share a sample", v, b)
			}
		}
	}
	if s.sample("") == newValueSet(16, BlockedValue, maphash.MakeSeed()).sample("") {
		t.Fatal("two seeds give one sample")
	}
}

func bitsSet(words []uint64) (n int) {
	for _, w := range words {
		n += bits.OnesCount64(w)
	}
	return n
}

func touchedByResource(t *Table) map[string]*Entry {
	m := map[string]*Entry{}
	for _, e := range t.Touched(nil) {
		m[e.Service+"|"+e.Resource+"|"+fmt.Sprint(e.PeerTags)] = e
	}
	return m
}

func keys(m map[string]*Entry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// addPeerTag adds a client span whose one peer tag is tag.
func addPeerTag(tb *Table, tag string) {
	s := Record{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
	s.SetPeerTags([]string{tag})
	tb.Add(&s)
}

// TestPeerKeyCapIsPerInterval: without the agent's list an interval tracks
// at most 64 peer-tag keys; keys of an earlier interval do not count
// against the next one (40 keys, then 24 new ones and a 25th in the next
// interval: none collapses).
func TestPeerKeyCapIsPerInterval(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	for i := range 40 {
		addPeerTag(tb, fmt.Sprintf("old%d:v", i))
	}
	tb.Rotate()
	for i := range 25 {
		addPeerTag(tb, fmt.Sprintf("new%d:v", i))
	}
	if n := tb.Collapsed(FieldPeerTags); n != 0 {
		t.Fatalf("%d peer tags collapsed in an interval of 25 keys", n)
	}
	for i := range 40 { // 65 keys in this interval: the last one collapses
		addPeerTag(tb, fmt.Sprintf("more%d:v", i))
	}
	if n := tb.Collapsed(FieldPeerTags); n != 1 {
		t.Fatalf("%d peer tags collapsed in an interval of 65 keys, want 1", n)
	}
}

// TestPeerKeyCapNotWithAgentList: with the agent's list of keys, which
// bounds them, every listed key has its own budget, 70 of them too.
func TestPeerKeyCapNotWithAgentList(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	var list []string
	for i := range 70 {
		list = append(list, fmt.Sprintf("key%d", i))
	}
	tb.SetPeerTagKeys(list)
	for _, k := range list {
		addPeerTag(tb, k+":v")
	}
	if n := tb.Collapsed(FieldPeerTags); n != 0 {
		t.Fatalf("%d of 70 listed keys' first values collapsed, want 0", n)
	}
}

// TestKeyListEndsTheCapAtOnce: without a key list the 65th key of an
// interval collapses, and its position remembers the cap's answer. The
// agent's list arriving mid-interval turns the cap off: the next span with
// a listed key at that position keeps its tag.
func TestKeyListEndsTheCapAtOnce(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	for i := range maxPeerTagKeys {
		addPeerTag(tb, fmt.Sprintf("k%d:v", i))
	}
	addPeerTag(tb, "out.host:a") // one key too many: collapsed
	if n := tb.Collapsed(FieldPeerTags); n != 1 {
		t.Fatalf("collapsed %d, want 1 at key %d", n, maxPeerTagKeys+1)
	}
	tb.SetPeerTagKeys([]string{"out.host"})
	addPeerTag(tb, "out.host:b")
	if n := tb.Collapsed(FieldPeerTags); n != 1 {
		t.Fatalf("collapsed %d once the agent's list names out.host, want still 1", n)
	}
	found := false
	for _, e := range tb.Touched(nil) {
		if slices.Equal(e.PeerTags, []string{"out.host:b"}) && e.Hits == 1 {
			found = true
		}
	}
	if !found {
		t.Fatal("no group of out.host:b with 1 hit")
	}
}

// TestListedKeysKeepTheirSets: with the agent's list (no cap), the sets of
// the keys in use outlive the interval: a client with as many listed keys
// as the cap allocates nothing per interval (it did from 64 keys on, each
// interval clearing them all).
func TestListedKeysKeepTheirSets(t *testing.T) {
	for _, n := range []int{maxPeerTagKeys - 1, maxPeerTagKeys, 2 * maxPeerTagKeys} {
		tb := NewTable(0)
		tb.SetLimits(Limits{})
		var list []string
		recs := make([]Record, n)
		for i := range recs {
			list = append(list, fmt.Sprintf("key%d", i))
			recs[i] = Record{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
			recs[i].SetPeerTags([]string{fmt.Sprintf("key%d:v", i)})
		}
		tb.SetPeerTagKeys(list)
		interval := func() {
			for i := range recs {
				tb.Add(&recs[i])
			}
			tb.Rotate()
		}
		interval()
		if allocs := testing.AllocsPerRun(20, interval); allocs != 0 {
			t.Errorf("%d listed keys in use: %.0f allocations per interval, want 0", n, allocs)
		}
		if c := tb.Collapsed(FieldPeerTags); c != 0 {
			t.Errorf("%d listed keys: %d collapsed, want 0", n, c)
		}
	}
}

// TestBudgetAbsentLabel: an absent label ("") takes no room in its field's
// budget and is never replaced: with the HTTP-method budget full, a span
// without a method keeps none, and the budget still holds its two methods.
func TestBudgetAbsentLabel(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{HTTPMethod: 2})
	tb.Add(&Record{Service: "web", Name: "db", Resource: "q", SpanKind: "client", Duration: 1})
	for i := range 3 {
		tb.Add(&Record{Service: "web", Name: "http.request", Resource: "r", SpanKind: "server",
			HTTPMethod: fmt.Sprint("M", i), Duration: 1})
	}
	tb.Add(&Record{Service: "web", Name: "db", Resource: "q", SpanKind: "client", Duration: 1})
	methods := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		methods[e.HTTPMethod] += e.Hits
	}
	want := map[string]uint64{"": 2, "M0": 1, "M1": 1, BlockedValue: 1}
	if !maps.Equal(methods, want) || tb.Collapsed(FieldHTTPMethod) != 1 {
		t.Fatalf("hits by HTTP method %v, %d collapsed; want %v and 1 (M2, over the budget of 2)", methods, tb.Collapsed(FieldHTTPMethod), want)
	}
}

// A budget beyond MaxLimit is MaxLimit: its set is sized by the limit, and a
// limit near math.MaxInt overflowed that size into a set too small to
// hold the limit, in which admit probed forever.
func TestBudgetHugeLimitIsMaxLimit(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: math.MaxInt, PeerTag: math.MaxInt - 63})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range MaxLimit + 10 {
			s := Record{Resource: fmt.Sprint("r", i), SpanKind: "client", Duration: 1}
			s.SetPeerTags([]string{fmt.Sprint("peer.hostname:h", i)})
			tb.Add(&s)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Add did not return")
	}
	if got := tb.Collapsed(FieldResource); got != 10 {
		t.Errorf("resources collapsed: %d, want 10", got)
	}
	if got := tb.Collapsed(FieldPeerTags); got != 10 {
		t.Errorf("peer tags collapsed: %d, want 10", got)
	}
}

// TestDefaultBudgets: the default budgets are DESIGN §5's, each its own
// field's: a field's limit-th distinct value in an interval keeps its
// value, the next becomes tracer_blocked_value (key:tracer_blocked_value
// for a peer tag) and is counted for that field only.
func TestDefaultBudgets(t *testing.T) {
	design := map[Field]int{
		FieldResource: 1024, FieldService: 32, FieldOperation: 64, FieldType: 16, FieldSpanKind: 8,
		FieldHTTPMethod: 16, FieldHTTPEndpoint: 512, FieldGRPCStatusCode: 24, FieldServiceSource: 16,
		FieldPeerTags: 512,
	}
	if len(design) != int(NumFields) {
		t.Fatalf("%d fields have a budget in DESIGN, the table has %d", len(design), NumFields)
	}
	for f, limit := range design {
		t.Run(f.String(), func(t *testing.T) {
			tb := NewTable(0)
			tb.SetLimits(DefaultLimits())
			rec := func(i int) Record {
				s := baseSpan()
				v := fmt.Sprint("v", i)
				if f == FieldPeerTags {
					s.SpanKind = "client"
					s.SetPeerTags([]string{"peer.hostname:" + v})
				} else {
					s.labels()[f] = v
				}
				return s
			}
			for i := range limit + 1 {
				s := rec(i)
				tb.Add(&s)
			}
			for g := range NumFields {
				if n, want := tb.Collapsed(g), map[bool]uint64{true: 1}[g == f]; n != want {
					t.Fatalf("after %d values: Collapsed(%v) = %d, want %d", limit+1, g, n, want)
				}
			}
			es := tb.Touched(nil)
			if len(es) != limit+1 {
				t.Fatalf("%d groups, want %d", len(es), limit+1)
			}
			last, want := es[limit], BlockedValue
			got := ""
			if f == FieldPeerTags {
				got, want = strings.Join(last.PeerTags, ","), "peer.hostname:"+BlockedValue
			} else {
				got = last.labels()[f]
			}
			if got != want {
				t.Fatalf("value %d of the interval is %q, want %q", limit+1, got, want)
			}
			if f != FieldPeerTags && es[limit-1].labels()[f] != fmt.Sprint("v", limit-1) {
				t.Fatalf("value %d of the interval is %q, want it kept", limit, es[limit-1].labels()[f])
			}
		})
	}
}

// TestNoValueIsNoTracerString: a label of the one byte 0, built at run time
// (the runtime serves every such string from one shared table), is decided
// as any other value: the first of an interval is admitted under an empty
// budget, not taken for the interval's "no value yet".
func TestNoValueIsNoTracerString(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{Resource: 4})
	zero := []byte{0}
	for round := range 2 {
		s := Record{Service: "s", Name: "op", Resource: string(zero), SpanKind: "server", Duration: 1}
		tb.Add(&s)
		got := tb.Touched(nil)
		if len(got) != 1 || got[0].Resource != "\x00" || tb.Collapsed(FieldResource) != 0 {
			t.Fatalf("interval %d: %d entries, collapsed %d; want the resource \"\\x00\" admitted under an empty budget",
				round, len(got), tb.Collapsed(FieldResource))
		}
		tb.Rotate()
	}
}

// TestPeerKeyCapWithUnlimitedPeerTag: the cap on peer-tag keys an interval
// holds applies whatever PeerTag's limit says, unlimited included: the
// 65th key's span is collapsed and counted.
func TestPeerKeyCapWithUnlimitedPeerTag(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{PeerTag: -1})
	add := fillPeerTagKeys(tb)
	if n := tb.CollapsedSpans(); n != 0 {
		t.Fatalf("%d keys with unlimited values: %d spans collapsed, want 0", maxPeerTagKeys, n)
	}
	add("peer.hostname:db1") // the 65th key of the interval
	if n, p := tb.CollapsedSpans(), tb.Collapsed(FieldPeerTags); n != 1 || p != 1 {
		t.Fatalf("key %d: CollapsedSpans %d, Collapsed(peer tags) %d; want 1, 1", maxPeerTagKeys+1, n, p)
	}
	if got := touchedByResource(tb); got["s|r|["+BlockedValue+"]"] == nil {
		t.Fatalf("key %d was not collapsed to %s: %v", maxPeerTagKeys+1, BlockedValue, keys(got))
	}
}

// fillPeerTagKeys adds to tb a client span of each of maxPeerTagKeys
// distinct peer-tag keys, and returns a function adding one more span with
// the one peer tag it is given.
func fillPeerTagKeys(tb *Table) func(tag string) {
	add := func(tag string) {
		s := Record{Service: "s", Resource: "r", SpanKind: "client", Duration: 1}
		s.SetPeerTags([]string{tag})
		tb.Add(&s)
	}
	for i := range maxPeerTagKeys {
		add(fmt.Sprintf("junk%d:v", i))
	}
	return add
}
