// This file tests the Aggregator end to end (conservation of spans,
// Publish, Flush and Stop at their edges, fuzzed spans) and holds TestMain
// and the start, publish and wait helpers the package's tests share.

package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

func TestMain(m *testing.M) {
	testenv.Clear() // the developer's DD_*, OTEL_* and SPANSTATS_* settings are not the tests'
	goleak.VerifyTestMain(m)
}

// newStarted starts an aggregator for cfg and, when the test ends, checks
// that no goroutine started since is left over: each test, not only the
// package, proves that Stop ends every goroutine the aggregator started
// (and the HTTP connections it opened).
// Each of set amends the aggregator before it starts.
func newStarted(t *testing.T, cfg Config, set ...func(*Aggregator)) *Aggregator {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range set {
		f(a)
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
// the number of ineligible spans published. With stable, a key's strings
// are the same data in every span (a tracer's constants, which the
// consumer's recent-span cache finds by identity); else each span formats
// its own.
func publishLoad(a *Aggregator, producers, n, keys int, stable bool) (map[statstest.GroupKey]*tally, uint64) {
	var (
		mu         sync.Mutex
		total      = map[statstest.GroupKey]*tally{}
		ineligible uint64
		wg         sync.WaitGroup
	)
	type labels struct {
		service, resource string
		peers             []string
	}
	labelsOf := func(k int) labels {
		return labels{fmt.Sprintf("svc-%d", k%5), fmt.Sprintf("GET /r/%d", k),
			[]string{"peer.service:db", fmt.Sprintf("peer.hostname:h%d", k%3)}}
	}
	constants := make([]labels, keys)
	for k := range constants {
		constants[k] = labelsOf(k)
	}
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[statstest.GroupKey]*tally{}
			var inel uint64
			kinds := []string{"server", "client", "internal", "CONSUMER"}
			for i := range n {
				k := (i*7 + p) % keys
				l := constants[k]
				if !stable {
					l = labelsOf(k)
				}
				s := Span{
					Service:        l.service,
					Name:           "op",
					Resource:       l.resource,
					Type:           "web",
					SpanKind:       kinds[k%len(kinds)],
					HTTPStatusCode: 200,
					PeerTags:       l.peers,
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
				key := statstest.GroupKey{Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type, SpanKind: s.SpanKind, HTTPStatusCode: s.HTTPStatusCode}
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
// spans per key, and every published span is in a named counter, whether
// each span formats its strings or reuses a key's (the recent-span cache's
// case).
func TestEndToEndConservation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inbox  int
		stable bool
	}{
		{"default-inbox", 0, false},
		{"tiny-inbox-drops", 16, false},
		{"constant-strings", 0, true},
		{"constant-strings-tiny-inbox", 16, true},
		{"one-slot-inbox", 1, false}, // every lap of the ring is one item
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag := statstest.New()
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
			want, ineligible := publishLoad(a, producers, n, keys, tc.stable)
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
			got, hits := statstest.Sum(ag.Requests())
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

// TestPublishAfterStopIsCounted: a span published after Stop counts in
// AfterStop, as Stop's doc says, also where the agent was off at Stop (it
// used to count in AgentOffSpans then).
func TestPublishAfterStopIsCounted(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	off := statstest.New()
	defer off.Close()
	off.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
	a := newStarted(t, Config{AgentURL: ag.URL()})
	b := newStarted(t, Config{AgentURL: off.URL()})
	waitFor(t, "the agent off", func() bool { return b.Health().AgentOff })
	stop(t, b)
	if b.Publish(&Span{Name: "op", TopLevel: true, Duration: 1}) {
		t.Fatal("Publish after Stop returned true")
	}
	if h := b.Health(); h.AfterStop != 1 || h.AgentOffSpans != 0 || h.Published != 1 {
		t.Fatalf("agent off: AfterStop %d AgentOffSpans %d Published %d, want 1, 0, 1", h.AfterStop, h.AgentOffSpans, h.Published)
	}
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
	// With ctx done too, always ErrStopped: select picked either before.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		if err := a.Flush(done); !errors.Is(err, ErrStopped) {
			t.Fatalf("Flush %d after Stop with a cancelled ctx = %v, want ErrStopped", i, err)
		}
	}
	if err := a.Stop(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second Stop = %v, want ErrStopped", err)
	}
}

// fastRetries makes retry tests quick while keeping the backoff logic.
func fastRetries(c Config) Config {
	c.RetryBackoff = 5 * time.Millisecond
	c.MaxRetryBackoff = 20 * time.Millisecond
	return c
}

func publishN(a *Aggregator, n int, resource string) {
	for i := range n {
		a.Publish(&Span{Service: "s", Name: "op", Resource: resource, SpanKind: "server", Duration: int64(100 + i)})
	}
}

// checkConservation asserts the span identity of Health after Stop, when
// nothing may be pending: Health computes Pending as what is left of the
// spans pushed, so a span lost between the inbox and the table shows only
// there, and the identity alone would hold.
func checkConservation(t *testing.T, h Health) {
	t.Helper()
	if h.Pending != 0 {
		t.Fatalf("after Stop %d spans pending (lost between the inbox and the table?): %+v", h.Pending, h)
	}
	if got := h.Counted + h.Ineligible + h.InboxFull + h.AfterStop + h.AgentOffSpans + h.AggregateDropped + h.StopUndrained + h.Pending; got != h.Published {
		t.Fatalf("published %d != counted %d + ineligible %d + full %d + afterStop %d + agentOff %d + dropped %d + undrained %d + pending %d",
			h.Published, h.Counted, h.Ineligible, h.InboxFull, h.AfterStop, h.AgentOffSpans, h.AggregateDropped, h.StopUndrained, h.Pending)
	}
	if h.Counted != h.SpansSent+h.SpansUnsent+h.Cleared {
		t.Fatalf("counted %d != sent %d + unsent %d + cleared %d", h.Counted, h.SpansSent, h.SpansUnsent, h.Cleared)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestFlushBeforeStart: Flush on an aggregator never started answers at
// once with ErrNotStarted instead of waiting for a consumer that is not
// there.
func TestFlushBeforeStart(t *testing.T) {
	a, err := New(Config{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- a.Flush(context.Background()) }()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrNotStarted) {
			t.Fatalf("Flush before Start = %v, want ErrNotStarted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Flush before Start blocked")
	}
}

// TestSecondStopHonoursItsContext: while a first Stop waits for a stuck
// agent, a second Stop returns by its own deadline.
func TestSecondStopHonoursItsContext(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	ag.SetHandler(func(w http.ResponseWriter, r *http.Request, n int) bool {
		arrived <- struct{}{}
		<-release
		return false
	})
	a := newStarted(t, Config{AgentURL: ag.URL()})
	publishN(a, 3, "r")
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		first <- a.Stop(ctx)
	}()
	<-arrived // the first Stop's report is held by the agent
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- a.Stop(ctx) }()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second Stop = %v, want its deadline's error", err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("second Stop ignored its 100 ms deadline")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Stop: %v", err)
	}
}

// decodingOut is a transport that decodes every payload it is handed, for
// the fuzz target: what the SDK would send must decode and carry its hits.
type decodingOut struct {
	hits, errors, topLevel uint64
	err                    error
}

func (d *decodingOut) start() {}
func (d *decodingOut) send(r *report, _ bool) {
	for _, p := range r.parts {
		pl, err := writer.DecodePayloadAsAgent(p.body) // as the agent: a nil array or summary is a 400
		if err != nil && d.err == nil {
			d.err = err
		}
		if pl != nil {
			for _, b := range pl.Buckets {
				for _, g := range b.Groups {
					d.hits += g.Hits
					d.errors += g.Errors
					d.topLevel += g.TopLevelHits
					// Each counted span's latency is in the sketch of its
					// kind: the ok one holds hits - errors, the error one errors.
					var ok, bad uint64
					if g.Ok != nil {
						ok = g.Ok.Count()
					}
					if g.Err != nil {
						bad = g.Err.Count()
					}
					if (g.Errors > g.Hits || g.TopLevelHits > g.Hits || ok != g.Hits-g.Errors || bad != g.Errors) && d.err == nil {
						d.err = fmt.Errorf("group of %d hits, %d errors, %d top-level; sketches of %d ok and %d error values",
							g.Hits, g.Errors, g.TopLevelHits, ok, bad)
					}
				}
			}
		}
	}
	if r.done != nil {
		r.done <- nil
	}
}
func (d *decodingOut) nextDue() (time.Time, bool) { return time.Time{}, false }
func (d *decodingOut) runDue(time.Time)           {}
func (d *decodingOut) stop()                      {}

// FuzzPublish publishes spans of arbitrary field values: whatever is
// counted is sent in payloads that decode, carrying every counted hit.
func FuzzPublish(f *testing.F) {
	f.Add("web", "http.request", "GET /", "web", "server", "GET", "/users", "", "", uint32(200), int64(1000), byte(1), "peer.service:db")
	f.Add("", "", "", "", "CLIENT", "", "", "14", "m", uint32(0), int64(math.MaxInt64), byte(0xff), "a:b\x00a:b\x00:\x00")
	f.Add("\xff\xfe", "op\x00", strings.Repeat("r", 5000), "t", "consumer", "x", "y", "z", "w", uint32(1<<31), int64(-5), byte(2), "")
	f.Fuzz(func(t *testing.T, svc, name, res, typ, kind, method, endpoint, grpc, src string, status uint32, dur int64, flags byte, peers string) {
		a, err := New(Config{AgentURL: "http://127.0.0.1:1", SendJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		out := &decodingOut{}
		a.snd.out = out
		a.Start()
		sp := &Span{Service: svc, Name: name, Resource: res, Type: typ, SpanKind: kind, HTTPMethod: method,
			HTTPEndpoint: endpoint, GRPCStatusCode: grpc, ServiceSource: src, HTTPStatusCode: status, Duration: dur,
			Error: flags&1 != 0, TopLevel: flags&2 != 0, Measured: flags&4 != 0, TraceRoot: flags&8 != 0, Synthetics: flags&16 != 0}
		if peers != "" {
			sp.PeerTags = strings.Split(peers, "\x00")
		}
		for range 3 {
			a.Publish(sp)
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		h := a.Health()
		if out.err != nil {
			t.Fatalf("a payload does not decode: %v", out.err)
		}
		if out.hits != h.Counted || h.Counted+h.Ineligible != 3 {
			t.Fatalf("decoded %d hits; counted %d, ineligible %d of 3", out.hits, h.Counted, h.Ineligible)
		}
		// The three spans are alike: each counted one is an error, or a
		// top-level span, as it was published.
		var errs, top uint64
		if sp.Error {
			errs = h.Counted
		}
		if sp.TopLevel {
			top = h.Counted
		}
		if out.errors != errs || out.topLevel != top {
			t.Fatalf("decoded %d errors, %d top-level of %d counted; want %d, %d", out.errors, out.topLevel, h.Counted, errs, top)
		}
	})
}

// TestTypeTwinsInSeparateBuckets: spans that differ only in Type reach the
// agent in separate buckets of the same start, each group once with its
// own counts: in one bucket the agent's intake would credit one's counts
// to the other's Type (see writer.TypeSplitter). The other groups stay in
// the first bucket.
func TestTypeTwinsInSeparateBuckets(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	now := time.Now().UnixNano()
	hits := map[string]uint64{"web": 3, "http": 5, "": 7}
	for typ, n := range hits {
		for range n {
			a.Publish(&Span{Service: "web", Name: "op", Resource: "GET /", Type: typ, SpanKind: "server", Start: now - 1000, Duration: 1000})
		}
	}
	// Another operation: no twin of GET / (a group of op with another
	// resource is one, since the agent may rewrite resources; see
	// writer.TypeSplitter), so in the first bucket whatever the layers.
	a.Publish(&Span{Service: "web", Name: "other.op", Resource: "other", Type: "web", SpanKind: "server", Start: now - 1000, Duration: 1000})
	stop(t, a)
	var buckets []writer.DecodedBucket
	for _, r := range statstest.Accepted(ag.Requests()) {
		buckets = append(buckets, r.Payload.Buckets...)
	}
	if len(buckets) != 3 {
		t.Fatalf("%d buckets, want 3 (one per twin of GET /): %+v", len(buckets), buckets)
	}
	got := map[string]uint64{}
	for i, b := range buckets {
		if b.Start != buckets[0].Start || b.Duration != buckets[0].Duration {
			t.Errorf("bucket %d: start %d duration %d, want the first's %d %d", i, b.Start, b.Duration, buckets[0].Start, buckets[0].Duration)
		}
		for _, g := range b.Groups {
			if g.Resource == "other" {
				if i != 0 || g.Hits != 1 {
					t.Errorf("the group without twins is in bucket %d with %d hits, want bucket 0 with 1", i, g.Hits)
				}
				continue
			}
			if _, dup := got[g.Type]; dup {
				t.Errorf("Type %q twice", g.Type)
			}
			got[g.Type] = g.Hits
		}
		twins := 0
		for _, g := range b.Groups {
			if g.Resource == "GET /" {
				twins++
			}
		}
		if twins != 1 {
			t.Errorf("bucket %d holds %d groups of GET /, want 1", i, twins)
		}
	}
	if !maps.Equal(got, hits) {
		t.Fatalf("hits by Type %v, want %v", got, hits)
	}
}

// TestSnapshotNeverMoreOutThanCounted: while spans are published, cleared
// and reported, every Health snapshot has Counted at least Cleared +
// SpansSent + SpansUnsent: what is on its way is never negative. (The
// race detector widens the window between the loads enough to show a bad
// read order within a second.)
func TestSnapshotNeverMoreOutThanCounted(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), BucketInterval: time.Millisecond, SendJitter: -1, InboxSize: 64,
		Logger: slog.New(slog.DiscardHandler)})
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !done.Load() {
			a.Publish(&Span{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Duration: 5})
		}
	})
	wg.Go(func() {
		for !done.Load() {
			a.Clear()
			time.Sleep(10 * time.Microsecond)
		}
	})
	bad, snaps := 0, 0
	var worst Health
	for end := time.Now().Add(time.Second); time.Now().Before(end); snaps++ {
		if h := a.Health(); h.SpansSent+h.SpansUnsent+h.Cleared > h.Counted {
			bad, worst = bad+1, h
		}
	}
	done.Store(true)
	wg.Wait()
	stop(t, a)
	if bad > 0 {
		t.Errorf("%d of %d snapshots: Counted %d < SpansSent %d + SpansUnsent %d + Cleared %d",
			bad, snaps, worst.Counted, worst.SpansSent, worst.SpansUnsent, worst.Cleared)
	}
}

// TestPublishNeverStartedWarns: an aggregator nobody started fills its
// inbox and then drops every span as InboxFull; the first such drop logs
// one warning naming the cause (Start was never called), later ones
// nothing more, and the full path still allocates nothing. Started, the
// same path does not claim so.
func TestPublishNeverStartedWarns(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	log, buf := textLogger()
	a, err := New(Config{AgentURL: ag.URL(), InboxSize: 16, ShedWithoutYield: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s := &Span{Name: "op", TopLevel: true, Duration: 1}
	for range 16 {
		if !a.Publish(s) {
			t.Fatal("Publish into an inbox with room returned false")
		}
	}
	if got := buf.lines(); len(got) != 0 {
		t.Fatalf("logged %q before the inbox was full, want nothing", got)
	}
	for range 100 {
		if a.Publish(s) {
			t.Fatal("Publish into a full inbox returned true")
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { a.Publish(s) }); allocs != 0 {
		t.Errorf("Publish into a full inbox after the warning: %v allocations, want 0", allocs)
	}
	warnings := func() []string {
		var found []string
		for _, l := range buf.lines() {
			if strings.Contains(l, "never started") {
				found = append(found, l)
			}
		}
		return found
	}
	got := warnings()
	if len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "Start") {
		t.Fatalf("logged %q, want one warning that Start was never called", buf.lines())
	}
	if h := a.Health(); h.InboxFull != 100+101 || h.Pending != 16 {
		t.Fatalf("InboxFull %d, Pending %d; want 201, 16", h.InboxFull, h.Pending)
	}
	a.Start()
	a.warnIfNotStarted() // the full-inbox path of a started aggregator: overload, not a missing Start
	stop(t, a)
	if got := warnings(); len(got) != 1 {
		t.Fatalf("after Start: %d warnings that it was never started, want still 1: %q", len(got), got)
	}
	if h := a.Health(); h.Counted != 16 {
		t.Fatalf("counted %d, want the 16 spans the inbox held until Start", h.Counted)
	}

	// The call above found the warning given already, so it shows nothing
	// about a started aggregator: one that never warned must not claim a
	// missing Start when its inbox fills (overload, logged by the sender).
	log2, buf2 := textLogger()
	b, err := New(Config{AgentURL: ag.URL(), InboxSize: 16, Logger: log2})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.warnIfNotStarted()
	b.warnIfNotStarted()
	stop(t, b)
	for _, l := range buf2.lines() {
		if strings.Contains(l, "never started") {
			t.Fatalf("a started aggregator logged %q", l)
		}
	}
	if !b.unstartedWarned.Load() {
		t.Fatal("a started aggregator's full-inbox path still looks for a missing Start at every drop")
	}
}

// TestStopPastAnAbandonedSlot: a slot claimed and never written (a Publish
// that panicked in its copy) holds the consumer, and the spans behind it
// wait; Stop with a deadline still returns by it, counting them all (the
// abandoned one too) in StopUndrained, and what was counted before the
// slot reaches the agent. Before, Stop never returned.
func TestStopPastAnAbandonedSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
	publish := func(n int) {
		for i := range n {
			s := raceSpan(i)
			s.Start = time.Now().UnixNano()
			if !a.Publish(&s) {
				t.Fatalf("span %d refused: %+v", i, a.Health())
			}
		}
	}
	publish(3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := a.Flush(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	abandonSlot(t, a, 0)
	publish(4)
	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want its deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Stop took %v past a 200 ms deadline", d)
	}
	h := a.Health()
	if h.Counted != 3 || h.StopUndrained != 5 || h.Pending != 0 || h.Published != 8 ||
		h.Published != h.Counted+h.Ineligible+h.InboxFull+h.AfterStop+h.AgentOffSpans+h.AggregateDropped+h.StopUndrained+h.Pending {
		t.Fatalf("health %+v: want 3 counted, 5 undrained of 8 published", h)
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != 3 {
		t.Fatalf("the agent holds %d hits, want 3", hits)
	}
}

// abandonSlot claims a slot of a's inbox and never writes it, as a Publish
// whose copy panicked does, then publishes behind spans behind it.
func abandonSlot(t *testing.T, a *Aggregator, behind int) {
	t.Helper()
	func() {
		defer func() { _ = recover() }()
		_, _ = a.inbox.Claim()
		panic("the copy into the slot panicked")
	}()
	for i := range behind {
		s := raceSpan(i)
		if !a.Publish(&s) {
			t.Fatalf("span %d refused behind the slot: %+v", i, a.Health())
		}
	}
}

// TestAbandonedSlotDoesNotSpin: with the wake mark's worth published
// behind an abandoned slot the consumer cannot park, and it used to try
// again at once for ever, a whole core (a second of CPU a second). It backs
// off to a try per slotWait: over a second the process's CPU stays under a
// quarter of it, and the tries are counted as wake-ups.
func TestAbandonedSlotDoesNotSpin(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
	abandonSlot(t, a, 7)               // the mark of an inbox of 8 is 4
	time.Sleep(100 * time.Millisecond) // past the first tries
	w0, cpu0 := a.cons.wakeups.Load(), cputime.Process()
	time.Sleep(time.Second)
	cpu, wakes := cputime.Process()-cpu0, a.cons.wakeups.Load()-w0
	t.Logf("behind an abandoned slot for 1 s: process CPU %v, %d wake-ups", cpu, wakes)
	if cpu > 250*time.Millisecond {
		t.Errorf("process CPU %v over 1 s behind an abandoned slot: the consumer spins", cpu)
	}
	if wakes < 5 || wakes > 20 {
		t.Errorf("%d tries in 1 s, want about one per slotWait (%v)", wakes, slotWait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Fatal(err)
	}
	if h := a.Health(); h.StopUndrained != 8 || h.Pending != 0 {
		t.Fatalf("health %+v: want the slot and the 7 behind it undrained", h)
	}
}

// TestQuietParkBehindAbandonedSlot: a consumer parked quiet (no timer,
// woken by the first push) when a Publish abandons the head slot used to
// park quiet again after each push behind it, so every push woke it and,
// once pushes stopped, nothing but a tick did: the slot went unread. It
// parks quiet only with nothing queued, so behind the slot it looks once
// a period (5 ms here), as Publish's doc says.
func TestQuietParkBehindAbandonedSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: time.Hour},
		func(a *Aggregator) { a.cons.period = 5 * time.Millisecond })
	for deadline := time.Now().Add(5 * time.Second); !a.cons.quietPark.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never parked quiet")
		}
	}
	c, ok := a.inbox.Claim() // as a Publish that panicked mid-copy
	if !ok {
		t.Fatal("cannot claim a slot")
	}
	w0 := a.cons.wakeups.Load()
	for i := range 200 {
		s := raceSpan(i)
		a.Publish(&s)
		time.Sleep(200 * time.Microsecond)
	}
	w1 := a.cons.wakeups.Load()
	time.Sleep(time.Second)
	w2 := a.cons.wakeups.Load()
	s := raceSpan(0)
	s.snapshot(c.Value())
	c.Commit()
	t.Logf("wake-ups: %d over 200 pushes behind the slot, %d in the second after", w1-w0, w2-w1)
	if w1-w0 > 100 {
		t.Errorf("%d wake-ups for 200 pushes behind the slot: each push wakes the consumer", w1-w0)
	}
	if w2-w1 < 20 {
		t.Errorf("%d wake-ups in a second behind the slot, want about one per 5 ms period", w2-w1)
	}
	stop(t, a)
	if h := a.Health(); h.Counted != 201 {
		t.Fatalf("counted %d of 201 once the slot was written: %+v", h.Counted, h)
	}
}

// TestTicksBehindAbandonedSlotDoNotSpin: each tick drains what is queued
// and waits up to slotWait for a claimed slot, sleeping and backing off
// rather than spinning, tick after tick behind a slot no Publish will
// write: the process's CPU over 2 s stays under a tenth of it.
func TestTicksBehindAbandonedSlotDoNotSpin(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: 200 * time.Millisecond})
	abandonSlot(t, a, 1)
	time.Sleep(300 * time.Millisecond)
	cpu0 := cputime.Process()
	time.Sleep(2 * time.Second)
	cpu := cputime.Process() - cpu0
	t.Logf("behind an abandoned slot, 20 ticks in 2 s: process CPU %v", cpu)
	if cpu > 200*time.Millisecond {
		t.Errorf("process CPU %v over 2 s of ticks behind an abandoned slot: the ticks spin", cpu)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Fatal(err)
	}
	if h := a.Health(); h.StopUndrained != 2 || h.Pending != 0 {
		t.Fatalf("health %+v: want the slot and the span behind it undrained", h)
	}
}

// TestStalledSlotReadOnItsCommit: behind a slot its Publish is slow to
// write, with the wake mark's worth queued behind it, the consumer backs
// off to a try per slotWait; the slot's commit wakes it, not its next try
// (up to slotWait later, of a filling inbox). Three stalls long enough to
// reach the longest pause, ending at three phases of it, are each read
// within 30 ms of the commit.
func TestStalledSlotReadOnItsCommit(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: time.Hour, InboxSize: 256})
	defer stop(t, a)
	mark := a.inbox.Cap() / wakeFraction
	for round := range 3 {
		before := a.Health().Counted
		c, ok := a.inbox.Claim()
		if !ok {
			t.Fatal("Claim refused")
		}
		for i := range mark + 10 {
			s := raceSpan(i)
			if !a.Publish(&s) {
				t.Fatalf("span %d refused behind the slot", i)
			}
		}
		// The pauses reach slotWait; the stalls end at three phases of them.
		time.Sleep(4*slotWait + time.Duration(round)*slotWait/3)
		s := raceSpan(0)
		s.snapshot(c.Value())
		t0 := time.Now()
		c.Commit()
		waitFor(t, "the stalled slot and the spans behind it counted", func() bool {
			return a.Health().Counted == before+uint64(mark+11)
		})
		d := time.Since(t0)
		t.Logf("round %d: read %v after the commit", round, d)
		if d > 30*time.Millisecond {
			t.Errorf("round %d: read %v after the commit, want < 30ms", round, d)
		}
	}
}

// TestStopWithoutDeadlinePastAnAbandonedSlot: a Stop whose ctx never ends
// used to wait for ever on a slot no Publish will write. It waits
// stopSlotWait, counts the slot and the spans behind it undrained, and
// still sends what was counted before it.
func TestStopWithoutDeadlinePastAnAbandonedSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
	for i := range 3 {
		s := raceSpan(i)
		if !a.Publish(&s) {
			t.Fatal("refused")
		}
	}
	waitFor(t, "3 counted", func() bool { return a.Health().Counted == 3 })
	abandonSlot(t, a, 2)
	done := make(chan error, 1)
	go func() { done <- a.Stop(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stop = %v", err)
		}
	case <-time.After(stopSlotWait + 10*time.Second):
		t.Fatal("Stop without a deadline still waits on the abandoned slot")
	}
	h := a.Health()
	if h.Counted != 3 || h.StopUndrained != 3 || h.Pending != 0 || h.Published != 6 ||
		h.Published != h.Counted+h.Ineligible+h.InboxFull+h.AfterStop+h.AgentOffSpans+h.AggregateDropped+h.StopUndrained+h.Pending {
		t.Fatalf("health %+v: want 3 counted, 3 undrained of 6 published", h)
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != 3 {
		t.Fatalf("the agent holds %d hits, want 3", hits)
	}
}

// TestStopBehindAbandonedSlotDoesNotSpin: Stop waits stopSlotWait for a
// slot claimed before Close and never written, sleeping and backing off
// after a moment of yielding, not yielding the whole time: the process's
// CPU over that second stays under a quarter of it (it was a whole core).
func TestStopBehindAbandonedSlotDoesNotSpin(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
	abandonSlot(t, a, 1)
	cpu0, start := cputime.Process(), time.Now()
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	took, cpu := time.Since(start), cputime.Process()-cpu0
	t.Logf("Stop behind an abandoned slot took %v, process CPU %v", took, cpu)
	if took < stopSlotWait {
		t.Fatalf("Stop took %v, under stopSlotWait %v: it did not wait for the slot", took, stopSlotWait)
	}
	if cpu > stopSlotWait/4 {
		t.Errorf("process CPU %v during a Stop of %v behind an abandoned slot: the wait spins", cpu, took)
	}
	if h := a.Health(); h.StopUndrained != 2 || h.Pending != 0 {
		t.Fatalf("health %+v: want the slot and the one behind it undrained", h)
	}
}

// stallSlot claims a slot of a's inbox, publishes behind spans behind it,
// writes the slot after hold (a producer preempted in its copy) and
// returns how long the consumer then took to count total spans.
func stallSlot(t *testing.T, a *Aggregator, behind int, hold time.Duration, total uint64) time.Duration {
	t.Helper()
	c, ok := a.inbox.Claim()
	if !ok {
		t.Fatal("claim refused")
	}
	for i := range behind {
		s := raceSpan(i)
		if !a.Publish(&s) {
			t.Fatalf("span %d refused behind the slot: %+v", i, a.Health())
		}
	}
	time.Sleep(hold)
	s := raceSpan(behind)
	s.snapshot(c.Value())
	c.Commit()
	start := time.Now()
	waitFor(t, fmt.Sprintf("%d counted", total), func() bool { return a.Health().Counted >= total })
	return time.Since(start)
}

// TestBackoffEndsWithTheSlot: a long stall backs the consumer off to a try
// per slotWait; a Flush then drains past the slot (in its own loop, not the
// run loop's). The next brief stall, any time later, must start from a
// short wait again: a backoff left over from the first made the consumer
// sleep a whole slotWait (about 100 ms) after a 2 ms stall.
func TestBackoffEndsWithTheSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var delays []time.Duration
	for range 3 { // scheduling noise can delay one round past the bound, not three
		a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
		c, _ := a.inbox.Claim()
		for i := range 7 {
			s := raceSpan(i)
			a.Publish(&s)
		}
		time.Sleep(300 * time.Millisecond) // backed off to slotWait
		flushed := make(chan error, 1)
		go func() { flushed <- a.Flush(context.Background()) }()
		time.Sleep(20 * time.Millisecond)
		s := raceSpan(7)
		s.snapshot(c.Value())
		c.Commit()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // parked as usual
		d := stallSlot(t, a, 7, 2*time.Millisecond, 16)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := a.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if d < slotWait/4 {
			return
		}
		delays = append(delays, d)
	}
	t.Fatalf("counted %v after a 2 ms stall that followed a long one (3 rounds), want under %v", delays, slotWait/4)
}

// TestStopDuringFlushBehindAbandonedSlot: a Flush without a deadline waits
// on an abandoned slot, backing off rather than spinning a core; a Stop
// without a deadline then ends its wait (it used to wait with it for ever),
// the Flush says it was cut by the stop, and the slot and the spans behind
// it are counted undrained.
func TestStopDuringFlushBehindAbandonedSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8})
	abandonSlot(t, a, 7)
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(context.Background()) }()
	time.Sleep(200 * time.Millisecond) // past the first tries
	cpu0 := cputime.Process()
	time.Sleep(time.Second)
	if cpu := cputime.Process() - cpu0; cpu > 250*time.Millisecond {
		t.Errorf("process CPU %v over 1 s while a Flush waits on an abandoned slot: it spins", cpu)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop = %v", err)
		}
	case <-time.After(stopSlotWait + 10*time.Second):
		t.Fatal("Stop without a deadline waits with the Flush on the abandoned slot")
	}
	if err := <-flushed; !errors.Is(err, ErrStopped) {
		t.Fatalf("Flush = %v, want ErrStopped: spans published before it were not reported", err)
	}
	if h := a.Health(); h.StopUndrained != 8 || h.Pending != 0 {
		t.Fatalf("health %+v: want the slot and the 7 behind it undrained", h)
	}
}

// TestTickPastAnAbandonedSlot: spans counted before a slot whose Publish
// panicked, not flushed, still reach the agent at the next close: the
// tick's drain leaves the slot after slotWait instead of spinning on it
// until Stop, whose deadline then dropped them unsent. With the inbox past
// the wake mark behind the slot (what a busy application fills it with
// in moments), the consumer cannot park, and looks at its timer between
// tries. A Flush meanwhile waits for the slot until its ctx ends, the
// buckets closing meanwhile (TestFlushBehindAbandonedSlotKeepsTicking: one
// without a deadline, which Stop's deadline cuts, returning that cause);
// the slot and the spans behind it count as undrained at Stop.
func TestTickPastAnAbandonedSlot(t *testing.T) {
	for _, behind := range []int{1, 7} { // the mark of an inbox of 8 is 4
		t.Run(fmt.Sprintf("behind=%d", behind), func(t *testing.T) { tickPastAbandonedSlot(t, behind, false) })
	}
}

// TestFlushBehindAbandonedSlotKeepsTicking: a Flush without a deadline
// waits on the abandoned slot, and the buckets still close and go out
// meanwhile; Stop cuts the Flush, which returns ErrStopped rather than
// nil, since spans published before it stay unread.
func TestFlushBehindAbandonedSlotKeepsTicking(t *testing.T) {
	for _, behind := range []int{1, 7} {
		t.Run(fmt.Sprintf("behind=%d", behind), func(t *testing.T) { tickPastAbandonedSlot(t, behind, true) })
	}
}

func tickPastAbandonedSlot(t *testing.T, behind int, flushing bool) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 8, BucketInterval: time.Second})
	for i := range 3 {
		s := raceSpan(i)
		if !a.Publish(&s) {
			t.Fatal("refused")
		}
	}
	waitFor(t, "3 counted", func() bool { return a.Health().Counted == 3 })
	abandonSlot(t, a, behind)
	flushed := make(chan error, 1)
	if flushing {
		go func() { flushed <- a.Flush(context.Background()) }()
	}
	waitFor(t, "the 3 counted spans at the agent", func() bool {
		_, hits := statstest.Sum(ag.Requests())
		return hits == 3
	})
	if !flushing {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := a.Flush(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Flush behind the abandoned slot: %v, want its deadline", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = a.Stop(ctx)
	if flushing {
		select {
		case err := <-flushed:
			if !errors.Is(err, ErrStopped) {
				t.Fatalf("Flush without a deadline, cut by Stop: %v, want %v", err, ErrStopped)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Flush still waiting after Stop's deadline")
		}
	}
	if h := a.Health(); h.Counted != 3 || h.SpansSent != 3 || h.StopUndrained != uint64(behind)+1 {
		t.Fatalf("Counted %d SpansSent %d StopUndrained %d, want 3, 3, %d (the slot and the spans behind it)",
			h.Counted, h.SpansSent, h.StopUndrained, behind+1)
	}
}

// TestClearDuringStopBehindAbandonedSlotDoesNotSpin: a Clear that finish
// takes (a boundary due with the previous bucket open) drains up to a slot
// no Publish will write and waits slotWait for it; on the closed ring it
// could not park on the slot and retried at once for all of slotWait, a
// core. Its Stop costs about what the same Stop without the Clear does
// (measured alike, before it), not slotWait more.
func TestClearDuringStopBehindAbandonedSlotDoesNotSpin(t *testing.T) {
	base, _ := stopBehindAbandonedSlot(t, false)
	cpu, h := stopBehindAbandonedSlot(t, true)
	t.Logf("Stop behind an abandoned slot: process CPU %v, %v with a Clear during it; health %+v", base, cpu, h)
	if h.Counted != 6 || h.Cleared != 6 || h.StopUndrained != 1 {
		t.Fatalf("health %+v: want all 6 counted, then cleared by finish (the 5 ahead of the slot drained by its Clear), the slot undrained", h)
	}
	if cpu > base+slotWait/2 {
		t.Errorf("process CPU %v during a Stop whose Clear waits %v behind an abandoned slot, %v without the Clear: the wait spins", cpu, slotWait, base)
	}
}

// stopBehindAbandonedSlot publishes a span, lets it be counted, queues 5
// more and a slot no Publish writes behind them, and stops the aggregator,
// calling Clear once the inbox is closed if clear; it returns the process
// CPU the Stop took and the health after it. Once the inbox is closed each
// clock reading is an interval further: finish crosses a boundary, and its
// first batch finds the next one due with the previous bucket open, which
// takes a pending Clear.
func stopBehindAbandonedSlot(t *testing.T, clear bool) (time.Duration, Health) {
	ag := statstest.New()
	defer ag.Close()
	var called atomic.Bool
	var jumps atomic.Int64
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, InboxSize: 64, BucketInterval: time.Hour}, func(a *Aggregator) {
		a.cons.clock = func() time.Time {
			if !a.inbox.Closed() {
				return time.Now()
			}
			if clear && !called.Swap(true) {
				a.Clear()
			}
			return time.Now().Add(time.Duration(jumps.Add(1)) * time.Hour)
		}
	})
	s := raceSpan(0)
	if !a.Publish(&s) {
		t.Fatal("refused")
	}
	waitFor(t, "the first span counted", func() bool { return a.Health().Counted == 1 })
	time.Sleep(20 * time.Millisecond) // parked below the mark, on its period
	for i := range 5 {
		s := raceSpan(i)
		if !a.Publish(&s) {
			t.Fatal("refused")
		}
	}
	abandonSlot(t, a, 0)
	cpu0 := cputime.Process()
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	return cputime.Process() - cpu0, a.Health()
}
