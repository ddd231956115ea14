// This file holds the peer implementation for the benchmarks: the agent's
// SpanConcentrator driven as dd-trace-go drives it, as a bench.Driver.

package peer

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/DataDog/datadog-agent/pkg/trace/config"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"

	"github.com/spanstats/spanstats/bench"
	"github.com/spanstats/spanstats/stats"
)

// The peer is the Datadog agent's SpanConcentrator driven the way
// dd-trace-go v2 drives it (ddtrace/tracer/stats.go, read, not copied):
//
//   - on the goroutine finishing the trace, NewStatSpanWithConfig from the
//     span's fields, meta and metrics, with the agent's peer-tag keys; the
//     stat span is wrapped with its origin and sent as a batch (one span per
//     one-span trace) on a channel of 10000 batches, without blocking: when
//     the channel is full the batch is dropped (counted here as shed);
//   - ONE ingester goroutine calls AddSpan for each span it receives;
//   - a flusher goroutine calls Flush(now, false) every bucket interval;
//     Stop ends both, drains the channel, then Flush(now, true) and encodes
//     each payload with MarshalMsg (dd-trace-go then POSTs it; that part is
//     left out, which favours the peer in the saturated suite, whose SDK
//     figures include its POST at Stop; in BenchmarkPaced both report at
//     10 s boundaries, about two in a cell of ~21 s: each report costs the
//     window open at the time, any side's or the harness's, which the
//     median over the rounds absorbs).
//
// Config as dd-trace-go's defaults: stats by span kind, 10 s buckets, and
// its default cardinality limits (whole key 2048, resource 1024, HTTP
// endpoint 512, peer tags 512, origin 20; additional tags are off).
const (
	peerInboxLen              = 10000 // dd-trace-go's concentrator In channel
	peerBucketInterval        = 10 * time.Second
	peerWholeKeyLimit         = 2048
	peerResourceLimit         = 1024
	peerHTTPEndpointLimit     = 512
	peerPeerTagsLimit         = 512
	peerOriginCardinalityLimt = 20
)

// agentPeerTagKeys is the peer-tag key list a default agent advertises in
// /info (and dd-trace-go therefore uses). Both implementations get it.
var agentPeerTagKeys = sync.OnceValue(func() []string {
	return (&config.AgentConfig{PeerTagsAggregation: true}).ConfiguredPeerTags()
})

func newSpanConcentrator(now time.Time) *agentstats.SpanConcentrator {
	return agentstats.NewSpanConcentrator(&agentstats.SpanConcentratorConfig{
		ComputeStatsBySpanKind:       true,
		BucketInterval:               peerBucketInterval.Nanoseconds(),
		WholeKeyCardinalityLimit:     peerWholeKeyLimit,
		ResourceCardinalityLimit:     peerResourceLimit,
		HTTPEndpointCardinalityLimit: peerHTTPEndpointLimit,
		PeerTagsCardinalityLimit:     peerPeerTagsLimit,
		OriginCardinalityLimit:       peerOriginCardinalityLimt,
	}, now)
}

// spanTags is what a dd-trace-go span carries besides its fields: its meta
// and metrics maps, built once per distinct tag set of a workload (a tracer
// builds them while the span runs; that is not stats work). Tag sets are
// told apart by value, so the fresh-string workloads share the few hundred
// maps of the interned ones (hot in the cache, as a tracer's span's own
// meta is when it finishes), and the peer reads their values rather than
// the span's fresh copies: it builds its "key:value" peer tags anew for
// every span either way, and the span's fresh resource reaches it through
// the span's fields.
type spanTags struct {
	metas   []map[string]string
	metrics [4]map[string]float64 // by topLevel | measured<<1
	meta    []uint32              // per position: index into metas
}

var tagCache sync.Map // *bench.Workload → *spanTags

// tagsFor returns the meta and metrics of every span of w.
func tagsFor(w *bench.Workload) *spanTags {
	if t, ok := tagCache.Load(w); ok {
		return t.(*spanTags)
	}
	type metaKey struct {
		kind, method, endpoint, grpc, srvSrc string
		status                               uint32
		synthetics                           bool
		peers                                string // joined: by value, not by slice (see bench.SteadyStateFreshStrings)
	}
	t := &spanTags{meta: make([]uint32, w.Len())}
	for i := range t.metrics {
		m := map[string]float64{}
		if i&1 != 0 {
			m["_top_level"] = 1
		}
		if i&2 != 0 {
			m["_dd.measured"] = 1
		}
		t.metrics[i] = m
	}
	seen := map[metaKey]uint32{}
	p := w.Producer(0)
	for range w.Len() {
		i, s := p.Next()
		k := metaKey{
			kind: s.SpanKind, method: s.HTTPMethod, endpoint: s.HTTPEndpoint, grpc: s.GRPCStatusCode,
			srvSrc: s.ServiceSource, status: s.HTTPStatusCode, synthetics: s.Synthetics,
			peers: strings.Join(s.PeerTags, "\x00"),
		}
		idx, ok := seen[k]
		if !ok {
			idx = uint32(len(t.metas))
			t.metas = append(t.metas, metaOf(s))
			seen[k] = idx
		}
		t.meta[i] = idx
	}
	got, _ := tagCache.LoadOrStore(w, t)
	return got.(*spanTags)
}

// metaOf is the meta map dd-trace-go's integrations give such a span.
func metaOf(s *stats.Span) map[string]string {
	m := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("span.kind", s.SpanKind)
	set("http.method", s.HTTPMethod)
	set("http.endpoint", s.HTTPEndpoint)
	set("rpc.grpc.status_code", s.GRPCStatusCode)
	set("_dd.svc_src", s.ServiceSource)
	if s.HTTPStatusCode != 0 {
		m["http.status_code"] = strconv.FormatUint(uint64(s.HTTPStatusCode), 10)
	}
	if s.Synthetics {
		m["_dd.origin"] = "synthetics"
	}
	for _, t := range s.PeerTags {
		k, v, _ := strings.Cut(t, ":")
		set(k, v)
	}
	return m
}

// statSpan mirrors dd-trace-go's tracerStatSpan: the stat span and the
// trace's origin, which the ingester passes to AddSpan.
type statSpan struct {
	ss      *agentstats.StatSpan
	origin  string
	version string
}

// Concentrator is the peer bench.Driver.
type Concentrator struct {
	sc       *agentstats.SpanConcentrator
	aggKey   agentstats.PayloadAggregationKey
	peerTags []string
	tags     *spanTags
	start    int64 // every span ends here: see Publish

	in   chan []*statSpan
	stop chan struct{}
	wg   sync.WaitGroup

	shed, ineligible atomic.Uint64
	counted          atomic.Uint64 // by the ingester, then by Stop
	collapsed        atomic.Uint64 // collapse events drained from the concentrator
	// Written by the flusher, then by Stop after the flusher ended.
	payloads, payloadBytes uint64
	buf                    []byte
}

// OpenConcentrator is the bench.OpenFunc of the peer.
func OpenConcentrator(w *bench.Workload) (bench.Driver, error) {
	return NewConcentrator(w), nil
}

// NewConcentrator starts a concentrator, its ingester and its flusher.
func NewConcentrator(w *bench.Workload) *Concentrator {
	now := time.Now()
	d := &Concentrator{
		sc: newSpanConcentrator(now),
		aggKey: agentstats.PayloadAggregationKey{
			Hostname: "bench-host", Env: "bench", Version: "1.0.0", Lang: "go",
		},
		peerTags: agentPeerTagKeys(),
		tags:     tagsFor(w),
		start:    now.UnixNano(),
		in:       make(chan []*statSpan, peerInboxLen),
		stop:     make(chan struct{}),
	}
	d.wg.Add(2)
	go d.ingest()
	go d.flushEvery(peerBucketInterval)
	return d
}

// Publish does what dd-trace-go does for a finished one-span trace. The
// span's end is the driver's start time, so no clock is read here (the
// tracer reads it for the span anyway); spans still land in the bucket of
// their end, and flushed buckets are handled by the concentrator's
// oldest-bucket rule.
func (d *Concentrator) Publish(i int, s *stats.Span) {
	meta := d.tags.metas[d.tags.meta[i]]
	// dd-trace-go sets this per span from the agent's obfuscation version;
	// the loopback agent advertises none.
	d.sc.SetObfuscationEnabled(false, false)
	ss, ok := d.sc.NewStatSpanWithConfig(d.statSpanConfig(s, meta))
	if !ok {
		d.ineligible.Add(1)
		return
	}
	batch := []*statSpan{{ss: ss, origin: meta["_dd.origin"]}}
	select {
	case d.in <- batch:
	default:
		d.shed.Add(1) // dd-trace-go logs "Stats channel full" and drops it
	}
}

// statSpanConfig is what dd-trace-go passes for a span: its fields, its
// meta and metrics, the agent's peer-tag keys, and the HTTP method and
// endpoint read from its meta.
func (d *Concentrator) statSpanConfig(s *stats.Span, meta map[string]string) agentstats.StatSpanConfig {
	mi := 0
	if s.TopLevel {
		mi |= 1
	}
	if s.Measured {
		mi |= 2
	}
	return spanConfig(s, d.start-s.Duration, meta, d.tags.metrics[mi], d.peerTags)
}

// spanConfig is the StatSpanConfig of s starting at start, with its meta
// and metrics: a root span has no parent, an error span Error 1.
func spanConfig(s *stats.Span, start int64, meta map[string]string, metrics map[string]float64, peerTags []string) agentstats.StatSpanConfig {
	var parent uint64
	if !s.TraceRoot {
		parent = 1
	}
	var isErr int32
	if s.Error {
		isErr = 1
	}
	return agentstats.StatSpanConfig{
		Service:      s.Service,
		Resource:     s.Resource,
		Name:         s.Name,
		Type:         s.Type,
		ParentID:     parent,
		Start:        start,
		Duration:     s.Duration,
		Error:        isErr,
		Meta:         meta,
		Metrics:      metrics,
		PeerTags:     peerTags,
		HTTPMethod:   meta["http.method"],
		HTTPEndpoint: meta["http.endpoint"],
	}
}

func (d *Concentrator) ingest() {
	defer d.wg.Done()
	for {
		select {
		case batch := <-d.in:
			d.add(batch)
		case <-d.stop:
			return
		}
	}
}

func (d *Concentrator) add(batch []*statSpan) {
	for _, s := range batch {
		key := d.aggKey
		if s.version != "" {
			key.Version = s.version
		}
		d.sc.AddSpan(s.ss, key, "", nil, s.origin)
		d.counted.Add(1) // uncontended: one writer
	}
}

func (d *Concentrator) flushEvery(interval time.Duration) {
	defer d.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			d.flush(now, false)
		case <-d.stop:
			return
		}
	}
}

// flush exports the buckets due and encodes each payload as dd-trace-go
// does before posting it.
func (d *Concentrator) flush(now time.Time, force bool) {
	payloads := d.sc.Flush(now.UnixNano(), force)
	d.drainCollapses()
	for _, p := range payloads {
		p.RuntimeID = "bench-runtime-id"
		p.Service = "bench"
		b, err := p.MarshalMsg(d.buf[:0])
		if err != nil {
			panic("BUG: peer: MarshalMsg: " + err.Error())
		}
		d.buf = b
		d.payloads++
		d.payloadBytes += uint64(len(b))
	}
}

// drainCollapses moves the concentrator's collapse counters (drained at
// each flush by dd-trace-go, for its health metrics) into d.collapsed.
func (d *Concentrator) drainCollapses() {
	bc := d.sc.DrainBlockCounts()
	d.collapsed.Add(uint64(bc.WholeKeyCollapses + bc.ResourceCollapses + bc.HTTPEndpointCollapses + bc.PeerTagsCollapses + bc.OriginCollapses))
}

// Stop implements bench.Driver the way dd-trace-go stops its concentrator.
func (d *Concentrator) Stop() error {
	close(d.stop)
	d.wg.Wait()
	for {
		select {
		case batch := <-d.in:
			d.add(batch)
			continue
		default:
		}
		break
	}
	d.flush(time.Now(), true)
	return nil
}

// Counts implements bench.Driver. The peer has no table cap (its whole-key
// limit collapses instead), so nothing overflows; Collapsed counts collapse
// events per field, as the concentrator reports them. Spans in the channel
// are published, not yet counted.
func (d *Concentrator) Counts() bench.Counts {
	d.drainCollapses()
	counted, queued := d.counted.Load(), uint64(len(d.in))
	shed, inel := d.shed.Load(), d.ineligible.Load()
	return bench.Counts{
		Published: counted + queued + shed + inel, Counted: counted, Shed: shed, Ineligible: inel,
		Collapsed: d.collapsed.Load(),
	}
}

// Close implements bench.Driver.
func (d *Concentrator) Close() {}
