// This file tests the payload decoder: malformed and hostile payloads are
// refused without amplifying memory, keys in any order and form are read,
// and a reused Decoder gives what DecodePayload gives.

package writer

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// smallPayload is a valid payload of a few hundred bytes with every kind of
// value: strings, arrays, integers of several widths, negative AgentTimeShift,
// a real sketch with a zero count and negative indices, and an empty one.
func smallPayload() []byte {
	e1 := goldenEntry
	e2 := aggregate.Entry{
		Key: aggregate.Key{Service: "db", Name: "query", Resource: "SELECT ?", Type: "sql", SpanKind: "client",
			PeerTags: []string{"peer.service:pg", "db.name:users"}, IsTraceRoot: aggregate.True, HTTPStatusCode: 70000},
		Hits: 1 << 40, Errors: 2, TopLevelHits: 0, Duration: 1 << 62,
		Ok: sketchOf(0, 0.5, 1200, 1250, 9e8), Err: sketchOf(3e4),
	}
	return AppendPayload(nil, &Header{Hostname: "h", Env: "e", Tags: []string{"a:b", "c:d"}, Sequence: 1 << 33},
		[]Bucket{{Start: 5, Duration: 10, AgentTimeShift: -7, Groups: []*aggregate.Entry{&e1, &e2}}})
}

// Hand-assembly helpers for payloads the encoder never writes.
type mp []byte

func (b mp) str(k, v string) mp { return msgp.AppendString(msgp.AppendString(b, k), v) }
func (b mp) key(k string) mp    { return msgp.AppendString(b, k) }
func (b mp) u64(k string, v uint64) mp {
	return msgp.AppendUint64(msgp.AppendString(b, k), v)
}
func (b mp) m(n uint32) mp    { return msgp.AppendMapHeader(b, n) }
func (b mp) a(n uint32) mp    { return msgp.AppendArrayHeader(b, n) }
func (b mp) raw(x ...byte) mp { return append(b, x...) }

// oneGroup wraps the fields of one group in a payload of one bucket.
func oneGroup(groupFields uint32, fields mp) []byte {
	b := mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(1).m(groupFields)
	return append(b, fields...)
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	for _, b := range [][]byte{smallPayload(), AppendPayload(nil, nil, nil)} {
		if _, err := DecodePayload(b); err != nil {
			t.Fatalf("full payload: %v", err)
		}
		for n := range len(b) {
			if p, err := DecodePayload(b[:n]); err == nil {
				t.Fatalf("prefix of %d/%d bytes decoded: %+v", n, len(b), p)
			}
		}
	}
}

// TestDecodeRejectsEmptyKeys: an empty key, in the payload's map, a
// bucket's or a group's (as fixstr or str8), is refused by both decoders,
// as the agent's decoder refuses it; a known key after it would decode.
func TestDecodeRejectsEmptyKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"payload", mp(nil).m(2).str("", "x").str("Env", "prod")},
		{"payload, str8", mp(nil).m(2).raw(0xd9, 0x00).key("x").u64("Sequence", 1)}, // key(): the value "x"
		{"bucket", mp(nil).m(1).key("Stats").a(1).m(2).u64("", 1).u64("Start", 5)},
		{"group", oneGroup(2, mp(nil).u64("", 1).u64("Hits", 1))},
	} {
		if _, err := DecodePayload(tc.in); !errors.Is(err, ErrEmptyKey) {
			t.Errorf("%s: DecodePayload = %v, want ErrEmptyKey", tc.name, err)
		}
		dec := Decoder{}
		if _, err := dec.Decode(tc.in, 16); !errors.Is(err, ErrEmptyKey) {
			t.Errorf("%s: Decode = %v, want ErrEmptyKey", tc.name, err)
		}
	}
}

func TestDecodeRejectsTrailingBytes(t *testing.T) {
	for _, extra := range [][]byte{{0xc0}, {0x00}, smallPayload()} {
		_, err := DecodePayload(append(smallPayload(), extra...))
		if !errors.Is(err, ErrTrailingBytes) {
			t.Errorf("trailing % x: err = %v, want ErrTrailingBytes", extra[:1], err)
		}
	}
}

func TestDecodeRejectsNonPayloads(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":    nil,
		"nil":      {0xc0},
		"array":    {0x90},
		"string":   {0xa1, 'x'},
		"bad byte": {0xc1},
	} {
		if _, err := DecodePayload(in); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if p, err := DecodePayload([]byte{0x80}); err != nil || p.Buckets != nil {
		t.Errorf("empty map: %v, %+v; want an empty payload", err, p)
	}
}

// The agent reads summaries with ReadBytesHeader / ReadBytesLimit, which
// accept only bin: a str summary is a 400 there, so it is an error here too.
func TestDecodeRejectsStrSummary(t *testing.T) {
	for _, k := range []string{"OkSummary", "ErrorSummary"} {
		b := oneGroup(1, mp(nil).key(k).raw(0xa0|byte(len(emptySketch))).raw(emptySketch...))
		_, err := DecodePayload(b)
		var te msgp.TypeError
		if !errors.As(err, &te) || te.Method != msgp.BinType || te.Encoded != msgp.StrType {
			t.Fatalf("%s as str: err = %v, want a msgp.TypeError bin/str", k, err)
		}
		if want := "Stats/0/Stats/0/" + k; !strings.Contains(err.Error(), want) {
			t.Errorf("%s as str: error %q lacks the path %q", k, err, want)
		}
	}
}

func TestDecodeWrongTypesCarryPath(t *testing.T) {
	cases := []struct {
		name, path string
		in         []byte
	}{
		{"Hostname int", "Hostname", mp(nil).m(1).key("Hostname").raw(0x01)},
		{"Sequence str", "Sequence", mp(nil).m(1).str("Sequence", "1")},
		{"Tags element int", "Tags/1", mp(nil).m(1).key("Tags").a(2).raw(0xa1, 'x', 0x05)},
		{"Stats map", "Stats", mp(nil).m(1).key("Stats").m(0)},
		{"bucket Start negative", "Stats/0/Start", mp(nil).m(1).key("Stats").a(1).m(1).key("Start").raw(0xff)},
		{"bucket AgentTimeShift str", "Stats/0/AgentTimeShift", mp(nil).m(1).key("Stats").a(1).m(1).str("AgentTimeShift", "x")},
		{"group Hits str", "Stats/0/Stats/0/Hits", oneGroup(1, mp(nil).str("Hits", "3"))},
		{"group HTTPStatusCode overflow", "Stats/0/Stats/0/HTTPStatusCode", oneGroup(1, mp(nil).u64("HTTPStatusCode", 1<<32))},
		{"group IsTraceRoot bool", "Stats/0/Stats/0/IsTraceRoot", oneGroup(1, mp(nil).key("IsTraceRoot").raw(0xc3))},
		{"group Synthetics int", "Stats/0/Stats/0/Synthetics", oneGroup(1, mp(nil).u64("Synthetics", 1))},
		{"group PeerTags element", "Stats/0/Stats/0/PeerTags/0", oneGroup(1, mp(nil).key("PeerTags").a(1).raw(0xc0))},
		{"group srv_src int", "Stats/0/Stats/0/ServiceSource", oneGroup(1, mp(nil).u64("srv_src", 1))},
		{"group not a map", "Stats/0/Stats/0", mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(1).raw(0x91, 0x01)},
		{"second group", "Stats/0/Stats/1/Name", mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(2).m(0).m(1).key("Name").raw(0x01)},
	}
	for _, tc := range cases {
		_, err := DecodePayload(tc.in)
		if err == nil {
			t.Errorf("%s: decoded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: error %q lacks the path %q", tc.name, err, tc.path)
		}
	}
}

func TestDecodeRejectsBadSketches(t *testing.T) {
	badGamma := append(pbMapping(1.05, 0, 0), pbBytes(2, packed(1))...)
	negative := append(pbMapping(gamma, 0, 0), pbBytes(3, packed(1))...)
	for _, tc := range []struct {
		key  string
		in   []byte
		want error
	}{
		{"OkSummary", badGamma, ErrMapping},
		{"ErrorSummary", badGamma, ErrMapping},
		{"OkSummary", negative, ErrNegativeValues},
		{"ErrorSummary", []byte{0x0a, 0x05}, ErrMalformedSketch},
	} {
		_, err := DecodePayload(oneGroup(1, msgp.AppendBytes(mp(nil).key(tc.key), tc.in)))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.key, err, tc.want)
			continue
		}
		if want := "Stats/0/Stats/0/" + tc.key; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q lacks the path %q", tc.key, err, want)
		}
	}
}

// TestDecodeMalformedAfterBadSketch: a payload whose bytes do not decode
// after a sketch that does but is not the agent's returns the decoding
// error, not the sketch's, by both decoders: the relay counts it
// malformed, not invalid.
func TestDecodeMalformedAfterBadSketch(t *testing.T) {
	badGamma := append(pbMapping(1.05, 0, 0), pbBytes(2, packed(1))...)
	good := oneGroup(2, msgp.AppendBytes(mp(nil).key("OkSummary"), badGamma))
	good = msgp.AppendUint64(append(good, "\xa4Hits"...), 1)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"whole", good, ErrMapping},
		{"cut", good[:len(good)-1], msgp.ErrShortBytes},
		{"trailing bytes", append(good[:len(good):len(good)], 0xc0), ErrTrailingBytes},
	} {
		_, err := DecodePayload(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodePayload = %v, want %v", tc.name, err, tc.want)
		}
		for _, wire := range []bool{false, true} {
			dec := Decoder{WireSketches: wire}
			if _, err := dec.Decode(tc.in, 16); !errors.Is(err, tc.want) {
				t.Errorf("%s: Decode (WireSketches %v) = %v, want %v", tc.name, wire, err, tc.want)
			}
		}
	}
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodePayloadEmptyGroupsCannotAmplify: DecodePayload (Split's, the
// fake agent's) bounds groups by the input as the relay's Decoder does: 32 Ki
// one-byte groups would decode into 32 Ki Groups of a few hundred bytes
// each (57 MB); they are refused having allocated a small multiple of the
// input, while 16 such groups (a tiny payload's allowance) decode.
func TestDecodePayloadEmptyGroupsCannotAmplify(t *testing.T) {
	empties := func(n int) []byte {
		return mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(uint32(n)).raw(bytes.Repeat([]byte{0x80}, n)...)
	}
	in := empties(32 << 10)
	var err error
	got := allocated(func() { _, err = DecodePayload(in) })
	if !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Fatalf("DecodePayload = %v, want %v", err, msgp.ErrLimitExceeded)
	}
	if got > 16*uint64(len(in)) {
		t.Fatalf("a %d-byte payload allocated %d bytes (%.0f×), bound 16×", len(in), got, float64(got)/float64(len(in)))
	}
	p, err := DecodePayload(empties(16))
	if err != nil || len(p.Buckets) != 1 || len(p.Buckets[0].Groups) != 16 {
		t.Fatalf("16 empty groups: %+v, %v", p, err)
	}
}

// repeatedStatsKeys is a payload map whose every key is Stats, each an
// array of nil buckets as long as the bytes after it allow a fresh budget
// per key (a tenth of them): built from the back, each array is sized to
// the input that follows it.
func repeatedStatsKeys(total int) []byte {
	var tail []byte
	keys := 0
	for len(tail) < total {
		n := min(MaxBuckets, (len(tail)+16)/7)
		for n > 1 && n > (len(msgp.AppendArrayHeader(nil, uint32(n)))+n+len(tail))/minWireBucketBytes+1 {
			n--
		}
		hdr := msgp.AppendArrayHeader(nil, uint32(n))
		arr := append(hdr, slices.Repeat([]byte{0xc0}, n)...)
		tail = append(append(msgp.AppendString(nil, "Stats"), arr...), tail...)
		keys++
	}
	return append(msgp.AppendMapHeader(nil, uint32(keys)), tail...)
}

// TestRepeatedStatsKeysCannotAmplify: the bucket budget is the payload's,
// as the group and string budgets are. Given afresh to every Stats key, a
// payload repeating the key preallocated 48 bytes per nil bucket, 48 times
// the input, and decoded (with no bucket); now its nils exceed the budget.
func TestRepeatedStatsKeysCannotAmplify(t *testing.T) {
	in := repeatedStatsKeys(60 << 10)
	for _, tc := range []struct {
		name   string
		decode func() error
	}{
		{"DecodePayload", func() error { _, err := DecodePayload(in); return err }},
		{"Decoder", func() error { var d Decoder; _, err := d.Decode(in, len(in)/MinWireGroupBytes); return err }},
	} {
		var err error
		got := allocated(func() { err = tc.decode() })
		if !errors.Is(err, msgp.ErrLimitExceeded) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, msgp.ErrLimitExceeded)
		}
		if got > 16*uint64(len(in)) {
			t.Errorf("%s: a %d-byte payload (err %v) allocated %d bytes (%.0f×), bound 16×",
				tc.name, len(in), err, got, float64(got)/float64(len(in)))
		}
	}
}

// Array headers that promise more than the input holds must fail fast and
// without allocating for elements that are not there.
func TestDecodeHugeArrayHeaders(t *testing.T) {
	cases := []struct {
		name  string
		in    []byte
		limit bool // over a Max* constant: ErrLimitExceeded
	}{
		{"buckets array32 max", mp(nil).m(1).key("Stats").raw(0xdd, 0xff, 0xff, 0xff, 0xff), true},
		{"buckets at the limit", mp(nil).m(1).key("Stats").a(MaxBuckets), false},
		{"groups array32 max", mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").raw(0xdd, 0xff, 0xff, 0xff, 0xff), true},
		{"groups at the limit", mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(MaxGroups), false},
		{"groups over two buckets", append(mp(nil).m(1).key("Stats").a(2).m(1).key("Stats").a(MaxGroups/2).
			raw(bytes.Repeat([]byte{0xc0}, MaxGroups/2)...).m(1).key("Stats"), mp(nil).a(MaxGroups/2+1)...), true},
		{"tags array32 max", mp(nil).m(1).key("Tags").raw(0xdd, 0xff, 0xff, 0xff, 0xff), true},
		{"tags at the limit", mp(nil).m(1).key("Tags").a(MaxStrings), false},
		{"peer tags at the limit", oneGroup(1, mp(nil).key("PeerTags").a(MaxStrings)), false},
		{"map32 max", mp(nil).raw(0xdf, 0xff, 0xff, 0xff, 0xff), false},
		{"unknown key with array32 max", mp(nil).m(1).key("X").raw(0xdd, 0xff, 0xff, 0xff, 0xff), false},
		{"bin32 max summary", oneGroup(1, mp(nil).key("OkSummary").raw(0xc6, 0xff, 0xff, 0xff, 0xff)), false},
		{"str32 max", mp(nil).m(1).key("Env").raw(0xdb, 0xff, 0xff, 0xff, 0xff), false},
	}
	for _, tc := range cases {
		var err error
		n := allocated(func() { _, err = DecodePayload(tc.in) })
		if err == nil {
			t.Errorf("%s: decoded", tc.name)
			continue
		}
		if tc.limit && !errors.Is(err, msgp.ErrLimitExceeded) {
			t.Errorf("%s: err = %v, want ErrLimitExceeded", tc.name, err)
		}
		if n > 64<<10+4*uint64(len(tc.in)) { // a few times the input at most
			t.Errorf("%s: allocated %d bytes for a %d-byte input", tc.name, n, len(tc.in))
		}
	}
}

// msgp lets nil stand for a missing element of the bucket and group arrays;
// an array or summary that is nil is read as empty.
func TestDecodeAcceptsNil(t *testing.T) {
	b := mp(nil).m(2).key("Tags").raw(0xc0).key("Stats").a(3).
		raw(0xc0).
		m(2).u64("Start", 1).key("Stats").raw(0xc0).
		m(1).key("Stats").a(3).raw(0xc0).
		m(6).u64("Hits", 4).key("OkSummary").raw(0xc0).key("ErrorSummary").raw(0xc4, 0x00).
		key("PeerTags").raw(0xc0).key("SpanDerivedPrimaryTags").raw(0xc0).key("AdditionalMetricTags").a(0).
		raw(0xc0)
	p, err := DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tags != nil || len(p.Buckets) != 2 {
		t.Fatalf("tags %q, %d buckets; want nil, 2 (nil bucket skipped)", p.Tags, len(p.Buckets))
	}
	if p.Buckets[0].Start != 1 || p.Buckets[0].Groups != nil {
		t.Errorf("bucket 0: %+v", p.Buckets[0])
	}
	gs := p.Buckets[1].Groups
	if len(gs) != 1 {
		t.Fatalf("%d groups, want 1 (nil groups skipped)", len(gs))
	}
	g := gs[0]
	if g.Hits != 4 || g.Ok != nil || g.Err != nil || g.PeerTags != nil || g.SpanDerivedPrimaryTags != nil || g.AdditionalMetricTags != nil {
		t.Errorf("group %+v", g)
	}
}

func TestDecodeSkipsUnknownKeysAndKeepsOthers(t *testing.T) {
	unknown := func(b mp) mp {
		return b.key("Unknown").m(2).key("a").a(3).raw(0x01, 0xc0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0).key("b").raw(0xc4, 0x01, 0xff)
	}
	ok := AppendSketch(nil, sketchOf(1e6, 2e6))
	b := mp(nil).m(4)
	b = unknown(b)
	b = b.str("Env", "prod")
	b = msgp.AppendBytes(b, []byte("Hostname")) // a bin key: msgp accepts it
	b = b.raw(0xa1, 'h')
	b = b.key("Stats").a(1).m(3)
	b = unknown(b)
	b = b.u64("Start", 9)
	b = b.key("Stats").a(1).m(7)
	b = unknown(b)
	b = b.str("Service", "s").str("DBType", "postgres").str("srv_src", "opt").str("Service", "s2") // last wins
	b = msgp.AppendBytes(b.key("OkSummary"), ok)
	b = b.key("Hits").raw(0xd3, 0, 0, 0, 0, 0, 0, 0, 5) // int64 width, positive
	p, err := DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Env != "prod" || p.Hostname != "h" || len(p.Buckets) != 1 || p.Buckets[0].Start != 9 {
		t.Fatalf("payload %+v", p)
	}
	g := p.Buckets[0].Groups[0]
	if g.Service != "s2" || g.DBType != "postgres" || g.ServiceSource != "opt" || g.Hits != 5 || !sameSketch(g.Ok, sketchOf(1e6, 2e6)) {
		t.Errorf("group %+v", g)
	}
}

// samePayload is reflect.DeepEqual but for the groups' sketches, which
// must hold the same values (sameSketch) and be nil alike: a sketch a
// Decoder reused from an earlier payload keeps an empty bins slice where a
// new one has nil, which DeepEqual tells apart.
func samePayload(a, b *Payload) bool {
	if a == nil || b == nil {
		return a == b
	}
	strip := func(p *Payload) (Payload, [][2]*aggregate.Sketch) {
		c := *p
		c.Buckets = slices.Clone(p.Buckets)
		var sk [][2]*aggregate.Sketch
		for i := range c.Buckets {
			gs := slices.Clone(c.Buckets[i].Groups)
			for j := range gs {
				sk = append(sk, [2]*aggregate.Sketch{gs[j].Ok, gs[j].Err})
				gs[j].Ok, gs[j].Err = nil, nil
			}
			c.Buckets[i].Groups = gs
		}
		return c, sk
	}
	ca, sa := strip(a)
	cb, sb := strip(b)
	if !reflect.DeepEqual(ca, cb) || len(sa) != len(sb) {
		return false
	}
	for i := range sa {
		for k := range 2 {
			if (sa[i][k] == nil) != (sb[i][k] == nil) || !sameSketch(sa[i][k], sb[i][k]) {
				return false
			}
		}
	}
	return true
}

func FuzzDecodePayload(f *testing.F) {
	f.Add(smallPayload())
	f.Add(AppendPayload(nil, nil, nil))
	f.Add(AppendPayload(nil, &testHeader, []Bucket{{Groups: []*aggregate.Entry{&goldenEntry}}}))
	f.Add([]byte(oneGroup(1, mp(nil).key("PeerTags").raw(0xc0))))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePayload(b)
		// A Decoder given DecodePayload's group budget (it bounds
		// groups by the input's size) accepts and rejects the same
		// inputs, with the same values and errors.
		budget := min(MaxGroups, len(b)/MinWireGroupBytes+16)
		if pa, errA := new(Decoder).Decode(b, budget); (err == nil) != (errA == nil) ||
			err != nil && err.Error() != errA.Error() || !reflect.DeepEqual(p, pa) {
			t.Fatalf("Decoder.Decode = %v, %v; DecodePayload = %v, %v", pa, errA, p, err)
		}
		// So does a Decoder reusing the sketches of an earlier payload.
		var dec Decoder
		if _, err := dec.Decode(smallPayload(), MaxGroups); err != nil {
			t.Fatal(err)
		}
		if pd, errD := dec.Decode(b, budget); (err == nil) != (errD == nil) ||
			err == nil && !samePayload(p, pd) {
			t.Fatalf("Decoder.Decode after another payload = %v, %v; DecodePayload = %v, %v", pd, errD, p, err)
		}
		// With WireSketches, the same, summaries left on the wire.
		wd := Decoder{WireSketches: true}
		if _, err := wd.Decode(smallPayload(), MaxGroups); err != nil {
			t.Fatal(err)
		}
		if pw, errW := wd.Decode(b, budget); (err == nil) != (errW == nil) ||
			err != nil && err.Error() != errW.Error() || err == nil && !samePayload(p, fromWire(t, &wd, pw)) {
			t.Fatalf("Decoder.Decode with WireSketches = %v, %v; DecodePayload = %v, %v", pw, errW, p, err)
		}
		if err != nil {
			return
		}
		// Size is what Append writes for a decoded group, and bounds it
		// for one with its summaries left on the wire: the packer's cuts.
		for i := range p.Buckets {
			for j := range p.Buckets[i].Groups {
				if g := &p.Buckets[i].Groups[j]; len(g.Append(nil)) != g.Size() {
					t.Fatalf("group %d/%d: Append wrote %d bytes, Size says %d", i, j, len(g.Append(nil)), g.Size())
				}
			}
		}
		if pw, err := wd.Decode(b, budget); err == nil {
			for i := range pw.Buckets {
				for j := range pw.Buckets[i].Groups {
					if g := &pw.Buckets[i].Groups[j]; len(g.Append(nil)) > g.Size() {
						t.Fatalf("wire group %d/%d: Append wrote %d bytes, Size says %d", i, j, len(g.Append(nil)), g.Size())
					}
				}
			}
		}
		// Its keys rewritten as str8, none matches the writer's bytes:
		// read the general way, every key, it decodes to the same values.
		s8, _ := rewriteMaps(t, b, true, func(k, v [][]byte) ([][]byte, [][]byte) { return k, v })
		if p8, err := DecodePayload(s8); err != nil || !samePayload(p8, p) {
			t.Fatalf("with str8 keys: %v, %v; want %v", p8, err, p)
		}
		// What decodes re-encodes, every field, and decodes again to the
		// same groups; split, it gives the same groups again.
		again, err := DecodePayload(p.Append(nil))
		if err != nil {
			t.Fatalf("re-encoded payload does not decode: %v", err)
		}
		if len(again.Buckets) != len(p.Buckets) || !equalHeader(again.Header, p.Header) ||
			!slices.Equal(located(again.Buckets), located(p.Buckets)) {
			t.Fatal("re-encoded payload differs")
		}
		var parts []part
		switch err := Split(b, nil, collect(t, &parts)); {
		case errors.Is(err, ErrUnsplittable):
			if len(parts) != 0 || len(located(p.Buckets)) > 1 {
				t.Fatalf("ErrUnsplittable for %d groups, after %d payloads", len(located(p.Buckets)), len(parts))
			}
		case err != nil:
			t.Fatalf("Split of a payload that decodes: %v", err)
		default:
			checkParts(t, parts, p.Buckets, &p.Header, math.MaxInt)
		}
	})
}

// TestDecoderAliases: a Decoder's strings are views of its
// input, and DecodePayload's are not.
func TestDecoderAliases(t *testing.T) {
	b := AppendPayload(nil, &testHeader, []Bucket{{Groups: []*aggregate.Entry{&goldenEntry}}})
	inside := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		start := uintptr(unsafe.Pointer(&b[0]))
		return p >= start && p < start+uintptr(len(b))
	}
	copied, err := DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	aliased, err := new(Decoder).Decode(b, MaxGroups)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(copied, aliased) {
		t.Fatalf("Decoder.Decode = %+v, want %+v", aliased, copied)
	}
	for _, c := range []struct {
		name            string
		copied, aliased string
	}{
		{"Hostname", copied.Hostname, aliased.Hostname},
		{"Resource", copied.Buckets[0].Groups[0].Resource, aliased.Buckets[0].Groups[0].Resource},
		{"Tags[0]", copied.Tags[0], aliased.Tags[0]},
	} {
		if c.aliased == "" || !inside(c.aliased) || inside(c.copied) {
			t.Errorf("%s: aliased inside the input %v, copied inside %v; want true, false", c.name, inside(c.aliased), inside(c.copied))
		}
	}
}

// TestDecoderGroupLimit: Decode takes at most maxGroups groups, none for
// zero or a negative maxGroups, which does not lift the limit.
func TestDecoderGroupLimit(t *testing.T) {
	b := sketchPayload(3, 1e3)
	for _, tc := range []struct {
		maxGroups int
		ok        bool
	}{{3, true}, {2, false}, {0, false}, {-1, false}, {math.MinInt, false}} {
		p, err := new(Decoder).Decode(b, tc.maxGroups)
		if tc.ok && (err != nil || len(p.Buckets[0].Groups) != 3) {
			t.Errorf("maxGroups %d: Decode = %v; want 3 groups", tc.maxGroups, err)
		}
		if !tc.ok && !errors.Is(err, msgp.ErrLimitExceeded) {
			t.Errorf("maxGroups %d: err = %v, want %v", tc.maxGroups, err, msgp.ErrLimitExceeded)
		}
	}
}

// sketchPayload is a payload of n groups, each with both sketches, whose
// values depend on seed.
func sketchPayload(n int, seed float64) []byte {
	gs := make([]*aggregate.Entry, n)
	for i := range gs {
		gs[i] = &aggregate.Entry{Key: aggregate.Key{Service: "s", Name: "op", Resource: fmt.Sprint("r", i)},
			Hits: 4, Errors: 1, Duration: 10,
			Ok: sketchOf(seed*float64(i+1), 2e6, 3e6), Err: sketchOf(seed * 7e5)}
	}
	return AppendPayload(nil, &Header{Hostname: "h"}, []Bucket{{Start: 1, Duration: 10, Groups: gs}})
}

// TestDecoderReuse: payload after payload, a Decoder gives what
// DecodePayload gives, though it decodes into the sketches the previous
// payload left it (some taken out by the caller, as the relay takes those
// of a new group), and saves exactly their allocations; the emptied
// sketches it keeps stay within maxSpareSketches.
func TestDecoderReuse(t *testing.T) {
	var dec Decoder
	inputs := [][]byte{sketchPayload(3, 1e3), smallPayload(), sketchPayload(5, 2e4), AppendPayload(nil, nil, nil), sketchPayload(3, 5e5)}
	for round := range 2 {
		for i, b := range inputs {
			want, err := DecodePayload(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec.Decode(b, MaxGroups)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, payload %d: Decode = %+v, %v; want %+v", round, i, got, err, want)
			}
			if len(got.Buckets) > 0 && len(got.Buckets[0].Groups) > 1 {
				got.Buckets[0].Groups[1].Ok = nil // kept by the caller: not reused
			}
		}
	}

	// Reusing, a payload allocates nothing: its sketches, buckets, groups
	// and tag arrays are carved from what the previous payloads left, while
	// a fresh Decoder allocates for them.
	b := sketchPayload(4, 1e3)
	if fresh := testing.AllocsPerRun(20, func() { _, _ = new(Decoder).Decode(b, MaxGroups) }); fresh < 4 {
		t.Errorf("a fresh Decoder allocated %v times for a payload of 4 groups with 8 sketches", fresh)
	}
	if reused := testing.AllocsPerRun(20, func() { _, _ = dec.Decode(b, MaxGroups) }); reused != 0 {
		t.Errorf("allocations per payload, reusing: %v; want 0", reused)
	}

	// An arena grown by one large payload is not kept past the next.
	large := sketchPayload(2*maxKeptGroups, 1e3)
	if got, err := dec.Decode(large, MaxGroups); err != nil || len(got.Buckets[0].Groups) != 2*maxKeptGroups {
		t.Fatalf("large payload: %v", err)
	}
	if _, err := dec.Decode(smallPayload(), MaxGroups); err != nil {
		t.Fatal(err)
	}
	if cap(dec.groups) > maxKeptGroups {
		t.Errorf("after a small payload the Decoder keeps room for %d groups; want at most %d", cap(dec.groups), maxKeptGroups)
	}

	big := sketchPayload(maxSpareSketches, 1e3) // twice as many sketches as spares
	for range 3 {
		if _, err := dec.Decode(big, MaxGroups); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dec.Decode(AppendPayload(nil, nil, nil), MaxGroups); err != nil {
		t.Fatal(err)
	}
	if len(dec.spares) != maxSpareSketches {
		t.Errorf("%d spare sketches after payloads of %d; want the cap, %d", len(dec.spares), 2*maxSpareSketches, maxSpareSketches)
	}
}

// rewriteMaps re-encodes the msgpack object at the start of b with every
// map's entries passed through edit (recursively, inner maps first), and
// returns it and the rest of b. Keys keep their bytes unless str8 is set,
// when each string key is written as a str8.
func rewriteMaps(t *testing.T, b []byte, str8 bool, edit func(keys, vals [][]byte) ([][]byte, [][]byte)) (out, rest []byte) {
	t.Helper()
	switch {
	case msgp.NextType(b) == msgp.MapType:
		n, b, err := msgp.ReadMapHeaderBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		var keys, vals [][]byte
		for range n {
			// Inside a skipped value a key may be any object: kept as is.
			k, r, err := msgp.ReadMapKeyZC(b)
			if err != nil {
				if r, err = msgp.Skip(b); err != nil {
					t.Fatal(err)
				}
				k = nil
			}
			kb := b[:len(b)-len(r)]
			if str8 && k != nil && len(k) < 256 {
				kb = append([]byte{0xd9, byte(len(k))}, k...)
			}
			var v []byte
			v, b = rewriteMaps(t, r, str8, edit)
			keys, vals = append(keys, kb), append(vals, v)
		}
		keys, vals = edit(keys, vals)
		out = msgp.AppendMapHeader(nil, uint32(len(keys)))
		for i := range keys {
			out = append(append(out, keys[i]...), vals[i]...)
		}
		return out, b
	case msgp.NextType(b) == msgp.ArrayType:
		n, b, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		out = msgp.AppendArrayHeader(nil, n)
		for range n {
			var v []byte
			v, b = rewriteMaps(t, b, str8, edit)
			out = append(out, v...)
		}
		return out, b
	default:
		r, err := msgp.Skip(b)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b[:len(b)-len(r)]...), r
	}
}

// The decoder matches each key first against the one the writer writes
// next: payloads whose keys come in another order, with some missing, or
// as str8 (how another tracer may write them) decode to the same values.
func TestDecodeKeysInAnyOrderAndForm(t *testing.T) {
	orig := smallPayload()
	want, err := DecodePayload(orig)
	if err != nil {
		t.Fatal(err)
	}
	reverse := func(k, v [][]byte) ([][]byte, [][]byte) {
		slices.Reverse(k)
		slices.Reverse(v)
		return k, v
	}
	same := func(k, v [][]byte) ([][]byte, [][]byte) { return k, v }
	// Drops every key whose value is an empty string, zero or empty array:
	// the value then decodes as the zero value all the same.
	dropEmpty := func(k, v [][]byte) (ks, vs [][]byte) {
		for i := range k {
			if len(v[i]) == 1 && (v[i][0] == 0xa0 || v[i][0] == 0x00 || v[i][0] == 0x90) {
				continue
			}
			ks, vs = append(ks, k[i]), append(vs, v[i])
		}
		return ks, vs
	}
	// Every other key moved to the end: runs of the writer's order, broken.
	interleave := func(k, v [][]byte) (ks, vs [][]byte) {
		for _, odd := range []int{0, 1} {
			for i := range k {
				if i%2 == odd {
					ks, vs = append(ks, k[i]), append(vs, v[i])
				}
			}
		}
		return ks, vs
	}
	for _, c := range []struct {
		name string
		str8 bool
		edit func(k, v [][]byte) ([][]byte, [][]byte)
	}{
		{"same", false, same}, {"str8", true, same}, {"reversed", false, reverse},
		{"reversed-str8", true, reverse}, {"sparse", false, dropEmpty}, {"interleaved", false, interleave},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, rest := rewriteMaps(t, orig, c.str8, c.edit)
			if len(rest) != 0 {
				t.Fatalf("%d bytes left", len(rest))
			}
			if c.name != "same" && bytes.Equal(b, orig) {
				t.Fatal("the rewrite changed nothing")
			}
			got, err := DecodePayload(b)
			if err != nil {
				t.Fatal(err)
			}
			if !samePayload(got, want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
			}
			var dec Decoder
			got, err = dec.Decode(b, len(b))
			if err != nil {
				t.Fatal(err)
			}
			if !samePayload(got, want) {
				t.Errorf("Decoder: decoded\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// skip, which counts objects instead of recursing, ends where msgp.Skip
// does, and fails where it does on truncated input.
func TestSkipMatchesMsgp(t *testing.T) {
	var objs [][]byte
	for _, v := range []any{
		nil, 1, -3, 1.5, "s", []byte{1, 2}, []any{}, map[string]any{},
		[]any{1, []any{"a", map[string]any{"k": []any{nil, true}}}, []byte("b")},
		map[string]any{"x": map[string]any{"y": []any{1, 2, 3}}, "z": "w"},
	} {
		b, err := msgp.AppendIntf(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, b)
	}
	objs = append(objs, append(bytes.Repeat([]byte{0x91}, 1000), 0xc0), []byte{0xc1}, []byte{0xd4, 1, 2})
	for _, o := range objs {
		for cut := 0; cut <= len(o); cut++ {
			in := append(o[:cut:cut], 0xc3) // a byte after, when whole
			want, werr := msgp.Skip(in)
			got, gerr := skip(in)
			if (werr == nil) != (gerr == nil) || werr == nil && len(got) != len(want) {
				t.Fatalf("skip(% x) = %d bytes left, %v; msgp.Skip %d, %v", in, len(got), gerr, len(want), werr)
			}
		}
	}
}

// TestDecodeGroupHeaderWithinBudget: a group array header that the
// decoders' budgets let through (1 MiB / MinWireGroupBytes groups, or
// MaxGroups for a Decoder given that budget) with junk behind it instead
// of groups preallocates for no more groups than the input could hold at
// MinWireGroupBytes each: what valid groups at the budget take anyway
// (TestDecoderGroupsAtBudget), not a Group for each of MaxGroups.
func TestDecodeGroupHeaderWithinBudget(t *testing.T) {
	const junk = 1 << 20
	for _, n := range []uint32{junk / MinWireGroupBytes, MaxGroups} {
		in := append(mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(n), bytes.Repeat([]byte{0xc1}, junk)...)
		for name, decode := range map[string]func() error{
			"DecodePayload": func() error { _, err := DecodePayload(in); return err },
			"Decoder (the relay's budget)": func() error {
				var d Decoder
				_, err := d.Decode(in, len(in)/MinWireGroupBytes+1)
				return err
			},
			"Decoder (budget MaxGroups)": func() error {
				var d Decoder
				_, err := d.Decode(in, MaxGroups)
				return err
			},
		} {
			var err error
			got := allocated(func() { err = decode() })
			if err == nil {
				t.Fatalf("%s, %d groups: decoded", name, n)
			}
			if bound := 64<<10 + uint64(unsafe.Sizeof(Group{}))*uint64(groupRoom(in)); got > bound {
				t.Errorf("%s, %d groups: a %d-byte input allocated %d bytes (%.1f×), bound %d",
					name, n, len(in), got, float64(got)/float64(len(in)), bound)
			}
		}
	}
}

// budgetPayload is a payload as large as a relay's datagram may carry
// (64 KiB less the envelope) of as many copies of group as the relay's
// budget lets through, one per MinWireGroupBytes, spread over the given
// number of buckets, its Hostname padding the rest.
func budgetPayload(group []byte, buckets int) []byte {
	const size = 1<<16 - EnvelopeSize
	n := size/MinWireGroupBytes + 1
	b := mp(nil).m(2).key("Stats").a(uint32(buckets))
	for i := range buckets {
		k := n / buckets
		if i < n%buckets {
			k++
		}
		b = b.m(1).key("Stats").a(uint32(k))
		for range k {
			b = append(b, group...)
		}
	}
	b = b.key("Hostname")
	pad := size - len(b) - 5
	b = b.raw(0xdb, byte(pad>>24), byte(pad>>16), byte(pad>>8), byte(pad))
	return append(b, make([]byte, pad)...)
}

// budgetGroup is a group of fewer bytes than MinWireGroupBytes, which a
// relay's datagram may carry as many of as its budget allows; plain: a
// Decoder without WireSketches may be given it (a summary with a value
// builds a Sketch: see DecodePayload).
type budgetGroup struct {
	name  string
	group []byte
	plain bool
}

func budgetGroups() []budgetGroup {
	return []budgetGroup{
		{"empty map", mp(nil).m(0), true},
		{"hits 1", mp(nil).m(1).u64("Hits", 1), true},
		{"one empty summary", mp(nil).m(1).key("OkSummary").raw(0xc4, 0), true},
		{"two empty summaries", mp(nil).m(2).key("OkSummary").raw(0xc4, 0).key("ErrorSummary").raw(0xc4, 0), true},
		{"least summary", mp(nil).m(2).u64("Hits", 1).key("OkSummary").raw(msgp.AppendBytes(nil, AppendSketch(nil, sketchOf(1)))...), false},
	}
}

// TestDecoderGroupsAtBudget: a fresh Decoder given the relay's budget
// allocates for a full datagram of the least groups (budgetGroups) about
// what their Groups take, one per MinWireGroupBytes: their slice is
// allocated once at its length, an empty summary costs nothing, and a
// summary's GroupSketches are carved from an arena that grows to at most
// maxKeptGroups.
func TestDecoderGroupsAtBudget(t *testing.T) {
	for _, tc := range budgetGroups() {
		if len(tc.group) >= MinWireGroupBytes {
			t.Fatalf("%s: a group of %d bytes", tc.name, len(tc.group))
		}
		for _, buckets := range []int{1, 2} {
			in := budgetPayload(tc.group, buckets)
			n := len(in)/MinWireGroupBytes + 1
			for _, wire := range []bool{true, false} {
				if !wire && !tc.plain {
					continue
				}
				var p *Payload
				var err error
				got := allocated(func() {
					d := Decoder{WireSketches: wire}
					p, err = d.Decode(in, n)
				})
				if err != nil || len(p.Buckets) != buckets || len(p.Buckets[0].Groups)*buckets < n-1 {
					t.Fatalf("%s, %d buckets, WireSketches %v: %v", tc.name, buckets, wire, err)
				}
				bound := 8.0 // a Group per MinWireGroupBytes: 7×
				if !tc.plain {
					bound += 3 // a GroupSketches each, from an arena doubling up to maxKeptGroups
				}
				if buckets > 1 {
					bound += 4 // the second bucket's slice from an arena of twice the first's
				}
				if x := float64(got) / float64(len(in)); x > bound {
					t.Errorf("%s, %d buckets, WireSketches %v: a %d-byte payload allocated %d bytes (%.1f×), bound %.0f×",
						tc.name, buckets, wire, len(in), got, x, bound)
				}
			}
		}
	}
}

// TestDecoderKeepsRoomForAFullDatagram: a Decoder reused for full
// datagrams of the least groups, in one bucket or two, summaries on the
// wire, settles on arenas it keeps: it allocates nothing per payload,
// where dropping an arena grown past maxKeptGroups would have it allocate
// the groups of every such datagram again.
func TestDecoderKeepsRoomForAFullDatagram(t *testing.T) {
	var ins [][]byte
	for _, g := range budgetGroups() {
		ins = append(ins, budgetPayload(g.group, 1), budgetPayload(g.group, 2))
	}
	dec := Decoder{WireSketches: true}
	decodeAll := func() {
		for _, in := range ins {
			if _, err := dec.Decode(in, len(in)/MinWireGroupBytes+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 3 { // the arenas grow to what a payload needs over a few
		decodeAll()
	}
	if allocs := testing.AllocsPerRun(5, decodeAll); allocs != 0 {
		t.Errorf("%v allocations per %d payloads, want 0", allocs, len(ins))
	}
	if cap(dec.groups) > maxKeptGroups || cap(dec.wires) > maxKeptGroups {
		t.Errorf("arenas of %d groups and %d GroupSketches kept, want at most %d", cap(dec.groups), cap(dec.wires), maxKeptGroups)
	}
	t.Logf("kept: %d groups, %d GroupSketches, %d strings: %d bytes", cap(dec.groups), cap(dec.wires), cap(dec.strs),
		uintptr(cap(dec.groups))*unsafe.Sizeof(Group{})+uintptr(cap(dec.wires))*unsafe.Sizeof(GroupSketches{})+uintptr(cap(dec.strs))*unsafe.Sizeof(""))
}

// TestDecoderGroupsPastRoom: a Decoder given a budget beyond its input
// (MaxGroups) decodes more one-byte groups than it preallocates for,
// growing their slice as it reads them, and once reused, decodes them
// again without allocating.
func TestDecoderGroupsPastRoom(t *testing.T) {
	const n = 1000 // within maxKeptGroups
	in := mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(n).raw(bytes.Repeat(mp(nil).m(1).u64("Hits", 1), n)...)
	if n <= groupRoom(in) {
		t.Fatalf("%d groups within the room of %d", n, groupRoom(in))
	}
	var dec Decoder
	decode := func() {
		p, err := dec.Decode(in, MaxGroups)
		if err != nil || len(p.Buckets[0].Groups) != n || p.Buckets[0].Groups[n-1].Hits != 1 {
			t.Fatalf("Decode = %v", err)
		}
	}
	decode()
	if allocs := testing.AllocsPerRun(5, decode); allocs != 0 {
		t.Errorf("%v allocations per reused Decode, want 0", allocs)
	}
}
