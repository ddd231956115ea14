// This file holds the example of AppendPayload: a table's entries encoded
// as one payload.

package writer_test

import (
	"fmt"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

func ExampleAppendPayload() {
	// The consumer aggregates spans into a table…
	tab := aggregate.NewTable(0)
	for i, ms := range []int64{1, 2, 3, 40} {
		tab.Add(&aggregate.Record{
			Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server",
			HTTPStatusCode: 200, Duration: ms * 1e6, Error: i == 3, TopLevel: true, TraceRoot: true,
		})
	}
	tab.Add(&aggregate.Record{
		Service: "web", Name: "http.request", Resource: "POST /login", SpanKind: "server",
		HTTPStatusCode: 302, Duration: 5e6, TopLevel: true,
	})

	// …and at the end of the interval writes the touched entries as one
	// payload for POST /v0.6/stats, reusing its buffer from report to report.
	var buf []byte
	h := writer.Header{Hostname: "host-1", Env: "prod", Service: "web", Lang: "go", Sequence: 1}
	buf = writer.AppendPayload(buf[:0], &h, []writer.Bucket{{
		Start:    1_700_000_000_000_000_000,
		Duration: 10_000_000_000,
		Groups:   tab.Touched(nil),
	}})

	// The agent (or the relay) decodes it.
	p, err := writer.DecodePayload(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("env=%s service=%s buckets=%d\n", p.Env, p.Service, len(p.Buckets))
	for _, g := range p.Buckets[0].Groups {
		fmt.Printf("%s %d hits=%d errors=%d top-level=%d ok-p50=%.1fms\n",
			g.Resource, g.HTTPStatusCode, g.Hits, g.Errors, g.TopLevelHits, g.Ok.Quantile(0.5)/1e6)
	}
	// Output:
	// env=prod service=web buckets=1
	// GET / 200 hits=4 errors=1 top-level=4 ok-p50=2.0ms
	// POST /login 302 hits=1 errors=0 top-level=1 ok-p50=5.0ms
}
