// This file pins the mapping's precedences and kind conditions that the
// other mapping tests leave open: which of two attributes of one concept
// wins, which span kinds a rule applies to, and the edges of the status
// codes, the measured flag and the duration.

package otelstats

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

// TestMappingPrecedence: each row's span maps to the name, resource, type,
// status codes, peer tags and flags the rules documented on the mapping's
// functions give it; "-" in want leaves a field unchecked, and so do nil
// peer tags ([]string{} wants none).
func TestMappingPrecedence(t *testing.T) {
	str, num := attribute.String, attribute.Int64
	type want struct {
		name, resource, typ, grpc string
		http                      uint32
		peerTags                  []string
		measured                  bool
	}
	for _, tc := range []struct {
		row  string
		spec spanSpec
		want want
	}{
		{"http.request.method wins over http.method", spanSpec{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("http.method", "POST"), str("http.request.method", "GET"), str("http.route", "/a")}},
			want{name: "http.server.request", resource: "GET /a", typ: "web"}},
		{"db.system.name wins over db.system", spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("db.system", "postgresql"), str("db.system.name", "redis"), str("db.query.text", "GET k")}},
			want{name: "redis.query", resource: "GET", typ: "redis"}},
		{"db.system names client spans only", spanSpec{name: "q", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("db.system", "postgresql")}},
			want{name: "server.request", resource: "q", typ: "web"}},
		{"messaging producer", spanSpec{name: "p", kind: trace.SpanKindProducer, local: true, attrs: []attribute.KeyValue{
			str("messaging.system", "kafka"), str("messaging.operation", "publish"), str("messaging.destination.name", "orders")}},
			want{name: "kafka.publish", resource: "publish orders", typ: "custom"}},
		{"messaging.destination wins over messaging.destination.name", spanSpec{name: "c", kind: trace.SpanKindConsumer, remote: true, attrs: []attribute.KeyValue{
			str("messaging.system", "kafka"), str("messaging.operation", "receive"),
			str("messaging.destination.name", "new"), str("messaging.destination", "old")}},
			want{name: "kafka.receive", resource: "receive old", typ: "custom"}},
		{"aws-api names client spans only", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("rpc.system", "aws-api"), str("rpc.service", "S3"), str("rpc.method", "GetObject")}},
			want{name: "aws_api.server.request", resource: "GetObject S3", typ: "web"}},
		{"aws-api client without rpc.service", spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("rpc.system", "aws-api")}},
			want{name: "aws.client.request", resource: "c", typ: "http"}},
		{"faas invoke needs provider and name", spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("faas.invoked_provider", "aws")}},
			want{name: "client.request", resource: "c", typ: "http"}},
		{"faas invoke", spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("faas.invoked_provider", "aws"), str("faas.invoked_name", "Resize")}},
			want{name: "aws.resize.invoke", resource: "c", typ: "http"}},
		{"faas.trigger names server spans only", spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("faas.trigger", "timer")}},
			want{name: "client.request", resource: "c", typ: "http"}},
		{"faas.trigger on a server", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("faas.trigger", "timer")}},
			want{name: "timer.invoke", resource: "s", typ: "web"}},
		{"network.protocol.name on a server", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("network.protocol.name", "amqp")}},
			want{name: "amqp.server.request", resource: "s", typ: "web"}},
		{"consumer without messaging", spanSpec{name: "c", kind: trace.SpanKindConsumer, remote: true},
			want{name: "Consumer", resource: "c", typ: "custom"}},
		{"span.type wins", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("span.type", "worker")}},
			want{name: "server.request", resource: "s", typ: "worker"}},
		{"valkey resource quantized", spanSpec{name: "GET session:1", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("span.type", "valkey")}},
			want{name: "client.request", resource: "GET", typ: "valkey"}},
		{"graphql", spanSpec{name: "g", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("graphql.operation.type", "query"), str("graphql.operation.name", "GetUser")}},
			want{name: "graphql.server.request", resource: "query GetUser", typ: "web"}},
		{"a statement without db.system is no resource", spanSpec{name: "work", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			str("db.statement", "SELECT 1")}},
			want{name: "Internal", resource: "work", typ: "custom"}},
		{"db.statement wins over db.query.text", spanSpec{name: "q", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("db.system", "postgresql"), str("db.query.text", "SELECT b FROM u"), str("db.statement", "SELECT a FROM t")}},
			want{name: "postgresql.query", resource: "SELECT a FROM t", typ: "sql"}},
		{"http.status_code wins over http.response.status_code", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			num("http.response.status_code", 503), num("http.status_code", 200)}},
			want{name: "-", resource: "-", typ: "-", http: 200}},
		{"negative status", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			num("http.response.status_code", -1)}},
			want{name: "-", resource: "-", typ: "-"}},
		{"non-integral status string", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("http.status_code", "200.5")}},
			want{name: "-", resource: "-", typ: "-"}},
		{"integral float status string", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("http.status_code", "404.0")}},
			want{name: "-", resource: "-", typ: "-", http: 404}},
		{"rpc.grpc.status_code wins over grpc.code", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			num("grpc.code", 3), num("rpc.grpc.status_code", 5)}},
			want{name: "-", resource: "-", typ: "-", grpc: "5"}},
		{"rpc.response.status_code under rpc.system grpc", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("rpc.system", "grpc"), num("rpc.response.status_code", 5)}},
			want{name: "-", resource: "-", typ: "-", grpc: "5"}},
		{"rpc.system.name other than grpc overrides rpc.system", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("rpc.system.name", "dubbo"), str("rpc.system", "grpc"), num("rpc.response.status_code", 5)}},
			want{name: "-", resource: "-", typ: "-"}},
		{"server spans have no peer tags", spanSpec{name: "s", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{
			str("_dd.base_service", "orig"), str("peer.service", "billing")}},
			want{name: "-", resource: "-", typ: "-", peerTags: []string{}}},
		{"peer.service normalized", spanSpec{name: "c", kind: trace.SpanKindClient, local: true, attrs: []attribute.KeyValue{
			str("peer.service", "Billing API")}},
			want{name: "-", resource: "-", typ: "-", peerTags: []string{"peer.service:billing_api"}}},
		{"_dd.measured 1", spanSpec{name: "i", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			num("_dd.measured", 1)}},
			want{name: "-", resource: "-", typ: "-", measured: true}},
		{"_dd.measured other than 1", spanSpec{name: "i", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			num("_dd.measured", 2)}},
			want{name: "-", resource: "-", typ: "-"}},
	} {
		t.Run(tc.row, func(t *testing.T) {
			got := mapOne(t, newProcessor(nil), svcRes, tc.spec)
			for _, f := range []struct{ field, got, want string }{
				{"name", got.Name, tc.want.name}, {"resource", got.Resource, tc.want.resource},
				{"type", got.Type, tc.want.typ}, {"grpc status", got.GRPCStatusCode, tc.want.grpc},
			} {
				if f.want != "-" && f.got != f.want {
					t.Errorf("%s %q, want %q", f.field, f.got, f.want)
				}
			}
			if got.HTTPStatusCode != tc.want.http {
				t.Errorf("http status %d, want %d", got.HTTPStatusCode, tc.want.http)
			}
			if tc.want.peerTags != nil && !slices.Equal(got.PeerTags, tc.want.peerTags) {
				t.Errorf("peer tags %q, want %q", got.PeerTags, tc.want.peerTags)
			}
			if got.Measured != tc.want.measured {
				t.Errorf("measured %v, want %v", got.Measured, tc.want.measured)
			}
		})
	}
}

// TestBaseServiceWithoutPeerTagKeys: with no peer-tag keys, an internal
// span's _dd.base_service is no peer tag either, as the agent's is none
// when no peer tag is aggregated.
func TestBaseServiceWithoutPeerTagKeys(t *testing.T) {
	spec := spanSpec{name: "i", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{attribute.String("_dd.base_service", "orig")}}
	if got := mapOne(t, newProcessor(nil), svcRes, spec); !slices.Equal(got.PeerTags, []string{"_dd.base_service:orig"}) {
		t.Fatalf("default keys: peer tags %q, want [_dd.base_service:orig]", got.PeerTags)
	}
	if got := mapOne(t, newProcessor(nil, WithPeerTagKeys()), svcRes, spec); got.PeerTags != nil {
		t.Fatalf("no keys: peer tags %q, want none", got.PeerTags)
	}
}

// TestSpanEndedBeforeStart: a span whose end timestamp precedes its start
// has a duration of 0, never a negative one.
func TestSpanEndedBeforeStart(t *testing.T) {
	rec := &recorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(resource.NewWithAttributes("", svcRes...)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	start := time.Unix(1700000000, 0)
	_, s := tp.Tracer("t").Start(context.Background(), "x", trace.WithTimestamp(start))
	s.End(trace.WithTimestamp(start.Add(-time.Second)))
	var sp stats.Span
	var b [scratchSize]byte
	newProcessor(nil).fill(&sp, rec.spans[0], b[:])
	if sp.Start != start.UnixNano() || sp.Duration != 0 {
		t.Fatalf("start %d duration %d, want %d and 0", sp.Start, sp.Duration, start.UnixNano())
	}
}

// TestEmptyStringsFallBackToResource: an empty string on the span does not
// hide the resource's value (the accessor's GetString), and an empty
// resource service.name is the default service: a span naming that
// default under a local parent of the same resource is not top-level.
func TestEmptyStringsFallBackToResource(t *testing.T) {
	p := newProcessor(nil)
	got := mapOne(t, p, svcRes, spanSpec{name: "i", kind: trace.SpanKindInternal, local: true,
		attrs: []attribute.KeyValue{attribute.String("service.name", "")}})
	if got.Service != "checkout" || got.TopLevel {
		t.Fatalf("empty span service.name: service %q top-level %v, want checkout, false", got.Service, got.TopLevel)
	}
	got = mapOne(t, p, []attribute.KeyValue{attribute.String("service.name", "")}, spanSpec{name: "i", kind: trace.SpanKindInternal, local: true,
		attrs: []attribute.KeyValue{attribute.String("service.name", defaultService)}})
	if got.Service != defaultService || got.TopLevel {
		t.Fatalf("empty resource service.name: service %q top-level %v, want %s, false", got.Service, got.TopLevel, defaultService)
	}
}
