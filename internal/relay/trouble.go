// This file holds the relay's log of trouble: after each forward it compares
// the counters with the previous look and logs what grew, each kind at most
// once per troubleEvery, with the counts since the kind's previous line, so
// an operator who reads only the log still learns that stats were lost.

package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/internal/agentclient"
)

// troubleEvery is the least time between two lines of one kind: an agent
// outage fails every forward, and a line per interval would bury the log.
const troubleEvery = time.Minute

// troubleKind is a kind of line; its counters are named "<kind>.<name>".
type troubleKind struct {
	prefix string
	level  slog.Level
	msg    string
}

var troubleKinds = []troubleKind{
	{"rejected", slog.LevelWarn, "statsrelay: datagrams rejected (statsrelay_datagrams_rejected_total)"},
	{"kernel", slog.LevelWarn, "statsrelay: the kernel dropped datagrams: the relay did not read fast enough (raise -udp-rcvbuf)"},
	{"senders", slog.LevelWarn, "statsrelay: senders lost datagrams on their way here (their own drops, sequence gaps), or were forgotten at a full sender table"},
	{"folded", slog.LevelWarn, "statsrelay: spans folded into the overflow group at -max-groups or -max-held-bytes"},
	{"late", slog.LevelWarn, "statsrelay: spans arrived after their window was forwarded; sent at the next round (senders send later than -grace allows)"},
	{"failed", slog.LevelWarn, "statsrelay: requests to the agent failed (5xx and network errors are retried; spans given up are logged as dropped)"},
	{"dropped", slog.LevelError, "statsrelay: spans dropped (statsrelay_spans_dropped_total)"},
	{"slow", slog.LevelWarn, "statsrelay: forward rounds took more than half the interval: the agent is slow to answer, " +
		"-forward-parallel is low for this many identities, or the relay was paused or short of CPU (statsrelay_forward_last_round_seconds)"},
}

// troubleLog turns counter growth into log lines. Only the forwarder uses
// it.
type troubleLog struct {
	log     *slog.Logger
	every   time.Duration
	seen    map[string]uint64 // counters at the previous look
	pending map[string]uint64 // growth not logged yet
	last    map[string]time.Time
	// lastErr is the last error noted for a kind since its previous line,
	// logged with it as last_error: a count alone does not say why.
	lastErr map[string]string
	// hints says, by counter name, what an operator can change about it;
	// a line carrying that counter carries the hint.
	hints map[string]string
}

func newTroubleLog(log *slog.Logger) *troubleLog {
	return &troubleLog{log: log, every: troubleEvery, seen: map[string]uint64{},
		pending: map[string]uint64{}, last: map[string]time.Time{}, lastErr: map[string]string{}}
}

// noteError keeps err as the last error of kind, for its next line; an
// attempt the stop cut short (context canceled) does not replace the
// error that made the others fail, which is the one worth reading.
func (l *troubleLog) noteError(kind string, err error) {
	if _, ok := l.lastErr[kind]; ok && errors.Is(err, context.Canceled) {
		return
	}
	l.lastErr[kind] = agentclient.Redact(err.Error())
}

// troubleCounters is the counters the trouble log watches, by name.
func (s *Server) troubleCounters() map[string]uint64 {
	st := s.relay.Stats()
	c := map[string]uint64{
		"senders.dropped_payloads": st.SenderDroppedPayloads,
		"senders.dropped_spans":    st.SenderDroppedSpans,
		"senders.seq_gaps":         st.SeqGaps,
		"senders.forgotten":        st.SendersForgotten,
		"folded.spans":             st.FoldedSpans,
		"late.spans":               st.LateSpans,
		"slow.rounds":              s.slowRounds.Load(),
	}
	for r := range NumReasons {
		c["rejected."+r.String()] = st.Rejected[r]
	}
	for t := range NumTransports {
		if conn := s.conn(t); conn != nil {
			c["kernel."+t.String()] = conn.KernelDrops()
		}
	}
	for reason, n := range st.SpansDropped {
		c["dropped."+reason] = n
	}
	s.requests.Range(func(code, n any) bool {
		if code != "2xx" {
			c["failed.status_"+code.(string)] = n.(*atomic.Uint64).Load()
		}
		return true
	})
	return c
}

// troubleHints are the trouble log's hints for this server's settings.
func (s *Server) troubleHints() map[string]string {
	return map[string]string{
		// A datagram over the limit is not read past it, so its sender is
		// unknown: the sender's next datagram read shows it as a gap too.
		"rejected.truncated": fmt.Sprintf("truncated datagrams are longer than -max-datagram (%d bytes, envelope included): "+
			"give the senders a MaxDatagramBytes at or below it, or raise -max-datagram; "+
			"a sender's next datagram read counts them as its sequence gaps too", s.cfg.MaxDatagram),
	}
}

// check adds what grew since the previous look and logs every kind whose
// wait is over; final logs whatever is pending, waiting or not.
func (l *troubleLog) check(counters map[string]uint64, now time.Time, final bool) {
	for name, v := range counters {
		if v > l.seen[name] {
			l.pending[name] += v - l.seen[name]
		}
		l.seen[name] = v
	}
	for _, k := range troubleKinds {
		if last, ok := l.last[k.prefix]; ok && !final && now.Sub(last) < l.every {
			continue
		}
		var attrs []any
		for _, name := range slices.Sorted(maps.Keys(l.pending)) {
			if rest, ok := strings.CutPrefix(name, k.prefix+"."); ok {
				attrs = append(attrs, slog.Uint64(rest, l.pending[name]))
				delete(l.pending, name)
			}
		}
		if len(attrs) == 0 {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(l.hints)) {
			if rest, ok := strings.CutPrefix(name, k.prefix+"."); ok && slices.ContainsFunc(attrs, func(a any) bool { return a.(slog.Attr).Key == rest }) {
				attrs = append(attrs, slog.String("hint", l.hints[name]))
			}
		}
		if e, ok := l.lastErr[k.prefix]; ok {
			attrs = append(attrs, slog.String("last_error", e))
			delete(l.lastErr, k.prefix)
		}
		if last, ok := l.last[k.prefix]; ok {
			attrs = append(attrs, slog.Duration("since", now.Sub(last).Round(time.Second)))
		}
		l.last[k.prefix] = now
		l.log.Log(context.Background(), k.level, k.msg, attrs...)
	}
}
