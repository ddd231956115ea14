// This file holds the example of a Relay: two senders' datagrams accepted,
// merged and harvested.

package relay_test

import (
	"fmt"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/writer"
)

func Example() {
	now := time.Unix(1_700_000_000, 0)
	r := relay.New(relay.Config{Now: func() time.Time { return now }})

	// Two processes of one service send their reports (decode workers call
	// Accept with each datagram a socket reader hands them).
	for i, rt := range []string{"rt-1", "rt-2"} {
		h := writer.Header{Env: "prod", Service: "web", Lang: "go", RuntimeID: rt}
		e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "http.request", Resource: "GET /"},
			Hits: uint64(i + 1)}
		d := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
		d = writer.AppendPayload(d, &h, []writer.Bucket{{Start: uint64(now.UnixNano()) - 10e9, Duration: 10e9,
			Groups: []*aggregate.Entry{e}}})
		if err := r.Accept(d, 0, relay.UDP); err != nil {
			fmt.Println(err)
		}
	}

	// At the boundary (plus a grace) the forwarder harvests and reports back.
	batches := r.Harvest(now)
	for i := range batches {
		b := &batches[i]
		fmt.Printf("%s/%s: %d bucket(s), %d hits, container %v\n", b.Env, b.Service, len(b.Buckets), b.Hits, b.HasContainer())
		// ... encode b (writer.Packer) and send it; then its groups go:
		r.Release(b)
		r.Forwarded(b.Hits) // once the agent took it; or r.Dropped(b.Hits, relay.DropRetryBudget)
	}
	s := r.Stats()
	fmt.Println("received", s.SpansReceived, "forwarded", s.SpansForwarded, "pending", s.SpansPending)
	// Output:
	// prod/web: 1 bucket(s), 3 hits, container false
	// received 3 forwarded 3 pending 0
}
