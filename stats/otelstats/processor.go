// This file holds Processor, the sdktrace.SpanProcessor that maps each
// ended span and publishes it to a stats.Aggregator, and its options.

package otelstats

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanstats/spanstats/stats"
)

// Processor is an sdktrace.SpanProcessor that publishes every span that
// ends to a stats.Aggregator. It is safe for concurrent use.
type Processor struct {
	agg            *stats.Aggregator
	topLevelByKind bool
	keys           *keyIndex
	res            resCache
	crossed        crossings
	// owners: each span's own service.name at its start (ownerMarks);
	// parents: the parent's, for a span whose parent had one, until it ends.
	owners  ownerMarks
	parents serviceMarks
	// spanServices: a span has ended with its own service.name, so OnStart
	// reads the service.name of starting spans from then on. Until then it
	// reads no attribute: the SDK's Attributes builds a map per call (a
	// heap one past 8 attributes), a cost on every span of the many
	// applications that never set service.name on a span.
	spanServices atomic.Bool
	obf          *obfuscate.Obfuscator
	// Each memo remembers one computation: normalized services, tag
	// values and operation names, resources (built, then obfuscated),
	// peer-tag sets.
	services, tags, names, resources, peers *memo
	// firstRaw: for an obfuscated resource the agent's pass on receipt
	// would change, keyed by class and resource, the raw one sent for it.
	firstRaw *memo
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// Option configures a Processor.
type Option func(*config)

type config struct {
	topLevelByKind bool
	spanServices   bool
	peerTagKeys    []string
}

// WithTopLevelBySpanKind computes top-level spans by span kind, as the agent
// does with enable_otlp_compute_top_level_by_span_kind: a root, server or
// consumer span is top-level, and client and producer spans are measured.
// The default is the agent's default, ComputeTopLevel (see the package
// doc): a root span, one whose parent is remote, of another TracerProvider
// or not sampled, or one under another service than its local parent's.
func WithTopLevelBySpanKind() Option { return func(c *config) { c.topLevelByKind = true } }

// WithSpanServiceNames makes the Processor read each starting span's own
// service.name from the first span on. By default it reads them once a span
// has ended with its own service.name: until then, a child is compared with
// its resource's service, not its local parent's own (the first traces of an
// application setting service.name on spans), and an application that never
// does pays nothing for it (the SDK's Attributes builds a map per call).
//
// A span's own service.name is kept for its children while the span runs,
// however many other spans start and end meanwhile (unless over a thousand
// with their own service.name run at once: the table has 4096 slots), and
// after it ends, for children that start later (detached work), until a
// span ending later takes its slot of 4096: after 4096 such ends on average.
// A child whose parent's is no longer kept is compared with the resource's.
func WithSpanServiceNames() Option { return func(c *config) { c.spanServices = true } }

// WithPeerTagKeys replaces DefaultPeerTagKeys: the attribute keys read as
// peer tags of client, producer and consumer spans. At most about 90 keys
// beyond the mapping's own are read; more are ignored.
func WithPeerTagKeys(keys ...string) Option {
	return func(c *config) { c.peerTagKeys = append([]string(nil), keys...) }
}

// NewProcessor returns a Processor publishing to agg. The caller starts agg
// before spans end and stops it after the TracerProvider's Shutdown (which
// flushes agg but does not stop it), so the spans ended during shutdown are
// counted.
// It panics if agg is nil.
func NewProcessor(agg *stats.Aggregator, opts ...Option) *Processor {
	if agg == nil {
		// Here, not at the first span's End, in whichever goroutine ends it.
		panic("otelstats: NewProcessor with a nil *stats.Aggregator (is New's error ignored?)")
	}
	return newProcessor(agg, opts...)
}

// newProcessor is NewProcessor without the check: the mapping tests call
// fill alone, with no Aggregator.
func newProcessor(agg *stats.Aggregator, opts ...Option) *Processor {
	c := config{peerTagKeys: DefaultPeerTagKeys}
	for _, o := range opts {
		o(&c)
	}
	p := &Processor{
		agg:            agg,
		topLevelByKind: c.topLevelByKind,
		keys:           newKeyIndex(c.peerTagKeys),
		// The agent's defaults for stats: SQL obfuscation keeps no literal,
		// which is what collapses every query of one shape into one group.
		obf:       obfuscate.NewObfuscator(obfuscate.Config{}),
		services:  newMemo(memoMaxKey),
		tags:      newMemo(memoMaxKey),
		names:     newMemo(memoMaxKey),
		resources: newMemo(resourceKeyLen),
		peers:     newMemo(memoMaxKey),
		firstRaw:  newMemo(resourceKeyLen),
	}
	p.spanServices.Store(c.spanServices)
	return p
}

// OnStart marks a span whose local parent belongs to another
// TracerProvider or was not recorded, and notes the services set by
// service.name at start, which decide whether the span is top-level (see
// the package documentation); the rest waits for the finished span.
func (p *Processor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if p.topLevelByKind {
		return
	}
	id := s.SpanContext().SpanID()
	// Read here, before the span is handed out: the SDK's Attributes
	// dedupes in place and returns its own slice, so reading a live
	// parent's would race with the parent's other readers.
	if p.spanServices.Load() {
		for _, kv := range s.Attributes() {
			if kv.Key == "service.name" && kv.Value.Type() == attribute.STRING && kv.Value.AsString() != "" {
				p.owners.mark(id, p.normalizeService(kv.Value.AsString()))
				break
			}
		}
	}
	parent := trace.SpanFromContext(ctx)
	psc := parent.SpanContext()
	if !psc.IsValid() || psc.IsRemote() || psc.SpanID() != s.Parent().SpanID() {
		return // no local parent (none, remote, or WithNewRoot)
	}
	if _, ok := parent.(sdktrace.ReadOnlySpan); !ok {
		if !psc.IsSampled() {
			// A local parent not recorded and not sampled (a sampler
			// dropped it) is exported by no one: the agent finds the
			// parent outside the chunk.
			p.crossed.mark(id)
			return
		}
		// A sampled parent known by its context alone
		// (trace.ContextWithSpanContext, as code detaches work from a
		// request's cancellation): its span lives on and is exported, by
		// this provider as far as the context tells.
	} else if parent.TracerProvider() != s.TracerProvider() {
		// The provider, not the resource: providers built without
		// WithResource share resource.Default()'s pointer, yet each
		// exports its own spans.
		p.crossed.mark(id)
		return
	}
	// ComputeTopLevel compares with the parent's service, which the
	// parent's own service.name overrides.
	if svc, ok := p.owners.get(s.Parent().SpanID()); ok {
		p.parents.mark(id, svc)
	}
}

// OnEnd maps s to a stats.Span and publishes it.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	var sp stats.Span
	var scratch [scratchSize]byte
	p.fill(&sp, s, scratch[:])
	p.agg.Publish(&sp)
}

// Shutdown flushes the Aggregator as ForceFlush does, as OpenTelemetry
// asks of a processor's Shutdown, so that a provider shut down reports its
// spans even where the Aggregator is stopped late or never; it does not
// stop the Aggregator, which is the caller's (and may serve other
// providers). As ForceFlush, without a deadline in ctx it waits for the
// agent's answer, retries included (seconds, with no agent), and returns
// its error; with one, at most half the time left. An Aggregator stopped
// already, or never started, has nothing it could flush: nil.
func (p *Processor) Shutdown(ctx context.Context) error {
	if err := p.ForceFlush(ctx); !errors.Is(err, stats.ErrStopped) && !errors.Is(err, stats.ErrNotStarted) {
		return err
	}
	return nil
}

// ForceFlush reports what the Aggregator holds now (stats.Aggregator.Flush)
// and waits for the agent's answer, retries included, with its error. When
// ctx has a deadline it waits at most half the time left and then returns
// nil, the report going on (its outcome counted in the Aggregator's
// Health): the TracerProvider flushes its processors in order within one
// ctx, and an agent slow to take stats must not leave none for the trace
// exporter's processor. Register this processor after that one.
func (p *Processor) ForceFlush(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return p.agg.Flush(ctx)
	}
	half, cancel := context.WithTimeout(ctx, time.Until(deadline)/2)
	defer cancel()
	err := p.agg.Flush(half)
	if err != nil && half.Err() != nil && ctx.Err() == nil {
		return nil // half the time is up: the rest is the next processors'
	}
	return err
}

// markSlots sizes each table of marks by span ID: crossings, serviceMarks
// and ownerMarks' ended ones.
const markSlots = 4096

// crossings marks the spans started under a local parent of another
// TracerProvider, so of another export, where the agent finds the parent
// outside the child's chunk and ComputeTopLevel makes the child
// top-level. OnEnd takes the mark back. A mark takes a free slot of the
// window at its ID (as serviceMarks does), so spans that start and end
// while another runs never replace its mark: only a window full of live
// marks makes a new mark replace the one at its ID, leaving that span to
// the rule for a local parent (TestCrossingsOfManySpansAtOnce). Span IDs
// are random and never 0, so a slot holds one span's ID or 0.
type crossings struct {
	// The last windows run on past markSlots rather than wrap.
	slots [markSlots + serviceMarkWindow - 1]atomic.Uint64
}

func (c *crossings) window(n uint64) []atomic.Uint64 { return markWindow(c.slots[:], n) }

// markWindow is the window of slots a mark of span ID n may take.
func markWindow[T any](slots []T, n uint64) []T {
	h := n % markSlots
	return slots[h : h+serviceMarkWindow]
}

func (c *crossings) mark(id trace.SpanID) {
	n := binary.BigEndian.Uint64(id[:])
	w := c.window(n)
	for i := range w {
		if w[i].Load() == 0 && w[i].CompareAndSwap(0, n) {
			return
		}
	}
	w[0].Store(n)
}

// take reports whether id was marked, and unmarks it.
func (c *crossings) take(id trace.SpanID) bool {
	n := binary.BigEndian.Uint64(id[:])
	if n == 0 {
		return false
	}
	w := c.window(n)
	for i := range w {
		if w[i].Load() == n && w[i].CompareAndSwap(n, 0) {
			return true
		}
	}
	return false
}

// serviceMarkWindow is how many slots from its hash a span's service mark
// (or crossing mark) may take: one cache line of pointers (of IDs).
const serviceMarkWindow = 8

// serviceMarks holds a service per span ID, from the span's start to its
// end (take). A mark takes a free slot of the window at its hash, so the
// spans that start and end while another runs never replace its mark; only
// a window full of live marks (as spans that never end leave them) makes a
// new mark replace the one at its hash.
type serviceMarks struct {
	// The last windows run on past markSlots rather than wrap.
	slots [markSlots + serviceMarkWindow - 1]atomic.Pointer[serviceMark]
}

type serviceMark struct {
	id  uint64
	svc string
}

func (c *serviceMarks) window(n uint64) []atomic.Pointer[serviceMark] {
	return markWindow(c.slots[:], n)
}

func (c *serviceMarks) mark(id trace.SpanID, svc string) {
	n := binary.BigEndian.Uint64(id[:])
	e := &serviceMark{id: n, svc: svc}
	w := c.window(n)
	for i := range w {
		if w[i].Load() == nil && w[i].CompareAndSwap(nil, e) {
			return
		}
	}
	w[0].Store(e)
}

// find returns the mark of the span n and its slot, or nil.
func (c *serviceMarks) find(n uint64) (*atomic.Pointer[serviceMark], *serviceMark) {
	w := c.window(n)
	for i := range w {
		if e := w[i].Load(); e != nil && e.id == n {
			return &w[i], e
		}
	}
	return nil, nil
}

// take returns the service marked for id, and unmarks it.
func (c *serviceMarks) take(id trace.SpanID) (string, bool) {
	slot, e := c.find(binary.BigEndian.Uint64(id[:]))
	if e != nil && slot.CompareAndSwap(e, nil) {
		return e.svc, true
	}
	return "", false
}

// ownerMarks holds each span's own service.name from its start: in live
// while the span runs, then in ended, where a child that starts after its
// parent ended (detached work) still finds it until a later-ended span
// with its own service.name takes its slot.
type ownerMarks struct {
	live  serviceMarks
	ended [markSlots]atomic.Pointer[serviceMark]
}

func (o *ownerMarks) mark(id trace.SpanID, svc string) { o.live.mark(id, svc) }

// get returns the service marked for id, live or ended.
func (o *ownerMarks) get(id trace.SpanID) (string, bool) {
	n := binary.BigEndian.Uint64(id[:])
	if _, e := o.live.find(n); e != nil {
		return e.svc, true
	}
	if e := o.ended[n%markSlots].Load(); e != nil && e.id == n {
		return e.svc, true
	}
	return "", false
}

// end moves id's mark from live to ended; in that order, so a child
// starting meanwhile finds it in one or the other.
func (o *ownerMarks) end(id trace.SpanID) {
	n := binary.BigEndian.Uint64(id[:])
	if slot, e := o.live.find(n); e != nil {
		o.ended[n%markSlots].Store(e)
		slot.CompareAndSwap(e, nil)
	}
}
