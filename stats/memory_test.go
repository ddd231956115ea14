package stats

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/writer"
)

// TestMemoryBoundedUnderCardinalityAttack pushes 10 M client spans with 1 M
// distinct resources and 32 K distinct peer hosts through one aggregator
// and checks that the live heap stays bounded, that no payload reaches the
// agent's 25 MiB limit, and that every span is accounted for.
//
// The bound, 64 MiB over the baseline, is the sum of what the SDK may hold
// by design with this workload, with room for the GC's timing:
//   - the inbox: 4096 slots × 328 B = 1.3 MiB, plus the strings of the
//     spans queued in it;
//   - the table: 2048 entries × (~400 B of key and counters + two sketches);
//     durations here span ~7 decades, ~800 bins of 4 B at 1 % accuracy, so
//     ≤ 14 MiB (34 MiB if every sketch reached its 2048-bin cap);
//   - the budgets: hash sets of 8 B slots, ≤ 32 KiB per field and per
//     peer-tag key, and the recent-span cache, which pins the strings of at
//     most 1024 spans: together < 1 MiB here;
//   - payload buffers: the one being encoded and the ones queued or being
//     sent (sized to their body, ≤ ~5 MiB here), and freeBuffers spares of
//     at most maxSpareBuf (256 KiB) each.
//
// Observed (2 cores): 14–30 MiB of growth, bodies of 2.7–4.3 MiB.
func TestMemoryBoundedUnderCardinalityAttack(t *testing.T) {
	total := 10_000_000
	if raceEnabled || testing.Short() {
		total = 1_000_000
	}
	const (
		resources = 1 << 20 // ~1 M
		peerHosts = 32 << 10
		boundMiB  = 64
	)
	var (
		bodies, maxBody, hits atomic.Uint64
		decodeErr             atomic.Value
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agentclient.StatsPath {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"endpoints":["/v0.6/stats"]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		bodies.Add(1)
		for old := maxBody.Load(); uint64(len(b)) > old && !maxBody.CompareAndSwap(old, uint64(len(b))); old = maxBody.Load() {
		}
		p, err := writer.DecodePayload(b)
		if err != nil {
			decodeErr.Store(err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, bk := range p.Buckets {
			for _, g := range bk.Groups {
				hits.Add(g.Hits)
			}
		}
	}))
	defer srv.Close()

	baseline := liveHeap()
	a := newStarted(t, Config{AgentURL: srv.URL, BucketInterval: 250 * time.Millisecond})

	var maxHeap atomic.Uint64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(200 * time.Millisecond):
				if h := liveHeap(); h > maxHeap.Load() {
					maxHeap.Store(h)
				}
			}
		}
	}()

	const producers = 4
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := []byte("GET /api/v1/users/")
			host := []byte("peer.hostname:db-")
			tags := []string{"peer.service:users-db", "", "db.system:postgresql"}
			s := Span{Service: "users-api", Name: "postgresql.query", Type: "sql", SpanKind: "client"}
			for i := p; i < total; i += producers {
				// Fresh strings per span, as a tracer formatting a UUID would make.
				s.Resource = string(strconv.AppendInt(res, int64(uint64(i)*2654435761%uint64(resources)), 10))
				tags[1] = string(strconv.AppendInt(host, int64(i%peerHosts), 10))
				s.PeerTags = tags
				s.Duration = int64(10_000 + (i%1000)*(i%1000)*1000)
				s.Error = i%10 == 0
				for !a.Publish(&s) {
					runtime.Gosched() // the inbox is full: the drop was counted; publish again
				}
			}
		}()
	}
	wg.Wait()
	if h := liveHeap(); h > maxHeap.Load() {
		maxHeap.Store(h)
	}
	close(sampling)
	<-sampled
	stop(t, a)

	if err := decodeErr.Load(); err != nil {
		t.Fatalf("agent could not decode a payload: %v", err)
	}
	h := a.Health()
	growth := int64(maxHeap.Load()) - int64(baseline)
	t.Logf("spans %d, payloads %d, largest body %.1f MiB, live heap growth %.1f MiB, collapsed spans %d (resource %d, peer %d), overflowed %d, inbox-full publishes %d",
		total, bodies.Load(), float64(maxBody.Load())/(1<<20), float64(growth)/(1<<20), h.CollapsedSpans, h.Collapsed[aggregate.FieldResource], h.Collapsed[aggregate.FieldPeerTags], h.Overflowed, h.InboxFull)
	if growth > boundMiB<<20 {
		t.Fatalf("live heap grew %.1f MiB, bound %d MiB", float64(growth)/(1<<20), boundMiB)
	}
	if maxBody.Load() >= 25<<20 {
		t.Fatalf("a payload of %d bytes reached the agent's 25 MiB limit", maxBody.Load())
	}
	if h.Counted != uint64(total) || hits.Load() != h.Counted || h.SpansSent != h.Counted {
		t.Fatalf("counted %d, agent hits %d, spans sent %d; want %d", h.Counted, hits.Load(), h.SpansSent, total)
	}
	checkConservation(t, h)
	if h.CollapsedSpans == 0 || h.Collapsed[aggregate.FieldResource] == 0 || h.Collapsed[aggregate.FieldPeerTags] == 0 {
		t.Fatalf("no collapses: the budgets were not exercised (%+v)", h.Collapsed)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
