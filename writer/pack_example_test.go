// This file holds the examples of Packer (an SDK's report, a relay's merged
// groups) and of Split.

package writer_test

import (
	"errors"
	"fmt"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// entries returns n aggregated entries, each of a distinct resource.
func entries(n int) []*aggregate.Entry {
	tab := aggregate.NewTable(0)
	for i := range n {
		for range i + 1 {
			tab.Add(&aggregate.Record{
				Service: "web", Name: "http.request", Resource: fmt.Sprintf("GET /item/%d", i),
				SpanKind: "server", HTTPStatusCode: 200, Duration: 3e6, TopLevel: true,
			})
		}
	}
	return tab.Touched(nil)
}

// The SDK's report: one bucket of entries, in payloads of at most 1200
// bytes, each numbered, each in a buffer of its own.
func ExamplePacker_Pack() {
	var seq uint64
	p := writer.Packer{
		Limit:    1200,
		Alloc:    func(n int) []byte { return make([]byte, 0, n) }, // the SDK's buffer pool
		Sequence: func() uint64 { seq++; return seq },
	}
	h := writer.Header{Hostname: "host-1", Env: "prod", Service: "web", Lang: "go"}
	bucket := []writer.Bucket{{Start: 1_700_000_000_000_000_000, Duration: 10e9, Groups: entries(6)}}
	p.Pack(&h, bucket, func(body []byte, hits uint64) {
		pl, _ := writer.DecodePayload(body)
		fmt.Printf("payload %d: %d groups, %d spans, under the limit: %t\n",
			pl.Sequence, len(pl.Buckets[0].Groups), hits, len(body) <= p.Limit)
	})
	// Output:
	// payload 1: 2 groups, 3 spans, under the limit: true
	// payload 2: 2 groups, 7 spans, under the limit: true
	// payload 3: 2 groups, 11 spans, under the limit: true
}

// A relay forwards merged groups, which may carry fields the SDK never
// sets, for one payload identity over several buckets.
func ExamplePacker_PackPayload() {
	var merged writer.Payload
	merged.Header = writer.Header{Env: "prod", Lang: "java", TracerVersion: "1.40.0"}
	for i, e := range entries(4) {
		merged.Buckets = append(merged.Buckets, writer.DecodedBucket{
			Start: uint64(i) * 10e9, Duration: 10e9,
			Groups: []writer.Group{{Entry: *e, DBType: "postgresql", AdditionalMetricTags: []string{"team:a"}}},
		})
	}
	p := writer.Packer{Limit: 1700}
	p.PackPayload(&merged, func(body []byte, hits uint64) {
		pl, _ := writer.DecodePayload(body)
		g := pl.Buckets[0].Groups[0]
		fmt.Printf("%d spans, buckets: %d, DBType %s, tags %q\n", hits, len(pl.Buckets), g.DBType, g.AdditionalMetricTags)
	})
	// Output:
	// 6 spans, buckets: 3, DBType postgresql, tags ["team:a"]
	// 4 spans, buckets: 1, DBType postgresql, tags ["team:a"]
}

// The agent answered 413 Request Entity Too Large: send the payload again
// as smaller ones.
func ExampleSplit() {
	body := writer.AppendPayload(nil, &writer.Header{Env: "prod"},
		[]writer.Bucket{{Start: 1, Duration: 10e9, Groups: entries(4)}})
	var parts int
	err := writer.Split(body, nil, func(part []byte, hits uint64) {
		parts++
		fmt.Printf("part %d: %d spans, smaller: %t\n", parts, hits, len(part) < len(body))
	})
	fmt.Println(parts, "parts, error:", err)

	one := writer.AppendPayload(nil, nil, []writer.Bucket{{Groups: entries(1)}})
	if err := writer.Split(one, nil, nil); errors.Is(err, writer.ErrUnsplittable) {
		fmt.Println("one group: drop it and count its spans")
	}
	// Output:
	// part 1: 3 spans, smaller: true
	// part 2: 7 spans, smaller: true
	// 2 parts, error: <nil>
	// one group: drop it and count its spans
}
