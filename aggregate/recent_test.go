// This file tests the recent-span caches: matching by identity and by
// contents, their ways and replacement, and keys they must tell apart.

package aggregate

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The recent-span caches match by string identity, then by contents:
// equal strings at other addresses land in the same entry.
func TestRecentCacheIdentityAndEquality(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(DefaultLimits())
	mk := func(clone func(string) string) *Record {
		s := &Record{Service: clone("web"), Name: clone("http.request"), Resource: clone("GET /a"),
			SpanKind: clone("client"), Duration: 10}
		s.SetPeerTags([]string{clone("peer.service:db"), clone("db.system:pg")})
		return s
	}
	same := func(v string) string { return v }
	for range 3 {
		tb.Add(mk(same)) // hits the cache after the first
		tb.Add(mk(strings.Clone))
	}
	// Peer tags in another order are the same set.
	s := mk(strings.Clone)
	s.SetPeerTags([]string{"db.system:pg", "peer.service:db"})
	tb.Add(s)
	if tb.Len() != 1 {
		t.Fatalf("%d entries, want 1", tb.Len())
	}
	if e := tb.Touched(nil)[0]; e.Hits != 7 || e.Duration != 70 {
		t.Fatalf("hits %d, duration %d, want 7 and 70", e.Hits, e.Duration)
	}
}

// TestRecentCacheWays: keys whose spans pick the same set of the
// recent-span cache are all cached up to its ways; one more replaces the
// least recently used, and an entry found in the cache counts as used.
func TestRecentCacheWays(t *testing.T) {
	tb := NewTable(0)
	bySet := map[uint][]*Record{}
	var set []*Record
	for i := 0; set == nil; i++ {
		s := baseSpan()
		s.Resource = fmt.Sprintf("GET /r/%d", i)
		j, _ := recentIndex(&s)
		bySet[j] = append(bySet[j], &s)
		if len(bySet[j]) == recentWays+1 {
			set = bySet[j]
		}
	}
	cached := func() []bool {
		var c []bool
		for _, s := range set {
			c = append(c, tb.recentEntry(s) != nil)
		}
		return c
	}
	a, b, c := set[0], set[1], set[2]
	tb.Add(a)
	tb.Add(b)
	if got := cached(); !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("after adding a and b, cached %v, want a and b", got)
	}
	tb.Add(a) // a hit: b is now the least recently used
	tb.Add(c)
	if got := cached(); !slices.Equal(got, []bool{true, false, true}) {
		t.Fatalf("after a hit on a and adding c, cached %v, want a and c", got)
	}
	if e := tb.recentEntry(a); e == nil || e.Hits != 2 {
		t.Fatalf("a's entry %+v, want 2 hits", e)
	}
	tb.Rotate() // a new interval: nothing cached is valid
	if got := cached(); !slices.Equal(got, []bool{false, false, false}) {
		t.Fatalf("after Rotate, cached %v, want none", got)
	}
}

// cloneRecord is s with every string a copy of its own, as a tracer that
// builds a span's strings anew gives them.
func cloneRecord(s Record) *Record {
	l := s.labels()
	for i := range l {
		l[i] = strings.Clone(l[i])
	}
	for i := range s.NumPeerTags {
		s.PeerTags[i] = strings.Clone(s.PeerTags[i])
	}
	return &s
}

// TestContentCacheFindsFreshStrings: a span whose strings are copies of a
// cached span's misses the cache by identity and hits the one by contents,
// in the same entry, until the interval ends.
func TestContentCacheFindsFreshStrings(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(DefaultLimits())
	s := baseSpan()
	s.SpanKind = "client"
	s.SetPeerTags([]string{"peer.service:users-db", "db.system:postgresql"})
	tb.Add(&s)
	e := tb.Touched(nil)[0]
	c := cloneRecord(s)
	if tb.recentEntry(c) != nil {
		t.Fatal("the cache by identity found a span of copied strings")
	}
	if got := tb.cachedEntry(c); got != e {
		t.Fatalf("the caches found %p for copied strings, want the entry %p", got, e)
	}
	tb.Add(c)
	if tb.Len() != 1 || e.Hits != 2 {
		t.Fatalf("%d entries, %d hits; want 1 and 2", tb.Len(), e.Hits)
	}
	c.PeerTags[1] = "db.system:mysql" // another key of the same layout
	if got := tb.cachedEntry(c); got != nil {
		t.Fatalf("the caches found %p for another peer tag", got)
	}
	tb.Rotate()
	if got := tb.cachedEntry(cloneRecord(s)); got != nil {
		t.Fatal("the cache by contents found an entry of the previous interval")
	}
}

// TestContentCacheSameEnds: two keys whose strings share the lengths and
// the first and last bytes that pick a set share it, and the cache by
// contents tells them apart by every byte.
func TestContentCacheSameEnds(t *testing.T) {
	tb := NewTable(0)
	a, b := baseSpan(), baseSpan()
	a.Resource = "GET /api/v1/users/aaaa/all-orders"
	b.Resource = "GET /api/v1/users/bbbb/all-orders"
	if ia, ta := contentIndex(&a); true {
		if ib, tb := contentIndex(&b); ia != ib || ta != tb {
			t.Fatalf("set and tag %d/%x and %d/%x: want the same", ia, ta, ib, tb)
		}
	}
	tb.Add(&a)
	if got := tb.cachedEntry(cloneRecord(b)); got != nil {
		t.Fatalf("found %+v for a key of the same ends", got.Key)
	}
	tb.Add(cloneRecord(b))
	tb.Add(cloneRecord(a))
	tb.Add(cloneRecord(b))
	hits := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		hits[e.Key.Resource] = e.Hits
	}
	if len(hits) != 2 || hits[a.Resource] != 2 || hits[b.Resource] != 2 {
		t.Fatalf("hits by resource %v, want 2 each for %q and %q", hits, a.Resource, b.Resource)
	}
	for _, r := range []*Record{&a, &b} {
		if e := tb.cachedEntry(cloneRecord(*r)); e == nil || e.Key.Resource != r.Resource {
			t.Fatalf("the cache by contents lost %q (both fit the set's ways)", r.Resource)
		}
	}
}

// TestContentCacheBareBlockedPeer: past the peer-key cap a tag becomes a
// bare BlockedValue in the collapsed key, while a tracer's own bare
// "tracer_blocked_value" tag has no colon and is dropped from its key. The
// two spans have equal contents but different keys, so neither may find
// the other's entry through the cache by contents, in either order.
func TestContentCacheBareBlockedPeer(t *testing.T) {
	for _, collapsedFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("collapsedFirst=%v", collapsedFirst), func(t *testing.T) {
			tb := NewTable(0)
			tb.SetLimits(Limits{})
			for i := range maxPeerTagKeys {
				addPeerTag(tb, fmt.Sprintf("junk%d:v", i))
			}
			bare := func() {
				addPeerTag(tb, "keep-last") // off attack, and a label span in between
				addPeerTag(tb, strings.Clone(BlockedValue))
			}
			if !collapsedFirst {
				bare()
			}
			addPeerTag(tb, "peer.hostname:db1") // a 65th key: a bare BlockedValue
			if collapsedFirst {
				bare()
			}
			got := touchedByResource(tb)
			if e := got["s|r|["+BlockedValue+"]"]; e == nil || e.Hits != 1 {
				t.Fatalf("collapsed group %+v, want 1 hit; groups %v", e, keys(got))
			}
			if e := got["s|r|[]"]; e == nil || e.Hits != 2 {
				t.Fatalf("group without peer tags %+v, want 2 hits (\"keep-last\" and the bare tag); groups %v", e, keys(got))
			}
		})
	}
}

// TestRecentCachesPinBoundedBytes: spans whose labels are at Publish's
// length limits and fresh on every span, 4096 new keys in one interval,
// keep no more than recentPinBytes of their strings alive in each
// recent-span cache; Rotate empties the caches,
// whose slots no longer hit then, so that the keys of the next interval,
// 64 long ones used again and again, are all cached; and a slot keeps no
// peer tag of the key it held before.
func TestRecentCachesPinBoundedBytes(t *testing.T) {
	pad := func(p string, n int) string { return p + strings.Repeat("x", n-len(p)) }
	span := func(resource string) *Record {
		s := &Record{Resource: resource, Service: pad("s", 100), Name: pad("n", 100),
			Type: pad("t", 100), SpanKind: strings.Clone("client"), HTTPMethod: pad("m", 200),
			HTTPEndpoint: pad("e", 200), ServiceSource: pad("x", 200), Duration: 1000}
		s.SetPeerTags([]string{pad("a:", 200), pad("b:", 200), pad("c:", 200), pad("d:", 200)})
		return s
	}
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	for i := range 4096 {
		tb.Add(span(pad(fmt.Sprint(i, "-"), 5000)))
	}
	for _, c := range []*spanCache{&tb.recent, &tb.seen} {
		n := 0
		for i := range c.slots {
			n += int(c.slots[i].bytes)
		}
		if c.pinned > recentPinBytes || n != c.pinned {
			t.Errorf("a cache counts %d bytes pinned, its slots %d; bound %d", c.pinned, n, recentPinBytes)
		}
	}
	before := heapNow()
	tb.Rotate()
	freed := int64(before) - int64(heapNow())
	t.Logf("emptying the caches freed %d B", freed)
	if freed > 2*recentPinBytes+256<<10 || tb.recent.pinned != 0 || tb.seen.pinned != 0 {
		t.Errorf("Rotate freed %d B and left %d and %d pinned; the caches may pin %d B of strings", freed, tb.recent.pinned, tb.seen.pinned, 2*recentPinBytes)
	}
	hot := make([]*Record, 64)
	for i := range hot {
		hot[i] = span(pad(fmt.Sprint("hot-", i, "-"), 4000))
		tb.Add(hot[i])
	}
	// A set holds recentWays keys: a key may be evicted only by hot keys
	// that fell into its set in that cache (three of 64 in one of 512 sets
	// in a run in twenty or so, the indexes being addresses and hashes).
	inRecent, inSeen := map[uint]int{}, map[uint]int{}
	for _, s := range hot {
		i, _ := recentIndex(s)
		inRecent[i]++
		i, _ = contentIndex(s)
		inSeen[i]++
	}
	for i, s := range hot {
		ri, _ := recentIndex(s)
		if tb.recentEntry(s) == nil && inRecent[ri] <= recentWays {
			t.Fatalf("hot key %d of 64 (4 KB each) is not cached by identity, %d hot keys in its set", i, inRecent[ri])
		}
		c := span(strings.Clone(s.Resource))
		ci, _ := contentIndex(c)
		if tb.contentEntry(c) == nil && inSeen[ci] <= recentWays {
			t.Fatalf("hot key %d of 64 (4 KB each) is not cached by contents, %d hot keys in its set", i, inSeen[ci])
		}
	}
	runtime.KeepAlive(tb)

	var k recentKey
	s := &Record{Resource: "r"}
	s.SetPeerTags([]string{"a:1", "b:2", "c:3"})
	k.setKey(s)
	s = &Record{Resource: "r"}
	s.SetPeerTags([]string{"a:1"})
	if k.setKey(s); k.peers[1] != "" || k.peers[2] != "" {
		t.Errorf("a slot kept %q of the key it held before", k.peers[1:])
	}
}

// heapNow is the live heap after a collection.
func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
