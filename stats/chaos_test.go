package stats

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/testagent"
)

// TestChaosConservation: 8 producers publish while the agent answers the
// payloads with a mix of 200, 500, 408, 413, 404 and 400, and Clear and
// Flush run concurrently with short intervals. After Stop both identities
// of Health hold, and the agent accepted exactly the spans Health counts as
// sent: each once, however often its payload was retried or split.
func TestChaosConservation(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	// Each run of 20 requests meets every answer; the stride mixes them.
	answers := [20]int{200, 500, 200, 413, 200, 500, 200, 400, 200, 404,
		200, 413, 200, 500, 200, 408, 200, 400, 200, 413}
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, n int) bool {
		code := answers[(n*7)%len(answers)]
		if code == http.StatusOK {
			return false
		}
		http.Error(w, http.StatusText(code), code)
		return true
	})
	a := newStarted(t, fastRetries(Config{AgentURL: ag.URL(), BucketInterval: 20 * time.Millisecond,
		InfoRefresh: 5 * time.Millisecond, InboxSize: 512, SendQueue: 2}))

	done := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(7 * time.Millisecond):
				a.Clear()
			}
		}
	})
	chaos.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
			_ = a.Flush(ctx) // any outcome: the counters must account for it
			cancel()
		}
	})

	const producers, perProducer = 8, 30000
	resources := make([]string, 64)
	for i := range resources {
		resources[i] = fmt.Sprintf("GET /r/%d", i)
	}
	var accepted [producers]uint64
	var pub sync.WaitGroup
	for p := range producers {
		pub.Go(func() {
			for i := range perProducer {
				s := Span{Service: "svc", Name: "op", Resource: resources[(i*7+p)%len(resources)],
					SpanKind: "server", Duration: int64(1 + i%5000), Error: i%6 == 0}
				if i%10 == 0 {
					s.SpanKind = "internal" // ineligible: not top-level or measured
				}
				if a.Publish(&s) {
					accepted[p]++
				}
				if i%32 == 0 {
					time.Sleep(time.Millisecond) // a run of ~1 s: many intervals, faults and clears interleave
				}
			}
		})
	}
	pub.Wait()
	close(done)
	chaos.Wait()
	stop(t, a)

	h := a.Health()
	checkConservation(t, h)
	if h.Published != producers*perProducer {
		t.Fatalf("Published %d, want %d", h.Published, producers*perProducer)
	}
	var acc uint64
	for _, n := range accepted {
		acc += n
	}
	if acc != h.Counted+h.AggregateDropped+h.Ineligible { // false means dropped (full, stopped, disabled)
		t.Fatalf("Publish returned true %d times, counted %d + dropped %d + ineligible %d", acc, h.Counted, h.AggregateDropped, h.Ineligible)
	}
	_, hits := testagent.Sum(ag.Requests())
	if hits != h.SpansSent {
		t.Fatalf("agent accepted %d hits, Health.SpansSent %d", hits, h.SpansSent)
	}
	// The faults really happened (else this test proves little).
	if h.PayloadsSent == 0 || h.PayloadsRetried == 0 || h.PayloadsSplit == 0 || h.AgentOffTimes == 0 ||
		h.PayloadsDropped == 0 || h.Cleared == 0 || h.Ineligible == 0 {
		t.Fatalf("a fault path was never taken: %+v", h)
	}
	t.Logf("published %d: counted %d (sent %d, unsent %d, cleared %d), ineligible %d, inbox full %d, disabled %d; "+
		"payloads sent %d retried %d split %d dropped %d; disabled %d times",
		h.Published, h.Counted, h.SpansSent, h.SpansUnsent, h.Cleared, h.Ineligible, h.InboxFull, h.AgentOffSpans,
		h.PayloadsSent, h.PayloadsRetried, h.PayloadsSplit, h.PayloadsDropped, h.AgentOffTimes)
}
