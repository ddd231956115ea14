package stats

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/testagent"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newStarted starts an aggregator for cfg and, when the test ends, checks
// that no goroutine started since is left over: each test, not only the
// package, proves that Stop ends every goroutine the aggregator started
// (and the HTTP connections it opened).
func newStarted(t *testing.T, cfg Config) *Aggregator {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	return a
}

func stop(t *testing.T, a *Aggregator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

type tally struct{ hits, errors, top, dur uint64 }

// publishLoad publishes n spans from each of producers goroutines over keys
// resources and returns per-key tallies of the spans Publish accepted, and
// the number of ineligible spans published.
func publishLoad(a *Aggregator, producers, n, keys int) (map[testagent.GroupKey]*tally, uint64) {
	var (
		mu         sync.Mutex
		total      = map[testagent.GroupKey]*tally{}
		ineligible uint64
		wg         sync.WaitGroup
	)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[testagent.GroupKey]*tally{}
			var inel uint64
			kinds := []string{"server", "client", "internal", "CONSUMER"}
			for i := range n {
				k := (i*7 + p) % keys
				s := Span{
					Service:        fmt.Sprintf("svc-%d", k%5),
					Name:           "op",
					Resource:       fmt.Sprintf("GET /r/%d", k),
					Type:           "web",
					SpanKind:       kinds[k%len(kinds)],
					HTTPStatusCode: 200,
					PeerTags:       []string{"peer.service:db", fmt.Sprintf("peer.hostname:h%d", k%3)},
					Duration:       int64(1000 + (i%97)*1013),
					Error:          i%5 == 0,
					TopLevel:       i%3 == 0,
				}
				eligible := s.Eligible()
				if !a.Publish(&s) {
					continue
				}
				if !eligible {
					inel++
					continue
				}
				key := testagent.GroupKey{Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type, SpanKind: s.SpanKind, HTTPStatusCode: s.HTTPStatusCode}
				tl := local[key]
				if tl == nil {
					tl = &tally{}
					local[key] = tl
				}
				tl.hits++
				if s.Error {
					tl.errors++
				}
				if s.TopLevel {
					tl.top++
				}
				tl.dur += uint64(s.Duration)
			}
			mu.Lock()
			defer mu.Unlock()
			ineligible += inel
			for k, v := range local {
				t := total[k]
				if t == nil {
					t = &tally{}
					total[k] = t
				}
				t.hits += v.hits
				t.errors += v.errors
				t.top += v.top
				t.dur += v.dur
			}
		}()
	}
	wg.Wait()
	return total, ineligible
}

// TestEndToEndConservation: 8 producers publish over many keys while another
// goroutine flushes; after Stop the agent has decoded exactly the accepted
// spans per key, and every published span is in a named counter.
func TestEndToEndConservation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inbox int
	}{
		{"default-inbox", 0},
		{"tiny-inbox-drops", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag := testagent.New()
			defer ag.Close()
			a := newStarted(t, Config{AgentURL: ag.URL(), Env: "test", Service: "svc", InboxSize: tc.inbox, SendQueue: 256,
				BucketInterval: 50 * time.Millisecond})
			const producers, n, keys = 8, 20000, 300
			stopFlush := make(chan struct{})
			flushed := make(chan struct{})
			go func() {
				defer close(flushed)
				for {
					select {
					case <-stopFlush:
						return
					case <-time.After(5 * time.Millisecond):
						_ = a.Flush(context.Background())
					}
				}
			}()
			want, ineligible := publishLoad(a, producers, n, keys)
			close(stopFlush)
			<-flushed
			stop(t, a)

			h := a.Health()
			if h.Published != producers*n {
				t.Fatalf("Published = %d, want %d", h.Published, producers*n)
			}
			if got := h.Counted + h.Ineligible + h.InboxFull + h.AfterStop + h.AgentOffSpans + h.AggregateDropped + h.Pending; got != h.Published {
				t.Fatalf("conservation: counted %d + ineligible %d + inboxFull %d + afterStop %d + dropped %d + pending %d = %d, published %d",
					h.Counted, h.Ineligible, h.InboxFull, h.AfterStop, h.AggregateDropped, h.Pending, got, h.Published)
			}
			if h.Pending != 0 || h.AfterStop != 0 || h.AggregateDropped != 0 {
				t.Fatalf("after Stop: pending %d afterStop %d aggDropped %d", h.Pending, h.AfterStop, h.AggregateDropped)
			}
			if h.Ineligible != ineligible {
				t.Fatalf("Ineligible = %d, want %d", h.Ineligible, ineligible)
			}
			if tc.inbox != 0 && h.InboxFull == 0 {
				t.Errorf("tiny inbox never filled; the drop path was not exercised")
			}
			got, hits := testagent.Sum(ag.Requests())
			if hits != h.Counted || h.SpansSent != h.Counted || h.SpansUnsent != 0 {
				t.Fatalf("agent decoded %d hits, Counted %d; health %+v", hits, h.Counted, h)
			}
			if len(got) != len(want) {
				t.Fatalf("agent has %d keys, want %d", len(got), len(want))
			}
			for k, w := range want {
				g := got[k]
				if g == nil {
					t.Fatalf("key %+v missing at the agent", k)
				}
				if g.Hits != w.hits || g.Errors != w.errors || g.TopLevelHits != w.top || g.Duration != w.dur {
					t.Fatalf("key %+v: got hits %d errors %d top %d dur %d, want %d %d %d %d",
						k, g.Hits, g.Errors, g.TopLevelHits, g.Duration, w.hits, w.errors, w.top, w.dur)
				}
				if g.OkCount+g.ErrCount != g.Hits || g.ErrCount != g.Errors {
					t.Fatalf("key %+v: sketch counts ok %d err %d, hits %d errors %d", k, g.OkCount, g.ErrCount, g.Hits, g.Errors)
				}
			}
			for _, r := range ag.Requests() {
				if r.Err != nil {
					t.Fatalf("agent could not decode a payload: %v", r.Err)
				}
			}
			if h.PayloadsFailed != 0 || h.PayloadsDropped != 0 || h.PayloadsSent != uint64(len(ag.Requests())) {
				t.Fatalf("payloads sent %d failed %d dropped %d, agent saw %d", h.PayloadsSent, h.PayloadsFailed, h.PayloadsDropped, len(ag.Requests()))
			}
		})
	}
}

// TestOverflowKeepsTotals: more keys than the cap in one interval fold into
// the overflow group without losing hits.
func TestOverflowKeepsTotals(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), MaxAggregates: 10})
	for i := range 25 {
		a.Publish(&Span{Service: "s", Name: "op", Resource: fmt.Sprint(i), SpanKind: "server", Duration: 100, Error: i%2 == 0})
	}
	stop(t, a)
	got, hits := testagent.Sum(ag.Requests())
	if hits != 25 {
		t.Fatalf("agent hits = %d, want 25", hits)
	}
	b := aggregate.BlockedValue
	ov := got[testagent.GroupKey{Service: b, Name: b, Resource: b, Type: b, SpanKind: b}]
	if ov == nil || ov.Hits != 15 || ov.Errors != 8 || ov.Duration != 1500 {
		t.Fatalf("overflow group = %+v, want 15 hits 8 errors 1500 ns", ov)
	}
	if h := a.Health(); h.Overflowed != 15 || h.Counted != 25 {
		t.Fatalf("Overflowed %d Counted %d, want 15 and 25", h.Overflowed, h.Counted)
	}
}

// TestBucketsAligned: buckets reported at interval boundaries start on a
// multiple of the interval and last exactly one interval; a Flush ends a
// bucket early with its real length.
func TestBucketsAligned(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	const iv = 100 * time.Millisecond
	a := newStarted(t, Config{AgentURL: ag.URL(), BucketInterval: iv})
	defer stop(t, a)
	deadline := time.After(5 * time.Second)
	for len(ag.Requests()) < 3 {
		a.Publish(&Span{Service: "s", Name: "op", Resource: "r", TopLevel: true, Duration: 5})
		select {
		case <-deadline:
			t.Fatalf("only %d payloads in 5 s", len(ag.Requests()))
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i, r := range ag.Requests()[:3] {
		b := r.Payload.Buckets[0]
		if b.Start%uint64(iv) != 0 || b.Duration != uint64(iv) {
			t.Fatalf("payload %d: bucket start %d duration %d, want a multiple of %d and %d", i, b.Start, b.Duration, iv, iv)
		}
		if r.Payload.Sequence != uint64(i+1) {
			t.Fatalf("payload %d: sequence %d", i, r.Payload.Sequence)
		}
	}
	before := time.Now()
	a.Publish(&Span{Service: "s", Name: "op", Resource: "r", TopLevel: true, Duration: 5})
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	reqs := ag.Requests()
	b := reqs[len(reqs)-1].Payload.Buckets[0]
	end := b.Start + b.Duration
	if b.Duration == 0 || b.Duration > uint64(iv) || end < uint64(before.UnixNano()) || end > uint64(time.Now().UnixNano()) {
		t.Fatalf("flushed bucket [%d, +%d) does not end at the flush", b.Start, b.Duration)
	}
}

// TestHeadersAndPayloadIdentity checks the request headers and payload
// fields the agent relies on, over a Unix socket.
func TestHeadersAndPayloadIdentity(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "apm.socket")
	ag, err := testagent.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: "unix://" + sock, Env: "prod", Service: "web", Version: "1.2.3",
		Hostname: "h1", RuntimeID: "rid", TracerVersion: "v9", ContainerID: "cid", EntityID: "eid", LangVersion: "1.26"})
	a.Publish(&Span{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server", HTTPStatusCode: 200, Duration: 42})
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	hd := reqs[0].Header
	for k, v := range map[string]string{
		"Content-Type": "application/msgpack", "Datadog-Meta-Lang": "go", "Datadog-Meta-Lang-Version": "1.26",
		"Datadog-Meta-Tracer-Version": "v9", "Datadog-Container-Id": "cid", "Datadog-Entity-Id": "eid",
	} {
		if hd.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, hd.Get(k), v)
		}
	}
	p := reqs[0].Payload
	if p.Env != "prod" || p.Service != "web" || p.Version != "1.2.3" || p.Hostname != "h1" || p.RuntimeID != "rid" ||
		p.Lang != "go" || p.TracerVersion != "v9" || p.ContainerID != "cid" {
		t.Fatalf("payload header = %+v", p.Header)
	}
	g := p.Buckets[0].Groups[0]
	if g.Hits != 1 || g.Duration != 42 || g.IsTraceRoot != aggregate.False || g.HTTPStatusCode != 200 {
		t.Fatalf("group = %+v", g.Entry)
	}
}

func TestPublishAfterStopIsCounted(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	stop(t, a)
	if a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1}) {
		t.Fatal("Publish after Stop returned true")
	}
	if h := a.Health(); h.AfterStop != 1 || h.Published != 1 {
		t.Fatalf("AfterStop %d Published %d, want 1 and 1", h.AfterStop, h.Published)
	}
	if err := a.Flush(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Flush after Stop = %v, want ErrStopped", err)
	}
	if err := a.Stop(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second Stop = %v, want ErrStopped", err)
	}
}

func TestClearDiscardsAndCounts(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for range 7 {
		a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	}
	if err := a.Flush(context.Background()); err != nil { // the 7 are reported
		t.Fatal(err)
	}
	for range 5 {
		a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	}
	// Wait until the consumer counted them, then clear.
	for a.Health().Counted != 12 {
		time.Sleep(time.Millisecond)
	}
	a.Clear()
	for a.Health().Cleared != 5 {
		time.Sleep(time.Millisecond)
	}
	stop(t, a)
	_, hits := testagent.Sum(ag.Requests())
	h := a.Health()
	if hits != 7 || h.Cleared != 5 || h.SpansSent != 7 {
		t.Fatalf("agent hits %d, Cleared %d, SpansSent %d; want 7, 5, 7", hits, h.Cleared, h.SpansSent)
	}
}

// TestBadRequestIsDroppedNotRetried: a 400 means the agent will never take
// the payload; it is dropped at once and counted.
func TestBadRequestIsDroppedNotRetried(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	ag.SetHandler(func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		http.Error(w, "boom", http.StatusBadRequest)
		return true
	})
	a := newStarted(t, Config{AgentURL: ag.URL(), RetryBackoff: time.Millisecond})
	a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	a.Publish(&Span{Name: "op", TopLevel: true, Duration: 1})
	err := a.Flush(context.Background())
	var ae *AgentError
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Body != "boom" {
		t.Fatalf("Flush = %v, want AgentError 400 boom", err)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsFailed != 1 || h.PayloadsDropped != 1 || h.PayloadsRetried != 0 || h.SpansUnsent != 2 || h.PayloadsSent != 0 {
		t.Fatalf("failed %d dropped %d retried %d unsent %d sent %d", h.PayloadsFailed, h.PayloadsDropped, h.PayloadsRetried, h.SpansUnsent, h.PayloadsSent)
	}
	if n := len(ag.Requests()); n != 1 {
		t.Fatalf("agent saw %d requests, want 1", n)
	}
}

// TestReportSplitsToPayloadLimit: a report larger than MaxPayloadBytes goes
// out as several complete payloads, each within the limit, carrying every
// group exactly once.
func TestReportSplitsToPayloadLimit(t *testing.T) {
	ag := testagent.New()
	defer ag.Close()
	const limit = 64 << 10
	a := newStarted(t, Config{AgentURL: ag.URL(), MaxPayloadBytes: limit})
	long := string(make([]byte, 300))
	for i := range 1000 {
		a.Publish(&Span{Service: "s", Name: "op", Resource: fmt.Sprintf("%s%d", long, i), TopLevel: true, Duration: int64(i + 1)})
	}
	stop(t, a)
	reqs := ag.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d payloads, want several", len(reqs))
	}
	seen := map[string]int{}
	for _, r := range reqs {
		if len(r.Body) > limit {
			t.Fatalf("payload of %d bytes over the %d limit", len(r.Body), limit)
		}
		for _, g := range r.Payload.Buckets[0].Groups {
			seen[g.Resource]++
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct groups, want 1000", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("group %q sent %d times", k[300:], n)
		}
	}
}

// TestShedYieldEvery checks which Publish calls yield: only those that find
// the inbox full, one in ShedYieldEvery of them, none with ShedWithoutYield.
func TestShedYieldEvery(t *testing.T) {
	var yields int
	defer func(f func()) { yield = f }(yield)
	yield = func() { yields++ }
	for _, tc := range []struct {
		cfg   Config
		every int // 0: never
	}{
		{Config{}, DefaultShedYieldEvery},
		{Config{ShedYieldEvery: 1}, 1},
		{Config{ShedYieldEvery: 3}, 3},
		{Config{ShedYieldEvery: 3, ShedWithoutYield: true}, 0},
	} {
		name := fmt.Sprintf("ShedYieldEvery=%d ShedWithoutYield=%v", tc.cfg.ShedYieldEvery, tc.cfg.ShedWithoutYield)
		// Never started: nothing drains, so the inbox fills and stays full.
		a, err := New(Config{AgentURL: "http://127.0.0.1:1", InboxSize: 16,
			ShedYieldEvery: tc.cfg.ShedYieldEvery, ShedWithoutYield: tc.cfg.ShedWithoutYield})
		if err != nil {
			t.Fatal(err)
		}
		yields = 0
		s := &Span{Name: "op", TopLevel: true, Duration: 1}
		for range 16 {
			if !a.Publish(s) {
				t.Fatal("Publish into an inbox with room returned false")
			}
		}
		if yields != 0 {
			t.Fatalf("%s: %d yields on accepted spans", name, yields)
		}
		for range 800 {
			if a.Publish(s) {
				t.Fatal("Publish into a full inbox returned true")
			}
		}
		// Each stripe of the counter yields on its multiples of every;
		// one goroutine normally stays on one stripe (800/every yields),
		// but a moved stack would change stripes.
		want := 0
		for i := range a.c.inboxFull.cells {
			if tc.every > 0 {
				want += int(a.c.inboxFull.cells[i].Load()) / tc.every
			}
		}
		if yields != want || (tc.every > 0 && want < 800/tc.every-1) {
			t.Errorf("%s: %d yields over 800 sheds, want %d (about %d)", name, yields, want, 800/max(tc.every, 1))
		}
		if h := a.Health(); h.InboxFull != 800 {
			t.Errorf("%s: InboxFull %d, want 800", name, h.InboxFull)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{AgentURL: "ftp://x"},
		{AgentURL: "http://"},
		{AgentURL: "unix://"},
		{InboxSize: -1},
		{ShedYieldEvery: -8},
		{MaxPayloadBytes: 100},
		{BucketInterval: -time.Second},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v) = %v, want ErrBadConfig", c, err)
		}
	}
}

func TestEligibility(t *testing.T) {
	for _, tc := range []struct {
		s    Span
		want bool
	}{
		{Span{Duration: 1, TopLevel: true}, true},
		{Span{Duration: 1, Measured: true}, true},
		{Span{Duration: 1, SpanKind: "Server"}, true},
		{Span{Duration: 1, SpanKind: "PRODUCER"}, true},
		{Span{Duration: 1, SpanKind: "internal"}, false},
		{Span{Duration: 1}, false},
		{Span{Duration: 0, TopLevel: true}, false},
		{Span{Duration: -5, SpanKind: "client"}, false},
	} {
		if got := tc.s.Eligible(); got != tc.want {
			t.Errorf("%+v: Eligible = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestPeerTagsOnlyForClientKinds(t *testing.T) {
	var r aggregate.Record
	(&Span{SpanKind: "server", PeerTags: []string{"a:b"}}).snapshot(&r)
	if r.NumPeerTags != 0 {
		t.Fatal("server span kept peer tags")
	}
	(&Span{SpanKind: "Client", PeerTags: []string{"a:b", "c:d"}}).snapshot(&r)
	if r.NumPeerTags != 2 || r.PeerTags[1] != "c:d" || r.ExtraPeerTags != nil {
		t.Fatalf("client span peer tags = %v + %v", r.PeerTags[:r.NumPeerTags], r.ExtraPeerTags)
	}
	// More tags than fit inline: the rest are copied, not aliased.
	tags := make([]string, aggregate.MaxInlinePeerTags+2)
	for i := range tags {
		tags[i] = fmt.Sprintf("k%d:v", i)
	}
	r = aggregate.Record{} // a claimed slot is zeroed
	(&Span{SpanKind: "producer", PeerTags: tags}).snapshot(&r)
	extra := tags[aggregate.MaxInlinePeerTags:]
	if int(r.NumPeerTags) != aggregate.MaxInlinePeerTags || len(r.ExtraPeerTags) != 2 ||
		r.ExtraPeerTags[0] != extra[0] || r.ExtraPeerTags[1] != extra[1] || &r.ExtraPeerTags[0] == &extra[0] {
		t.Fatalf("%d inline tags and extra %v, want %d and a copy of %v", r.NumPeerTags, r.ExtraPeerTags, aggregate.MaxInlinePeerTags, extra)
	}
}
