// This file tests the Table: its cap and defaults, allocation-free hits,
// the overflow entry, the interval (Touched, Rotate, Clear), its index
// under removals; and holds the span and lookup helpers the package's
// tests share.

package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func baseSpan() Record {
	return Record{
		Service: "web-store", Name: "http.request", Resource: "GET /api/v1/users/:id",
		Type: "web", SpanKind: "server", HTTPMethod: "GET", HTTPEndpoint: "/api/v1/users/:id",
		HTTPStatusCode: 200, Duration: 1500,
	}
}

func withPeers(s Record, tags ...string) Record {
	s.SetPeerTags(tags)
	return s
}

// find returns the entry holding s's key, without adding anything.
func find(tb *Table, s *Record) *Entry {
	b := tb.encodeKey(s, tb.sortedPeers(tb.keptPeers(s)))
	return tb.lookup(hash(b), b[seedLen:])
}

// findWithHash is find for keys added with addWithHash.
func findWithHash(tb *Table, s *Record, h uint64) *Entry {
	b := tb.encodeKey(s, tb.sortedPeers(tb.keptPeers(s)))
	return tb.lookup(h, b[seedLen:])
}

// addWithHash is Table.Add with the hash chosen by the test, to force
// collisions of home slots and of whole hashes.
func addWithHash(tb *Table, s *Record, h uint64) {
	key := tb.encodeKey(s, tb.sortedPeers(tb.keptPeers(s)))[seedLen:]
	e := tb.lookup(h, key)
	if e == nil {
		e = tb.insert(h, key)
	}
	e.epoch = tb.epoch
	e.record(s.Duration, s.Error, s.TopLevel)
}

// checkSlots verifies the open-addressing index: exactly one slot per entry,
// holding the entry's hash, reachable from its home slot without crossing an
// empty slot (what lookup relies on after backward-shift deletions).
func checkSlots(t *testing.T, tb *Table) {
	t.Helper()
	seen := make([]bool, len(tb.entries))
	for i, sl := range tb.slots {
		if sl.idx == 0 {
			continue
		}
		if int(sl.idx) > len(tb.entries) || seen[sl.idx-1] {
			t.Fatalf("slot %d: idx %d out of range or indexed twice", i, sl.idx)
		}
		seen[sl.idx-1] = true
		if e := tb.entries[sl.idx-1]; e.hash != sl.hash {
			t.Fatalf("slot %d: hash %x, entry hash %x", i, sl.hash, e.hash)
		}
		for j := sl.hash & tb.mask; j != uint64(i); j = (j + 1) & tb.mask {
			if tb.slots[j].idx == 0 {
				t.Fatalf("slot %d unreachable: empty slot %d after its home %d", i, j, sl.hash&tb.mask)
			}
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("entry %d (%q) not indexed", i, tb.entries[i].Resource)
		}
	}
}

func wantKey(s Record) Key {
	tags := append(slices.Clone(s.PeerTags[:s.NumPeerTags]), s.ExtraPeerTags...)
	slices.Sort(tags)
	tags = slices.Compact(tags)
	if len(tags) == 0 {
		tags = nil
	}
	root := False
	if s.TraceRoot {
		root = True
	}
	return Key{
		Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type,
		SpanKind: s.SpanKind, HTTPMethod: s.HTTPMethod, HTTPEndpoint: s.HTTPEndpoint,
		GRPCStatusCode: s.GRPCStatusCode, ServiceSource: s.ServiceSource,
		HTTPStatusCode: s.HTTPStatusCode, Synthetics: s.Synthetics, IsTraceRoot: root,
		PeerTags: tags,
	}
}

func keyEqual(a, b Key) bool {
	return a.Service == b.Service && a.Name == b.Name && a.Resource == b.Resource &&
		a.Type == b.Type && a.SpanKind == b.SpanKind && a.HTTPMethod == b.HTTPMethod &&
		a.HTTPEndpoint == b.HTTPEndpoint && a.GRPCStatusCode == b.GRPCStatusCode &&
		a.ServiceSource == b.ServiceSource && a.HTTPStatusCode == b.HTTPStatusCode &&
		a.Synthetics == b.Synthetics && a.IsTraceRoot == b.IsTraceRoot &&
		slices.Equal(a.PeerTags, b.PeerTags) && (a.PeerTags == nil) == (b.PeerTags == nil)
}

func TestNewTableDefaults(t *testing.T) {
	for _, n := range []int{0, -5} {
		if got := NewTable(n).MaxEntries(); got != DefaultMaxEntries {
			t.Fatalf("NewTable(%d).MaxEntries() = %d, want %d", n, got, DefaultMaxEntries)
		}
	}
	tb := NewTable(3)
	if tb.MaxEntries() != 3 || tb.Len() != 0 || len(tb.slots) != 16 {
		t.Fatalf("NewTable(3): max %d len %d slots %d", tb.MaxEntries(), tb.Len(), len(tb.slots))
	}
	if got := len(NewTable(DefaultMaxEntries).slots); got != 2*DefaultMaxEntries {
		t.Fatalf("default table has %d slots, want %d", got, 2*DefaultMaxEntries)
	}
	if got := tb.Touched(nil); len(got) != 0 {
		t.Fatalf("empty table touched %d entries", len(got))
	}
}

// A cap beyond MaxEntriesLimit is MaxEntriesLimit: the slots are sized by the
// cap, and 2*math.MaxInt wrapped to a 16-slot index that 16 keys filled, after
// which a lookup probed forever.
func TestNewTableHugeCap(t *testing.T) {
	tb := NewTable(math.MaxInt)
	if got := tb.MaxEntries(); got != MaxEntriesLimit {
		t.Fatalf("NewTable(math.MaxInt).MaxEntries() = %d, want %d", got, MaxEntriesLimit)
	}
	if got := len(tb.slots); got != 2*MaxEntriesLimit {
		t.Fatalf("%d slots, want %d", got, 2*MaxEntriesLimit)
	}
	for i := range 100 {
		s := Record{Resource: fmt.Sprint("r", i), Duration: 1}
		tb.Add(&s)
	}
	if tb.Len() != 100 {
		t.Fatalf("%d entries, want 100", tb.Len())
	}
}

func TestTableHitAllocs(t *testing.T) {
	many := make([]string, MaxInlinePeerTags+4)
	for i := range many {
		many[i] = fmt.Sprintf("peer.tag%d:value%d", i, i)
	}
	cases := map[string]Record{
		"no peer tags": baseSpan(),
		"3 peer tags":  withPeers(baseSpan(), "peer.service:db", "db.instance:users", "peer.hostname:db-1"),
		"12 peer tags": withPeers(baseSpan(), many...),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			tb := NewTable(0)
			tb.Add(&s)
			i := int64(0)
			allocs := testing.AllocsPerRun(1000, func() {
				i++
				s.Duration = i * 997 // a new sketch bin now and then
				s.Error = i%5 == 0
				tb.Add(&s)
			})
			if allocs != 0 {
				t.Fatalf("hit path allocates %v times per span", allocs)
			}
			if tb.Len() != 1 {
				t.Fatalf("%d entries, want 1", tb.Len())
			}
		})
	}
}

func TestTableCapOverflow(t *testing.T) {
	const n = 4
	tb := NewTable(n)
	spans := make([]Record, n+2)
	for i := range spans {
		spans[i] = baseSpan()
		spans[i].Resource = fmt.Sprintf("res-%d", i)
		spans[i].Duration = int64(100 * (i + 1))
	}
	for i := range n {
		tb.Add(&spans[i])
	}
	if tb.Len() != n || tb.Overflowed() != 0 {
		t.Fatalf("len %d overflowed %d, want %d 0", tb.Len(), tb.Overflowed(), n)
	}
	extra := spans[n]
	extra.Error, extra.TopLevel = true, true
	tb.Add(&extra)
	if tb.Len() != n || tb.Overflowed() != 1 || tb.Recycled() != 0 {
		t.Fatalf("len %d overflowed %d recycled %d, want %d 1 0", tb.Len(), tb.Overflowed(), tb.Recycled(), n)
	}
	got := tb.Touched(nil)
	if len(got) != n+1 {
		t.Fatalf("touched %d, want %d", len(got), n+1)
	}
	ov := got[n]
	wantOv := Key{
		Service: BlockedValue, Name: BlockedValue, Resource: BlockedValue, Type: BlockedValue,
		SpanKind: BlockedValue, HTTPMethod: BlockedValue, HTTPEndpoint: BlockedValue,
		GRPCStatusCode: BlockedValue, ServiceSource: BlockedValue,
	}
	if !keyEqual(ov.Key, wantOv) {
		t.Fatalf("overflow key %+v", ov.Key)
	}
	if ov.Hits != 1 || ov.Errors != 1 || ov.TopLevelHits != 1 || ov.Duration != uint64(extra.Duration) || ov.Err.Count() != 1 {
		t.Fatalf("overflow values: hits %d errors %d top %d duration %d", ov.Hits, ov.Errors, ov.TopLevelHits, ov.Duration)
	}
	// Another new key and the same one again: still overflow; known keys still hit.
	tb.Add(&spans[n+1])
	tb.Add(&extra)
	tb.Add(&spans[0])
	if tb.Overflowed() != 3 || ov.Hits != 3 || tb.Len() != n || got[0].Hits != 2 {
		t.Fatalf("overflowed %d overflow hits %d len %d first hits %d, want 3 3 %d 2",
			tb.Overflowed(), ov.Hits, tb.Len(), n, got[0].Hits)
	}
	if find(tb, &extra) != nil {
		t.Fatal("overflowed key is indexed")
	}

	// Next interval: a new key recycles an idle entry.
	tb.Rotate()
	tb.Add(&spans[1]) // keep res-1 busy
	tb.Add(&extra)
	if tb.Recycled() != 1 || tb.Overflowed() != 3 || tb.Len() != n {
		t.Fatalf("recycled %d overflowed %d len %d, want 1 3 %d", tb.Recycled(), tb.Overflowed(), tb.Len(), n)
	}
	e := find(tb, &extra)
	if e == nil || e.Hits != 1 || !keyEqual(e.Key, wantKey(extra)) {
		t.Fatalf("recycled entry for the new key: %+v", e)
	}
	// The cursor starts at the first entry: res-0 was idle and is gone.
	if find(tb, &spans[0]) != nil {
		t.Fatal("res-0 still indexed after its entry was recycled")
	}
	if e.Err == nil || e.Err.Count() != 1 || e.Errors != 1 {
		t.Fatal("recycled entry lost the new span's error")
	}
	for i := 1; i < n; i++ {
		if find(tb, &spans[i]) == nil {
			t.Fatalf("res-%d lost by the recycle", i)
		}
	}
	tb.Add(&extra) // a hit now
	if tb.Recycled() != 1 || e.Hits != 2 {
		t.Fatalf("recycled %d hits %d, want 1 2", tb.Recycled(), e.Hits)
	}
	tb.Add(&spans[0]) // gone: recycles the next idle entry (res-2; res-1 is busy)
	if tb.Recycled() != 2 || find(tb, &spans[2]) != nil || find(tb, &spans[0]) == nil {
		t.Fatalf("recycled %d; res-2 indexed %v", tb.Recycled(), find(tb, &spans[2]) != nil)
	}
	tb.Add(&spans[2]) // recycles res-3, the last idle entry
	tb.Add(&spans[3]) // every entry is busy: overflow
	if tb.Recycled() != 3 || tb.Overflowed() != 4 {
		t.Fatalf("recycled %d overflowed %d, want 3 4", tb.Recycled(), tb.Overflowed())
	}
	got = tb.Touched(nil)
	if len(got) != n+1 || got[n].Resource != BlockedValue || got[n].Hits != 1 {
		t.Fatalf("touched %d entries, last %q hits %d", len(got), got[n].Resource, got[n].Hits)
	}
	checkSlots(t, tb)
}

func TestTableTouchedRotateClear(t *testing.T) {
	tb := NewTable(3)
	mk := func(res string, err bool) *Record {
		s := baseSpan()
		s.Resource, s.Error = res, err
		return &s
	}
	tb.Add(mk("a", false))
	tb.Add(mk("b", true))
	tb.Add(mk("c", false))
	tb.Add(mk("d", false)) // overflow
	tb.Rotate()
	if got := tb.Touched(nil); len(got) != 0 {
		t.Fatalf("after Rotate %d touched, want 0", len(got))
	}
	for _, e := range tb.entries {
		if e.Hits != 0 || e.Errors != 0 || e.TopLevelHits != 0 || e.Duration != 0 ||
			count(e.Ok) != 0 || count(e.Err) != 0 {
			t.Fatalf("entry %q not reset: %+v", e.Resource, e)
		}
	}
	if tb.overflow.Hits != 0 || tb.Len() != 3 {
		t.Fatalf("overflow hits %d len %d after Rotate", tb.overflow.Hits, tb.Len())
	}

	tb.Add(mk("c", false))
	tb.Add(mk("a", true))
	tb.Add(mk("c", false))
	got := tb.Touched(nil)
	if len(got) != 2 || got[0].Resource != "a" || got[1].Resource != "c" || got[1].Hits != 2 || got[0].Errors != 1 {
		t.Fatalf("touched %v, want a (1 error) then c (2 hits), in creation order", resources(got))
	}
	// Touched appends.
	if got2 := tb.Touched(got[:1]); len(got2) != 3 || got2[0] != got[0] {
		t.Fatalf("Touched(dst) = %v, want dst + 2", resources(got2))
	}

	tb.Clear()
	if tb.Len() != 0 || len(tb.Touched(nil)) != 0 || tb.overflow != nil {
		t.Fatalf("after Clear: len %d touched %d", tb.Len(), len(tb.Touched(nil)))
	}
	tb.Add(mk("a", false))
	tb.Add(mk("e", false))
	if tb.Len() != 2 || tb.Recycled() != 0 || tb.Touched(nil)[0].Hits != 1 {
		t.Fatalf("after Clear and 2 adds: len %d recycled %d", tb.Len(), tb.Recycled())
	}
	checkSlots(t, tb)
}

func resources(es []*Entry) []string {
	var r []string
	for _, e := range es {
		r = append(r, fmt.Sprintf("%s:%d", e.Resource, e.Hits))
	}
	return r
}

// TestTableUnlink removes entries directly from a crowded slot array in
// random order and checks that every remaining key stays reachable.
func TestTableUnlink(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for round := range 500 {
		tb := NewTable(8) // 16 slots
		type item struct {
			s Record
			h uint64
		}
		var items []item
		for k := range 8 {
			s := modelSpan(k+100*round, r)
			// Homes drawn from three slots around the wrap of the array.
			h := (tb.mask-1+uint64(r.IntN(3)))&tb.mask | uint64(r.IntN(3))<<40
			addWithHash(tb, &s, h)
			items = append(items, item{s, h})
		}
		checkSlots(t, tb)
		order := r.Perm(len(items))
		for n, i := range order {
			e := findWithHash(tb, &items[i].s, items[i].h)
			if e == nil {
				t.Fatalf("round %d: item %d lost before its unlink", round, i)
			}
			tb.unlink(e.hash, int32(slices.Index(tb.entries, e)+1))
			if findWithHash(tb, &items[i].s, items[i].h) != nil {
				t.Fatalf("round %d: item %d found after unlink", round, i)
			}
			for _, j := range order[n+1:] {
				if findWithHash(tb, &items[j].s, items[j].h) == nil {
					t.Fatalf("round %d: item %d lost after unlinking %d", round, j, i)
				}
			}
		}
		for _, sl := range tb.slots {
			if sl.idx != 0 {
				t.Fatalf("round %d: slot left after unlinking everything", round)
			}
		}
	}
}

// TestTableConservation: whatever the cap and workload, every span is
// counted once in the touched entries of its interval.
func TestTableConservation(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, cap := range []int{1, 5, 50, DefaultMaxEntries} {
		tb := NewTable(cap)
		for interval := range 20 {
			n := r.IntN(5000)
			var errs, dur uint64
			for range n {
				s := modelSpan(r.IntN(3000), r)
				tb.Add(&s)
				dur += uint64(s.Duration)
				if s.Error {
					errs++
				}
			}
			var hits, gotErrs, gotDur, sketched uint64
			for _, e := range tb.Touched(nil) {
				hits += e.Hits
				gotErrs += e.Errors
				gotDur += e.Duration
				sketched += count(e.Ok) + count(e.Err)
			}
			if hits != uint64(n) || gotErrs != errs || gotDur != dur || sketched != uint64(n) {
				t.Fatalf("cap %d interval %d: hits %d errors %d duration %d sketched %d, want %d %d %d %d",
					cap, interval, hits, gotErrs, gotDur, sketched, n, errs, dur, n)
			}
			tb.Rotate()
		}
	}
}
