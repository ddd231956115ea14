// This file holds BenchmarkConsume: the consumer's own loop over a full
// inbox, per span.

package stats

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkConsume is the consumer's own loop over a full inbox, one span
// per op: the in-place batch, the routing of each span to its bucket and
// Table.AddBatch, on 64 keys of constant strings (the recent-span cache's
// hit path). Spans end now, so each lands in the current bucket.
func BenchmarkConsume(b *testing.B) {
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	c := a.cons
	startConsumer(c)
	res := make([]string, 64)
	for i := range res {
		res[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
	}
	spans := make([]Span, a.inbox.Cap())
	fill := func() {
		end := time.Now().UnixNano()
		for i := range spans {
			s := &spans[i]
			*s = Span{Service: "web", Name: "http.request", Resource: res[i%len(res)], Type: "web",
				SpanKind: "server", HTTPStatusCode: 200, Duration: int64(1000 + i), Start: end - int64(1000+i)}
			if !a.Publish(s) {
				b.Fatal("inbox full")
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		fill()
		b.StartTimer()
		for n := c.consume(); n > 0; n = c.consume() {
			done += n
		}
	}
}

// startConsumer readies c as run does, without its goroutine.
func startConsumer(c *consumer) {
	c.begin(c.clock())
	c.timer.Stop()
}
