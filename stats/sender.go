// This file holds the sender: the goroutine that hands each report's
// payloads to the agent client and counts every outcome in Health.

package stats

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/internal/agentclient"
)

var (
	// ErrRetryBudget is the outcome of a payload dropped because the retry
	// budget (attempts, queued payloads or bytes) was exhausted.
	ErrRetryBudget = agentclient.ErrRetryBudget
	// ErrAgentOff is the outcome of a payload dropped because the agent
	// does not accept client stats (404, or /info without /v0.6/stats).
	ErrAgentOff = agentclient.ErrAgentOff
)

// AgentError is returned (by Flush) when the agent answers a payload with a
// non-2xx status.
type AgentError = agentclient.AgentError

// report is one interval's payloads, handed from the consumer to the sender.
type report struct {
	parts []part
	done  chan error // non-nil when Flush or Stop waits for the outcome
	final bool       // the consumer's last (Stop)
	// headerOnly: a relay's final flag when Stop had no group left, one
	// part of the header alone (consumer.sendFinal); HTTP never gets one.
	headerOnly bool
	// fallback (to a relay, Stop's report): a payload of the header alone
	// that carries the final flag if the last part is not written.
	fallback []byte
	// answer is the consumer's outcome for done (ErrAgentOff), if any: a
	// Flush that found nothing to send still waits for the reports held
	// before it, sent with it (sender.withHeld).
	answer error
	// merged counts the held reports whose parts withHeld put before this
	// report's: each keeps its own patience toward a relay.
	merged int
	// queued is when the consumer queued it (zero: when the sender took it):
	// its jitter counts from there, not from when a sender busy with a slow
	// agent got to it (TestJitterCountsFromTheQueueing).
	queued time.Time
}

type part struct {
	body []byte
	hits uint64
}

// sender is the state of the goroutine that talks to the agent. It reaches
// the table only through signals (Clear).
type sender struct {
	in <-chan *report
	// stopping is closed when Stop begins: the retries then wait for the
	// stop's window (Final) rather than spend an HTTPTimeout each against
	// a hung agent while the last reports come (TestStopBoundWithHungAgent);
	// the held reports still go at their time.
	stopping <-chan struct{}
	out      transport
	ctr      *counters
	bufs     bufPool
	// peerTags is the agent's peer_tags list for the consumer, unless the
	// config fixed the keys (fixedPeerTags).
	peerTags      atomic.Pointer[[]string]
	fixedPeerTags bool
	clear         func()
	switches      agentclient.SwitchLog // the agent's returns, rate-limited
	health        func() Health
	metrics       *emitter
	done          chan struct{}

	logs    *troubleLog
	jitter  time.Duration // Config.SendJitter past the bucket's close
	rng     *rand.Rand
	delayed []delayedReport // interval reports waiting for their send time
	// infoStreak counts the /info reads failed since the last good one:
	// the first of a streak is logged, and its end.
	infoStreak uint64
}

// delayedReport is an interval's report held until its jittered send time.
type delayedReport struct {
	r   *report
	due time.Time
}

func newSender(ctx context.Context, a *Aggregator, cfg *Config, to target, in <-chan *report, bufs bufPool) *sender {
	s := &sender{
		in:            in,
		stopping:      a.stopCh,
		ctr:           &a.c,
		bufs:          bufs,
		fixedPeerTags: len(cfg.PeerTagKeys) > 0,
		clear:         a.Clear,
		health:        a.Health,
		metrics:       &emitter{client: cfg.Metrics, namespace: cfg.MetricsNamespace},
		done:          make(chan struct{}),
		logs:          newTroubleLog(cfg.Logger),
		jitter:        cfg.SendJitter,
		rng:           rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	// The consumer reports a bucket at its close, the grace after its
	// boundary: the jitter is what is left of SendJitter past that.
	s.jitter = max(s.jitter-closeGrace(cfg.BucketInterval), 0)
	if to.network != "" {
		s.out = newDatagramOut(ctx, to, cfg.MaxDatagramBytes, &a.c, bufs)
		return s
	}
	s.out = &httpOut{
		stopWindow: cfg.StopRetryWindow,
		headers: agentclient.Headers{
			Lang: cfg.Lang, LangVersion: cfg.LangVersion, TracerVersion: cfg.TracerVersion,
			ContainerID: cfg.ContainerID, EntityID: cfg.EntityID,
		},
		client: agentclient.New(ctx, agentclient.Config{
			Endpoint:         to.http,
			Timeout:          cfg.HTTPTimeout,
			MaxRetries:       cfg.MaxRetries,
			RetryBackoff:     cfg.RetryBackoff,
			MaxRetryBackoff:  cfg.MaxRetryBackoff,
			MaxRetryPayloads: cfg.MaxRetryPayloads,
			MaxRetryBytes:    cfg.MaxRetryBytes,
			InfoRefresh:      cfg.InfoRefresh,
			RecheckInfo:      agentclient.InfoRecheck * cfg.InfoRefresh, // for a new peer_tags list
			Parallel:         1,                                         // a report is a payload or a few: one connection
			Off:              &a.off,
			GetBuf:           bufs.get,
			PutBuf:           bufs.put,
		}, s),
	}
	return s
}

// transport delivers reports: to the agent over HTTP (httpOut), or as
// datagrams to a relay (datagramOut). Its methods run on the sender.
type transport interface {
	start()
	// send delivers r; last marks the sender's last report.
	send(r *report, last bool)
	// nextDue and runDue schedule work of its own (retries, /info polls).
	nextDue() (time.Time, bool)
	runDue(now time.Time)
	// stop gives pending work a last chance and releases the transport.
	stop()
}

// httpOut posts payloads through the agent client.
type httpOut struct {
	client     *agentclient.Client
	headers    agentclient.Headers
	stopWindow time.Duration // Config.StopRetryWindow
}

func (h *httpOut) start() { h.client.ReadInfo() }

func (h *httpOut) send(r *report, _ bool) {
	w := agentclient.NewWaiter(r.done, len(r.parts), r.answer)
	for _, p := range r.parts {
		h.client.Send(&agentclient.Payload{Body: p.body, Hits: p.hits, Headers: &h.headers, Waiter: w})
	}
}

func (h *httpOut) nextDue() (time.Time, bool) { return h.client.NextDue() }
func (h *httpOut) runDue(now time.Time)       { h.client.RunDue(now) }

func (h *httpOut) stop() {
	h.client.Final(h.stopWindow)
	h.client.Close()
}

// run is the sender goroutine: it sends each report's payloads, runs the
// client's retries when due, and answers the waiting Flush or Stop.
func (s *sender) run() {
	defer close(s.done)
	defer func() {
		h := s.health()
		s.metrics.emit(h)
		s.logs.check(h, time.Now(), true)
		s.switches.Check(s.logs.log, true)
	}()
	s.out.start()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wake <-chan time.Time
		if d, ok := s.nextDue(); ok {
			timer.Reset(max(time.Until(d), 0))
			wake = timer.C
		}
		select {
		case r, ok := <-s.in:
			if !ok {
				for i, d := range s.delayed {
					s.send(d.r, i == len(s.delayed)-1)
				}
				s.out.stop()
				return
			}
			if r.done != nil || s.jitter <= 0 {
				// Someone waits for it: send it now, after the reports
				// still held, so that payloads leave in sequence order.
				if r = s.withHeld(r); len(r.parts) == 0 {
					if r.done != nil {
						r.done <- r.answer
					}
					continue
				}
				s.send(r, r.final)
				continue
			}
			d := time.Duration(s.rng.Int64N(int64(s.jitter) + 1))
			due := cmp.Or(r.queued, time.Now()).Add(d) // past already: sent at once
			s.delayed = append(s.delayed, delayedReport{r: r, due: due})
		case <-wake:
			t := time.Now()
			// A report due now goes with every report held before it, in
			// order: a later report never overtakes an earlier one.
			n := 0
			for i, d := range s.delayed {
				if !t.Before(d.due) {
					n = i + 1
				}
			}
			s.sendHeld(n)
			if !s.isStopping() {
				s.out.runDue(t)
			}
			// Also here: while the agent refuses stats there is no report,
			// and the outage's drops must not wait for its end to be counted.
			h := s.health()
			s.metrics.emit(h)
			s.logs.check(h, time.Now(), false)
			s.switches.Check(s.logs.log, false)
		}
	}
}

// isStopping says whether Stop has begun: from then the retries wait for
// the stop's window.
func (s *sender) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// withHeld returns r with the parts of every held report before its own,
// so that whoever waits for r (Flush) is answered once those too are
// handed over, with their first error. A held final report (Stop's) goes
// out on its own first, with its flag.
func (s *sender) withHeld(r *report) *report {
	if len(s.delayed) == 0 {
		return r
	}
	if slices.ContainsFunc(s.delayed, func(d delayedReport) bool { return d.r.final || d.r.fallback != nil }) {
		s.sendHeld(len(s.delayed))
		return r
	}
	var parts []part
	for _, d := range s.delayed {
		parts = append(parts, d.r.parts...)
	}
	m := *r
	m.parts = append(parts, r.parts...)
	m.merged = r.merged + len(s.delayed)
	if len(r.parts) == 0 { // a Flush with nothing new is no report of its own
		m.merged--
	}
	s.delayed = slices.Delete(s.delayed, 0, len(s.delayed))
	return &m
}

// sendHeld sends the first n held reports, in arrival order.
func (s *sender) sendHeld(n int) {
	for _, d := range s.delayed[:n] {
		s.send(d.r, d.r.final) // Stop's last, due before the queue's close is seen
	}
	s.delayed = slices.Delete(s.delayed, 0, n)
}

// nextDue is the earliest of the delayed reports' send times, the
// client's work and a pending log line.
func (s *sender) nextDue() (time.Time, bool) {
	var d time.Time
	ok := false
	if !s.isStopping() { // the retries wait for the stop's window
		d, ok = s.out.nextDue()
	}
	if l, lok := s.logs.due(); lok && (!ok || l.Before(d)) {
		d, ok = l, true
	}
	for _, r := range s.delayed {
		if !ok || r.due.Before(d) {
			d, ok = r.due, true
		}
	}
	return d, ok
}

// send hands a report to the transport.
func (s *sender) send(r *report, last bool) {
	s.out.send(r, last)
	h := s.health()
	s.metrics.emit(h)
	s.logs.check(h, time.Now(), false)
	s.switches.Check(s.logs.log, false)
}

// The sender is the agent client's Observer: it counts every outcome.

// Sent counts a payload the agent accepted.
func (s *sender) Sent(p *agentclient.Payload) {
	s.ctr.payloadsSent.Add(1)
	s.ctr.bytesSent.Add(uint64(len(p.Body)))
	s.ctr.spansSent.Add(p.Hits)
}

// Failed counts a failed attempt and keeps its error for Health.
func (s *sender) Failed(_ *agentclient.Payload, err error) {
	s.ctr.noteError(err)
	s.ctr.payloadsFailed.Add(1)
}

// Retried counts an attempt scheduled after a retryable failure, and
// apart those after a timeout (see Health.RetriesAfterTimeout).
func (s *sender) Retried(_ *agentclient.Payload, afterTimeout bool) {
	s.ctr.payloadsRetried.Add(1)
	if afterTimeout {
		s.ctr.retriesAfterTimeout.Add(1)
	}
}

// Split counts a payload the agent refused as too large.
func (s *sender) Split(*agentclient.Payload) { s.ctr.payloadsSplit.Add(1) }

// Dropped counts a payload given up, and its spans.
func (s *sender) Dropped(p *agentclient.Payload, err error) {
	s.ctr.noteError(err)
	s.ctr.payloadsDropped.Add(1)
	s.ctr.spansUnsent.Add(p.Hits) // before its part: see Health
	if p.MaybeDelivered() {
		s.ctr.unsentAfterTimeout.Add(p.Hits)
	}
}

// Off clears the table: the agent would refuse what it holds.
func (s *sender) Off(switched bool) {
	if switched {
		s.ctr.agentOffTimes.Add(1)
	}
	s.clear()
}

// On logs the agent's return, rate-limited (the trouble log says when it
// went off).
func (s *sender) On() {
	s.switches.Log(s.logs.log, slog.LevelInfo, "spanstats: the agent accepts client stats again; aggregating")
}

// Info counts the read and hands the agent's peer tags to the consumer.
func (s *sender) Info(info *agentclient.Info) {
	if !s.fixedPeerTags {
		// Read again every InfoRecheck × InfoRefresh while the agent takes
		// stats (every poll while it does not): a new list empties the
		// tables' caches. Before the count: a caller that sees the read
		// counted publishes under the new list. No list (peer_tags null:
		// the agent's peer_tags_aggregation is off, or an agent older than
		// the list) keeps no peer tag, as the agent's own concentrator and
		// dd-trace-go then keep none (TestPeerTagsAggregationOffMatchesAgent).
		if k := s.peerTags.Load(); k == nil || !slices.Equal(*k, info.PeerTags) {
			keys := append(make([]string, 0, len(info.PeerTags)), info.PeerTags...)
			s.peerTags.Store(&keys)
		}
	}
	s.ctr.infoErr.Store(nil) // before the count: a snapshot with the read has no stale error
	s.ctr.infoReads.Add(1)
	if s.infoStreak > 0 {
		s.logs.log.Info("spanstats: the agent's /info answers again", "failed_reads", s.infoStreak)
		s.infoStreak = 0
	}
}

// InfoFailed counts the failure and keeps its error for Health; the first
// of a streak is logged (the client polls /info at up to InfoRefresh, and a
// line per poll would bury the log).
func (s *sender) InfoFailed(err error) {
	// Counted before the error is kept, as Health reads them the other way
	// round: a snapshot with this error has its failure counted.
	s.ctr.infoFailures.Add(1)
	s.ctr.infoErr.Store(&sendError{err: err, at: time.Now()})
	if s.infoStreak++; s.infoStreak > 1 {
		return
	}
	msg := "spanstats: the agent's /info could not be read; its last answer stands; polling it again"
	switch {
	case s.ctr.infoReads.Load() > 0:
	case s.fixedPeerTags:
		msg = "spanstats: the agent's /info could not be read; until it is, its body limit is unknown; polling it again"
	default:
		msg = "spanstats: the agent's /info could not be read; until it is, its peer_tags list and body limit are unknown (every peer-tag key is kept); polling it again"
	}
	s.logs.log.Warn(msg, "error", err)
}
