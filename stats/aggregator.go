package stats

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
	"github.com/spanstats/spanstats/writer"
)

// drainBatch is how many spans the consumer takes from the inbox at a time:
// large enough to amortise the signal check, small enough (~80 KiB of
// records) to stay in L2.
const drainBatch = 256

// yield is runtime.Gosched; tests count the calls.
var yield = runtime.Gosched

var (
	// ErrStopped is returned by Flush and Stop once the aggregator has stopped.
	ErrStopped = errors.New("stats: aggregator stopped")
	// ErrSendQueueFull is returned by Flush when the report could not be
	// queued because the sender is still busy with earlier ones; the report
	// is dropped and counted in PayloadsDropped.
	ErrSendQueueFull = errors.New("stats: send queue full, report dropped")
)

// Aggregator computes span stats and reports them to the agent. Publish,
// Flush, Stop, Clear and Health are safe for concurrent use.
type Aggregator struct {
	cfg    Config
	ep     endpoint
	inbox  *inbox.Ring[aggregate.Record]
	c      counters
	client *http.Client
	header writer.Header

	flushCh chan chan error // Flush requests, answered after the send
	clearCh chan struct{}   // ClearSignal, coalesced
	stopCh  chan struct{}   // closed by Stop
	sendCh  chan *report    // consumer → sender
	freeBuf chan []byte     // payload buffers returned by the sender

	sendCtx    context.Context // cancelled when Stop gives up waiting
	sendCancel context.CancelFunc

	// disabled is set while the agent does not accept stats; Publish reads
	// it (a shared, rarely written cache line).
	disabled atomic.Bool
	// peerTagKeys is the agent's peer_tags list, published by the sender
	// for the consumer (nil: not known).
	peerTagKeys atomic.Pointer[[]string]
	// yieldEvery is Config.ShedYieldEvery, or 0 with ShedWithoutYield.
	yieldEvery uint64

	startOnce, stopOnce      sync.Once
	consumerDone, senderDone chan struct{}
	started                  chan struct{}
}

// report is one interval's payloads, handed from the consumer to the sender.
type report struct {
	parts []part
	done  chan error // non-nil when Flush or Stop waits for the outcome
}

type part struct {
	body []byte
	hits uint64
}

// New validates cfg and returns an Aggregator that is not started yet.
func New(cfg Config) (*Aggregator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ep, err := parseAgentURL(cfg.AgentURL)
	if err != nil {
		return nil, err
	}
	a := &Aggregator{
		cfg:          cfg,
		ep:           ep,
		inbox:        newInbox(cfg.InboxSize),
		client:       newHTTPClient(ep, cfg.HTTPTimeout),
		flushCh:      make(chan chan error),
		clearCh:      make(chan struct{}, 1),
		stopCh:       make(chan struct{}),
		sendCh:       make(chan *report, cfg.SendQueue),
		freeBuf:      make(chan []byte, freeBuffers),
		consumerDone: make(chan struct{}),
		senderDone:   make(chan struct{}),
		started:      make(chan struct{}),
		header: writer.Header{
			Hostname: cfg.Hostname, Env: cfg.Env, Version: cfg.Version,
			Lang: cfg.Lang, TracerVersion: cfg.TracerVersion, RuntimeID: cfg.RuntimeID,
			Service: cfg.Service, ContainerID: cfg.ContainerID, Tags: cfg.Tags,
			GitCommitSha: cfg.GitCommitSha, ImageTag: cfg.ImageTag, ProcessTags: cfg.ProcessTags,
		},
	}
	if !cfg.ShedWithoutYield {
		a.yieldEvery = uint64(cfg.ShedYieldEvery)
	}
	a.sendCtx, a.sendCancel = context.WithCancel(context.Background())
	return a, nil
}

// Start launches the consumer and sender goroutines. Calling it more than
// once, or after Stop, does nothing.
func (a *Aggregator) Start() {
	a.startOnce.Do(func() {
		select {
		case <-a.stopCh:
			return
		default:
		}
		close(a.started)
		c := newConsumer(a)
		go c.run()
		go a.send()
	})
}

// Publish hands a finished span to the aggregator. It never waits, does not
// retain s, and allocates nothing unless s has more than
// aggregate.MaxInlinePeerTags peer tags. When the inbox is full it drops the
// span and, now and then (Config.ShedYieldEvery), yields the processor so
// the consumer can catch up. It returns false when the span is
// dropped (inbox full, published after Stop, or the agent does not accept
// stats; each counted in Health); an ineligible span returns true — it is
// correctly not counted.
func (a *Aggregator) Publish(s *Span) bool {
	if s == nil {
		return false
	}
	if !s.Eligible() {
		a.c.ineligible.Add(1)
		return true
	}
	if a.disabled.Load() {
		a.c.disabled.Add(1)
		return false
	}
	if c, ok := a.inbox.Claim(); ok {
		s.snapshot(c.Value()) // straight into the slot: no copy of the record
		c.Commit()
		return true
	}
	if a.inbox.Closed() {
		a.c.rejected.Add(1)
		return false
	}
	// A full inbox means the consumer is short of CPU: now and then, give
	// it this processor (on 2 cores, 8 busy producers that never yield
	// leave the consumer a fraction of one and shed ~99 %; yielding counts
	// several times more spans — BenchmarkPublish8Producers: ~1.7 M
	// accepted/s without yields, ~11.7 M with the default). This is not a wait:
	// the span is already dropped and counted, and Gosched returns as soon
	// as the scheduler runs this goroutine again. The count of the caller's
	// stripe of the counter, already in hand, picks the calls that yield.
	if n := a.c.inboxFull.Add(1); a.yieldEvery != 0 && n%a.yieldEvery == 0 {
		yield()
	}
	return false
}

// Flush reports everything published before the call, now, and returns once
// the payloads were handed to the agent, with the first send error.
func (a *Aggregator) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case a.flushCh <- done:
	case <-a.consumerDone:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Clear asks the consumer to discard every aggregate (the ClearSignal). The
// discarded spans are counted in Health.Cleared. It does not wait.
func (a *Aggregator) Clear() {
	select {
	case a.clearCh <- struct{}{}:
	default: // a clear is already pending; they coalesce
	}
}

// Stop drains the inbox, sends a final report and ends every goroutine.
// If ctx ends first, in-flight requests are cancelled, what is left is
// counted as dropped, and ctx's error is returned once the goroutines ended.
// Spans published after Stop begins are rejected and counted.
func (a *Aggregator) Stop(ctx context.Context) error {
	a.Start() // a never-started aggregator still reports what it holds
	first := false
	a.stopOnce.Do(func() {
		first = true
		close(a.stopCh)
	})
	if !first {
		<-a.consumerDone
		<-a.senderDone
		return ErrStopped
	}
	select {
	case <-a.senderDone:
		<-a.consumerDone
		a.sendCancel()
		return nil
	case <-ctx.Done():
		a.sendCancel()
		<-a.consumerDone
		<-a.senderDone
		return ctx.Err()
	}
}

// Health returns a snapshot of the counters.
func (a *Aggregator) Health() Health {
	c := &a.c
	h := Health{
		Ineligible:       c.ineligible.Load(),
		InboxFull:        c.inboxFull.Load(),
		Rejected:         c.rejected.Load(),
		AggregateDropped: c.aggDropped.Load(),
		Counted:          c.counted.Load(),
		Overflowed:       c.overflowed.Load(),
		Recycled:         c.recycled.Load(),
		Cleared:          c.cleared.Load(),
		Entries:          c.entries.Load(),
		PayloadsSent:     c.payloadsSent.Load(),
		PayloadsFailed:   c.payloadsFailed.Load(),
		PayloadsDropped:  c.payloadsDropped.Load(),
		BytesSent:        c.bytesSent.Load(),
		SpansSent:        c.spansSent.Load(),
		SpansUnsent:      c.spansUnsent.Load(),
		PayloadsRetried:  c.payloadsRetried.Load(),
		PayloadsSplit:    c.payloadsSplit.Load(),
		Disabled:         c.disabled.Load(),
		StatsDisabled:    a.disabled.Load(),
		DisabledTimes:    c.disabledTimes.Load(),
		InfoReads:        c.infoReads.Load(),
		CollapsedSpans:   c.collapsedSpans.Load(),
		Collapsed: FieldCounts{
			Resource:       c.collapsed[aggregate.FieldResource].Load(),
			Service:        c.collapsed[aggregate.FieldService].Load(),
			Operation:      c.collapsed[aggregate.FieldOperation].Load(),
			Type:           c.collapsed[aggregate.FieldType].Load(),
			SpanKind:       c.collapsed[aggregate.FieldSpanKind].Load(),
			HTTPMethod:     c.collapsed[aggregate.FieldHTTPMethod].Load(),
			HTTPEndpoint:   c.collapsed[aggregate.FieldHTTPEndpoint].Load(),
			GRPCStatusCode: c.collapsed[aggregate.FieldGRPCStatusCode].Load(),
			ServiceSource:  c.collapsed[aggregate.FieldServiceSource].Load(),
			PeerTags:       c.collapsed[aggregate.FieldPeerTags].Load(),
		},
	}
	// Pushed is read last: every span the consumer counted was pushed
	// earlier, so Pending never goes negative.
	pushed := a.inbox.Pushed()
	if pushed > h.Counted+h.AggregateDropped {
		h.Pending = pushed - h.Counted - h.AggregateDropped
	}
	h.Published = pushed + h.Ineligible + h.InboxFull + h.Rejected + h.Disabled
	return h
}

// freeBuffers is how many payload buffers are kept for reuse: one being
// encoded and one being sent is the steady state.
const freeBuffers = 2

// maxSpareBuf is the largest payload buffer kept for reuse. A larger one
// (a report of many groups, up to MaxPayloadBytes) is left to the GC once
// sent, so a burst never leaves the process holding megabytes for good;
// encoding it again costs one allocation of the right size per interval.
const maxSpareBuf = 256 << 10

// getBuf returns an empty payload buffer with room for n bytes, reusing one
// the sender gave back if it is large enough.
func (a *Aggregator) getBuf(n int) []byte {
	select {
	case b := <-a.freeBuf:
		if cap(b) >= n {
			return b[:0]
		}
		a.putBuf(b) // too small for this one: keep it for the next
	default:
	}
	return make([]byte, 0, max(n, 4<<10))
}

// putBuf offers a sent payload's buffer for reuse.
func (a *Aggregator) putBuf(b []byte) {
	if cap(b) > maxSpareBuf {
		return
	}
	select {
	case a.freeBuf <- b:
	default:
	}
}

// now is the clock; a variable so tests can check bucket alignment.
var now = time.Now

// newInbox returns the inbox of n spans. Its slots are cleared with
// aggregate.Span.Reset, which writes the ~170 bytes a span without peer
// tags fills (48 more for 3 tags), not the slot's whole 328: zeroing it all
// made the consumer fetch the slot's last cache lines, untouched since the
// last lap of an inbox larger than its L2 cache, only to write zeros over
// zeros. BenchmarkConsumer does not see this (its slots are filled on the
// consumer's core); the end-to-end benchmarks do: 1.35× the spans counted
// per second in SteadyState and 1.1× in Adversarial, in alternating rounds
// against whole-slot zeroing.
func newInbox(n int) *inbox.Ring[aggregate.Record] {
	r := inbox.New[aggregate.Record](n)
	r.SetClear((*aggregate.Record).Reset)
	return r
}
