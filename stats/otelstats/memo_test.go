// This file tests the memo: interned strings shared across spans, long keys
// kept within its bound, and a repeated route mapped without allocating.

package otelstats

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

// TestMemoReturnsSameStrings: a repeated route yields the very same string
// values (the aggregator's fast path), and an obfuscated query is computed
// once.
func TestMemoReturnsSameStrings(t *testing.T) {
	p := newProcessor(nil)
	spec := spanSpec{name: "q", kind: trace.SpanKindClient, attrs: []attribute.KeyValue{
		attribute.String("db.system", "mysql"), attribute.String("db.statement", "SELECT a FROM t WHERE b = 'x'"), attribute.String("db.name", "d")}}
	a, b := mapOne(t, p, svcRes, spec), mapOne(t, p, svcRes, spec)
	if a.Resource != "SELECT a FROM t WHERE b = ?" || b.Resource != a.Resource {
		t.Fatalf("resources %q %q", a.Resource, b.Resource)
	}
	if !sameString(a.Resource, b.Resource) || !sameString(a.Name, b.Name) || &a.PeerTags[0] != &b.PeerTags[0] {
		t.Fatal("a repeated route built new strings")
	}
}

// TestMemoLongKeys: a long attribute value (the SDK does not bound them)
// maps as any other, but is not kept in a memo: 4096 of them would
// otherwise hold gigabytes.
func TestMemoLongKeys(t *testing.T) {
	p := newProcessor(nil)
	long := strings.Repeat("h", 1<<20)
	sp := mapOne(t, p, svcRes, spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
		attribute.String("service.name", "S"+long), attribute.String("out.host", long)}})
	if sp.Service != "s"+long[:99] || !slices.Equal(sp.PeerTags, []string{"out.host:" + long}) {
		t.Fatalf("service of %d bytes, peer tags of %d; want the service cut to 100 and the value whole", len(sp.Service), len(sp.PeerTags))
	}
	for name, m := range map[string]*memo{"services": p.services, "names": p.names, "resources": p.resources, "peers": p.peers} {
		if n := memoBytes(m); n > 64<<10 {
			t.Errorf("%s memo holds %d bytes after one span", name, n)
		}
	}
}

// TestMemoRetainedHeap: spans whose values are long and all distinct (a
// service, peer tags, a route, SQL statements the agent's pass keeps or
// changes) leave a Processor holding at most its memos' tables of large
// entries, not memoSlots of them per memo.
func TestMemoRetainedHeap(t *testing.T) {
	// The large entries of a memo take at most memoLargeBytes, and one
	// more entry of at most a key and a value of resourceKeyLen bytes;
	// two memos at most per case (resources and firstRaw), and a MiB for
	// small entries, the service marks and the runtime's own.
	const bound = 2*(memoLargeBytes+2*resourceKeyLen) + 1<<20
	const spans = 20000
	pad := strings.Repeat("x", 3900)
	str := attribute.String
	for _, tc := range []struct {
		row   string
		kind  trace.SpanKind
		attrs func(i string) []attribute.KeyValue
		sql   bool
	}{
		{"service.name", trace.SpanKindServer, func(i string) []attribute.KeyValue {
			return []attribute.KeyValue{str("service.name", i+pad)}
		}, false},
		{"peer tags", trace.SpanKindClient, func(i string) []attribute.KeyValue {
			return []attribute.KeyValue{str("out.host", i+pad[:1900]), str("db.name", i+pad[:1900])}
		}, false},
		{"http.route", trace.SpanKindServer, func(i string) []attribute.KeyValue {
			return []attribute.KeyValue{str("http.method", "GET"), str("http.route", "/"+i+pad+pad[:1000])}
		}, false},
		{"sql", trace.SpanKindClient, func(i string) []attribute.KeyValue {
			return []attribute.KeyValue{str("db.system", "postgresql"), str("db.statement", "SELECT a FROM t"+i+pad[:1900]+" WHERE b = 1")}
		}, true},
		{"sql the agent's pass changes", trace.SpanKindClient, func(i string) []attribute.KeyValue {
			return []attribute.KeyValue{str("db.system", "postgresql"), str("db.statement", "SELECT 1 AS a, 2 AS b FROM t"+i+pad[:1900])}
		}, true},
	} {
		t.Run(tc.row, func(t *testing.T) {
			if tc.sql && raceOn {
				t.Skip("obfuscating the statements takes most of a minute under -race; one goroutine, nothing for it to find")
			}
			p := newProcessor(nil, WithSpanServiceNames())
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&fillOnEnd{p: p}))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tr := tp.Tracer("t")
			before := heapInUse()
			for i := range spans {
				_, s := tr.Start(context.Background(), "op", trace.WithSpanKind(tc.kind), trace.WithAttributes(tc.attrs(strconv.Itoa(i))...))
				s.End()
			}
			if n := heapInUse() - before; n > bound {
				t.Errorf("%d spans of distinct long values left %d KiB, want at most %d", spans, n>>10, bound>>10)
			}
			runtime.KeepAlive(p)
		})
	}
}

// heapInUse is the heap's live bytes after a collection.
func heapInUse() int {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int(m.HeapAlloc)
}

// TestMemoKeepsLongStatements: 256 distinct long statements (an ORM's
// SELECTs of 600 bytes and their obfuscation) put once are almost all
// found again, each miss being an obfuscation; 20 000 of 5 KB stay within
// memoLargeBytes, and the byte count the table keeps is its entries'
// exact size.
func TestMemoKeepsLongStatements(t *testing.T) {
	m := newMemo(memoMaxKey)
	pad := strings.Repeat("c, ", 200)
	key := func(i int) string { return "SELECT " + pad + strconv.Itoa(i) + " FROM t" }
	for i := range 256 {
		m.put(&memoEntry{key: key(i), val: key(i) + " ?"})
	}
	kept := 0
	for i := range 256 {
		if e := m.getS(key(i)); e != nil && e.val == key(i)+" ?" {
			kept++
		}
	}
	if kept < 230 {
		t.Errorf("%d of 256 long statements kept, want at least 230 (90 %%)", kept)
	}
	long := strings.Repeat("x", 2500)
	for i := range 20000 {
		k := strconv.Itoa(i) + long
		m.put(&memoEntry{key: k, val: k})
	}
	var large int
	for i := range m.large {
		if e := m.large[i].Load(); e != nil {
			large += e.size()
		}
	}
	if large > memoLargeBytes || int64(large) != m.largeBytes.Load() {
		t.Errorf("large entries hold %d bytes, counted %d; want the count exact and within %d", large, m.largeBytes.Load(), memoLargeBytes)
	}
}

func memoBytes(m *memo) (n int) {
	for _, slots := range [][]atomic.Pointer[memoEntry]{m.small[:], m.large[:]} {
		for i := range slots {
			if e := slots[i].Load(); e != nil {
				n += e.size()
			}
		}
	}
	return n
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafeData(a) == unsafeData(b))
}

// TestRepeatedRouteAllocatesNothing: once a route was seen, mapping it again
// allocates nothing, whatever case its values come in: the agent's
// lower-casing (NormalizeTagValue) of the parts of an operation name and
// of db.system is remembered, not redone per span.
func TestRepeatedRouteAllocatesNothing(t *testing.T) {
	p := newProcessor(nil)
	str := attribute.String
	for _, tc := range []struct {
		row  string
		spec spanSpec
		name string
	}{
		{"aws sdk client", spanSpec{name: "S3.GetObject", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("rpc.system", "aws-api"), str("rpc.service", "S3"), str("rpc.method", "GetObject")}}, "aws.s3.request"},
		{"messaging consumer", spanSpec{name: "jobs process", kind: trace.SpanKindConsumer, remote: true, attrs: []attribute.KeyValue{
			str("messaging.system", "AmazonSQS"), str("messaging.operation", "Process"), str("messaging.destination.name", "jobs")}}, "amazonsqs.process"},
		{"database client", spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("db.system", "PostgreSQL"), str("db.statement", "SELECT 1")}}, "postgresql.query"},
		{"operation.name attribute", spanSpec{name: "w", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			str("operation.name", "Worker.Run")}}, "worker.run"},
	} {
		t.Run(tc.row, func(t *testing.T) {
			s := endSpans(t, svcRes, tc.spec)[0]
			var sp stats.Span
			var b [scratchSize]byte
			if p.fill(&sp, s, b[:]); sp.Name != tc.name {
				t.Fatalf("name %q, want %q", sp.Name, tc.name)
			}
			if allocs := testing.AllocsPerRun(100, func() { p.fill(&sp, s, b[:]) }); allocs != 0 {
				t.Fatalf("%v allocations per span of a repeated route, want 0", allocs)
			}
		})
	}
}
