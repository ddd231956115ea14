package stats

import (
	"bytes"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// onlyGroup decodes the single group the agent received.
func onlyGroup(t *testing.T, ag *statstest.Agent) *writer.Group {
	t.Helper()
	reqs := statstest.Accepted(ag.Requests())
	var groups []*writer.Group
	for _, r := range reqs {
		if r.Payload == nil {
			t.Fatalf("payload did not decode: %v", r.Err)
		}
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				groups = append(groups, &b.Groups[i])
			}
		}
	}
	if len(groups) != 1 {
		t.Fatalf("the agent received %d groups in %d requests, want 1", len(groups), len(reqs))
	}
	return groups[0]
}

// TestDurationSaturates: three spans of one key lasting math.MaxInt64 ns
// reach the agent as a group whose duration sum is saturated, not wrapped,
// and whose sketch, decoded by the writer's decoder, counts the three.
func TestDurationSaturates(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for range 3 {
		a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: math.MaxInt64, TopLevel: true})
	}
	stop(t, a)
	g := onlyGroup(t, ag)
	if g.Hits != 3 || g.TopLevelHits != 3 || g.Duration != math.MaxUint64 {
		t.Fatalf("hits %d, top %d, duration %d; want 3, 3, %d", g.Hits, g.TopLevelHits, g.Duration, uint64(math.MaxUint64))
	}
	if g.Ok == nil || g.Ok.Count() != g.Hits {
		t.Fatalf("ok sketch %v, want a count of %d", g.Ok, g.Hits)
	}
}

// TestRetriesAfterTimeout: the agent reads the payload, then answers only
// after HTTPTimeout; the SDK retries and the agent receives the body twice
// (at-least-once). Health counts exactly that one retry after a timeout.
func TestRetriesAfterTimeout(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n == 1 { // accepted, but the answer comes after the SDK gave up
			<-r.Context().Done()
			return true
		}
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), HTTPTimeout: 100 * time.Millisecond, RetryBackoff: time.Millisecond})
	a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: 5, TopLevel: true})
	if err := flushWithin(a, 5*time.Second); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	stop(t, a)
	h := a.Health()
	if h.RetriesAfterTimeout != 1 || h.PayloadsRetried != 1 || h.PayloadsSent != 1 || h.SpansSent != 1 {
		t.Fatalf("retries after a timeout %d, retries %d, payloads sent %d, spans sent %d; want 1 1 1 1",
			h.RetriesAfterTimeout, h.PayloadsRetried, h.PayloadsSent, h.SpansSent)
	}
	reqs := ag.Requests()
	if len(reqs) != 2 || !bytes.Equal(reqs[0].Body, reqs[1].Body) {
		t.Fatalf("the agent received %d requests, want the same body twice", len(reqs))
	}
}
