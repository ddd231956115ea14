// This file tests Packer and Split: every group packed once under the
// limit, cut where the consumer cut, every field kept, and nothing
// allocated but the buffers.

package writer

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

// part is one payload a Packer emitted, decoded.
type part struct {
	body []byte
	hits uint64
	p    *Payload
}

// collect returns an emit function that decodes and keeps what it is given.
func collect(t *testing.T, parts *[]part) func([]byte, uint64) {
	return func(body []byte, hits uint64) {
		t.Helper()
		p, err := DecodePayload(body)
		if err != nil {
			t.Fatalf("part %d does not decode: %v", len(*parts), err)
		}
		*parts = append(*parts, part{body, hits, p})
	}
}

// wire is a group as the agent reads it: its encoding, and the fields the
// SDK never sets once more, in case Append lost them.
func wire(g *Group) string {
	return fmt.Sprintf("%x %q %q %q", g.Append(nil), g.DBType, g.SpanDerivedPrimaryTags, g.AdditionalMetricTags)
}

// located lists the groups of buckets, each with its bucket's fields.
func located(buckets []DecodedBucket) []string {
	var out []string
	for _, bk := range buckets {
		for j := range bk.Groups {
			out = append(out, fmt.Sprintf("%d/%d/%d %s", bk.Start, bk.Duration, bk.AgentTimeShift, wire(&bk.Groups[j])))
		}
	}
	return out
}

// checkParts checks that parts hold exactly the groups of want, in order,
// bucket by bucket, each under limit unless alone, with the right hits and
// header.
func checkParts(t *testing.T, parts []part, want []DecodedBucket, h *Header, limit int) {
	t.Helper()
	var got []string
	for n, pt := range parts {
		var hits uint64
		groups := 0
		for _, bk := range pt.p.Buckets {
			if len(bk.Groups) == 0 {
				t.Errorf("part %d: a bucket without groups", n)
			}
			for j := range bk.Groups {
				hits += bk.Groups[j].Hits
				groups++
			}
		}
		got = append(got, located(pt.p.Buckets)...)
		if hits != pt.hits {
			t.Errorf("part %d: emitted with %d hits, holds %d", n, pt.hits, hits)
		}
		if len(pt.body) > limit && groups != 1 {
			t.Errorf("part %d: %d bytes over the limit %d with %d groups", n, len(pt.body), limit, groups)
		}
		header := pt.p.Header
		header.Sequence = h.Sequence
		if !equalHeader(header, *h) {
			t.Errorf("part %d: header %+v, want %+v", n, pt.p.Header, *h)
		}
	}
	if w := located(want); !slices.Equal(got, w) {
		t.Fatalf("the parts hold %d groups, want %d, or other ones", len(got), len(w))
	}
}

// asDecoded is what buckets of entries decode to.
func asDecoded(buckets []Bucket) []DecodedBucket {
	out := make([]DecodedBucket, len(buckets))
	for i, bk := range buckets {
		out[i] = DecodedBucket{Start: bk.Start, Duration: bk.Duration, AgentTimeShift: bk.AgentTimeShift}
		for _, e := range bk.Groups {
			if e != nil {
				out[i].Groups = append(out[i].Groups, Group{Entry: *e})
			}
		}
	}
	return out
}

// extraGroups is a payload of decoded groups that carry the fields the SDK
// never sets, over three buckets.
func extraGroups(t *testing.T) *Payload {
	entries := tableEntries(t)
	pl := &Payload{Header: testHeader, Buckets: asDecoded([]Bucket{
		{Start: 10, Duration: 10, AgentTimeShift: -5, Groups: entries[:4]},
		{Start: 20, Duration: 10, Groups: entries[4:5]},
		{Start: 30, Duration: 10, AgentTimeShift: 1 << 40, Groups: entries[5:]},
	})}
	for i := range pl.Buckets {
		for j := range pl.Buckets[i].Groups {
			g := &pl.Buckets[i].Groups[j]
			g.DBType = fmt.Sprintf("db-%d-%d", i, j)
			g.SpanDerivedPrimaryTags = []string{"region:eu", fmt.Sprintf("k:%d", j)}
			if j%2 == 0 {
				g.AdditionalMetricTags = []string{"team:a"}
			}
		}
	}
	return pl
}

func TestPackEntries(t *testing.T) {
	entries := tableEntries(t)
	buckets := []Bucket{
		{Start: 10, Duration: 10, AgentTimeShift: 3, Groups: []*aggregate.Entry{entries[0], nil, entries[1], entries[2]}},
		{Start: 20, Duration: 10}, // no groups: left out
		{Start: 30, Duration: 10, Groups: entries[3:]},
	}
	whole := len(AppendPayload(nil, &testHeader, buckets))
	bound := payloadSize(&testHeader, buckets)
	for _, limit := range []int{1, HeaderSize(&testHeader) + 600, whole / 3, whole / 2, whole, bound} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var parts []part
			seq := uint64(100)
			p := Packer{Limit: limit, Sequence: func() uint64 { seq++; return seq }}
			p.Pack(&testHeader, buckets, collect(t, &parts))
			checkParts(t, parts, asDecoded(buckets), &testHeader, limit)
			for i, pt := range parts {
				if pt.p.Sequence != 101+uint64(i) {
					t.Errorf("part %d: sequence %d, want %d", i, pt.p.Sequence, 101+i)
				}
			}
			if limit == bound && len(parts) != 1 {
				t.Errorf("%d parts under a limit the whole payload's bound fits", len(parts))
			}
			if limit == 1 && len(parts) != len(entries) {
				t.Errorf("%d parts, want one per group (%d)", len(parts), len(entries))
			}
		})
	}
}

// The SDK's consumer cuts where HeaderSize plus the groups' GroupSize would
// pass the limit; Pack cuts at the same places, so a report's payloads do
// not change.
func TestPackCutsAsTheConsumerDid(t *testing.T) {
	entries := benchEntries(t, 300, 20)
	limit := 64 << 10
	var want []int // groups per payload, by the consumer's loop
	for i := 0; i < len(entries); {
		j, size := i, 0
		for j < len(entries) {
			gs := GroupSize(entries[j])
			if j > i && size+gs > limit-HeaderSize(&testHeader) {
				break
			}
			size += gs
			j++
		}
		want = append(want, j-i)
		i = j
	}
	var got []int
	p := Packer{Limit: limit}
	p.Pack(&testHeader, []Bucket{{Start: 1, Duration: 2, Groups: entries}}, func(body []byte, _ uint64) {
		pl, err := DecodePayload(body)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, len(pl.Buckets[0].Groups))
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups per payload %v, the consumer's %v", got, want)
	}
}

func TestPackPayloadKeepsEveryField(t *testing.T) {
	pl := extraGroups(t)
	whole := len(pl.Append(nil))
	for _, limit := range []int{1, whole / 4, whole / 2, whole} {
		var parts []part
		p := Packer{Limit: limit}
		p.PackPayload(pl, collect(t, &parts))
		checkParts(t, parts, pl.Buckets, &pl.Header, limit)
	}
	// And Payload.Append writes what decodes back to the same groups.
	again, err := DecodePayload(pl.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(located(again.Buckets), located(pl.Buckets)) || !equalHeader(again.Header, pl.Header) {
		t.Error("Payload.Append: the payload decodes to other groups")
	}
}

// Each payload is written into the one buffer Alloc gave, without growing
// it, and nothing else is allocated.
func TestPackAllocatesOnlyBuffers(t *testing.T) {
	entries := benchEntries(t, 2048, 20)
	buckets := []Bucket{{Start: 1, Duration: 2, Groups: entries}}
	arena := make([]byte, 0, 4*payloadSize(&testHeader, buckets))
	var given []byte
	p := Packer{Limit: 64 << 10, Alloc: func(n int) []byte {
		given = arena[len(arena) : len(arena) : len(arena)+n]
		arena = arena[:len(arena)+n]
		return given
	}}
	parts := 0
	emit := func(body []byte, _ uint64) {
		if &body[:1][0] != &given[:1][0] || cap(body) != cap(given) {
			t.Fatal("the payload is not in the buffer Alloc returned")
		}
		parts++
	}
	if n := testing.AllocsPerRun(3, func() { arena = arena[:0]; p.Pack(&testHeader, buckets, emit) }); n != 0 {
		t.Errorf("Pack allocated %v times beside its buffers", n)
	}
	if parts < 3*4 {
		t.Fatalf("%d payloads: the test wants several", parts)
	}
}

func TestSplit(t *testing.T) {
	pl := extraGroups(t)
	body := pl.Append(nil)
	var parts []part
	allocs := 0
	alloc := func(n int) []byte { allocs++; return make([]byte, 0, n) }
	if err := Split(body, alloc, collect(t, &parts)); err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 || len(parts) > 3 || allocs != len(parts) {
		t.Fatalf("%d parts from %d buffers, want 2 or 3 from as many", len(parts), allocs)
	}
	half := len(body)/2 + HeaderSize(&pl.Header) + bucketHeaderSize
	checkParts(t, parts, pl.Buckets, &pl.Header, half)
	for i, pt := range parts {
		if pt.p.Sequence != pl.Sequence {
			t.Errorf("part %d: sequence %d, want the payload's %d", i, pt.p.Sequence, pl.Sequence)
		}
	}
}

// TestSplitEmptyBuckets: empty buckets, which Pack leaves out, do not
// count toward the half a part may take: two groups beside twenty empty
// buckets still split in two.
func TestSplitEmptyBuckets(t *testing.T) {
	e1 := &aggregate.Entry{Key: aggregate.Key{Service: "s", Name: "a"}, Hits: 3}
	e2 := &aggregate.Entry{Key: aggregate.Key{Service: "s", Name: "b"}, Hits: 4}
	buckets := []Bucket{{Start: 1, Duration: 10, Groups: []*aggregate.Entry{e1, e2}}}
	for i := range 20 {
		buckets = append(buckets, Bucket{Start: uint64(100 + i), Duration: 10})
	}
	var parts []part
	if err := Split(AppendPayload(nil, &testHeader, buckets), nil, collect(t, &parts)); err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].hits != 3 || parts[1].hits != 4 {
		t.Fatalf("%d parts, want two of 3 and 4 hits", len(parts))
	}
}

func TestSplitRejects(t *testing.T) {
	one := AppendPayload(nil, &testHeader, []Bucket{{Groups: []*aggregate.Entry{&goldenEntry}}})
	for name, tc := range map[string]struct {
		body []byte
		want error
	}{
		"one group":   {one, ErrUnsplittable},
		"no groups":   {AppendPayload(nil, &testHeader, []Bucket{{Start: 1}}), ErrUnsplittable},
		"not msgpack": {[]byte{0xc1}, nil},
		"trailing":    {append(bytes.Clone(one), 0), ErrTrailingBytes},
	} {
		emitted := 0
		err := Split(tc.body, nil, func([]byte, uint64) { emitted++ })
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
		if emitted != 0 {
			t.Errorf("%s: %d payloads emitted", name, emitted)
		}
	}
}

func TestGroupAppendKeepsEveryField(t *testing.T) {
	for _, bk := range extraGroups(t).Buckets {
		for j := range bk.Groups {
			g := &bk.Groups[j]
			b := g.Append(mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(1))
			if n := len(b) - len(mp(nil).m(1).key("Stats").a(1).m(1).key("Stats").a(1)); n > g.Size() {
				t.Errorf("Append wrote %d bytes, Size is %d", n, g.Size())
			}
			p, err := DecodePayload(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := &p.Buckets[0].Groups[0]; wire(got) != wire(g) {
				t.Errorf("group decodes as\n%s\nwant\n%s", wire(got), wire(g))
			}
		}
	}
}

// TestPackReserve: Reserve bytes stand before each payload in its buffer,
// outside Limit, and the payload after them decodes whole.
func TestPackReserve(t *testing.T) {
	const reserve = 24
	e1 := &aggregate.Entry{Key: aggregate.Key{Service: "s", Name: "a"}, Hits: 3}
	e2 := &aggregate.Entry{Key: aggregate.Key{Service: "s", Name: "b"}, Hits: 4}
	h := Header{Service: "s"}
	one := len(AppendPayload(nil, &h, []Bucket{{Start: 1, Duration: 2, Groups: []*aggregate.Entry{e1}}}))
	p := Packer{Limit: one + 1, Reserve: reserve} // room for one group a payload
	var bodies [][]byte
	var hits []uint64
	p.Pack(&h, []Bucket{{Start: 1, Duration: 2, Groups: []*aggregate.Entry{e1, e2}}}, func(b []byte, n uint64) {
		bodies, hits = append(bodies, b), append(hits, n)
	})
	if len(bodies) != 2 || hits[0] != 3 || hits[1] != 4 {
		t.Fatalf("%d payloads with hits %v, want 2 with 3 and 4", len(bodies), hits)
	}
	for i, b := range bodies {
		if len(b)-reserve > p.Limit {
			t.Fatalf("payload %d: %d bytes after the reserve, over the limit %d", i, len(b)-reserve, p.Limit)
		}
		pl, err := DecodePayload(b[reserve:])
		if err != nil || pl.Buckets[0].Groups[0].Hits != hits[i] {
			t.Fatalf("payload %d after the reserve: %v", i, err)
		}
	}
}

// TestPackBucketLimit: a payload of more than MaxBuckets buckets (a relay
// holding groups that differ only in Type puts each in its own bucket) is
// packed into payloads of at most MaxBuckets buckets, whatever Limit, so
// every one decodes, and so does Split's answer to a 413 for each.
func TestPackBucketLimit(t *testing.T) {
	e := tableEntries(t)[0]
	pl := &Payload{Header: testHeader}
	const n = 2*MaxBuckets + 3
	for i := range n {
		g := Group{Entry: *e}
		g.Type = fmt.Sprintf("t%d", i)
		pl.Buckets = append(pl.Buckets, DecodedBucket{Start: 10, Duration: 10, Groups: []Group{g}})
	}
	var parts []part
	p := Packer{Limit: 1 << 30}
	p.PackPayload(pl, collect(t, &parts))
	if len(parts) != 3 || len(parts[0].p.Buckets) != MaxBuckets || len(parts[1].p.Buckets) != MaxBuckets || len(parts[2].p.Buckets) != 3 {
		t.Fatalf("%d parts, want 3 of %d, %d and 3 buckets", len(parts), MaxBuckets, MaxBuckets)
	}
	checkParts(t, parts, pl.Buckets, &testHeader, 1<<30)
	var split []part
	if err := Split(parts[0].body, nil, collect(t, &split)); err != nil || len(split) < 2 {
		t.Fatalf("Split of a part: %v, %d parts", err, len(split))
	}
	checkParts(t, split, parts[0].p.Buckets, &testHeader, len(parts[0].body))
}

// TestPackContinuedBucketUnderLimit: a bucket cut across payloads opens
// again in the next one with a bucket header of its own, which the next
// payload's size counts: with a header and bucket fields at their longest
// (so the header's bound has no slack to hide a missing bucket header),
// every payload of more than one group stays within the limit, at every
// limit from a few groups a payload to dozens.
func TestPackContinuedBucketUnderLimit(t *testing.T) {
	long := strings.Repeat("h", 300)
	h := Header{Hostname: long, Env: long, Version: long, Lang: long, TracerVersion: long, RuntimeID: long,
		Service: long, ContainerID: long, GitCommitSha: long, ImageTag: long, ProcessTags: long, AgentAggregation: long,
		ProcessTagsHash: math.MaxUint64, Sequence: math.MaxUint64}
	bk := Bucket{Start: math.MaxUint64, Duration: math.MaxUint64, AgentTimeShift: math.MinInt64}
	for i := range 300 {
		e := &aggregate.Entry{Hits: uint64(i + 1)}
		e.Service, e.Name, e.Resource = "svc", "op", strings.Repeat("r", 1+i%37)
		bk.Groups = append(bk.Groups, e)
	}
	for limit := HeaderSize(&h) + 600; limit <= HeaderSize(&h)+2000; limit += 7 {
		var parts []part
		p := Packer{Limit: limit}
		p.Pack(&h, []Bucket{bk}, collect(t, &parts))
		if len(parts) < 2 {
			t.Fatalf("limit %d: %d parts; the test needs the bucket cut", limit, len(parts))
		}
		checkParts(t, parts, asDecoded([]Bucket{bk}), &h, limit)
		if t.Failed() {
			t.Fatalf("limit %d", limit)
		}
	}
}

// TestPackExactFit: groups whose payload is exactly the limit go out as
// one payload: the limit is a size a payload may have, not one it must
// stay under.
func TestPackExactFit(t *testing.T) {
	entries := tableEntries(t)
	a, b := entries[0], entries[1]
	limit := HeaderSize(&testHeader) + GroupSize(a) + GroupSize(b)
	var parts []part
	p := Packer{Limit: limit}
	p.Pack(&testHeader, []Bucket{{Start: 10, Duration: 10, Groups: []*aggregate.Entry{a, b}}}, collect(t, &parts))
	if len(parts) != 1 || len(parts[0].body) > limit {
		t.Fatalf("%d parts (first %d bytes) at a limit of %d, the two groups' size: want one within it", len(parts), len(parts[0].body), limit)
	}
}

// TestPackHalt: a Packer whose Halt says to give up returns within
// haltEvery groups of the look that said so, having emitted only whole
// payloads before it; without Halt, or with one that never says so, every
// group is packed.
func TestPackHalt(t *testing.T) {
	const n = 4 * haltEvery
	es := make([]*aggregate.Entry, n)
	for i := range es {
		e := &aggregate.Entry{Hits: 1}
		e.Service, e.Name, e.Resource = "web", "op", fmt.Sprintf("r%d", i)
		es[i] = e
	}
	buckets := []Bucket{{Start: 10, Duration: 10, Groups: es}}
	for _, tc := range []struct {
		name       string
		halt       func() bool
		wantGroups int
	}{
		{"nil", nil, n},
		{"never", func() bool { return false }, n},
		{"second look", func() func() bool {
			looks := 0
			return func() bool { looks++; return looks == 2 }
		}(), 2*haltEvery - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts []part
			limit := 40 * 64 // some tens of groups a payload
			p := Packer{Limit: limit, Halt: tc.halt}
			p.Pack(&testHeader, buckets, collect(t, &parts))
			groups, hits := 0, uint64(0)
			for _, pt := range parts {
				for _, b := range pt.p.Buckets {
					groups += len(b.Groups)
				}
				hits += pt.hits
			}
			if tc.wantGroups == n && (groups != n || hits != n) {
				t.Fatalf("%d groups, %d hits packed; want all %d", groups, hits, n)
			}
			if tc.wantGroups < n && (groups > tc.wantGroups || groups < tc.wantGroups-limit/20 || hits != uint64(groups)) {
				t.Fatalf("%d groups (%d hits) packed; want the whole payloads before group %d", groups, hits, tc.wantGroups+1)
			}
		})
	}
}
