// This file holds the Aggregator: construction, the public methods, and
// the wiring of the consumer and sender goroutines.

package stats

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
)

// yield is runtime.Gosched; tests count the calls, and
// BenchmarkPublishLatencyOverload swaps in the candidate shed policies.
var yield = runtime.Gosched

var (
	// ErrStopped is returned by Flush and Stop once the aggregator has stopped.
	ErrStopped = errors.New("stats: aggregator stopped")
	// ErrNotStarted is returned by Flush before Start: nothing would
	// answer it.
	ErrNotStarted = errors.New("stats: aggregator not started")
	// ErrSendQueueFull is returned by Flush when its report could not be
	// queued because the sender is still busy with earlier ones: the
	// report is dropped and counted in PayloadsDropped. A Flush that had
	// nothing new to send drops nothing, but could not wait for those
	// earlier reports either.
	ErrSendQueueFull = errors.New("stats: send queue full: the sender is busy with earlier reports")
	// errStopDeadline is the cause of a report dropped unencoded because
	// Stop's context ended first (Health.LastSendError).
	errStopDeadline = errors.New("stats: Stop's context ended before the report was encoded")
)

// Aggregator computes span stats and reports them to the agent. Publish,
// Flush, Stop, Clear and Health are safe for concurrent use.
type Aggregator struct {
	inbox *inbox.Ring[aggregate.Record]
	c     counters
	// off is set while the agent does not accept stats; Publish reads it
	// (a shared, rarely written cache line).
	off atomic.Bool
	// yieldEvery is Config.ShedYieldEvery, or 0 with ShedWithoutYield.
	yieldEvery uint64
	log        *slog.Logger
	// unstartedWarned: a full inbox was blamed on a missing Start once, or
	// filled after Start; either way there is nothing (more) to warn of.
	unstartedWarned atomic.Bool

	cons *consumer
	snd  *sender

	flushCh chan flushReq // Flush requests, answered after the send
	clearCh chan struct{} // ClearSignal, coalesced
	stopCh  chan struct{} // closed by Stop
	abort   context.CancelFunc

	startOnce, stopOnce sync.Once
	started             chan struct{}
}

// New validates cfg and returns an Aggregator that is not started yet.
func New(cfg Config) (*Aggregator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	to, err := parseAgentURL(cfg.AgentURL)
	if err != nil {
		return nil, err
	}
	a := &Aggregator{
		inbox:   newInbox(cfg.InboxSize),
		flushCh: make(chan flushReq),
		clearCh: make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		started: make(chan struct{}),
		log:     cfg.Logger,
	}
	if !cfg.ShedWithoutYield {
		a.yieldEvery = uint64(cfg.ShedYieldEvery)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.abort = cancel
	reports := make(chan *report, cfg.SendQueue)
	bufs := newBufPool()
	a.snd = newSender(ctx, a, &cfg, to, reports, bufs)
	a.cons = newConsumer(a, &cfg, to, reports, bufs, ctx.Done())
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
		go a.cons.run()
		go a.snd.run()
	})
}

// Publish hands a finished span to the aggregator, once: a partial snapshot
// of a span still running (one a tracer flushes early, which the agent
// marks _dd.partial_version and its concentrator leaves out) must not be
// published, or the span counts twice. It never waits for the consumer
// (on a full inbox it drops the span, and yields its processor once every
// Config.ShedYieldEvery drops, see there), does not retain s, and allocates nothing unless s has more than
// aggregate.MaxInlinePeerTags peer tags. It returns false when the span is
// dropped (inbox full, published after Stop, or the agent does not accept
// stats; each counted in Health) and for a nil s (not counted); an
// ineligible span returns true — it is correctly not counted. Label values over their limits (MaxResourceLen
// and the others) are cut, and cost one allocation each (a peer tag read
// whole whose value quantizes to MaxTagLen or less is not cut, and costs
// none; one read in part is counted cut, and costs one; once more than 16
// distinct entries are read, the set that drops repeats costs about an
// allocation per entry besides, cut or not). Before Start
// nothing drains the inbox: once it is full, the first drop logs a warning
// that Start was never called. A Publish that panics while it copies s
// (only a span another goroutine changes meanwhile can make it) leaves its
// inbox slot claimed and unwritten: the consumer stops at that slot, and
// the spans behind it wait there until Stop, which waits a second for the
// slot (less if its deadline comes first) and then drops them
// (StopUndrained); the spans before it are reported as usual, a Flush
// waits for the slot until its ctx ends or Stop is called (then returning
// ErrStopped), and a tick or a Clear for 100 ms;
// meanwhile the consumer looks at the slot 10 times a second. No guard
// against it is paid on every call.
func (a *Aggregator) Publish(s *Span) bool {
	if s == nil {
		return false
	}
	if !s.Eligible() {
		a.c.ineligible.Add(1)
		return true
	}
	if a.off.Load() {
		if a.inbox.Closed() { // as Stop's doc says, whatever the agent's state
			a.c.afterStop.Add(1)
		} else {
			a.c.agentOff.Add(1)
		}
		return false
	}
	if c, ok := a.inbox.Claim(); ok {
		cut := s.snapshot(c.Value()) // straight into the slot: no copy of the record
		if cut != (cuts{}) {
			// Before the commit: once committed, Stop may report its last
			// metrics and log lines before this producer runs again.
			a.c.addCuts(cut)
		}
		c.Commit()
		return true
	}
	if a.inbox.Closed() {
		a.c.afterStop.Add(1)
		return false
	}
	// A full inbox means the consumer is short of CPU: now and then give it
	// this processor (Config.ShedYieldEvery). The span is already dropped
	// and counted; the count in hand picks the calls that yield.
	if n := a.c.inboxFull.Add(1); a.yieldEvery != 0 && n%a.yieldEvery == 0 {
		yield()
	}
	if !a.unstartedWarned.Load() {
		a.warnIfNotStarted()
	}
	return false
}

// warnIfNotStarted logs, once per aggregator, that the inbox is full
// because Start was never called: the drops would otherwise show only as
// InboxFull, and the sender, which logs the shed spans, is not running.
func (a *Aggregator) warnIfNotStarted() {
	select {
	case <-a.started:
		// Overload, which the sender logs. Nothing to warn of from now on:
		// the shed path (saturation) skips this select hereafter.
		a.unstartedWarned.Store(true)
		return
	default:
	}
	if a.unstartedWarned.CompareAndSwap(false, true) {
		a.log.Warn("spanstats: Publish called on an aggregator that was never started: its inbox is full and spans are dropped (Health.InboxFull) until Start is called",
			"inbox_size", a.inbox.Cap())
	}
}

// Flush reports everything published before the call, now, and returns once
// the payloads were handed to the agent, with the first send error. A span
// whose Publish is still writing it is waited for, within ctx, until Stop
// is called (the Flush then reports what it read and returns ErrStopped). Before
// Start it returns ErrNotStarted at once (it does not start the aggregator).
// The payloads of earlier reports that wait for a retry after a failed
// attempt are not waited for: they go at their retry time, or at Stop,
// which gives them their last attempts. A Flush whose report Stop's
// deadline cuts short returns that cause, the report counted dropped.
// Before freezing a process (a serverless function), Health's Counted −
// Cleared − SpansSent − SpansUnsent is what is still on its way.
func (a *Aggregator) Flush(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return ErrNotStarted
	}
	select {
	case <-a.cons.done:
		// Stopped: ErrStopped whatever ctx says, not one or the other
		// as select would pick between two ready cases.
		return ErrStopped
	default:
	}
	done := make(chan error, 1)
	until := ctx.Done()
	if until == nil {
		until = forever
	}
	select {
	case a.flushCh <- flushReq{done, until}:
	case <-a.cons.done:
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

// Clear asks the consumer to discard every aggregate (the ClearSignal):
// every span published before the call, aggregated or still in the inbox,
// and any published after it that the consumer takes before it handles
// the request. The discarded spans are counted in Health.Cleared. It does
// not wait. A span whose Publish is still writing it 100 ms after the
// consumer takes the request, and those queued behind it, are not
// discarded.
func (a *Aggregator) Clear() {
	select {
	case a.clearCh <- struct{}{}:
	default: // a clear is already pending; they coalesce
	}
}

// Stop drains the inbox, sends a final report and ends every goroutine.
// Payloads still waiting for a retry (the agent answered 5xx, or 404 and
// may come back) get their retries at their backoff for up to
// Config.StopRetryWindow (default 5 s), no request starting after it,
// then one last attempt each. Against an agent that keeps failing Stop
// may take that long, plus, against a hung agent, Config.HTTPTimeout for
// each first attempt of the payloads of the reports still queued for the
// sender (at most Config.SendQueue), of the final report and of the
// reports the send jitter held (sent one at a time before the window; the
// retries wait for it), for the requests in flight as the window ends,
// and for each payload still waiting; give ctx a deadline to bound it. If ctx ends first, it returns ctx's
// error within moments: in-flight
// requests are cancelled, the spans still in the inbox are counted in
// Health.StopUndrained and undelivered reports in SpansUnsent.
// Spans published while Stop drains the inbox may still be aggregated
// and sent; from the moment the consumer closes the inbox, Publish counts
// them in Health.AfterStop. Either way each is counted once.
// The first Stop's ctx bounds the shutdown; a Stop called meanwhile waits
// for it within its own ctx (returning ctx's error, cancelling nothing),
// and once it is done returns ErrStopped.
func (a *Aggregator) Stop(ctx context.Context) error {
	a.Start() // a never-started aggregator still reports what it holds
	first := false
	a.stopOnce.Do(func() {
		first = true
		close(a.stopCh)
	})
	if !first { // another Stop runs: wait for it, within this one's ctx
		select {
		case <-a.snd.done:
			<-a.cons.done
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-a.snd.done:
		<-a.cons.done
		a.abort()
		return nil
	case <-ctx.Done():
		a.cons.halt.Store(true)
		// Nor wait for a slot claimed and never written (a Publish that
		// panicked in its copy): counted in StopUndrained all the same
		// (TestStopPastAnAbandonedSlot).
		a.inbox.GiveUp()
		a.abort()
		<-a.cons.done
		<-a.snd.done
		return ctx.Err()
	}
}
