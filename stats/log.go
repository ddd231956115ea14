// This file holds the rate-limited log of trouble: the sender compares
// Health snapshots and logs what grew, each kind at most once per logEvery,
// with the count since the kind's previous line.

package stats

import (
	"log/slog"
	"time"
)

// logEvery is the least time between two lines of one kind: an agent outage
// fails every report, and a line per report would bury the log.
const logEvery = time.Minute

// trouble is a kind of line the sender logs.
type trouble int

const (
	troubleFailed    trouble = iota // attempts that failed (some are retried)
	troubleDropped                  // payloads given up, with their spans
	troubleAgentOff                 // the agent refuses stats; spans not aggregated
	troubleShed                     // spans dropped before aggregation (inbox full; and AggregateDropped)
	troubleUndrained                // spans left in the inbox at Stop's deadline
	numTrouble
)

// troubleLog turns counter growth into log lines. Only the sender goroutine
// uses it.
type troubleLog struct {
	log   *slog.Logger
	every time.Duration
	seen  Health // counters at the previous check
	kinds [numTrouble]struct {
		n, spans uint64    // growth not logged yet
		last     time.Time // the kind's previous line; zero: none yet
	}
}

func newTroubleLog(log *slog.Logger) *troubleLog {
	return &troubleLog{log: log, every: logEvery}
}

// check adds what grew since the previous check and logs every kind whose
// wait is over; final logs whatever is pending, waiting or not.
func (l *troubleLog) check(h Health, now time.Time, final bool) {
	p := &l.seen
	l.add(troubleFailed, h.PayloadsFailed-p.PayloadsFailed, 0)
	l.add(troubleDropped, h.PayloadsDropped-p.PayloadsDropped, h.SpansUnsent-p.SpansUnsent)
	l.add(troubleAgentOff, h.AgentOffTimes-p.AgentOffTimes, h.AgentOffSpans-p.AgentOffSpans)
	l.add(troubleShed, h.InboxFull-p.InboxFull, h.AggregateDropped-p.AggregateDropped)
	l.add(troubleUndrained, h.StopUndrained-p.StopUndrained, 0)
	l.seen = h
	for k := range numTrouble {
		st := &l.kinds[k]
		if st.n == 0 && st.spans == 0 || !final && !st.last.IsZero() && now.Sub(st.last) < l.every {
			continue
		}
		l.write(k, st.n, st.spans, &h)
		st.n, st.spans, st.last = 0, 0, now
	}
}

func (l *troubleLog) add(k trouble, n, spans uint64) {
	l.kinds[k].n += n
	l.kinds[k].spans += spans
}

// due is when a pending count may be logged next.
func (l *troubleLog) due() (time.Time, bool) {
	var t time.Time
	ok := false
	for k := range numTrouble {
		st := &l.kinds[k]
		if st.n == 0 && st.spans == 0 {
			continue
		}
		if d := st.last.Add(l.every); !ok || d.Before(t) {
			t, ok = d, true
		}
	}
	return t, ok
}

// write logs one line: n of kind k since the kind's previous line (the
// "since" attribute; absent on the first line).
func (l *troubleLog) write(k trouble, n, spans uint64, h *Health) {
	var since []any
	if last := l.kinds[k].last; !last.IsZero() {
		since = []any{"since", last}
	}
	switch k {
	case troubleFailed:
		l.log.Warn("spanstats: sending stats failed",
			append([]any{"attempts", n, "last_error", h.LastSendError, "at", h.LastSendErrorAt}, since...)...)
	case troubleDropped:
		l.log.Warn("spanstats: stats payloads dropped",
			append([]any{"payloads", n, "spans", spans, "last_error", h.LastSendError}, since...)...)
	case troubleAgentOff:
		msg := "spanstats: the agent does not accept client stats; spans are not aggregated until its /info lists /v0.6/stats"
		if !h.AgentOff { // the spans were refused earlier in the period; it is back
			msg = "spanstats: the agent did not accept client stats for a while; spans were not aggregated meanwhile"
		}
		l.log.Warn(msg, append([]any{"switched_off", n, "spans", spans, "agent_off", h.AgentOff}, since...)...)
	case troubleShed:
		// spans here are Health.AggregateDropped, another cause (none
		// today: the overflow entry takes them), named apart.
		msg, args := "spanstats: spans dropped before aggregation (inbox full: the consumer could not keep up, or waits on a slot a Publish that panicked never wrote)", []any{"spans", n}
		if spans > 0 {
			if n == 0 {
				msg, args = "spanstats: spans could not be aggregated", nil
			}
			args = append(args, "not_aggregatable", spans)
		}
		l.log.Warn(msg, append(args, since...)...)
	case troubleUndrained:
		// Its own line: the shed line blames a full inbox, and these were
		// published in time but Stop's deadline came before the consumer
		// (or the consumer gave up on a slot a panicked Publish left).
		l.log.Warn("spanstats: spans not aggregated: Stop's deadline came before the consumer took them from the inbox, or they queued behind a slot a Publish that panicked never wrote",
			append([]any{"spans", n}, since...)...)
	default:
		panic("BUG: unknown trouble kind")
	}
}
