// This file holds the workloads: the span streams every benchmark
// publishes (Workload), walked by one Producer per goroutine.

package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats"
)

// Producers is the number of publishing goroutines every benchmark runs
// (dd-trace-java's JMH suite runs @Threads(8)).
const Producers = 8

// Workload dimensions. The high-cardinality sizes are far above every
// cardinality budget and the table cap, which is the point.
const (
	// SteadyStateKeys is the number of distinct keys of SteadyState and
	// ClientPeerTags: a large service's working set, well under the cap.
	SteadyStateKeys = 200
	// HeapKeys is the number of entries HeapEntries fills: the default
	// table cap.
	HeapKeys = 2048
	// HeapSpansPerKey spreads each HeapEntries key's durations over its
	// sketches the way a busy interval does.
	HeapSpansPerKey = 200

	Resources     = 1 << 20 // distinct resources (~1 M)
	PeerHostnames = 1 << 15 // distinct peer.hostname values (32 K)
	Services      = 1 << 16 // distinct services in Adversarial (64 K)
	Operations    = 1 << 18 // distinct operations in Adversarial (256 K)
	mixedSpans    = 1 << 16 // table length of the few-key workloads
	hiCardSpans   = 1 << 20 // table length of the high-cardinality workloads
	peerSpans     = 1 << 16 // table length of HighCardinalityPeer
	errorRate     = 0.2
	minDurationNs = 50e3 // 50 µs
	maxDurationNs = 2e9  // 2 s
	workloadSeed1 = 0x5eed_5eed
	workloadSeed2 = 0xbe4c_0de5
)

// Workload is a deterministic, precomputed sequence of finished spans.
// Benchmark producers walk it with a Producer each; nothing is computed,
// drawn or allocated per span.
//
// A workload with few keys is a plain table of spans. A high-cardinality
// workload is one template span plus a compact, pointer-free record per
// position naming its values in shared string tables (a million 200-byte
// spans with a dozen pointers each would dominate the process's memory,
// the GC's marking and the race detector's shadow). Producer.Next writes a
// record's values over the template in the producer's own span.
//
// Span.Start is 0 throughout: the SDK then counts a span in the bucket of
// the moment its consumer reads it; a driver whose implementation needs the
// span's end time (the agent's concentrator) stamps it from the clock itself.
type Workload struct {
	Name string

	spans []stats.Span // the table, or the template when vary != nil
	vary  []variant

	// Tables the variants index; a field that does not vary has a table of
	// one value: the template's.
	services, operations, resources []string
	peerTags                        [][]string

	// joinsPeerTags: a FreshStrings workload, whose tracer builds its
	// "key:value" peer tags per span; the SDK drivers charge it (JoinPeerTags).
	joinsPeerTags bool
}

// JoinsPeerTags reports whether an SDK publishing w must build each span's
// "key:value" peer tags itself, as the tracer w models does (see
// withFreshStrings): the agent's concentrator builds them from the span's
// tags inside the peer's measured Publish, so the SDK side pays for it too.
// A span of such a workload that a Producer hands out has peer tags of
// the producer's own (at most aggregate.MaxInlinePeerTags), which a driver
// may join in place.
func (w *Workload) JoinsPeerTags() bool { return w != nil && w.joinsPeerTags }

// joiner is the PeerTagJoiner an SDK driver of w joins with, nil when w's
// tracer does not join its peer tags.
func (w *Workload) joiner() *stats.PeerTagJoiner {
	if !w.JoinsPeerTags() {
		return nil
	}
	return stats.NewPeerTagJoiner()
}

// JoinPeerTags joins each of tags anew, in place, from its key and value,
// as a tracer holding a span's tags as key and value does with the SDK's
// stats.PeerTagJoiner, shared by the process (j); a nil j joins with +, a
// string per tag allocated, as without it (and as the agent's concentrator
// does for the peer, per span). Splitting each tag at its ':' is the
// harness's (a tracer reads key and value from its span) and errs against
// the SDK.
func JoinPeerTags(j *stats.PeerTagJoiner, tags []string) {
	for i, t := range tags {
		k, v, _ := strings.Cut(t, ":")
		if j != nil {
			tags[i] = j.Join(k, v)
		} else {
			tags[i] = k + ":" + v
		}
	}
}

// variant is one position of a high-cardinality workload.
type variant struct {
	service, operation, resource, peerTags uint32
	duration                               int64
	error                                  bool
}

// Len is the number of spans in the sequence.
func (w *Workload) Len() int {
	if w.vary != nil {
		return len(w.vary)
	}
	return len(w.spans)
}

// Producer is one goroutine's walk through a workload. Not safe for
// concurrent use: each producer goroutine has its own.
type Producer struct {
	_       [64]byte // the producers' spans are written on different cores:
	w       *Workload
	next    int
	scratch stats.Span
	tags    [aggregate.MaxInlinePeerTags]string // scratch's PeerTags, when JoinsPeerTags
	_       [64]byte                            // keep them off each other's cache lines
}

// Producer returns the walk of producer k of Producers: it starts k/Producers
// of the way through the sequence, so that the producers do not publish the
// same keys in lockstep.
func (w *Workload) Producer(k int) *Producer {
	p := &Producer{w: w, next: k % Producers * (w.Len() / Producers)}
	if w.vary != nil {
		p.scratch = w.spans[0]
	}
	return p
}

// Next returns the position of the next span in the sequence and the span.
// The span is valid until the following call; it must not be modified,
// but for the peer tags of a JoinsPeerTags workload's span: those are the
// producer's own (copied here, for every side), which a driver joins in
// place.
func (p *Producer) Next() (int, *stats.Span) {
	w, i := p.w, p.next
	if p.next++; p.next == w.Len() {
		p.next = 0
	}
	if w.vary == nil {
		if w.joinsPeerTags && len(w.spans[i].PeerTags) > 0 {
			// Tags of the producer's own, which a driver joins in place.
			p.scratch = w.spans[i]
			p.scratch.PeerTags = append(p.tags[:0], w.spans[i].PeerTags...)
			return i, &p.scratch
		}
		return i, &w.spans[i]
	}
	v, s := &w.vary[i], &p.scratch
	s.Service = w.services[v.service]
	s.Name = w.operations[v.operation]
	s.Resource = w.resources[v.resource]
	s.PeerTags = w.peerTags[v.peerTags]
	s.Duration, s.Error = v.duration, v.error
	return i, s
}

// Finished is Next as a tracer publishes a span: one it has just finished,
// so in the cache of its core. Next hands out the table's own span (but
// for a JoinsPeerTags workload's with peer tags), one of
// mixedSpans (megabytes), which costs whoever reads it first a cache miss;
// Finished copies it into the producer's span, so that miss is the walk's:
// the harness's, which RunPaced subtracts, not the publishing side's.
func (p *Producer) Finished() (int, *stats.Span) {
	i, s := p.Next()
	if s != &p.scratch {
		p.scratch = *s
		s = &p.scratch
	}
	return i, s
}

// varied returns a high-cardinality workload of n positions over template
// tmpl: position i takes value i mod len(table) of each table (a field with
// fewer values than positions repeats them).
func varied(name string, tmpl stats.Span, n int, stream uint64, services, operations, resources []string, peerTags [][]string) *Workload {
	one := func(tab []string, v string) []string {
		if tab == nil {
			return []string{v}
		}
		return tab
	}
	w := &Workload{
		Name: name, spans: []stats.Span{tmpl}, vary: make([]variant, n),
		services: one(services, tmpl.Service), operations: one(operations, tmpl.Name),
		resources: one(resources, tmpl.Resource), peerTags: peerTags,
	}
	if w.peerTags == nil {
		w.peerTags = [][]string{tmpl.PeerTags}
	}
	rng := newRand(stream)
	var s stats.Span
	for i := range w.vary {
		measure(&s, rng)
		// Every table is read in order, so that walking the workload costs
		// the producer no cache miss per span (a tracer's fresh strings are
		// in its cache too); the tables' lengths differ, so the fields still
		// change together on every span.
		w.vary[i] = variant{
			service:   uint32(i % len(w.services)),
			operation: uint32(i % len(w.operations)),
			resource:  uint32(i % len(w.resources)),
			peerTags:  uint32(i % len(w.peerTags)),
			duration:  s.Duration,
			error:     s.Error,
		}
	}
	return w
}

var (
	steadyOnce, resOnce, peerOnce, advOnce, clientOnce, heapOnce sync.Once
	steady, hiRes, hiPeer, adversarial, clientPeers, heapEntries *Workload

	steadyFreshOnce, clientFreshOnce sync.Once
	steadyFresh, clientFresh         *Workload
)

// SteadyStateFreshStrings is SteadyState with the strings a tracer builds
// anew for each span fresh at every position (see withFreshStrings): the
// same keys, none of them found by the SDK's recent-span cache by address
// (they are by the one by contents).
func SteadyStateFreshStrings() *Workload {
	steadyFreshOnce.Do(func() { steadyFresh = withFreshStrings("SteadyStateFreshStrings", SteadyState()) })
	return steadyFresh
}

// ClientPeerTagsFreshStrings is ClientPeerTags with fresh strings at every
// position (see withFreshStrings).
func ClientPeerTagsFreshStrings() *Workload {
	clientFreshOnce.Do(func() { clientFresh = withFreshStrings("ClientPeerTagsFreshStrings", ClientPeerTags()) })
	return clientFresh
}

// withFreshStrings returns a copy of the table workload src in which every
// position holds its own copy of the strings a tracer builds for each span
// rather than reusing: the resource (dd-trace-go's net/http builds
// r.Method + " " + route per request), the HTTP method (parsed from each
// request) and the "key:value" peer tags (joined from the span's tags:
// the SDK drivers join them anew per span, timed, with a
// stats.PeerTagJoiner, which hands back one string per pair, see
// JoinsPeerTags; the copies here are what they join from). The
// service, operation, type, kind and route template stay shared, as the
// constants they are in a tracer. In src every span of a key shares all of
// its string data, so the SDK's recent-span cache by identity, which
// recognises a key by the addresses of its strings, finds every span's
// entry without reading its bytes: the SDK's best case, not a tracer's
// usual one. The copies are slices of one string and one []string laid out in
// position order, so a producer walking its stretch reads them in order
// (no cache miss per span beyond the walk's) and the GC has two objects
// more to mark, not hundreds of thousands.
func withFreshStrings(name string, src *Workload) *Workload {
	if src.vary != nil {
		panic("BUG: withFreshStrings of a high-cardinality workload")
	}
	w := &Workload{Name: name, spans: slices.Clone(src.spans), joinsPeerTags: true}
	var buf []byte
	npeers := 0
	for i := range w.spans {
		s := &w.spans[i]
		buf = append(buf, s.Resource...)
		buf = append(buf, s.HTTPMethod...)
		for _, t := range s.PeerTags {
			buf = append(buf, t...)
		}
		npeers += len(s.PeerTags)
	}
	all, off := string(buf), 0
	fresh := func(v string) string {
		if v == "" {
			return v
		}
		c := all[off : off+len(v)]
		off += len(v)
		return c
	}
	peers, k := make([]string, npeers), 0
	for i := range w.spans {
		s := &w.spans[i]
		s.Resource = fresh(s.Resource)
		s.HTTPMethod = fresh(s.HTTPMethod)
		if n := len(s.PeerTags); n > 0 {
			p := peers[k : k+n : k+n]
			for j, t := range s.PeerTags {
				p[j] = fresh(t)
			}
			s.PeerTags, k = p, k+n
		}
	}
	return w
}

// SteadyState is a realistic mix over SteadyStateKeys keys: 5 services ×
// (20 HTTP server endpoints, 12 client calls to databases, caches and other
// services with 3 peer tags each, 8 measured internal operations); 20 %
// errors; durations log-uniform between 50 µs and 2 s.
func SteadyState() *Workload {
	steadyOnce.Do(func() {
		steady = mixedWorkload("SteadyState", []string{"web-store", "checkout", "catalog", "users", "payments"}, 20, 12, 8, mixedSpans, 1, true)
	})
	return steady
}

// ClientPeerTags is SteadyStateKeys keys of client spans only, each with 3
// peer tags (peer.service, peer.hostname and db.system or out.host): 4
// services × 50 client calls.
func ClientPeerTags() *Workload {
	clientOnce.Do(func() {
		clientPeers = mixedWorkload("ClientPeerTags", []string{"web-store", "checkout", "catalog", "users"}, 0, 50, 0, mixedSpans, 2, true)
	})
	return clientPeers
}

// HeapEntries is HeapKeys keys (16 services × (64 server, 40 client, 24
// internal templates)), HeapSpansPerKey spans each, in key order. It stays
// within every default cardinality budget (and the peer's), so that both
// implementations hold exactly HeapKeys entries afterwards.
func HeapEntries() *Workload {
	heapOnce.Do(func() {
		svcs := make([]string, 16)
		for i := range svcs {
			svcs[i] = "svc-" + strconv.Itoa(i)
		}
		heapEntries = mixedWorkload("HeapEntries", svcs, 64, 40, 24, HeapKeys*HeapSpansPerKey, 3, false)
	})
	return heapEntries
}

// HighCardinalityResource varies only the resource (Resources values) of
// an otherwise fixed HTTP server span.
func HighCardinalityResource() *Workload {
	resOnce.Do(func() {
		hiRes = varied("HighCardinalityResource", serverTemplate("web-store", 0), hiCardSpans, 4, nil, nil, resourceTable(), nil)
	})
	return hiRes
}

// HighCardinalityPeer varies only peer.hostname (PeerHostnames values) of
// an otherwise fixed database client span with 3 peer tags.
func HighCardinalityPeer() *Workload {
	peerOnce.Do(func() {
		tmpl := stats.Span{
			Service: "web-store", Name: "postgres.query", Resource: "SELECT * FROM users WHERE id = ?",
			Type: "sql", SpanKind: "client",
		}
		hiPeer = varied("HighCardinalityPeer", tmpl, peerSpans, 5, nil, nil, nil, peerTagTable())
	})
	return hiPeer
}

// Adversarial varies service (Services values), operation (Operations),
// resource (Resources) and peer.hostname (PeerHostnames) at once, on client
// spans so that the peer tags count: every span differs from the previous
// one in all four.
func Adversarial() *Workload {
	advOnce.Do(func() {
		tmpl := stats.Span{Type: "sql", SpanKind: "client"}
		adversarial = varied("Adversarial", tmpl, hiCardSpans, 6,
			numbered("svc-", Services), numbered("op.", Operations), resourceTable(), peerTagTable())
	})
	return adversarial
}

func newRand(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(workloadSeed1, workloadSeed2^stream))
}

// measure draws the span's measurements: a log-uniform duration between
// 50 µs and 2 s and an error 20 % of the time.
func measure(s *stats.Span, rng *rand.Rand) {
	s.Duration = int64(minDurationNs * math.Exp(rng.Float64()*math.Log(maxDurationNs/minDurationNs)))
	s.Error = rng.Float64() < errorRate
}

// numbered returns prefix+i for i in [0, n), zero-padded so that all have
// one length. The strings are slices of one allocation: a million small
// strings would be a million objects for the GC to mark in every cycle of
// every benchmark.
func numbered(prefix string, n int) []string {
	width := len(strconv.Itoa(n - 1))
	size := len(prefix) + width
	buf := make([]byte, 0, n*size)
	for i := range n {
		buf = append(buf, prefix...)
		d := strconv.AppendInt(nil, int64(i), 10)
		for range width - len(d) {
			buf = append(buf, '0')
		}
		buf = append(buf, d...)
	}
	all := string(buf)
	out := make([]string, n)
	for i := range out {
		out[i] = all[i*size : (i+1)*size]
	}
	return out
}

var (
	resTableOnce, peerTableOnce sync.Once
	resTable                    []string
	peerTable                   [][]string
)

// resourceTable is Resources distinct HTTP resources, shared by the
// workloads that need them.
func resourceTable() []string {
	resTableOnce.Do(func() { resTable = numbered("GET /api/v1/items/", Resources) })
	return resTable
}

// peerTagTable is PeerHostnames peer-tag sets that differ only in
// peer.hostname. Spans share these slices; Publish never retains or
// modifies them.
func peerTagTable() [][]string {
	peerTableOnce.Do(func() {
		hosts := numbered("peer.hostname:users-db-", PeerHostnames)
		peerTable = make([][]string, PeerHostnames)
		for i, h := range hosts {
			peerTable[i] = []string{"peer.service:users-db", h + ".prod.internal", "db.system:postgresql"}
		}
	})
	return peerTable
}

// mixedWorkload builds len(services) × (server+client+internal) key
// templates and a table of n spans cycling through them, each with its own
// measurements; stream seeds the draws. shuffle puts the table in a seeded
// random order instead of a fixed rotation through the keys.
func mixedWorkload(name string, services []string, server, client, internal, n int, stream uint64, shuffle bool) *Workload {
	var tmpl []stats.Span
	for _, svc := range services {
		for j := range server {
			tmpl = append(tmpl, serverTemplate(svc, j))
		}
		for j := range client {
			tmpl = append(tmpl, clientTemplate(svc, j))
		}
		for j := range internal {
			tmpl = append(tmpl, internalTemplate(svc, j))
		}
	}
	rng := newRand(stream)
	w := &Workload{Name: name, spans: make([]stats.Span, n)}
	for i := range w.spans {
		w.spans[i] = tmpl[i%len(tmpl)]
		measure(&w.spans[i], rng)
	}
	if shuffle {
		rng.Shuffle(n, func(i, j int) { w.spans[i], w.spans[j] = w.spans[j], w.spans[i] })
	}
	return w
}

var nouns = []string{
	"users", "orders", "items", "carts", "payments", "invoices", "sessions", "products",
	"reviews", "coupons", "shipments", "addresses", "wishlists", "stores", "categories", "prices",
	"inventory", "returns", "refunds", "notifications", "accounts", "tokens", "reports", "exports",
	"imports", "webhooks", "events", "jobs", "tasks", "files", "images", "videos",
	"comments", "likes", "follows", "messages", "threads", "teams", "projects", "tickets",
	"alerts", "metrics", "logs", "traces", "spans", "dashboards", "monitors", "incidents",
	"services", "hosts", "containers", "pods", "nodes", "clusters", "regions", "zones",
	"vendors", "partners", "contracts", "plans", "subscriptions", "licenses", "quotas", "limits",
}

var methods = []string{"GET", "GET", "POST", "PUT", "GET", "DELETE", "GET", "PATCH"}

// serverTemplate is a top-level HTTP server span (the root of its trace).
func serverTemplate(svc string, j int) stats.Span {
	m := methods[j%len(methods)]
	ep := "/api/v1/" + nouns[j%len(nouns)] + "/{id}"
	if j >= len(nouns) {
		ep += "/v" + strconv.Itoa(j/len(nouns))
	}
	return stats.Span{
		Service: svc, Name: "http.request", Resource: m + " " + ep, Type: "web", SpanKind: "server",
		HTTPStatusCode: 200, HTTPMethod: m, HTTPEndpoint: ep, TopLevel: true, TraceRoot: true,
	}
}

// clientTemplate is a call to a database, a cache or another service, with
// 3 peer tags; it is counted because of its kind.
func clientTemplate(svc string, j int) stats.Span {
	host := strconv.Itoa(j)
	switch j % 3 {
	case 0:
		table := nouns[j%len(nouns)]
		return stats.Span{
			Service: svc, Name: "postgres.query", Resource: "SELECT * FROM " + table + " WHERE id = $" + host,
			Type: "sql", SpanKind: "client",
			PeerTags: []string{"peer.service:" + table + "-db", "peer.hostname:pg-" + host + ".prod.internal", "db.system:postgresql"},
		}
	case 1:
		return stats.Span{
			Service: svc, Name: "redis.command", Resource: "GET " + nouns[j%len(nouns)] + ":{key}",
			Type: "redis", SpanKind: "client",
			PeerTags: []string{"peer.service:cache", "peer.hostname:redis-" + host + ".prod.internal", "db.system:redis"},
		}
	default:
		ep := "/v2/" + nouns[(j+7)%len(nouns)]
		peer := "api-" + strconv.Itoa(j%5)
		return stats.Span{
			Service: svc, Name: "http.client.request", Resource: "GET " + ep, Type: "http", SpanKind: "client",
			HTTPStatusCode: 200, HTTPMethod: "GET", HTTPEndpoint: ep,
			PeerTags: []string{"peer.service:" + peer, "peer.hostname:" + peer + "-" + host + ".prod.internal", "out.host:" + peer + ".prod.internal"},
		}
	}
}

// internalTemplate is a measured span of custom instrumentation.
func internalTemplate(svc string, j int) stats.Span {
	ops := []string{"template.render", "cache.compute", "auth.check", "serialize"}
	return stats.Span{
		Service: svc, Name: ops[j%len(ops)], Resource: ops[j%len(ops)] + " " + nouns[j%len(nouns)],
		SpanKind: "internal", Measured: true,
	}
}
