// This file tests that the memo never answers for another key sharing a
// slot, and that its small table holds only entries within memoSmallEntry
// counting their tags.

package otelstats

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

// TestMemoCollisionsRecompute: more distinct services and routes than a
// memo has slots (so some share one) each map to their own values, on
// first sight and again.
func TestMemoCollisionsRecompute(t *testing.T) {
	const n = memoSlots + memoSlots/4
	rec := &recorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	for i := range n {
		id := strconv.Itoa(i)
		_, s := tr.Start(context.Background(), "r", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("service.name", "svc"+id), attribute.String("http.request.method", "GET"), attribute.String("http.route", "/r/"+id)))
		s.End()
	}
	p := newProcessor(nil)
	var sp stats.Span
	var b [scratchSize]byte
	for pass := range 2 {
		bad := 0
		for i, s := range rec.spans {
			p.fill(&sp, s, b[:])
			id := strconv.Itoa(i)
			if sp.Service != "svc"+id || sp.Resource != "GET /r/"+id {
				if bad++; bad <= 3 {
					t.Errorf("pass %d span %d: service %q resource %q, want svc%s, GET /r/%s", pass, i, sp.Service, sp.Resource, id, id)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("pass %d: %d of %d spans mapped to another span's values", pass, bad, n)
		}
	}
}

// TestMemoSmallEntriesCountTags: a peer-tag set whose key fits the small
// table but whose tags take it past memoSmallEntry is kept among the large
// entries, counted whole, so each table stays within its bound in bytes.
func TestMemoSmallEntriesCountTags(t *testing.T) {
	p := newProcessor(nil)
	val := strings.Repeat("h", 400) // key 406 bytes, tags 409: 815 in all
	got := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindClient, local: true,
		attrs: []attribute.KeyValue{attribute.String("out.host", val)}})
	if len(got.PeerTags) != 1 || got.PeerTags[0] != "out.host:"+val {
		t.Fatalf("peer tags %d, want out.host and its %d-byte value", len(got.PeerTags), len(val))
	}
	whole := func(e *memoEntry) int {
		n := len(e.key) + len(e.val)
		for _, tag := range e.tags {
			n += len(tag)
		}
		return n
	}
	large := 0
	for i := range p.peers.small {
		if e := p.peers.small[i].Load(); e != nil && whole(e) > memoSmallEntry {
			t.Errorf("small slot %d holds an entry of %d bytes, past %d", i, whole(e), memoSmallEntry)
		}
		if e := p.peers.large[i].Load(); e != nil {
			large += whole(e)
		}
	}
	if large != 406+409 || p.peers.largeBytes.Load() != int64(large) {
		t.Fatalf("large entries hold %d bytes, counted %d; want 815 and the count exact", large, p.peers.largeBytes.Load())
	}
}
