// This file tests TypeSplitter, Packer and Split with the agent's intake:
// groups that differ only in Type, however their payloads were cut, are
// filed by the agent under their own Type and bucket.

package peer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"
	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// filedKey is where the agent files a group's hits: its bucket's start and
// its aggregation key, Type included.
type filedKey struct {
	start uint64
	agg   agentstats.Aggregation
	typ   string
}

// agentFiles decodes bodies as the agent's stats handler does, merges each
// bucket's duplicates as its intake does (agent.mergeDuplicates, which
// leaves Type out of the key) and totals the hits it would file per key.
func agentFiles(t *testing.T, bodies [][]byte) map[filedKey]uint64 {
	t.Helper()
	return filedByAgent(t, bodies, nil, true)
}

// filedByAgent decodes bodies as the agent's stats handler does, runs each
// (if not nil) on every group and, if merge, merges each bucket's
// duplicates as the agent's intake does; it totals the hits filed per
// bucket start, aggregation key and Type.
func filedByAgent(t *testing.T, bodies [][]byte, each func(*pb.ClientGroupedStats), merge bool) map[filedKey]uint64 {
	t.Helper()
	filed := map[filedKey]uint64{}
	for _, b := range bodies {
		var in pb.ClientStatsPayload
		if err := msgp.Decode(bytes.NewReader(b), &in); err != nil {
			t.Fatalf("the agent cannot decode a %d-byte body: %v", len(b), err)
		}
		for _, bk := range in.Stats {
			first := map[agentstats.Aggregation]int{}
			for i, g := range bk.Stats {
				if each != nil {
					each(g)
				}
				if !merge {
					continue
				}
				a := agentstats.NewAggregationFromGroup(g)
				if j, ok := first[a]; ok {
					bk.Stats[j].Hits += g.Hits
					bk.Stats[i].Hits = 0
				} else {
					first[a] = i
				}
			}
			for _, g := range bk.Stats {
				if g.Hits > 0 {
					filed[filedKey{bk.Start, agentstats.NewAggregationFromGroup(g), g.Type}] += g.Hits
				}
			}
		}
	}
	return filed
}

// randomEntry is a group of a few labels, long resources and peer tags now
// and then, with a sketch.
func randomEntry(r *rand.Rand, typ, resource string) *aggregate.Entry {
	e := &aggregate.Entry{Hits: r.Uint64N(1000) + 1, Errors: r.Uint64N(3), Duration: r.Uint64N(1 << 40)}
	e.Service, e.Name, e.Resource, e.Type = "svc", "op", resource, typ
	e.SpanKind = []string{"", "client", "server"}[r.IntN(3)]
	e.IsTraceRoot = aggregate.Trilean(r.IntN(3))
	if r.IntN(4) == 0 {
		e.Resource += strings.Repeat("R", r.IntN(3000))
	}
	if r.IntN(3) == 0 {
		e.PeerTags = []string{"peer.service:" + strings.Repeat("p", r.IntN(50))}
	}
	e.Ok = new(aggregate.Sketch)
	for range r.IntN(30) + 1 {
		e.Ok.Add(float64(r.IntN(1e9) + 1))
	}
	return e
}

// TestPackSplitTypeTwinsInteropWithAgent: random reports with groups that
// differ only in Type, laid out by TypeSplitter, packed at random limits
// and then each payload split as after a 413: the agent files every hit
// under its own Type and bucket, exactly as from the whole report, however
// the payloads were cut.
func TestPackSplitTypeTwinsInteropWithAgent(t *testing.T) {
	h := &writer.Header{Lang: "go", Hostname: "h", Tags: []string{"a:b"}}
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 7))
		var buckets []writer.Bucket
		for b := range r.IntN(4) + 1 {
			bk := writer.Bucket{Start: uint64(b) * 10e9, Duration: 10e9}
			for g := range r.IntN(15) {
				typ := []string{"web", "sql", "http"}[r.IntN(3)]
				bk.Groups = append(bk.Groups, randomEntry(r, typ, fmt.Sprintf("r%d", g%3)))
			}
			buckets = append(buckets, bk)
		}
		var ts writer.TypeSplitter
		laid := ts.Split(nil, buckets)
		whole := writer.AppendPayload(nil, h, laid)
		// What the agent files of the whole, without its merge: each
		// group under its own key.
		want := map[filedKey]uint64{}
		var in pb.ClientStatsPayload
		if _, err := in.UnmarshalMsg(whole); err != nil {
			t.Fatal(err)
		}
		for _, bk := range in.Stats {
			for _, g := range bk.Stats {
				want[filedKey{bk.Start, agentstats.NewAggregationFromGroup(g), g.Type}] += g.Hits
			}
		}
		check := func(what string, bodies [][]byte) {
			t.Helper()
			got := agentFiles(t, bodies)
			if len(got) != len(want) {
				t.Fatalf("seed %d, %s: the agent files %d keys, want %d", seed, what, len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("seed %d, %s: %s/%s/%s at %d filed with %d hits, want %d", seed, what, k.agg.Name, k.agg.Resource, k.typ, k.start, got[k], v)
				}
			}
		}
		check("whole", [][]byte{whole})
		var packed [][]byte
		p := writer.Packer{Limit: r.IntN(len(whole)) + 100}
		p.Pack(h, laid, func(b []byte, _ uint64) { packed = append(packed, b) })
		check("packed", packed)
		var split [][]byte
		for _, b := range packed {
			err := writer.Split(b, nil, func(b []byte, _ uint64) { split = append(split, b) })
			switch {
			case err == writer.ErrUnsplittable:
				split = append(split, b)
			case err != nil:
				t.Fatal(err)
			}
		}
		check("split", split)
	}
}
