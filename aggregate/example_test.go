// This file holds the example of a Table: spans added by key, the overflow
// entry at the cap, and the interval's entries read and rotated.

package aggregate_test

import (
	"fmt"

	"github.com/spanstats/spanstats/aggregate"
)

func ExampleTable() {
	// Owned by the consumer goroutine: no locks.
	t := aggregate.NewTable(2)

	get := aggregate.Record{
		Service: "web-store", Name: "http.request", Resource: "GET /users/:id",
		Type: "web", SpanKind: "server", HTTPMethod: "GET", HTTPEndpoint: "/users/:id",
		HTTPStatusCode: 200, TopLevel: true,
	}
	for _, ms := range []int64{12, 15, 9, 240} {
		get.Duration = ms * 1e6
		t.Add(&get)
	}
	db := aggregate.Record{
		Service: "web-store", Name: "postgres.query", Resource: "SELECT users",
		Type: "sql", SpanKind: "client", Duration: 3e6, Error: true,
	}
	db.SetPeerTags([]string{"peer.service:users-db", "db.instance:users"})
	t.Add(&db)
	// The cap is 2 and both entries were hit in this interval: a third key
	// is folded into the overflow entry.
	cache := aggregate.Record{Service: "web-store", Name: "redis.command", SpanKind: "client", Duration: 1e5}
	t.Add(&cache)

	// Quantiles are within about 1.2 % of the durations (printed to two digits).
	for _, e := range t.Touched(nil) {
		fmt.Printf("%s %q hits=%d errors=%d top=%d p50≈%.2gms", e.Name, e.Resource, e.Hits, e.Errors, e.TopLevelHits,
			median(e)/1e6)
		if e.PeerTags != nil {
			fmt.Printf(" peers=%v", e.PeerTags)
		}
		fmt.Println()
	}

	// Report done: the next interval starts empty, entries keep their memory.
	t.Rotate()
	fmt.Println("touched after Rotate:", len(t.Touched(nil)), "entries kept:", t.Len(), "overflowed:", t.Overflowed())
	// Output:
	// http.request "GET /users/:id" hits=4 errors=0 top=4 p50≈12ms
	// postgres.query "SELECT users" hits=1 errors=1 top=0 p50≈3ms peers=[db.instance:users peer.service:users-db]
	// tracer_blocked_value "tracer_blocked_value" hits=1 errors=0 top=0 p50≈0.1ms
	// touched after Rotate: 0 entries kept: 2 overflowed: 1
}

// median reads the ok sketch, or the error sketch for an entry with errors
// only. A sketch may be there and empty: test its Count, not nil.
func median(e *aggregate.Entry) float64 {
	if e.Ok != nil && e.Ok.Count() > 0 {
		return e.Ok.Quantile(0.5)
	}
	return e.Err.Quantile(0.5)
}
