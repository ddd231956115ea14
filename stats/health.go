// This file holds Health, the aggregator's account of every span and
// payload, and the counters it is read from.

package stats

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
)

// Health is a snapshot of an Aggregator's counters. Every span handed to
// Publish is in exactly one of: Counted, Ineligible, InboxFull, AfterStop,
// AgentOffSpans, AggregateDropped, StopUndrained, or still Pending in the
// inbox (zero after Stop):
//
//	Published == Counted + Ineligible + InboxFull + AfterStop + AgentOffSpans + AggregateDropped + StopUndrained + Pending
//
// and every counted span is in a payload that was sent, one that was not,
// or was discarded by Clear, or is still on its way:
//
//	Counted == SpansSent + SpansUnsent + Cleared + (spans on their way)
//
// where the spans on their way are those in the open buckets and in
// reports the sender has not settled (queued for it, held for the send's
// jitter, waiting for a retry). No counter holds them: the second identity
// is exact once Stop has returned, when there are none; before, Counted
// less the other three is what is on its way.
type Health struct {
	// Published is the number of Publish calls with a non-nil span.
	Published uint64
	// Ineligible spans were not counted by rule (see Span.Eligible).
	Ineligible uint64
	// InboxFull spans were dropped because the inbox was full.
	InboxFull uint64
	// AfterStop spans were published once Stop had closed the inbox.
	AfterStop uint64
	// AggregateDropped spans could not be aggregated. The overflow entry
	// makes this 0; it exists so that a future drop cannot be silent.
	AggregateDropped uint64
	// StopUndrained spans were still in the inbox when Stop's context
	// ended, dropped unaggregated so that Stop returns by its deadline; or
	// sat behind a slot whose Publish never wrote it (it panicked), which
	// Stop waits for one second at most.
	StopUndrained uint64
	// Pending spans are in the inbox, not yet seen by the consumer.
	Pending uint64
	// Counted spans were added to an entry (including the overflow entry).
	Counted uint64
	// Overflowed spans were counted in the overflow entry because the table
	// was at its cap with no idle entry (their labels are lost, not their
	// hits, errors or durations).
	Overflowed uint64
	// Recycled is the number of idle entries reused for a new key at the cap.
	Recycled uint64
	// Cleared spans were counted, then discarded before a report: by Clear,
	// or because the agent switched stats off (what the table held then).
	Cleared uint64
	// Entries is the number of groups held after the last batch: the
	// current bucket's table and the previous one's, open for its grace,
	// each capped at MaxAggregates (so up to twice it), idle groups kept
	// for reuse included, the overflow groups not.
	Entries uint64
	// CollapsedSpans were counted with at least one label over its
	// cardinality budget (replaced by tracer_blocked_value); Collapsed counts,
	// per field, the spans whose value of it (for peer tags, any of them)
	// was collapsed. Both are part of Counted.
	CollapsedSpans uint64
	Collapsed      FieldCounts
	// LateSpans were counted in the oldest open bucket because no open
	// bucket holds their end: they ended before it began, or between the
	// buckets a pause left apart (see Span.Start); they are part of Counted.
	LateSpans uint64
	// ClockStepsBack counts the times the consumer found the wall clock
	// gone back by more than an interval behind its latest reading (or
	// more than 30 s behind the current bucket's start): each time it
	// reported the open buckets with their spans, each keeping its length
	// but re-stamped to end at the new time (so not aligned: a relay
	// refuses a start in its future), and started new ones on the new
	// time, rather than wait for the clock to come back to report again.
	// A smaller step keeps the buckets; spans stamped before the current
	// one count in LateSpans.
	ClockStepsBack uint64
	// PeerTagsCut counts the peer tags left out of spans that carried more
	// than MaxPeerTags (the spans themselves are counted).
	PeerTagsCut uint64
	// LabelsTruncated counts label values (peer tags included) cut to
	// their length limit (MaxResourceLen and the others in span.go), and
	// peer tags holding a list of IP addresses longer than Publish reads
	// (4 × what MaxTagLen leaves for the value after its key), whose
	// unread entries are left out (counted even where they were all
	// duplicates, the tag then as the agent keys it); the spans themselves
	// are counted.
	LabelsTruncated uint64
	// AgentOffSpans were not aggregated because the agent did not accept
	// client stats when they were published (see AgentOff).
	AgentOffSpans uint64

	// PayloadsSent were accepted by the agent (2xx), or, toward a relay
	// (unixgram://, udp://), written to its socket whole.
	PayloadsSent uint64
	// PayloadsFailed counts failed attempts: an error or a non-2xx answer.
	// A payload retried three times and then sent adds 3 here and 1 to
	// PayloadsSent. Toward a relay, a payload too large for a datagram
	// (ErrDatagramTooLarge) counts here too, though nothing was sent.
	PayloadsFailed uint64
	// PayloadsRetried counts attempts scheduled after a retryable failure
	// (toward a relay: a missing relay; a full socket's short waits are
	// neither failures nor retries: DatagramWaits).
	PayloadsRetried uint64
	// DatagramWaits counts, toward a relay, the times a datagram found the
	// relay's socket full (EAGAIN, ENOBUFS) and was written again after a
	// short pause, within the report's patience. Frequent waits say the
	// relay's queue is short for this host's bursts (on Linux,
	// net.unix.max_dgram_qlen); a wait that outlasts the patience also
	// drops the payload (PayloadsDropped). Off Linux a write first waits
	// in the kernel for up to 10 ms: only one still refused then counts.
	DatagramWaits uint64
	// RetriesAfterTimeout counts the PayloadsRetried whose failed attempt
	// timed out, or lost its connection before the answer, after the
	// request was sent: the agent may have accepted the payload, so the
	// retry may count its spans twice (delivery is at-least-once).
	RetriesAfterTimeout uint64
	// UnsentAfterTimeout counts the SpansUnsent of payloads an attempt of
	// which timed out, lost its connection before the answer, or was cut by
	// Stop's deadline, after the request was sent: the agent may have taken
	// them after all. Spans of payloads delivered by a retry after such an
	// attempt (RetriesAfterTimeout) may reach the agent twice and are not
	// counted here: the agent can show more than SpansSent +
	// UnsentAfterTimeout when RetriesAfterTimeout is not zero.
	UnsentAfterTimeout uint64
	// PayloadsSplit counts payloads the agent refused as too large (413,
	// or its 400 "read limit reached"), or larger than the limit its /info
	// gives, each re-sent as smaller complete payloads of about half its size
	// (usually two, three when no cut falls near its middle).
	PayloadsSplit uint64
	// PayloadsDropped were given up: retry budget exhausted (404s
	// included: a payload the agent answered 404 is held within the budget
	// for /info to list the stats endpoint again), refused by the agent
	// (400 and other 4xx), send queue full, or still unsent at the end of
	// Stop; toward a relay, also no relay listening or its socket full
	// for the report's patience, or a payload over MaxDatagramBytes
	// (ErrDatagramTooLarge). Their spans are in SpansUnsent.
	PayloadsDropped uint64
	// BytesSent is the total body size of PayloadsSent (toward a relay,
	// each datagram's envelope included).
	BytesSent uint64
	// SpansSent is the sum of hits in PayloadsSent; SpansUnsent the sum of
	// hits in dropped payloads.
	SpansSent, SpansUnsent uint64
	// AgentOff is true while the agent does not accept client stats (a 404,
	// or /info without /v0.6/stats); AgentOffTimes counts the switches to
	// that state and InfoReads the successful /info reads.
	AgentOff                 bool
	AgentOffTimes, InfoReads uint64
	// InfoFailures counts the /info reads that failed: no agent, a non-2xx
	// answer (a 404 is an old agent's answer, not a failure), a body that
	// is not /info's JSON. InfoError is the last failure's cause and
	// InfoErrorAt its time, until a read succeeds: then nil and zero.
	// Meanwhile the last read stands; before the first, the SDK knows no
	// peer_tags list (it keeps every key, unless Config.PeerTagKeys) and no
	// body limit, and takes the agent to accept stats. Toward a relay,
	// which reads /info itself, all three stay zero.
	InfoFailures uint64
	InfoError    error
	InfoErrorAt  time.Time

	// LastSendError is the most recent failure to deliver a payload (an
	// agent's non-2xx answer, a network error, a dropped payload's cause),
	// and LastSendErrorAt when it happened; nil and zero until one fails.
	// A later success does not clear it: compare with PayloadsSent.
	LastSendError   error
	LastSendErrorAt time.Time
}

// FieldCounts holds one counter per label field with a cardinality budget,
// indexed by aggregate.Field: h.Collapsed[aggregate.FieldResource].
type FieldCounts [aggregate.NumFields]uint64

// Total is the sum over all fields.
func (f *FieldCounts) Total() uint64 {
	var n uint64
	for _, v := range f {
		n += v
	}
	return n
}

// counters are the live values behind Health. Producers touch only
// ineligible, inboxFull, afterStop and agentOff, each on its own cache line.
type counters struct {
	ineligible striped
	inboxFull  striped
	afterStop  striped
	agentOff   striped // spans published while the agent refuses stats
	// peerTagsCut: tags over MaxPeerTags, written by producers (rarely).
	peerTagsCut striped
	// labelsTruncated: label values over their limits, written by
	// producers (rarely).
	labelsTruncated striped

	// Written by the consumer goroutine only.
	counted, overflowed, recycled, cleared, entries, aggDropped atomic.Uint64
	stopUndrained, late, clockStepsBack                         atomic.Uint64
	collapsedSpans                                              atomic.Uint64
	collapsed                                                   [aggregate.NumFields]atomic.Uint64
	// Written by the sender (and the consumer when it drops a report).
	payloadsSent, payloadsFailed, payloadsDropped, bytesSent atomic.Uint64
	payloadsRetried, payloadsSplit, agentOffTimes, infoReads atomic.Uint64
	datagramWaits                                            atomic.Uint64
	spansSent, spansUnsent                                   atomic.Uint64
	retriesAfterTimeout                                      atomic.Uint64
	unsentAfterTimeout                                       atomic.Uint64
	lastErr                                                  atomic.Pointer[sendError]
	infoFailures                                             atomic.Uint64
	infoErr                                                  atomic.Pointer[sendError] // nil once /info is read
	// Reports the consumer dropped before the sender saw them, for the
	// next datagram's envelope to tell the relay (the sender takes them).
	unannouncedPayloads, unannouncedSpans atomic.Uint64
}

// droppedReport counts payloads the consumer dropped before handing them
// to the sender, holding hits spans.
func (c *counters) droppedReport(payloads, hits uint64) {
	c.payloadsDropped.Add(payloads)
	c.spansUnsent.Add(hits)
	c.unannouncedPayloads.Add(payloads)
	c.unannouncedSpans.Add(hits)
}

// addCuts counts what Publish cut from one span.
func (c *counters) addCuts(cut cuts) {
	if cut.peerTags > 0 {
		c.peerTagsCut.Add(uint64(cut.peerTags))
	}
	if cut.labels > 0 {
		c.labelsTruncated.Add(uint64(cut.labels))
	}
}

// sendError is a failure (to deliver, to read /info) and its time, for
// Health.
type sendError struct {
	err error
	at  time.Time
}

// noteError records err as the last send error.
func (c *counters) noteError(err error) {
	if err != nil {
		c.noteErrorAt(err, time.Now())
	}
}

// noteErrorAt records err, which happened at at, unless the last send
// error is a later one: the consumer and the sender both note errors, and
// one that read the clock first may store second.
func (c *counters) noteErrorAt(err error, at time.Time) {
	e := &sendError{err: err, at: at}
	for {
		last := c.lastErr.Load()
		if last != nil && last.at.After(at) {
			return
		}
		if c.lastErr.CompareAndSwap(last, e) {
			return
		}
	}
}

// stripes is the number of cells of a striped counter: enough that 8–16
// publishing goroutines rarely share a cache line.
const (
	stripeBits = 4
	stripes    = 1 << stripeBits
)

// striped is a counter written by many producers: each adds to the cell
// its goroutine's stack address picks, so concurrent writers seldom share a
// cache line; reads sum the cells.
type striped struct {
	cells [stripes]struct {
		atomic.Uint64
		_ [56]byte // one cache line per cell
	}
}

// Add adds n in the calling goroutine's cell and returns the cell's new
// value.
func (c *striped) Add(n uint64) uint64 {
	var marker byte
	return c.cells[stripeOf(uintptr(unsafe.Pointer(&marker)))].Add(n)
}

// stripeOf is the cell of a goroutine whose stack holds addr. Goroutine
// stacks start at 2 KiB, often side by side: bits above 11 tell them apart,
// and Fibonacci hashing spreads neighbours over the cells
// (TestStripedCellsSpread). A stack that moves just picks another cell.
func stripeOf(addr uintptr) uint64 {
	return (uint64(addr) >> 11) * 0x9E3779B97F4A7C15 >> (64 - stripeBits)
}

// Load sums the cells.
func (c *striped) Load() uint64 {
	var n uint64
	for i := range c.cells {
		n += c.cells[i].Load()
	}
	return n
}

// Health returns a snapshot of the counters.
func (a *Aggregator) Health() Health {
	c := &a.c
	// Every part is read before its whole, and every writer adds to the
	// whole first, so a snapshot taken meanwhile never has a part above
	// its whole: what left the table (cleared, sent, unsent) and what is
	// counted apart (collapsed, overflowed, late) within Counted, each
	// field's Collapsed (peer tags too) within CollapsedSpans, the after-timeout counts
	// within theirs, the retries within the failed attempts they follow
	// (TestHealthPartsNeverExceedWhole, TestHealthRetriedNeverExceedsFailed).
	var byField FieldCounts
	for f := range byField {
		byField[f] = c.collapsed[f].Load()
	}
	collapsed, overflowed, late := c.collapsedSpans.Load(), c.overflowed.Load(), c.late.Load()
	retriedAfterTimeout, unsentAfterTimeout := c.retriesAfterTimeout.Load(), c.unsentAfterTimeout.Load()
	retried := c.payloadsRetried.Load()
	cleared, sent, unsent := c.cleared.Load(), c.spansSent.Load(), c.spansUnsent.Load()
	h := Health{
		Collapsed:           byField,
		RetriesAfterTimeout: retriedAfterTimeout,
		UnsentAfterTimeout:  unsentAfterTimeout,
		Ineligible:          c.ineligible.Load(),
		InboxFull:           c.inboxFull.Load(),
		AfterStop:           c.afterStop.Load(),
		AggregateDropped:    c.aggDropped.Load(),
		StopUndrained:       c.stopUndrained.Load(),
		LateSpans:           late,
		ClockStepsBack:      c.clockStepsBack.Load(),
		Counted:             c.counted.Load(),
		Overflowed:          overflowed,
		Recycled:            c.recycled.Load(),
		Cleared:             cleared,
		Entries:             c.entries.Load(),
		PayloadsSent:        c.payloadsSent.Load(),
		PayloadsFailed:      c.payloadsFailed.Load(),
		PayloadsDropped:     c.payloadsDropped.Load(),
		BytesSent:           c.bytesSent.Load(),
		SpansSent:           sent,
		SpansUnsent:         unsent,
		PayloadsRetried:     retried,
		PayloadsSplit:       c.payloadsSplit.Load(),
		DatagramWaits:       c.datagramWaits.Load(),
		AgentOffSpans:       c.agentOff.Load(),
		AgentOff:            a.off.Load(),
		AgentOffTimes:       c.agentOffTimes.Load(),
		InfoReads:           c.infoReads.Load(),
		CollapsedSpans:      collapsed,
		PeerTagsCut:         c.peerTagsCut.Load(),
	}
	h.LabelsTruncated = c.labelsTruncated.Load()
	if e := c.lastErr.Load(); e != nil {
		h.LastSendError, h.LastSendErrorAt = e.err, e.at
	}
	if e := c.infoErr.Load(); e != nil {
		h.InfoError, h.InfoErrorAt = e.err, e.at
	}
	h.InfoFailures = c.infoFailures.Load() // after the error (see InfoFailed)
	// Pushed is read last: every span the consumer counted was pushed
	// earlier, so Pending never goes negative.
	pushed := a.inbox.Pushed()
	if seen := h.Counted + h.AggregateDropped + h.StopUndrained; pushed > seen {
		h.Pending = pushed - seen
	}
	h.Published = pushed + h.Ineligible + h.InboxFull + h.AfterStop + h.AgentOffSpans
	return h
}
