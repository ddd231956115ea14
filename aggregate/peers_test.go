// This file tests a span's peer tags on their way into its key: a sorted
// set without duplicates or empty values, the SetPeerTagKeys filter, and
// the memo of the tag last seen at each position.

package aggregate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestTablePeerTagsAreASet(t *testing.T) {
	tb := NewTable(0)
	orders := [][]string{
		{"peer.service:db", "db.instance:users", "peer.hostname:db-1"},
		{"peer.hostname:db-1", "peer.service:db", "db.instance:users"},
		{"db.instance:users", "peer.hostname:db-1", "peer.service:db"},
		{"peer.service:db", "peer.service:db", "db.instance:users", "peer.hostname:db-1", "db.instance:users"},
	}
	for _, o := range orders {
		s := withPeers(baseSpan(), o...)
		tb.Add(&s)
	}
	if tb.Len() != 1 {
		t.Fatalf("%d entries for one peer-tag set in 4 orders, want 1", tb.Len())
	}
	e := tb.Touched(nil)[0]
	if e.Hits != 4 {
		t.Fatalf("hits %d, want 4", e.Hits)
	}
	want := []string{"db.instance:users", "peer.hostname:db-1", "peer.service:db"}
	if !slices.Equal(e.PeerTags, want) {
		t.Fatalf("PeerTags %q, want %q", e.PeerTags, want)
	}

	// More tags than fit inline: order across the inline/extra split does
	// not matter either, and duplicates collapse.
	many := make([]string, MaxInlinePeerTags+4)
	for i := range many {
		many[i] = fmt.Sprintf("tag%02d:v", i)
	}
	tb = NewTable(0)
	for i := range 5 {
		tags := slices.Clone(many)
		rand.New(rand.NewPCG(uint64(i), 9)).Shuffle(len(tags), func(a, b int) { tags[a], tags[b] = tags[b], tags[a] })
		if i == 4 {
			tags = append(tags, many[0], many[11], many[0])
		}
		s := withPeers(baseSpan(), tags...)
		tb.Add(&s)
	}
	if tb.Len() != 1 {
		t.Fatalf("%d entries for one large peer-tag set, want 1", tb.Len())
	}
	if e := tb.Touched(nil)[0]; e.Hits != 5 || !slices.Equal(e.PeerTags, many) {
		t.Fatalf("hits %d PeerTags %q, want 5 %q", e.Hits, e.PeerTags, many)
	}
}

func TestTableDuplicatePeerTags(t *testing.T) {
	tb := NewTable(0)
	s := withPeers(baseSpan(), "b:2", "a:1", "b:2", "a:1", "a:1")
	tb.Add(&s)
	e := tb.Touched(nil)[0]
	if !slices.Equal(e.PeerTags, []string{"a:1", "b:2"}) {
		t.Fatalf("PeerTags %q, want [a:1 b:2]", e.PeerTags)
	}
	s2 := withPeers(baseSpan(), "a:1", "b:2")
	tb.Add(&s2)
	if tb.Len() != 1 || e.Hits != 2 {
		t.Fatalf("len %d hits %d, want 1 entry with 2 hits", tb.Len(), e.Hits)
	}
	s3 := withPeers(baseSpan(), "a:1")
	tb.Add(&s3)
	if tb.Len() != 2 {
		t.Fatalf("a subset of the tags shares an entry: len %d", tb.Len())
	}
}

func TestSetPeerTagKeysFilters(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{"peer.service", "db.instance"})
	s := Record{Resource: "r", SpanKind: "client", Duration: 1}
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

// TestSetPeerTagKeysDropsBudgetsOfOtherKeys: budgets of peer-tag keys a new
// list does not hold are dropped (a list turns the key cap and its sweep
// off, so nothing else would), the base-service key's kept.
func TestSetPeerTagKeysDropsBudgetsOfOtherKeys(t *testing.T) {
	tb := NewTable(0)
	tb.SetLimits(Limits{})
	for i, tags := range [][]string{{"db.instance:i1", "noise:x"}, {"peer.service:users", "other:y"}} {
		s := Record{Resource: "r", SpanKind: "client", Duration: 1}
		s.SetPeerTags(tags)
		tb.Add(&s)
		if i == 0 {
			b := Record{Resource: "r", Duration: 1}
			b.SetPeerTags([]string{BaseServiceKey + ":svc"})
			tb.Add(&b)
		}
	}
	if n := len(tb.budgets.peer); n != 5 {
		t.Fatalf("%d key budgets before the list, want 5", n)
	}
	tb.SetPeerTagKeys([]string{"peer.service", "db.instance"})
	got := slices.Sorted(maps.Keys(tb.budgets.peer))
	if want := []string{BaseServiceKey, "db.instance", "peer.service"}; !slices.Equal(got, want) {
		t.Fatalf("key budgets after the list %v, want %v", got, want)
	}
}

// TestPeerTagsWithoutValueDropped: a peer tag without a value ("key:", or
// a bare "key") is not part of the key, as the agent aggregates no empty
// value: spans that differ only by one group together, with or without a
// peer-tag key filter.
func TestPeerTagsWithoutValueDropped(t *testing.T) {
	for _, keys := range [][]string{nil, {"peer.service", "db.instance"}} {
		tb := NewTable(0)
		tb.SetPeerTagKeys(keys)
		for _, tags := range [][]string{
			{"peer.service:db"}, {"peer.service:db", "db.instance:"}, {"db.instance:", "peer.service:db"},
			{"peer.service:db", "db.instance"},
		} {
			s := baseSpan()
			s.SetPeerTags(tags)
			tb.Add(&s)
		}
		s := baseSpan()
		s.SetPeerTags([]string{"peer.service:"})
		tb.Add(&s)
		es := tb.Touched(nil)
		if len(es) != 2 || es[0].Hits != 4 || !slices.Equal(es[0].PeerTags, []string{"peer.service:db"}) ||
			es[1].Hits != 1 || es[1].PeerTags != nil {
			for _, e := range es {
				t.Logf("%q: %d hits", e.PeerTags, e.Hits)
			}
			t.Fatalf("keys %q: %d entries; want peer.service:db with 4 hits, and no peer tags with 1", keys, len(es))
		}
	}
}

// TestPeerTagMemoFollowsTheTag: keepPeers remembers the last tag at each
// position; a different tag there (an IP address, a tag without a value, an
// equal tag at another address, a key the filter drops) is decided afresh,
// whatever the position held before.
func TestPeerTagMemoFollowsTheTag(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{"out.host", "peer.service"})
	ip := "out.host:10.1.2." + fmt.Sprint(3) // not the constant below's bytes
	for _, tags := range [][]string{
		{"out.host:10.1.2.3", "peer.service:a"},
		{"out.host:db", "peer.service:a"},
		{ip, "peer.service:a"},
		{"out.host:", "peer.service:a"},
		{"noise:x", "peer.service:a"},
		{"out.host:10.1.2.3", "peer.service:a"},
	} {
		s := baseSpan()
		s.SetPeerTags(tags)
		tb.Add(&s)
	}
	got := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		got[fmt.Sprint(e.PeerTags)] += e.Hits
	}
	want := map[string]uint64{
		"[out.host:blocked-ip-address peer.service:a]": 3,
		"[out.host:db peer.service:a]":                 1,
		"[peer.service:a]":                             2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

// TestPeerKeyMemoNeedsTheColon: with the key list {out.host}, a span with
// "out.hostname:b" at the position where the last span had "out.host:a"
// keeps no peer tag: its key is out.hostname, not listed.
func TestPeerKeyMemoNeedsTheColon(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{"out.host"})
	a := withPeers(baseSpan(), "out.host:a")
	b := withPeers(baseSpan(), "out.hostname:b")
	tb.Add(&a)
	tb.Add(&b)
	got := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		got[strings.Join(e.PeerTags, ",")] = e.Hits
	}
	if len(got) != 2 || got["out.host:a"] != 1 || got[""] != 1 {
		t.Fatalf("groups by peer tags %v, want out.host:a: 1 and none: 1", got)
	}
}
