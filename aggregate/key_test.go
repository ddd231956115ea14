// This file tests the key bytes: every field tells keys apart, the encoding
// is injective, keys own their strings, and the hash is seeded per process.

package aggregate

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

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
		{func(s *Record) { s.SetPeerTags([]string{"a:1", "b:2"}) }, func(s *Record) { s.SetPeerTags([]string{"a:1\x01b:2"}) }},
		{func(s *Record) { s.SetPeerTags([]string{"a:b:"}) }, func(s *Record) { s.SetPeerTags([]string{"a:b"}) }},
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
	buf := []byte("db.instance:" + strings.Repeat("SELECT * FROM t WHERE id = ? ", 3000)) // ~87 kB
	s := baseSpan()
	s.Resource = unsafe.String(&buf[0], len(buf))
	s.Service = unsafe.String(&buf[0], 300)
	s.SetPeerTags([]string{unsafe.String(&buf[0], 200), "db:x"})
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

// TestRecycledKeyDropsTheOldOne: an entry recycled for a key with fewer
// peer tags keeps none of the old key's tags past its own, which alias the
// old key string and would keep it alive. Keys that shed a tag each
// interval left every entry holding all its earlier keys: 16 entries with
// 66 KiB of live keys held 11 MiB.
func TestRecycledKeyDropsTheOldOne(t *testing.T) {
	const entries, gens = 16, MaxInlinePeerTags * 8
	span := func(g, i int) Record {
		s := baseSpan()
		s.SpanKind = "client"
		s.Resource = fmt.Sprintf("%d-%d-", g, i) + strings.Repeat("r", 4000)
		tags := make([]string, gens-g)
		for k := range tags {
			p := fmt.Sprintf("k%02d:%d-", k, g)
			tags[k] = p + strings.Repeat("v", 200-len(p))
		}
		s.SetPeerTags(tags)
		return s
	}
	base := heapAlloc()
	tb := NewTable(entries)
	for g := range gens {
		for i := range entries {
			s := span(g, i)
			tb.Add(&s)
		}
		tb.Rotate()
	}
	grown := int64(heapAlloc()) - int64(base)
	if tb.Recycled() != entries*(gens-1) {
		t.Fatalf("recycled %d entries, want %d", tb.Recycled(), entries*(gens-1))
	}
	live := 0
	for _, e := range tb.entries {
		live += len(e.key)
	}
	if grown > 1<<20 {
		t.Errorf("%d entries with %d KiB of keys: the heap grew %d KiB", tb.Len(), live>>10, grown>>10)
	}
	for _, e := range tb.entries {
		for i, p := range e.PeerTags[len(e.PeerTags):cap(e.PeerTags)] {
			if p != "" {
				t.Fatalf("entry %q keeps an old key's tag past its %d: [%d] %.20q", e.Resource[:8], len(e.PeerTags), len(e.PeerTags)+i, p)
			}
		}
	}
	runtime.KeepAlive(tb)
}

// TestKeyHashIsSeededPerProcess: DESIGN §5 seeds the key hash per process,
// so a key's hash cannot be computed ahead to collide: another run of this
// test binary hashes the same key bytes to another value.
func TestKeyHashIsSeededPerProcess(t *testing.T) {
	keyHash := func() uint64 {
		s := baseSpan()
		tb := NewTable(0)
		return hash(tb.encodeKey(&s, nil))
	}
	if os.Getenv("SPANSTATS_KEY_HASH_CHILD") == "1" {
		fmt.Printf("keyhash=%d\n", keyHash())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeyHashIsSeededPerProcess$")
	cmd.Env = append(os.Environ(), "SPANSTATS_KEY_HASH_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, after, ok := strings.Cut(string(out), "keyhash=")
	line, _, _ := strings.Cut(after, "\n")
	child, perr := strconv.ParseUint(line, 10, 64)
	if !ok || perr != nil {
		t.Fatalf("child printed %q", out)
	}
	if here := keyHash(); child == here {
		t.Fatalf("the same key hashes to %#x in two processes: the seed is not random", here)
	}
}

// TestKeyFieldOf128Bytes: fields of 127, 128 and 129 bytes (the first
// length whose uvarint takes two bytes, and either side of it) come back
// whole in the entry's Key, each span in a group of its own.
func TestKeyFieldOf128Bytes(t *testing.T) {
	tb := NewTable(0)
	for _, n := range []int{127, 128, 129} {
		s := baseSpan()
		s.Resource = strings.Repeat("r", n)
		s.PeerTags[0], s.NumPeerTags = "peer.service:"+strings.Repeat("p", n-13), 1
		s.SpanKind = "client"
		tb.Add(&s)
	}
	got := tb.Touched(nil)
	if len(got) != 3 {
		t.Fatalf("%d groups, want 3", len(got))
	}
	for _, e := range got {
		n := len(e.Resource)
		if e.Resource != strings.Repeat("r", n) || (n != 127 && n != 128 && n != 129) || e.Hits != 1 ||
			len(e.PeerTags) != 1 || len(e.PeerTags[0]) != n || e.Service != "web-store" || e.HTTPStatusCode != 200 {
			t.Fatalf("group %q (%d bytes), tags %q, service %q, status %d, hits %d",
				e.Resource, n, e.PeerTags, e.Service, e.HTTPStatusCode, e.Hits)
		}
	}
}
