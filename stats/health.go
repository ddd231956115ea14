package stats

import "sync/atomic"

// Health is a snapshot of an Aggregator's counters. Every span handed to
// Publish is in exactly one of: Counted, Ineligible, InboxFull, Rejected,
// AggregateDropped, or still Pending in the inbox (zero after Stop):
//
//	Published == Counted + Ineligible + InboxFull + Rejected + AggregateDropped + Pending
//
// and every counted span is in a payload that was sent, one that was not,
// one still aggregating, or was discarded by Clear:
//
//	Counted == SpansSent + SpansUnsent + Cleared + (spans in the current interval)
type Health struct {
	// Published is the number of Publish calls with a non-nil span.
	Published uint64
	// Ineligible spans were not counted by rule (see Span.Eligible).
	Ineligible uint64
	// InboxFull spans were dropped because the inbox was full.
	InboxFull uint64
	// Rejected spans were published after Stop.
	Rejected uint64
	// AggregateDropped spans could not be aggregated. The overflow entry
	// makes this 0; it exists so that a future drop cannot be silent.
	AggregateDropped uint64
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
	// Cleared spans were counted, then discarded by Clear before a report.
	Cleared uint64
	// Entries is the number of groups in the table after the last batch.
	Entries uint64

	// PayloadsSent were accepted by the agent (2xx).
	PayloadsSent uint64
	// PayloadsFailed got an error or a non-2xx answer.
	PayloadsFailed uint64
	// PayloadsDropped were discarded before sending (send queue full, or
	// the aggregator stopping before they could be sent).
	PayloadsDropped uint64
	// BytesSent is the total body size of PayloadsSent.
	BytesSent uint64
	// SpansSent is the sum of hits in PayloadsSent; SpansUnsent the sum of
	// hits in failed or dropped payloads.
	SpansSent, SpansUnsent uint64
}

// counters are the live values behind Health. Producers touch only
// ineligible, inboxFull and rejected, each on its own cache line.
type counters struct {
	ineligible padded
	inboxFull  padded
	rejected   padded

	// Written by the consumer goroutine only.
	counted, overflowed, recycled, cleared, entries, aggDropped atomic.Uint64
	// Written by the sender (and the consumer when it drops a report).
	payloadsSent, payloadsFailed, payloadsDropped, bytesSent atomic.Uint64
	spansSent, spansUnsent                                   atomic.Uint64
}

type padded struct {
	atomic.Uint64
	_ [56]byte // keep contended counters off each other's cache line
}
