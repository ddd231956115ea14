// This file tests TypeSplitter: groups the agent would merge, once it has
// normalized, obfuscated and hashed their labels, go to separate buckets
// when their Type differs.

package writer

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

// TestTypeSplitterLayers: groups of one bucket that differ only in Type go
// to separate buckets of the bucket's start, length and shift, the n-th of
// a key in the n-th; others stay in the first; a bucket without twins is
// passed as it is; a second bucket's layers follow the first's.
func TestTypeSplitterLayers(t *testing.T) {
	entry := func(typ, resource string, peer ...string) *aggregate.Entry {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource, e.Type, e.SpanKind, e.PeerTags = "web", "op", resource, typ, "client", peer
		return e
	}
	web, http, sql := entry("web", "r"), entry("http", "r"), entry("sql", "r")
	other, peered := entry("web", "s"), entry("http", "r", "peer.service:db") // another resource; other peer tags
	plain := []*aggregate.Entry{entry("web", "x"), entry("web", "y")}
	var s TypeSplitter
	for round := range 2 { // the second reuses the first's memory
		src := []Bucket{
			{Start: 10, Duration: 5, AgentTimeShift: 3, Groups: []*aggregate.Entry{web, other, http, peered, sql}},
			{Start: 20, Duration: 10, Groups: plain},
		}
		got := s.Split(nil, src)
		want := []Bucket{
			{Start: 10, Duration: 5, AgentTimeShift: 3, Groups: []*aggregate.Entry{web, other, peered}},
			{Start: 10, Duration: 5, AgentTimeShift: 3, Groups: []*aggregate.Entry{http}},
			{Start: 10, Duration: 5, AgentTimeShift: 3, Groups: []*aggregate.Entry{sql}},
			{Start: 20, Duration: 10, Groups: plain},
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d buckets, want %d: %+v", round, len(got), len(want), got)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Start != w.Start || g.Duration != w.Duration || g.AgentTimeShift != w.AgentTimeShift || len(g.Groups) != len(w.Groups) {
				t.Fatalf("round %d: bucket %d is %+v, want %+v", round, i, g, w)
			}
			for j := range w.Groups {
				if g.Groups[j] != w.Groups[j] {
					t.Fatalf("round %d: bucket %d group %d is %s/%s, want %s/%s", round, i, j, g.Groups[j].Type, g.Groups[j].Resource, w.Groups[j].Type, w.Groups[j].Resource)
				}
			}
		}
		s.Release()
	}
	src := []Bucket{{Start: 10, Duration: 5, Groups: []*aggregate.Entry{web, other, http, peered, sql}}}
	dst := make([]Bucket, 0, 8)
	if a := testing.AllocsPerRun(100, func() { dst = s.Split(dst[:0], src); s.Release() }); a != 0 {
		t.Errorf("Split of a shape laid out before allocates %.1f times", a)
	}
}

// TestTypeSplitterSkipsNil: a nil group, which Pack skips, is skipped here
// too, in a bucket with twins or without.
func TestTypeSplitterSkipsNil(t *testing.T) {
	entry := func(typ string) *aggregate.Entry {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource, e.Type = "web", "op", "r", typ
		return e
	}
	web, sql := entry("web"), entry("sql")
	var s TypeSplitter
	got := s.Split(nil, []Bucket{
		{Start: 10, Groups: []*aggregate.Entry{nil, web}},
		{Start: 20, Groups: []*aggregate.Entry{web, nil, sql}},
	})
	if len(got) != 3 || len(got[0].Groups) != 2 ||
		len(got[1].Groups) != 1 || got[1].Groups[0] != web || len(got[2].Groups) != 1 || got[2].Groups[0] != sql {
		t.Fatalf("laid out %+v", got)
	}
}

// TestTypeSplitterRewritableLabels: the agent rewrites Resource and
// HTTPStatusCode before it merges duplicates (an empty resource becomes the
// name; its obfuscation of some Types' resources; the operator's replace
// rules on resource.name, http.status_code or "*"), so groups of different
// Types that differ only in those are laid apart, the n-th Type in the n-th
// bucket; groups of one Type stay together whatever their resources and
// codes.
func TestTypeSplitterRewritableLabels(t *testing.T) {
	entry := func(typ, resource string, code uint32) *aggregate.Entry {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource, e.Type, e.HTTPStatusCode = "web", "op", resource, typ, code
		return e
	}
	web1, http, web2, bare := entry("web", "GET /u/1", 200), entry("http", "GET /u/2", 201), entry("web", "POST /u", 500), entry("db", "", 0)
	other := entry("http", "GET /u/3", 200)
	other.Name = "http.request" // another operation: no twin of the others
	var s TypeSplitter
	got := s.Split(nil, []Bucket{{Start: 10, Duration: 5, Groups: []*aggregate.Entry{web1, http, other, web2, bare}}})
	want := [][]*aggregate.Entry{{web1, other, web2}, {http}, {bare}}
	if len(got) != len(want) {
		t.Fatalf("laid out %d buckets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Start != 10 || got[i].Duration != 5 || !slices.Equal(got[i].Groups, w) {
			t.Errorf("bucket %d: %+v, want groups %v at 10+5", i, got[i], w)
		}
	}
}

// TestTypeSplitterNormalizedLabels: the agent normalizes Service and Name
// (normalizeStatsGroup) before it merges duplicates, so groups whose raw
// labels differ only in what the normalizer takes out are twins to it:
// they must go to separate buckets when their types differ.
func TestTypeSplitterNormalizedLabels(t *testing.T) {
	for _, tc := range []struct{ service, name, resource, service2, name2, resource2 string }{
		{"Web", "op", "r", "web", "op", "r"},               // service lowercased
		{"my service", "op", "r", "my_service", "op", "r"}, // invalid char → '_'
		{"web", "op!", "r", "web", "op", "r"},              // trailing '_' trimmed from the name
		{"web", "1op", "r", "web", "op", "r"},              // leading non-letters skipped
		{"web", "op.x", "", "web", "op.x", "op.x"},         // empty resource: the normalized name
		{"web", "op!", "", "web", "op", "op"},
		// An empty service, or one without a letter or digit, is the
		// agent's unnamed-<lang>-service, whatever the lang.
		{"", "op", "r", "unnamed-go-service", "op", "r"},
		{"!!", "op", "r", "Unnamed-Java-Service", "op", "r"},
		{"", "op", "r", "unnamed-python-service", "op", "r"},
	} {
		a, b := &aggregate.Entry{Hits: 1}, &aggregate.Entry{Hits: 1}
		a.Service, a.Name, a.Resource, a.Type = tc.service, tc.name, tc.resource, "web"
		b.Service, b.Name, b.Resource, b.Type = tc.service2, tc.name2, tc.resource2, "http"
		var s TypeSplitter
		if got := s.Split(nil, []Bucket{{Start: 10, Groups: []*aggregate.Entry{a, b}}}); len(got) != 2 {
			t.Errorf("%q/%q/%q and %q/%q/%q: %d buckets, want 2 (the agent merges them)",
				tc.service, tc.name, tc.resource, tc.service2, tc.name2, tc.resource2, len(got))
		}
	}
}

// TestTypeSplitterObfuscatedResources: the agent obfuscates the resource of
// an sql or cassandra group and quantizes that of a redis or valkey group
// before it merges duplicates, so a group of such a Type and one of
// another Type whose resources it makes equal are twins to it, whatever
// their folds: they must go to separate buckets. Groups of one Type stay
// together however many resources they have.
func TestTypeSplitterObfuscatedResources(t *testing.T) {
	entry := func(typ, resource string) *aggregate.Entry {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource, e.Type = "web", "op", resource, typ
		return e
	}
	// The agent's obfuscator (v0.85.4) makes each pair's resources equal.
	for _, tc := range []struct{ typ, resource, typ2, resource2 string }{
		{"sql", "SELECT * FROM t WHERE id = 42", "web", "SELECT * FROM t WHERE id = ?"},
		{"sql", "SELECT 1", "cassandra", "SELECT 2"},
		{"sql", "SELECT /* c */ a FROM t", "db", "SELECT a FROM t"},
		{"redis", "SET k v", "cache", "SET"},
		{"valkey", "GET a", "sql", "GET"},
	} {
		var s TypeSplitter
		a, b := entry(tc.typ, tc.resource), entry(tc.typ2, tc.resource2)
		if got := s.Split(nil, []Bucket{{Start: 10, Groups: []*aggregate.Entry{a, b}}}); len(got) != 2 {
			t.Errorf("%s %q and %s %q: %d buckets, want 2 (the agent merges them)", tc.typ, tc.resource, tc.typ2, tc.resource2, len(got))
		}
	}
	var groups []*aggregate.Entry
	for i := range 100 {
		groups = append(groups, entry("sql", fmt.Sprintf("SELECT %d FROM t%d", i, i)), entry("web", fmt.Sprintf("GET /%d", i)))
	}
	var s TypeSplitter
	got := s.Split(nil, []Bucket{{Start: 10, Groups: groups}})
	n := 0
	for _, b := range got {
		n += len(b.Groups)
	}
	if len(got) > 2 || n != len(groups) {
		t.Fatalf("%d buckets of %d groups; want at most 2 (one a Type) of %d", len(got), n, len(groups))
	}
}

// TestTypeSplitterOneTypeOneBucket: groups of one Type never need separate
// buckets, whatever the agent merges of them, so groups whose labels fold
// alike (resources that differ only outside ASCII letters and digits, in
// case or punctuation) stay in one bucket when their Type is the same.
func TestTypeSplitterOneTypeOneBucket(t *testing.T) {
	var groups []*aggregate.Entry
	for i, r := range []string{"запрос", "получить", "GET /a", "get /a", "GET /a/", "GET-/a", "é", "É", ""} {
		e := &aggregate.Entry{Hits: uint64(i + 1)}
		e.Service, e.Name, e.Resource, e.Type = "web", "op", r, "web"
		groups = append(groups, e)
	}
	var s TypeSplitter
	if got := s.Split(nil, []Bucket{{Start: 10, Groups: groups}}); len(got) != 1 || len(got[0].Groups) != len(groups) {
		t.Fatalf("%d groups of one Type laid out as %d buckets, want 1", len(groups), len(got))
	}
}

// TestTypeSplitterPeerTagsAsTheAgentHashes: the agent keys a group's peer
// tags by a hash of them joined with 0 bytes (tagsFnvHash), so tags that
// join alike (a NUL inside a value) are twins to it when their types
// differ: they must go to separate buckets.
func TestTypeSplitterPeerTagsAsTheAgentHashes(t *testing.T) {
	entry := func(typ string, peer ...string) *aggregate.Entry {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource, e.Type, e.SpanKind, e.PeerTags = "web", "op", "r", typ, "client", peer
		return e
	}
	two, one := entry("web", "a:1", "b:2"), entry("http", "a:1\x00b:2")
	var s TypeSplitter
	if got := s.Split(nil, []Bucket{{Start: 10, Groups: []*aggregate.Entry{two, one}}}); len(got) != 2 {
		t.Fatalf("peer tags %q and %q: %d buckets, want 2 (the agent merges them)", two.PeerTags, one.PeerTags, len(got))
	}
}

// TestAppendTagsHashIsTheAgents: the bytes appended are the agent's
// tagsFnvHash (v0.85.4): 64-bit FNV-1a of the tags joined with 0 bytes, 0
// for no tag, so every pair of lists the agent cannot tell apart (a
// collision included) keys alike.
func TestAppendTagsHashIsTheAgents(t *testing.T) {
	for _, tags := range [][]string{nil, {}, {""}, {"a:1"}, {"a:1", "b:2"}, {"a:1\x00b:2"}, {"", ""}, {"peer.service:db", "out.host:10.0.0.1"}} {
		want := uint64(0)
		if len(tags) > 0 {
			h := fnv.New64a()
			h.Write([]byte(strings.Join(tags, "\x00")))
			want = h.Sum64()
		}
		b := AppendTagsHash([]byte("x"), tags)
		if len(b) != 9 || b[0] != 'x' || binary.LittleEndian.Uint64(b[1:]) != want {
			t.Errorf("AppendTagsHash(%q) appended % x, want the 8 bytes of %#x", tags, b[1:], want)
		}
	}
}

// TestTypeSplitterHalt: a TypeSplitter whose Halt says to give up returns
// at once with the buckets laid out before, and lays out the next Split
// whole.
func TestTypeSplitterHalt(t *testing.T) {
	bucket := func(start uint64) Bucket {
		b := Bucket{Start: start, Duration: 10}
		for i := range haltEvery {
			e := &aggregate.Entry{Hits: 1}
			e.Service, e.Name, e.Resource, e.Type = "web", "op", fmt.Sprintf("r%d", i), "web"
			b.Groups = append(b.Groups, e)
		}
		return b
	}
	src := []Bucket{bucket(10), bucket(20), bucket(30)}
	looks := 0
	s := TypeSplitter{Halt: func() bool { looks++; return looks == 2 }}
	if got := s.Split(nil, src); len(got) != 1 || got[0].Start != 10 {
		t.Fatalf("halted on the second look: %d buckets laid out; want the first alone", len(got))
	}
	s.Release()
	looks = -100
	if got := s.Split(nil, src); len(got) != 3 {
		t.Fatalf("%d buckets laid out after a halt; want 3", len(got))
	}
}
