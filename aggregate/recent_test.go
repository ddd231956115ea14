package aggregate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The recent-span cache matches by string identity: equal strings at other
// addresses take the hashed path and land in the same entry.
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
