package aggregate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
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

func TestSetPeerTags(t *testing.T) {
	var s Record
	s.SetPeerTags([]string{"a:1", "b:2"})
	if s.NumPeerTags != 2 || s.ExtraPeerTags != nil || s.PeerTags[1] != "b:2" {
		t.Fatalf("inline: %d %v %v", s.NumPeerTags, s.PeerTags, s.ExtraPeerTags)
	}
	tags := make([]string, MaxInlinePeerTags+3)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d:v", i)
	}
	s.SetPeerTags(tags)
	if s.NumPeerTags != MaxInlinePeerTags || len(s.ExtraPeerTags) != 3 || s.ExtraPeerTags[2] != "t10:v" {
		t.Fatalf("overflowing: %d %v", s.NumPeerTags, s.ExtraPeerTags)
	}
	tags[10] = "changed"
	if s.ExtraPeerTags[2] != "t10:v" {
		t.Fatal("ExtraPeerTags aliases the caller's slice")
	}
	s.SetPeerTags(nil)
	if s.NumPeerTags != 0 || s.ExtraPeerTags != nil {
		t.Fatalf("cleared: %d %v", s.NumPeerTags, s.ExtraPeerTags)
	}
}

// TestSpanReset: whatever a span's fields and SetPeerTags set, Reset leaves
// the zero Record. Every field other than the peer tags is filled by
// reflection, so a field added to Record and forgotten by Reset fails here.
func TestSpanReset(t *testing.T) {
	for _, n := range []int{0, 1, 3, MaxInlinePeerTags, MaxInlinePeerTags + 2} {
		var s Record
		v := reflect.ValueOf(&s).Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			switch name := v.Type().Field(i).Name; {
			case name == "NumPeerTags" || name == "PeerTags" || name == "ExtraPeerTags":
			case f.Kind() == reflect.String:
				f.SetString("v-" + name)
			case f.Kind() == reflect.Bool:
				f.SetBool(true)
			case f.CanUint():
				f.SetUint(7)
			case f.CanInt():
				f.SetInt(-7)
			default:
				t.Fatalf("field %s of kind %s: teach this test (and Record.Reset) about it", name, f.Kind())
			}
		}
		tags := make([]string, n)
		for i := range tags {
			tags[i] = fmt.Sprintf("k%d:v", i)
		}
		s.SetPeerTags(tags)
		s.Reset()
		if !v.IsZero() {
			t.Errorf("%d peer tags: after Reset %+v, want the zero Record", n, s)
		}
	}
}

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

// TestTableKeyFields checks that every key field distinguishes entries, and
// that the new entry's Key holds exactly the span's fields.
func TestTableKeyFields(t *testing.T) {
	fields := []struct {
		name   string
		mutate func(*Record)
	}{
		{"Service", func(s *Record) { s.Service = "web-store2" }},
		{"Name", func(s *Record) { s.Name = "http.request2" }},
		{"Resource", func(s *Record) { s.Resource = "GET /api/v2/users/:id" }},
		{"Type", func(s *Record) { s.Type = "http" }},
		{"SpanKind", func(s *Record) { s.SpanKind = "client" }},
		{"HTTPMethod", func(s *Record) { s.HTTPMethod = "POST" }},
		{"HTTPEndpoint", func(s *Record) { s.HTTPEndpoint = "/api/v1/users" }},
		{"GRPCStatusCode", func(s *Record) { s.GRPCStatusCode = "14" }},
		{"ServiceSource", func(s *Record) { s.ServiceSource = "opt.peer_service" }},
		{"HTTPStatusCode", func(s *Record) { s.HTTPStatusCode = 404 }},
		{"HTTPStatusCode high byte", func(s *Record) { s.HTTPStatusCode = 200 | 1<<24 }},
		{"Synthetics", func(s *Record) { s.Synthetics = true }},
		{"TraceRoot", func(s *Record) { s.TraceRoot = true }},
		{"PeerTags added", func(s *Record) { s.SetPeerTags([]string{"peer.service:db"}) }},
		{"PeerTags value", func(s *Record) { s.SetPeerTags([]string{"peer.service:cache"}) }},
		{"PeerTags extra", func(s *Record) {
			s.SetPeerTags(strings.Split("a:1 b:1 c:1 d:1 e:1 f:1 g:1 h:1 i:1 j:1", " "))
		}},
	}
	base := baseSpan()
	base.SetPeerTags([]string{"peer.service:db", "a:0"}) // so that every mutation changes the set
	for _, f := range fields {
		t.Run(f.name, func(t *testing.T) {
			tb := NewTable(0)
			a, b := base, base
			f.mutate(&b)
			tb.Add(&a)
			tb.Add(&b)
			tb.Add(&b)
			if tb.Len() != 2 {
				t.Fatalf("%d entries, want 2: %s does not distinguish keys", tb.Len(), f.name)
			}
			got := tb.Touched(nil)
			if len(got) != 2 || got[0].Hits != 1 || got[1].Hits != 2 {
				t.Fatalf("touched %d entries, hits %d/%d, want 2 entries 1/2", len(got), got[0].Hits, got[1].Hits)
			}
			if !keyEqual(got[0].Key, wantKey(a)) || !keyEqual(got[1].Key, wantKey(b)) {
				t.Fatalf("keys\n%+v\n%+v\nwant\n%+v\n%+v", got[0].Key, got[1].Key, wantKey(a), wantKey(b))
			}
			if find(tb, &a) != got[0] || find(tb, &b) != got[1] {
				t.Fatal("lookup does not find each key's own entry")
			}
		})
	}
}

// TestTableKeyEncodingIsInjective checks keys whose concatenated bytes
// would be equal under a separator encoding.
func TestTableKeyEncodingIsInjective(t *testing.T) {
	pairs := [][2]func(*Record){
		{func(s *Record) { s.Service, s.Name = "ab", "c" }, func(s *Record) { s.Service, s.Name = "a", "bc" }},
		{func(s *Record) { s.Service, s.Name = "a\xff", "b" }, func(s *Record) { s.Service, s.Name = "a", "\xffb" }},
		{func(s *Record) { s.Service, s.Name = "\x01a", "" }, func(s *Record) { s.Service, s.Name = "", "a" }},
		{func(s *Record) { s.ServiceSource = "x"; s.HTTPStatusCode = 0 }, func(s *Record) { s.ServiceSource = ""; s.HTTPStatusCode = 0x0178 }},
		{func(s *Record) { s.SetPeerTags([]string{"a", "b"}) }, func(s *Record) { s.SetPeerTags([]string{"a\x01b"}) }},
		{func(s *Record) { s.SetPeerTags([]string{""}) }, func(s *Record) { s.SetPeerTags(nil) }},
		{func(s *Record) { s.Resource = strings.Repeat("r", 200) }, func(s *Record) { s.Resource = strings.Repeat("r", 199) }},
	}
	for i, p := range pairs {
		tb := NewTable(0)
		a, b := baseSpan(), baseSpan()
		p[0](&a)
		p[1](&b)
		tb.Add(&a)
		tb.Add(&b)
		if tb.Len() != 2 {
			t.Fatalf("pair %d: %d entries, want 2", i, tb.Len())
		}
		got := tb.Touched(nil)
		if !keyEqual(got[0].Key, wantKey(a)) || !keyEqual(got[1].Key, wantKey(b)) {
			t.Fatalf("pair %d: keys %+v %+v", i, got[0].Key, got[1].Key)
		}
	}
}

// TestTableKeyOwnsStrings checks that long fields (multi-byte length
// prefixes) round-trip and that entries copy the tracer's strings.
func TestTableKeyOwnsStrings(t *testing.T) {
	buf := []byte(strings.Repeat("SELECT * FROM t WHERE id = ? ", 3000)) // ~87 kB
	s := baseSpan()
	s.Resource = unsafe.String(&buf[0], len(buf))
	s.Service = unsafe.String(&buf[0], 300)
	s.SetPeerTags([]string{unsafe.String(&buf[7], 200), "db:x"})
	want := wantKey(s)
	want.Resource, want.Service = strings.Clone(want.Resource), strings.Clone(want.Service)
	want.PeerTags = slices.Clone(want.PeerTags)
	for i := range want.PeerTags {
		want.PeerTags[i] = strings.Clone(want.PeerTags[i])
	}
	tb := NewTable(0)
	tb.Add(&s)
	for i := range buf {
		buf[i] = 'x' // the tracer reuses its buffer
	}
	e := tb.Touched(nil)[0]
	if !keyEqual(e.Key, want) {
		t.Fatal("entry key changed with the tracer's buffer: strings not copied")
	}
	// The original bytes still find the entry.
	s2 := baseSpan()
	s2.Resource, s2.Service = want.Resource, want.Service
	s2.SetPeerTags([]string{"db:x", want.PeerTags[0]})
	tb.Add(&s2)
	if tb.Len() != 1 || e.Hits != 2 {
		t.Fatalf("len %d hits %d, want 1 entry with 2 hits", tb.Len(), e.Hits)
	}
}

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

func TestTableErrSketchLazy(t *testing.T) {
	tb := NewTable(0)
	s := baseSpan()
	for range 5 {
		tb.Add(&s)
	}
	e := tb.Touched(nil)[0]
	if e.Err != nil {
		t.Fatal("Err sketch allocated before the first error")
	}
	if e.Ok == nil || e.Ok.Count() != 5 {
		t.Fatalf("Ok sketch %v, want 5 values", e.Ok)
	}
	s.Error = true
	s.Duration = 7e6
	tb.Add(&s)
	if e.Err == nil || e.Err.Count() != 1 || e.Ok.Count() != 5 || e.Errors != 1 {
		t.Fatalf("after one error: Err %v Ok %d Errors %d", e.Err, e.Ok.Count(), e.Errors)
	}
	// Only errors: Ok stays nil too.
	only := baseSpan()
	only.Resource, only.Error = "only-errors", true
	tb.Add(&only)
	if e2 := find(tb, &only); e2.Ok != nil || e2.Err.Count() != 1 {
		t.Fatalf("error-only entry: Ok %v Err %d", e2.Ok, e2.Err.Count())
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

// count is a sketch's count, 0 for a sketch not allocated yet.
func count(s *Sketch) uint64 {
	if s == nil {
		return 0
	}
	return s.Count()
}

func resources(es []*Entry) []string {
	var r []string
	for _, e := range es {
		r = append(r, fmt.Sprintf("%s:%d", e.Resource, e.Hits))
	}
	return r
}

// model is the table's contract as a plain map: creation-order positions,
// recycling of the first idle entry from a forward cursor, and the overflow
// entry when no entry is idle.
type model struct {
	cap        int
	keys       []int       // position -> key id
	pos        map[int]int // key id -> position
	hit        []bool      // position -> hit in this interval
	vals       []modelVals
	overflow   modelVals
	cursor     int
	noIdle     bool
	recycled   uint64
	overflowed uint64
}

type modelVals struct{ hits, errs, top, dur uint64 }

func (v *modelVals) record(s *Record) {
	v.hits++
	v.dur += uint64(s.Duration)
	if s.Error {
		v.errs++
	}
	if s.TopLevel {
		v.top++
	}
}

func newModel(cap int) *model { return &model{cap: cap, pos: map[int]int{}} }

func (m *model) add(k int, s *Record) {
	p, ok := m.pos[k]
	if !ok {
		switch {
		case len(m.keys) < m.cap:
			p = len(m.keys)
			m.keys = append(m.keys, k)
			m.hit = append(m.hit, false)
			m.vals = append(m.vals, modelVals{})
		default:
			p = m.idle()
			if p < 0 {
				m.overflowed++
				m.overflow.record(s)
				return
			}
			delete(m.pos, m.keys[p])
			m.keys[p] = k
			m.recycled++
		}
		m.pos[k] = p
	}
	m.hit[p] = true
	m.vals[p].record(s)
}

func (m *model) idle() int {
	if m.noIdle {
		return -1
	}
	for range len(m.keys) {
		i := m.cursor
		m.cursor = (m.cursor + 1) % len(m.keys)
		if !m.hit[i] {
			return i
		}
	}
	m.noIdle = true
	return -1
}

func (m *model) rotate() {
	for i := range m.hit {
		m.hit[i] = false
		m.vals[i] = modelVals{}
	}
	m.overflow = modelVals{}
	m.noIdle = false
}

func (m *model) clear() {
	*m = model{cap: m.cap, pos: map[int]int{}, recycled: m.recycled, overflowed: m.overflowed}
}

// modelSpan is the span of key id k: resource names the key, the other
// fields vary so that peer tags, booleans and the status take part.
func modelSpan(k int, r *rand.Rand) Record {
	s := baseSpan()
	s.Resource = fmt.Sprintf("GET /r/%d", k)
	s.Service = []string{"web", "api", "worker"}[k%3]
	s.TraceRoot = k%2 == 0
	s.Synthetics = k%5 == 0
	s.HTTPStatusCode = uint32(200 + k%4)
	if k%4 != 0 {
		tags := []string{"peer.service:db", fmt.Sprintf("db.instance:i%d", k%7), "peer.hostname:h"}[:k%4]
		r.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
		if k%3 == 0 {
			tags = append(tags, tags[0]) // a duplicate
		}
		s.SetPeerTags(tags)
	}
	s.Duration = 1 + r.Int64N(2e9)
	s.Error = r.IntN(5) == 0
	s.TopLevel = r.IntN(2) == 0
	return s
}

// TestTableMatchesModel drives random workloads over many intervals through
// the table and the model and compares everything after each interval:
// Touched (order, keys, values, sketch counts), which keys are indexed, the
// counters and the slot index. forcedHash makes many keys share home slots
// (around the wrap of the slot array) and whole hashes, which stresses
// backward-shift deletion and the key comparison.
func TestTableMatchesModel(t *testing.T) {
	for _, forced := range []bool{false, true} {
		for _, cap := range []int{1, 2, 3, 8, 64} {
			t.Run(fmt.Sprintf("cap=%d/forcedHash=%v", cap, forced), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(cap), 77))
				tb := NewTable(cap)
				m := newModel(cap)
				universe := 3*cap + 5
				hashOf := func(k int) uint64 {
					// Homes in the last two and first two slots; keys equal
					// mod 12 share the whole 64-bit hash.
					home := (tb.mask - 1 + uint64(k%4)) & tb.mask
					return home | uint64(k%12)<<32
				}
				add := func(k int, s *Record) {
					if forced {
						addWithHash(tb, s, hashOf(k))
					} else {
						tb.Add(s)
					}
				}
				lookup := func(k int, s *Record) *Entry {
					if forced {
						return findWithHash(tb, s, hashOf(k))
					}
					return find(tb, s)
				}
				var touched []*Entry
				for interval := range 300 {
					n := r.IntN(4 * cap)
					for range n {
						// Skewed: low key ids are hot.
						k := r.IntN(r.IntN(universe) + 1)
						s := modelSpan(k, r)
						add(k, &s)
						m.add(k, &s)
					}
					touched = tb.Touched(touched[:0])
					var want []*Entry
					var sum uint64
					for p, k := range m.keys {
						if m.hit[p] {
							want = append(want, tb.entries[p])
							if e := tb.entries[p]; !keyEqual(e.Key, wantKey(modelSpan(k, r))) {
								t.Fatalf("interval %d: position %d holds %q, model key %d", interval, p, e.Resource, k)
							}
						}
					}
					if m.overflow.hits > 0 {
						want = append(want, tb.overflow)
					}
					if !slices.Equal(touched, want) {
						t.Fatalf("interval %d: touched %v, want %v", interval, resources(touched), resources(want))
					}
					for _, e := range touched {
						v := m.overflow
						if e != tb.overflow {
							v = m.vals[slices.Index(tb.entries, e)]
						}
						if e.Hits != v.hits || e.Errors != v.errs || e.TopLevelHits != v.top || e.Duration != v.dur ||
							count(e.Ok) != v.hits-v.errs || count(e.Err) != v.errs {
							t.Fatalf("interval %d: %q values %d/%d/%d/%d, model %+v", interval, e.Resource,
								e.Hits, e.Errors, e.TopLevelHits, e.Duration, v)
						}
						sum += e.Hits
					}
					if sum != uint64(n) {
						t.Fatalf("interval %d: %d hits in touched entries, %d spans added", interval, sum, n)
					}
					if tb.Recycled() != m.recycled || tb.Overflowed() != m.overflowed || tb.Len() != len(m.keys) {
						t.Fatalf("interval %d: recycled %d overflowed %d len %d, model %d %d %d", interval,
							tb.Recycled(), tb.Overflowed(), tb.Len(), m.recycled, m.overflowed, len(m.keys))
					}
					for k := range universe {
						s := modelSpan(k, r)
						e := lookup(k, &s)
						p, live := m.pos[k]
						if live != (e != nil) || (live && e != tb.entries[p]) {
							t.Fatalf("interval %d: key %d found=%v, model live=%v", interval, k, e != nil, live)
						}
					}
					checkSlots(t, tb)
					if interval%37 == 36 {
						tb.Clear()
						m.clear()
						if len(tb.Touched(nil)) != 0 || tb.Len() != 0 {
							t.Fatal("Clear left entries")
						}
					} else {
						tb.Rotate()
						m.rotate()
						if len(tb.Touched(nil)) != 0 {
							t.Fatal("Rotate left touched entries")
						}
					}
				}
				if m.recycled == 0 || m.overflowed == 0 {
					t.Fatalf("workload never recycled (%d) or overflowed (%d)", m.recycled, m.overflowed)
				}
			})
		}
	}
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

func testAddBatchMatchesAdd(t *testing.T, maxEntries int, addBatch func(*Table, []*Record)) {
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
