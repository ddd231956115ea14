// This file tests the memo: interned strings shared across spans, long keys
// kept within its bound, and a repeated route mapped without allocating.

package otelstats

import (
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
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

func memoBytes(m *memo) (n int) {
	for i := range m.slots {
		if e := m.slots[i].Load(); e != nil {
			n += len(e.key) + len(e.val)
			for _, t := range e.tags {
				n += len(t)
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
