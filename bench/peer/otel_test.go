// This file tests otelstats against the agent's OTLP path: the groups the
// Processor makes of OTel spans, on fixed and random rows, equal those the
// agent computes of the same spans.

package peer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	"github.com/DataDog/datadog-agent/pkg/opentelemetry-mapping-go/otlp/attributes"
	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/DataDog/datadog-agent/pkg/trace/config"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil"
	"github.com/DataDog/datadog-agent/pkg/trace/transform"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/otelstats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// otelRow is one span of the equality table, ended under a provider whose
// resource has service.name "shop" unless res says otherwise.
type otelRow struct {
	name  string
	kind  trace.SpanKind
	attrs []attribute.KeyValue
	res   []attribute.KeyValue
	// "": a root; "local": a child of a local span; "remote": of a remote
	// parent; "dropped": of a local span the sampler dropped; "detached":
	// of a local span, through a context holding its SpanContext alone.
	under  string
	parent []attribute.KeyValue // the local parent's attributes
	err    bool
	pad    int // filler attributes set before attrs, as a span with many attributes has
}

var (
	str = attribute.String
	num = attribute.Int
)

// otelRows covers server, client, DB, messaging, gRPC and internal spans,
// with the old and the current semantic-convention attribute names.
var otelRows = []otelRow{
	// HTTP server and client, old and new names.
	{name: "GET /users/{id}", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("http.request.method", "GET"), str("http.route", "/users/{id}"), num("http.response.status_code", 200)}},
	{name: "POST", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("http.method", "POST"), str("http.route", "/pay"), num("http.status_code", 503)}, err: true},
	{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("http.method", "PUT"), str("http.status_code", "201")}, under: "remote"},
	{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("http.request.method", "_OTHER"), num("http.response.status_code", -1)}},
	{name: "GET", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("http.request.method", "GET"), str("url.template", "/v1/items/{id}"), str("server.address", "api.example.com"), num("server.port", 443), num("http.response.status_code", 404)}},
	{name: "GET", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("http.method", "GET"), str("net.peer.name", "10.2.3.4"), str("peer.service", "Billing API"), num("http.status_code", 200)}},
	{name: "h2", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("network.protocol.name", "HTTP")}},
	{name: "c", kind: trace.SpanKindClient, under: "local"},
	// Databases: SQL obfuscated, Redis quantized, others as given.
	{name: "SELECT", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "postgresql"), str("db.statement", "SELECT * FROM users WHERE id = 42 AND name = 'bob'"), str("db.name", "shop"), str("net.peer.name", "db.internal")}},
	{name: "SELECT", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system.name", "mysql"), str("db.query.text", "SELECT a, b FROM t WHERE c IN (1, 2, 3)"), str("db.namespace", "inventory"), str("server.address", "10.0.0.7")}},
	{name: "q", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "postgresql"), str("db.statement", "SELECT ' FROM")}},
	{name: "GET", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "redis"), str("db.statement", "GET session:abc123"), str("db.instance", "0")}},
	{name: "HMSET", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system.name", "redis"), str("db.query.text", "HMSET k f1 v1 f2 v2")}},
	// Pipelines, one command a line: the agent's pass on receipt would
	// re-quantize "GET SET" to "GET".
	{name: "pipeline", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "redis"), str("db.statement", "GET a\nSET b c")}},
	{name: "pipeline", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "redis"), str("db.statement", "GET x\nSET y z")}},
	{name: "pipeline", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "redis"), str("db.statement", "MULTI\nINCR n\nEXEC")}},
	{name: "find", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "mongodb"), str("db.statement", `{"find": "users"}`), str("db.name", "app")}},
	{name: "query", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "cassandra"), str("db.statement", "SELECT * FROM ks.t WHERE k = 1"), str("db.cassandra.contact.points", "10.0.0.1,10.0.0.2")}},
	{name: "op", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "SomeNewDB")}},
	{name: "op", kind: trace.SpanKindInternal, under: "local", attrs: []attribute.KeyValue{str("db.system", "postgresql"), str("db.statement", "SELECT 1"), num("_dd.measured", 1)}},
	// Messaging, old and new destination names.
	{name: "orders publish", kind: trace.SpanKindProducer, under: "local", attrs: []attribute.KeyValue{str("messaging.system", "kafka"), str("messaging.operation", "publish"), str("messaging.destination", "orders"), str("messaging.kafka.bootstrap.servers", "k1:9092")}},
	{name: "orders receive", kind: trace.SpanKindConsumer, under: "remote", attrs: []attribute.KeyValue{str("messaging.system", "rabbitmq"), str("messaging.operation", "receive"), str("messaging.destination.name", "orders")}},
	{name: "sqs", kind: trace.SpanKindConsumer, attrs: []attribute.KeyValue{str("messaging.system", "AmazonSQS"), str("messaging.operation", "process"), str("messaging.destination.name", "jobs")}, err: true},
	// gRPC and other RPC, codes as numbers, strings and names.
	{name: "shop.Cart/Add", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("rpc.system", "grpc"), str("rpc.service", "shop.Cart"), str("rpc.method", "Add"), num("rpc.grpc.status_code", 0)}},
	{name: "shop.Cart/Get", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("rpc.system", "grpc"), str("rpc.service", "shop.Cart"), str("rpc.method", "Get"), str("rpc.grpc.status_code", "NOT_FOUND"), str("server.address", "cart:50051")}},
	{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("rpc.system", "grpc"), str("rpc.method", "Ping"), str("rpc.response.status_code", "DEADLINE_EXCEEDED")}, err: true},
	{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("rpc.system.name", "grpc"), str("rpc.method", "Ping"), num("rpc.response.status_code", 14)}},
	{name: "x", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("rpc.system", "grpc"), str("rpc.system.name", "connect"), str("rpc.method", "P"), str("rpc.response.status_code", "5")}},
	{name: "S3.GetObject", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("rpc.system", "aws-api"), str("rpc.service", "S3"), str("rpc.method", "GetObject"), str("aws.s3.bucket", "media")}},
	{name: "lambda", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("faas.invoked_provider", "aws"), str("faas.invoked_name", "resize")}},
	{name: "trigger", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("faas.trigger", "http")}},
	{name: "graphql", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("graphql.operation.type", "query"), str("graphql.operation.name", "GetUser")}},
	// Past the 255th attribute (a provider may raise the SDK's limit of 128):
	// the agent reads every attribute.
	{name: "GET", kind: trace.SpanKindServer, pad: 300, attrs: []attribute.KeyValue{str("http.request.method", "GET"), str("http.route", "/big"), num("http.response.status_code", 503)}},
	// Internal spans and the Datadog attributes.
	{name: "compute tax", kind: trace.SpanKindInternal, under: "local"},
	{name: "compute tax", kind: trace.SpanKindInternal, under: "local", attrs: []attribute.KeyValue{num("_dd.measured", 1)}},
	{name: "job", kind: trace.SpanKindInternal},
	// A service override: the agent's one peer tag of an internal span
	// (peerTagKeysToAggregateForSpan), none of a server span.
	{name: "work", kind: trace.SpanKindInternal, under: "local", attrs: []attribute.KeyValue{num("_dd.measured", 1), str("_dd.base_service", "Web Base"), str("db.system", "redis")}},
	{name: "job", kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{str("_dd.base_service", "web-base")}},
	{name: "job", kind: trace.SpanKindUnspecified, attrs: []attribute.KeyValue{str("_dd.base_service", "web-base")}},
	{name: "serve", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("_dd.base_service", "web-base"), str("peer.service", "db")}},
	{name: "override", kind: trace.SpanKindServer, attrs: []attribute.KeyValue{str("service.name", "Tax Engine!"), str("operation.name", "Web.Request"), str("resource.name", "custom res"), str("span.type", "worker")}},
	{name: "nosvc", kind: trace.SpanKindServer, res: []attribute.KeyValue{str("deployment.environment.name", "prod")}},
	{name: "ressvc", kind: trace.SpanKindClient, under: "local", res: []attribute.KeyValue{str("service.name", "Shop Front"), str("db.system", "redis")}, attrs: []attribute.KeyValue{str("db.statement", "DEL a b")}},
	// A span's own service under a local parent of the resource's: top-level
	// (ComputeTopLevel), so an internal span is counted; the same service
	// once normalized is not.
	{name: "work", kind: trace.SpanKindInternal, under: "local", attrs: []attribute.KeyValue{str("service.name", "worker")}},
	{name: "work", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("service.name", "Shop")}},
	// A local parent under its own service.name: the child's service is
	// compared with the parent's, not the resource's.
	{name: "call", kind: trace.SpanKindClient, under: "local", parent: []attribute.KeyValue{str("service.name", "Worker")}},
	{name: "step", kind: trace.SpanKindClient, under: "local", parent: []attribute.KeyValue{str("service.name", "Worker")}, attrs: []attribute.KeyValue{str("service.name", "worker")}},
	// A local parent the sampler dropped is not exported: the agent finds
	// the child's parent outside the chunk.
	{name: "handler", kind: trace.SpanKindClient, under: "dropped"},
	{name: "step", kind: trace.SpanKindInternal, under: "dropped", attrs: []attribute.KeyValue{num("_dd.measured", 1)}},
	// A sampled local parent known by its context alone, as work detached
	// from a request's cancellation has: exported, found in the chunk.
	{name: "GET", kind: trace.SpanKindClient, under: "detached", attrs: []attribute.KeyValue{str("http.request.method", "GET")}},
	{name: "async work", kind: trace.SpanKindInternal, under: "detached"},
	{name: "call", kind: trace.SpanKindClient, under: "detached", parent: []attribute.KeyValue{str("service.name", "Worker")}},
	// A db.system that normalizes to nothing is no db.system.
	{name: "a", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{str("db.system", "!!!")}},
	// Float peer tags, formatted as pdata formats them.
	{name: "f", kind: trace.SpanKindClient, under: "local", attrs: []attribute.KeyValue{attribute.Float64("peer.service", 1e21), attribute.Float64("out.host", 1e-7), attribute.Float64("db.instance", 2.5)}},
}

// dbTypeRows adds a client span for every db.system value the agent knows.
func dbTypeRows() []otelRow {
	var rows []otelRow
	for db := range attributes.DBTypes {
		rows = append(rows, otelRow{name: "q", kind: trace.SpanKindClient, attrs: []attribute.KeyValue{str("db.system", db)}})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].attrs[0].Value.AsString() < rows[j].attrs[0].Value.AsString() })
	return rows
}

// otelRecorder keeps every span that ends, parents included, and passes
// the starts and ends on to proc as they happen: the processor's marks
// live from a span's start to its end, and a slot collision between two
// spans in flight at once costs a mark (so, were all the spans ended
// before the processor saw them, one round in a few would lose one).
type otelRecorder struct {
	spans []sdktrace.ReadOnlySpan
	proc  sdktrace.SpanProcessor
}

func (r *otelRecorder) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if r.proc != nil {
		r.proc.OnStart(ctx, s)
	}
}

func (r *otelRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.spans = append(r.spans, s)
	if r.proc != nil {
		r.proc.OnEnd(s)
	}
}

func (r *otelRecorder) Shutdown(context.Context) error   { return nil }
func (r *otelRecorder) ForceFlush(context.Context) error { return nil }

// endRows ends each row's span (and its local parent) under a provider of
// its own resource; proc, if not nil, sees every span start and end.
func endRows(rows []otelRow, proc sdktrace.SpanProcessor) []sdktrace.ReadOnlySpan {
	rec := &otelRecorder{proc: proc}
	providers := map[string]*sdktrace.TracerProvider{}
	for i, r := range rows {
		res := r.res
		if res == nil {
			res = []attribute.KeyValue{str("service.name", "shop")}
		}
		set := attribute.NewSet(res...)
		key := set.Encoded(attribute.DefaultEncoder())
		tp := providers[key]
		if tp == nil {
			limits := sdktrace.NewSpanLimits()
			limits.AttributeCountLimit = -1 // unlimited, for the rows with pad
			tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(resource.NewWithAttributes("", res...)),
				sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(dropParents{}))
			providers[key] = tp
		}
		tr := tp.Tracer("equality")
		ctx := context.Background()
		var parent trace.Span
		switch r.under {
		case "remote":
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{byte(i + 1)}, SpanID: trace.SpanID{byte(i + 1)}, TraceFlags: trace.FlagsSampled, Remote: true}))
		case "local":
			ctx, parent = tr.Start(ctx, "parent "+r.name, trace.WithAttributes(r.parent...))
		case "dropped":
			ctx, parent = tr.Start(ctx, droppedPrefix+r.name)
		case "detached":
			ctx, parent = tr.Start(ctx, "parent "+r.name, trace.WithAttributes(r.parent...))
			ctx = trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx))
		}
		start := time.Now()
		_, s := tr.Start(ctx, r.name, trace.WithSpanKind(r.kind), trace.WithTimestamp(start))
		for j := range r.pad {
			s.SetAttributes(num(fmt.Sprint("pad.", j), j))
		}
		s.SetAttributes(r.attrs...)
		if r.err {
			s.SetStatus(codes.Error, "failed")
		}
		s.End(trace.WithTimestamp(start.Add(time.Duration(i+1) * time.Millisecond)))
		if parent != nil {
			parent.End()
		}
	}
	for _, tp := range providers {
		_ = tp.Shutdown(context.Background())
	}
	return rec.spans
}

// droppedPrefix starts the names of the spans dropParents drops.
const droppedPrefix = "dropped parent "

// dropParents drops the spans named with droppedPrefix and samples every
// other, as a sampler filtering spans by name (not parent-based) does.
type dropParents struct{}

func (dropParents) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if strings.HasPrefix(p.Name, droppedPrefix) {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (dropParents) Description() string { return "dropParents" }

// toPtrace converts the spans as an OTLP exporter would: one ResourceSpans
// per resource, one ScopeSpans per scope.
func toPtrace(spans []sdktrace.ReadOnlySpan) ptrace.Traces {
	td := ptrace.NewTraces()
	byRes := map[*resource.Resource]ptrace.ScopeSpans{}
	for _, s := range spans {
		ss, ok := byRes[s.Resource()]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			putAttrs(rs.Resource().Attributes(), s.Resource().Attributes())
			ss = rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(s.InstrumentationScope().Name)
			byRes[s.Resource()] = ss
		}
		ps := ss.Spans().AppendEmpty()
		ps.SetName(s.Name())
		ps.SetTraceID(pcommon.TraceID(s.SpanContext().TraceID()))
		ps.SetSpanID(pcommon.SpanID(s.SpanContext().SpanID()))
		if p := s.Parent(); p.SpanID().IsValid() {
			ps.SetParentSpanID(pcommon.SpanID(p.SpanID()))
		}
		ps.SetKind(ptrace.SpanKind(s.SpanKind()))
		ps.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime()))
		ps.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime()))
		if s.Status().Code == codes.Error {
			ps.Status().SetCode(ptrace.StatusCodeError)
		}
		putAttrs(ps.Attributes(), s.Attributes())
	}
	return td
}

func putAttrs(m pcommon.Map, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		k := string(kv.Key)
		switch kv.Value.Type() {
		case attribute.STRING:
			m.PutStr(k, kv.Value.AsString())
		case attribute.INT64:
			m.PutInt(k, kv.Value.AsInt64())
		case attribute.FLOAT64:
			m.PutDouble(k, kv.Value.AsFloat64())
		case attribute.BOOL:
			m.PutBool(k, kv.Value.AsBool())
		case attribute.STRINGSLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsStringSlice() {
				sl.AppendEmpty().SetStr(v)
			}
		case attribute.INT64SLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsInt64Slice() {
				sl.AppendEmpty().SetInt(v)
			}
		case attribute.FLOAT64SLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsFloat64Slice() {
				sl.AppendEmpty().SetDouble(v)
			}
		case attribute.BOOLSLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsBoolSlice() {
				sl.AppendEmpty().SetBool(v)
			}
		default:
			m.PutStr(k, kv.Value.Emit())
		}
	}
}

// groupRow is what both sides compare: a group's key and counts.
type groupRow struct {
	Service, Name, Resource, Type, SpanKind, GRPC string
	Status                                        uint32
	Root                                          int32
	PeerTags                                      string
	Hits, Errors, TopLevel                        uint64
}

func (g groupRow) String() string {
	return fmt.Sprintf("%s|%s|%s|%s|%s|http=%d|grpc=%s|root=%d|peer=[%s] hits=%d err=%d top=%d",
		g.Service, g.Name, g.Resource, g.Type, g.SpanKind, g.Status, g.GRPC, g.Root, g.PeerTags, g.Hits, g.Errors, g.TopLevel)
}

// agentGroups computes the groups as the agent does from OTLP: index the
// spans, the minimal conversion (GetOTelService, GetOTelOperationNameV2,
// GetOTelResourceV2, GetOTelSpanType and the semantics lookups) with its
// default peer-tag keys, the normalizer's empty resource, the obfuscation
// of SQL and Redis resources,
// top-level by ComputeTopLevel over each trace's spans (its default, not by
// kind), and the concentrator.
func agentGroups(t *testing.T, td ptrace.Traces) map[string]groupRow {
	conf := config.New()
	peerKeys := conf.ConfiguredPeerTags()
	spanByID, resByID, scopeByID := transform.IndexOTelSpans(td)
	obf := obfuscate.NewObfuscator(obfuscate.Config{})
	now := time.Now()
	sc := newSpanConcentrator(now.Add(-time.Minute))
	chunks := map[uint64]pb.Trace{}
	for id, span := range spanByID {
		dd := transform.OtelSpanToDDSpanMinimal(span, resByID[id], scopeByID[id], false, false, conf, peerKeys, nil)
		if dd.Resource == "" { // the agent's normalizer, which Process runs before obfuscation
			dd.Resource = dd.Name
		}
		switch dd.Type { // the agent's obfuscateSpanInternal, by type
		case "sql", "cassandra":
			if _, err := transform.ObfuscateSQLSpan(obf, dd); err != nil {
				dd.Resource = transform.TextNonParsable
			}
		case "redis", "valkey":
			dd.Resource = obf.QuantizeRedisString(dd.Resource)
		}
		tid := transform.OTelTraceIDToUint64(span.TraceID())
		chunks[tid] = append(chunks[tid], dd)
	}
	for _, chunk := range chunks {
		// What the agent's Process does with OTLP spans (top-level not
		// computed by the client): a root, a parent not in the chunk, or a
		// parent under another service.
		traceutil.ComputeTopLevel(chunk)
		for _, dd := range chunk {
			ss, ok := sc.NewStatSpanFromPB(dd, peerKeys, nil)
			if !ok {
				continue
			}
			sc.AddSpan(ss, agentstats.PayloadAggregationKey{Env: "test"}, "", nil, "")
		}
	}
	out := map[string]groupRow{}
	for _, p := range sc.Flush(now.Add(time.Hour).UnixNano(), true) {
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				addGroup(out, groupRow{g.Service, g.Name, g.Resource, g.Type, g.SpanKind, g.GRPCStatusCode, g.HTTPStatusCode,
					int32(g.IsTraceRoot), joinSorted(g.PeerTags), g.Hits, g.Errors, g.TopLevelHits})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the agent computed no groups")
	}
	return out
}

func joinSorted(tags []string) string {
	s := slices.Clone(tags)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// addGroup adds g to the group with its key (buckets may split a group).
func addGroup(m map[string]groupRow, g groupRow) {
	k := g
	k.Hits, k.Errors, k.TopLevel = 0, 0, 0
	key := k.String()
	if o, ok := m[key]; ok {
		g.Hits += o.Hits
		g.Errors += o.Errors
		g.TopLevel += o.TopLevel
	}
	m[key] = g
}

// processorGroups ends the rows' spans through otelstats.Processor, a
// stats Aggregator and the fake agent, and returns the spans and the
// decoded groups as the agent keys them once received: its processStats
// obfuscates the resources of SQL and Redis groups again (no
// Datadog-Obfuscation-Version header is sent).
func processorGroups(t *testing.T, rows []otelRow) ([]sdktrace.ReadOnlySpan, map[string]groupRow) {
	agent := statstest.New()
	defer agent.Close()
	agg, err := stats.New(stats.Config{AgentURL: agent.URL(), PeerTagKeys: agentPeerTagKeys()})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	p := otelstats.NewProcessor(agg, otelstats.WithSpanServiceNames()) // parents with service.name from the first row
	spans := endRows(rows, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	obf := obfuscate.NewObfuscator(obfuscate.Config{})
	out := map[string]groupRow{}
	for _, r := range statstest.Accepted(agent.Requests()) {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				addGroup(out, groupRow{g.Service, g.Name, receivedResource(obf, g.Type, g.DBType, g.Resource), g.Type, g.SpanKind, g.GRPCStatusCode, g.HTTPStatusCode,
					int32(g.IsTraceRoot), joinSorted(g.PeerTags), g.Hits, g.Errors, g.TopLevelHits})
			}
		}
	}
	return spans, out
}

// receivedResource is the agent's obfuscateStatsGroup (agent/obfuscate.go,
// v0.85.4), which processStats runs on every group it receives.
func receivedResource(obf *obfuscate.Obfuscator, typ, dbType, res string) string {
	switch typ {
	case "sql", "cassandra":
		oq, err := obf.ObfuscateSQLStringForDBMS(res, dbType)
		if err != nil {
			return transform.TextNonParsable
		}
		return oq.Query
	case "redis", "valkey":
		return obf.QuantizeRedisString(res)
	}
	return res
}

// TestOTelGroupsMatchAgent: for every row, the groups the processor
// produces equal what the agent's own OTLP functions compute for the same
// spans converted to ptrace — key fields, hits, errors and top-level hits.
func TestOTelGroupsMatchAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []otelRow
	}{{"table", otelRows}, {"db-types", dbTypeRows()}} {
		t.Run(tc.name, func(t *testing.T) {
			spans, got := processorGroups(t, tc.rows)
			want := agentGroups(t, toPtrace(spans))
			for k, w := range want {
				if g, ok := got[k]; !ok {
					t.Errorf("agent group missing from the processor's:\n  %v", w)
				} else if g != w {
					t.Errorf("counts differ for %s:\n  agent     %v\n  processor %v", k, w, g)
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("processor group the agent does not have:\n  %v", g)
				}
			}
			if !t.Failed() {
				t.Logf("%d groups equal", len(want))
			}
		})
	}
}

// TestOTelDefaultPeerTagKeys: the processor's default keys are the agent's.
func TestOTelDefaultPeerTagKeys(t *testing.T) {
	if want := config.New().ConfiguredPeerTags(); !slices.Equal(otelstats.DefaultPeerTagKeys, want) {
		t.Fatalf("DefaultPeerTagKeys\n  %q\nagent\n  %q", otelstats.DefaultPeerTagKeys, want)
	}
}

var _ = pb.Trilean_TRUE

// randomKeys are the attribute keys the random rows draw from: the
// mapping's own, a few peer-tag keys, and span.kind (which must not change
// the kind).
var randomKeys = []string{"service.name", "operation.name", "resource.name", "span.type", "http.request.method", "http.method",
	"url.template", "http.route", "http.status_code", "http.response.status_code", "messaging.operation", "messaging.destination",
	"messaging.destination.name", "messaging.system", "rpc.method", "rpc.service", "rpc.system", "rpc.system.name",
	"graphql.operation.type", "graphql.operation.name", "db.system.name", "db.system", "db.statement", "db.query.text",
	"faas.invoked_provider", "faas.invoked_name", "faas.trigger", "network.protocol.name", "rpc.grpc.status_code", "grpc.code",
	"rpc.grpc.status.code", "grpc.status.code", "rpc.response.status_code", "_dd.measured", "_dd.base_service", "peer.service",
	"server.address", "db.name", "net.peer.name", "out.host", "db.instance", "span.kind", "http.server_name", "network.destination.ip"}

var randomValues = []string{"", "GET", "_OTHER", "grpc", "redis", "postgresql", "aws-api", "kafka", "200", "404.0", "5", "NOT_FOUND",
	"StatusCode.UNAVAILABLE", "1", "SELECT * FROM t WHERE a = 1", "Hello World", "10.1.2.3", "x y", "query", "My.Svc", "-3", "1e3",
	" 12", "HTTP", "!!!", "Ünï", "sql", "cassandra", "valkey", "SET k v", "2001:db8::1", "10.0.0.1:5432,10.0.0.2", "UPDATE x SET y = $1", "\xff\xfeab", "a\x00b", "  "}

// Long values go only to span names and to keys that are no peer tags:
// Publish bounds a peer tag at stats.MaxTagLen and a type at MaxTypeLen,
// where the concentrator alone does not.
var (
	randomLongValues = []string{strings.Repeat("é", 3000), strings.Repeat("select a from b where c = 'd' ", 200)}
	randomLongKeys   = []string{"db.statement", "db.query.text", "resource.name", "http.route", "url.template", "operation.name"}
)

func randomAttrs(r *rand.Rand, n int) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	for range n {
		k := randomKeys[r.IntN(len(randomKeys))]
		switch r.IntN(8) {
		case 0:
			kvs = append(kvs, attribute.Int(k, []int{0, 1, 5, 200, 404, -1, 1 << 33}[r.IntN(7)]))
		case 1:
			kvs = append(kvs, attribute.Float64(k, []float64{1, 2.5, 404, 0}[r.IntN(4)]))
		case 2:
			kvs = append(kvs, attribute.Bool(k, r.IntN(2) == 0))
		case 3:
			kvs = append(kvs, attribute.StringSlice(k, []string{"a", "b"}))
		case 4:
			kvs = append(kvs, str(randomLongKeys[r.IntN(len(randomLongKeys))], randomLongValues[r.IntN(len(randomLongValues))]))
		default:
			kvs = append(kvs, str(k, randomValues[r.IntN(len(randomValues))]))
		}
	}
	return kvs
}

// TestOTelRandomGroupsMatchAgent is TestOTelGroupsMatchAgent over random
// rows: the mapping's keys on the span and on the resource, of every
// attribute type, with values that collide across concepts.
func TestOTelRandomGroupsMatchAgent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	kinds := []trace.SpanKind{trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer}
	for round := range 100 {
		var rows []otelRow
		for range 30 {
			res := randomAttrs(r, r.IntN(4))
			if r.IntN(2) == 0 {
				res = append(res, str("service.name", "shop"))
			}
			name := randomValues[r.IntN(len(randomValues))]
			if r.IntN(10) == 0 {
				name = randomLongValues[r.IntN(len(randomLongValues))]
			}
			rows = append(rows, otelRow{name: name, kind: kinds[r.IntN(len(kinds))], attrs: randomAttrs(r, r.IntN(8)), res: res,
				under: []string{"", "local", "remote", "dropped"}[r.IntN(4)], err: r.IntN(3) == 0, parent: randomAttrs(r, r.IntN(3))})
		}
		spans, got := processorGroups(t, rows)
		want := agentGroups(t, toPtrace(spans))
		for k, w := range want {
			if g := got[k]; g != w {
				t.Errorf("round %d:\n  agent     %.400v\n  processor %.400v", round, w, g)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("round %d: processor group the agent does not have:\n  %.400v", round, g)
			}
		}
		if t.Failed() {
			return
		}
	}
}
