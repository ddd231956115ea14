// This file tests AddBatch: it counts what Add counts, its look-ahead reads
// the right bytes (touch), and it stops at the halt flag.

package aggregate

import (
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
)

// AddBatch, with its look-ahead under attack (either kind) and its
// deferred records on the hit path, counts exactly what Add does: the same
// hits, errors, top-level hits, durations and sketch bins per key, and the
// same collapses — also at a small cap, where entries are recycled between
// the lookups and the records of a batch.
func TestAddBatchMatchesAdd(t *testing.T) {
	for _, maxEntries := range []int{0, 24} {
		name := fmt.Sprintf("cap=%d/", maxEntries)
		t.Run(name+"AddBatch", func(t *testing.T) { testAddBatchMatchesAdd(t, maxEntries, (*Table).AddBatch) })
		t.Run(name+"hits", func(t *testing.T) { testAddBatchMatchesAdd(t, maxEntries, (*Table).addHits) })
		t.Run(name+"prefetching", func(t *testing.T) { testAddBatchMatchesAdd(t, maxEntries, (*Table).addPrefetching) })
		t.Run(name+"touching", func(t *testing.T) { testAddBatchMatchesAdd(t, maxEntries, (*Table).addTouching) })
	}
}

func testAddBatchMatchesAdd(t *testing.T, maxEntries int, addBatch func(*Table, []*Record) int) {
	const rotateAt = 12 * 256
	one, batched := NewTable(maxEntries), NewTable(maxEntries)
	one.SetLimits(Limits{Resource: 8, PeerTag: 4})
	batched.SetLimits(Limits{Resource: 8, PeerTag: 4})
	spans := make([]Record, 6000)
	ptrs := make([]*Record, len(spans))
	names, hosts := make([]string, 61), make([]string, 13)
	for i := range names {
		names[i] = fmt.Sprint("r", i)
	}
	for i := range hosts {
		hosts[i] = fmt.Sprint("peer.hostname:h", i)
	}
	for i := range spans {
		s := &spans[i]
		// In the first interval the resources recur more and more rarely
		// (hits, then misses, then an attack); in the second, 5 of them
		// repeat, so the hit path runs again and, at the small cap, idle
		// entries of the first interval are recycled.
		// The strings come from tables, as a tracer's constants do, so the
		// recent-span cache finds repeated keys.
		res := names[i%(1+i/100)]
		if i >= rotateAt {
			res = names[i%5]
		}
		*s = Record{Service: "svc", Name: "op", Resource: res, SpanKind: "client",
			Duration: int64(i * i % 5_000_000), Error: i%7 == 0, TopLevel: i%3 == 0}
		if i%3 != 0 {
			s.SetPeerTags([]string{hosts[i%13], "db.system:pg"})
		}
		ptrs[i] = s
	}
	sum := func(tb *Table) map[string]string {
		m := map[string]string{}
		for _, e := range tb.Touched(nil) {
			k := fmt.Sprint(e.Resource, e.PeerTags)
			v := fmt.Sprint(e.Hits, e.Errors, e.TopLevelHits, e.Duration)
			for _, sk := range []*Sketch{e.Ok, e.Err} {
				if sk != nil {
					lo, bins := sk.Bins()
					v += fmt.Sprint(" ", sk.Count(), sk.ZeroCount(), lo, bins)
				}
			}
			m[k] = v
		}
		return m
	}
	for i := 0; i < len(ptrs); i += 256 {
		if i == rotateAt {
			if got, want := sum(batched), sum(one); !maps.Equal(got, want) {
				t.Fatalf("first interval: AddBatch: %v\nAdd: %v", got, want)
			}
			if batched.CollapsedSpans() == 0 {
				t.Fatal("the workload never put the table under attack")
			}
			one.Rotate()
			batched.Rotate()
		}
		for _, s := range ptrs[i:min(i+256, len(ptrs))] {
			one.Add(s)
		}
		addBatch(batched, ptrs[i:min(i+256, len(ptrs))])
	}
	if got, want := sum(batched), sum(one); !maps.Equal(got, want) {
		t.Fatalf("second interval: AddBatch: %v\nAdd: %v", got, want)
	}
	if batched.CollapsedSpans() != one.CollapsedSpans() || batched.Recycled() != one.Recycled() ||
		batched.Overflowed() != one.Overflowed() {
		t.Fatalf("collapsed/recycled/overflowed %d/%d/%d spans, Add %d/%d/%d",
			batched.CollapsedSpans(), batched.Recycled(), batched.Overflowed(),
			one.CollapsedSpans(), one.Recycled(), one.Overflowed())
	}
	if maxEntries > 0 && one.Recycled() == 0 {
		t.Fatal("the workload never recycled an entry at the cap")
	}
}

func TestTouch(t *testing.T) {
	var zero Record
	if got := touch(&zero); got != 0 {
		t.Fatalf("touch(empty span) = %d, want 0", got)
	}
	_ = touchFields(&zero) // empty strings and no peer tags: must not fault
	s := Record{Resource: "ab", Service: "c", Name: "", HTTPEndpoint: "xyz"}
	s.SetPeerTags([]string{"k:v", "q"})
	// "c" and "q" fold to 0 (first byte ^ last byte); "" is 0.
	want := ('a' ^ 'b') ^ ('x' ^ 'z') ^ ('k' ^ 'v')
	if got := touch(&s); got != byte(want) {
		t.Fatalf("touch = %#x, want %#x", got, want)
	}
}

// TestAddBatchHalts: once the SetHalt flag is set, every AddBatch path
// stops before the next span that misses the recent-span cache, reports how
// many it added, and leaves the rest uncounted; hits still go through.
func TestAddBatchHalts(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(*Table, []*Record) int
	}{
		{"AddBatch", (*Table).AddBatch}, {"hits", (*Table).addHits}, {"plain", (*Table).addPlain},
		{"prefetching", (*Table).addPrefetching}, {"touching", (*Table).addTouching},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var halt atomic.Bool
			tb := NewTable(0)
			tb.SetHalt(&halt)
			names := []string{"a", "b", "c", "d"}
			spans := make([]Record, 6)
			ptrs := make([]*Record, len(spans))
			for i := range spans {
				spans[i] = Record{Service: "s", Name: "op", Resource: names[min(i, 3)], SpanKind: "server", Duration: 10}
				ptrs[i] = &spans[i]
			}
			if n := tc.add(tb, ptrs[:2]); n != 2 { // a, b: now in the recent-span cache
				t.Fatalf("added %d of 2", n)
			}
			halt.Store(true)
			n := tc.add(tb, ptrs[:4]) // a, b hit; c misses
			var hits uint64
			for _, e := range tb.Touched(nil) {
				hits += e.Hits
			}
			// The look-ahead paths look at the flag before every span.
			want := 2
			if tc.name == "prefetching" || tc.name == "touching" {
				want = 0
			}
			if n != want || hits != uint64(2+want) {
				t.Fatalf("halted: added %d, %d hits in the table; want %d and %d", n, hits, want, 2+want)
			}
		})
	}
}
