// This file holds the forwarder: at each interval boundary plus the grace,
// it harvests the merged payloads and sends them through the agent client,
// reporting every outcome back to the Relay's accounting.

package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/writer"
)

// What may wait for a retry in the forwarder's agent client: more than the
// SDK's, as a relay's reports carry the payloads of many identities.
const (
	forwardRetryPayloads = 256
	forwardRetryBytes    = 128 << 20
)

type forwarder struct {
	s         *Server
	client    *agentclient.Client
	final     chan struct{} // closed by Run once every datagram read is merged
	runtimeID string
	seq       uint64
	trouble   *troubleLog
	switches  agentclient.SwitchLog // the agent going off and back, rate-limited
	packer    writer.Packer         // one request per identity, more beyond MaxPayloadBytes or the agent's limit
	// infoStreak counts the /info reads failed since the last good one
	// (the first of a streak is logged, and its end); infoRead: one read
	// succeeded, so its answer stands.
	infoStreak uint64
	infoRead   bool
}

func newForwarder(ctx context.Context, s *Server) *forwarder {
	f := &forwarder{s: s, final: make(chan struct{}), runtimeID: newRuntimeID(), trouble: newTroubleLog(s.log)}
	f.trouble.hints = s.troubleHints()
	f.packer = writer.Packer{Limit: s.cfg.MaxPayloadBytes, Sequence: f.nextSeq}
	f.client = agentclient.New(ctx, agentclient.Config{
		Endpoint:         s.ep,
		Timeout:          s.cfg.AgentTimeout,
		MaxRetries:       agentclient.DefaultMaxRetries,
		RetryBackoff:     agentclient.DefaultRetryBackoff,
		MaxRetryBackoff:  agentclient.DefaultMaxRetryBackoff,
		MaxRetryPayloads: forwardRetryPayloads,
		MaxRetryBytes:    forwardRetryBytes,
		InfoRefresh:      s.cfg.InfoRefresh,
		Parallel:         s.cfg.ForwardParallel,
		Off:              &s.agentOff,
	}, f)
	return f
}

// boundaryAfter is the end of the window holding t: the boundary the
// forwarder waits for (plus the grace), on the epoch as windowOf aligns
// windows and the SDK its buckets.
func boundaryAfter(t time.Time, interval time.Duration) time.Time {
	return writer.AlignStart(t, interval).Add(interval)
}

// nextBoundary is the first boundary whose forward (at it plus grace) is
// not past at now: started or realigned within the grace after a boundary,
// the forwarder still forwards the window it ended then, not an interval
// later.
func nextBoundary(now time.Time, interval, grace time.Duration) time.Time {
	return boundaryAfter(now.Add(-grace), interval)
}

// stopRetries is how long the final forward's retries may take: as long as
// the stop timeout, which ends the client's context, allows.
const stopRetries = time.Duration(1 << 62)

// allWindows is a boundary after every window, ended or not.
var allWindows = time.Unix(0, 1<<62)

// run forwards at every boundary plus the grace until stop ends; then, once
// Run closes final, it forwards everything held and gives pending retries a
// last attempt.
func (f *forwarder) run(stop context.Context) {
	defer f.client.Close()
	cfg := &f.s.cfg
	// The start's time, not the end of the first /info read (up to a
	// Timeout): started within the grace, the relay forwards the window
	// the boundary ended as soon as the read returns, not an interval
	// later.
	boundary := nextBoundary(cfg.Now(), cfg.Interval, cfg.Grace)
	// Every /info read (this one, the rechecks, the client's polls while
	// it is stale) until the stop: an agent slow to answer it must not
	// hold the final forward back until the stop timeout cancels its
	// requests (TestStopDuringSlowInfoForwards).
	f.client.SetReadStop(stop)
	f.client.ReadInfo()
	infoRead := time.Now()
	tick := time.NewTimer(time.Until(boundary.Add(cfg.Grace)))
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		var retryC <-chan time.Time
		if d, ok := f.client.NextDue(); ok {
			retry.Reset(max(time.Until(d), 0))
			retryC = retry.C
		}
		select {
		case <-tick.C:
			// The wall clock gone back by more than an interval (a step:
			// an NTP correction, a restored VM) would stall forwarding
			// until it is back at the boundary: forward everything held
			// and realign on the new time.
			now := cfg.Now()
			stepped := boundary.Sub(now) > cfg.Interval
			if end := boundary.Add(cfg.Grace); !stepped && now.Before(end) {
				// Early on the wall clock, which went back by less than
				// that (or runs slow of the monotonic one the timer
				// keeps): the senders on this host, on the same wall
				// clock, still send the window's reports. Wait for its
				// grace on the wall clock (TestSmallStepBackDoesNotForwardEarly).
				tick.Reset(end.Sub(now))
				continue
			}
			due := boundary // the windows this round forwarded end by it
			if stepped {
				f.s.clockStepsBack.Add(1)
				f.s.log.Warn("statsrelay: the wall clock went back; forwarding everything held and realigning the intervals",
					"expected_after", boundary, "now", now)
				f.forward(allWindows)
			} else {
				// Late (the process was paused): the windows whose grace
				// has passed since go too, not an interval and grace later.
				if past := writer.AlignStart(now.Add(-cfg.Grace), cfg.Interval); past.After(due) {
					due = past
				}
				f.forward(due)
			}
			if time.Since(infoRead) >= infoRecheck*cfg.InfoRefresh && !f.client.Off() {
				// An agent restarted with another peer_tags list fails
				// no request: only a fresh read tells (the list applies
				// to what is merged from now on).
				f.client.ReadInfo()
				infoRead = time.Now()
			}
			now = cfg.Now()
			f.trouble.check(f.s.troubleCounters(), now, false)
			f.switches.Check(f.s.log, false)
			// From due, not boundary: a late round forwarded up to due, and
			// the next must not harvest it again at once (its senders'
			// sequence gaps would be judged milliseconds apart).
			boundary = due.Add(cfg.Interval)
			if stepped || now.Sub(boundary) >= cfg.Interval { // or the process was paused: realign
				boundary = nextBoundary(now, cfg.Interval, cfg.Grace)
				// Paused during the round (or the round itself took
				// intervals): the windows whose grace has passed since
				// it harvested go at once, not at the next boundary.
				if past := writer.AlignStart(now.Add(-cfg.Grace), cfg.Interval); !stepped && past.After(due) {
					boundary = past
				}
			}
			wait := boundary.Add(cfg.Grace).Sub(now)
			if wait > cfg.Interval+cfg.Grace {
				// Longer than any wait: the clock went back during the
				// round. The next one, at once, sees the step.
				wait = 0
			}
			tick.Reset(wait)
		case <-retryC:
			f.client.RunDue(time.Now())
		case <-stop.Done():
			<-f.final
			f.s.relay.CloseSequences() // every datagram read is merged
			f.forward(allWindows)
			f.client.Final(stopRetries)
			f.trouble.check(f.s.troubleCounters(), cfg.Now(), true)
			f.switches.Check(f.s.log, true)
			return
		}
	}
}

// forward sends every identity's windows that ended at or before boundary:
// one request per identity (more if it exceeds MaxPayloadBytes, or the
// lower body limit the agent's /info gives), up to ForwardParallel at
// once. Each payload is encoded when the one before it has a request slot,
// in one pass of the agent client: at most ForwardParallel + 1 bodies'
// worth of bytes (a refused body's parts replace it) exist at once beside
// the merged groups they encode, and a request the agent is slow to answer
// holds its slot, not the identities after it.
func (f *forwarder) forward(boundary time.Time) {
	start := time.Now()
	// Packed to the agent's limit when /info gave a lower one: the client
	// would decode each larger body and encode it again in parts.
	f.packer.Limit = f.s.cfg.MaxPayloadBytes
	if m := f.client.MaxBody(); m > 0 && m < int64(f.packer.Limit) {
		f.packer.Limit = int(m)
	}
	pass := f.client.NewPass()
	var identities, requests int
	var spans, unattributable uint64
	batches := f.s.relay.Harvest(boundary)
	for i := range batches {
		b := &batches[i]
		if f.s.selfContained && !b.HasContainer() && !b.Local {
			f.s.relay.Dropped(b.Hits, DropUnattributable)
			unattributable += b.Hits
			f.release(b)
			continue
		}
		identities++
		spans += b.Hits
		h := &agentclient.Headers{Lang: b.Lang, TracerVersion: b.TracerVersion, ContainerID: b.ContainerID}
		if b.ContainerID != "" {
			h.EntityID = "ci-" + b.ContainerID
		}
		b.RuntimeID = f.runtimeID
		f.packer.PackPayload(&b.Payload, func(body []byte, hits uint64) {
			pass.Send(&agentclient.Payload{Body: body, Hits: hits, Headers: h})
			requests++
		})
		f.release(b)
	}
	pass.Close()
	took := time.Since(start)
	f.s.lastRound.Store(int64(took))
	f.s.rounds.Add(1)
	if took > f.s.cfg.Interval/2 { // the trouble log says so, at most once a minute
		f.s.slowRounds.Add(1)
	}
	// What each round did, for an operator following the relay at debug
	// level (-log-level debug); its losses are the trouble log's, at warn.
	// all_held: every window went, ended or not (the stop, a clock step).
	f.s.log.Debug("statsrelay: forward round", "all_held", boundary.Equal(allWindows),
		"identities", identities, "requests", requests, "spans", spans,
		"spans_unattributable", unattributable, "took", took)
}

// release ends a harvested batch's charge against the bounds once it is
// encoded (or given up) and lets its groups go: a round that waits on a
// slow agent holds, beside the bounds, only the bodies in flight
// (TestSlowRoundHoldsWithinTheBounds).
func (f *forwarder) release(b *Batch) {
	f.s.relay.Release(b)
	*b = Batch{}
}

// infoRecheck × InfoRefresh (5 minutes by default) is how often the relay
// reads /info again while the agent takes stats, for its peer_tags list:
// at a forward round, by itself, not through the client's RecheckInfo.
const infoRecheck = agentclient.InfoRecheck

// The forwarder is the agent client's Observer: every outcome settles the
// Relay's accounting and the request counter.

// Sent settles p's spans as forwarded.
func (f *forwarder) Sent(p *agentclient.Payload) {
	f.s.countRequest("2xx")
	f.s.relay.Forwarded(p.Hits)
}

// Failed counts the failed request by status ("error" without one), and
// keeps its error for the trouble log's line.
func (f *forwarder) Failed(_ *agentclient.Payload, err error) {
	f.trouble.noteError("failed", err)
	var ae *agentclient.AgentError
	if errors.As(err, &ae) {
		f.s.countRequest(strconv.Itoa(ae.StatusCode))
	} else {
		f.s.countRequest("error")
	}
}

// Retried needs nothing: the spans stay pending.
func (f *forwarder) Retried(*agentclient.Payload, bool) {}

// Split needs nothing: the halves carry the spans.
func (f *forwarder) Split(*agentclient.Payload) {}

// Dropped settles p's spans as dropped, by reason.
func (f *forwarder) Dropped(p *agentclient.Payload, err error) {
	reason := DropRefused
	switch {
	case errors.Is(err, agentclient.ErrRetryBudget):
		reason = DropRetryBudget
	case errors.Is(err, agentclient.ErrAgentOff):
		reason = DropAgentOff
	case errors.Is(err, writer.ErrUnsplittable):
		// Maybe never sent: over /info's max_request_bytes it is not.
		reason = DropTooLarge
	case errors.Is(err, context.Canceled):
		reason = DropStopped
	}
	if p.MaybeDelivered() {
		f.s.droppedAfterTimeout.Add(p.Hits) // the agent may have them
	}
	f.s.relay.Dropped(p.Hits, reason)
}

// Off logs the agent's refusal; payloads are dropped (agent_off) until
// /info lists the stats endpoint again.
func (f *forwarder) Off(switched bool) {
	if switched {
		f.switches.Log(f.s.log, slog.LevelWarn, "statsrelay: the agent does not accept client stats; holding payloads within the retry budget, then dropping them, until /info lists /v0.6/stats")
	}
}

// On logs the agent's return.
func (f *forwarder) On() {
	f.switches.Log(f.s.log, slog.LevelInfo, "statsrelay: the agent accepts client stats again; forwarding")
}

// InfoFailed counts the failure; the first of a streak is logged (the
// client polls /info at up to InfoRefresh, and a line per poll would bury
// the log).
func (f *forwarder) InfoFailed(err error) {
	f.s.infoFailures.Add(1)
	if f.infoStreak++; f.infoStreak > 1 {
		return
	}
	msg := "statsrelay: the agent's /info could not be read; its last answer stands; polling it again"
	if !f.infoRead {
		msg = "statsrelay: the agent's /info could not be read; until it is, its peer_tags list and body limit are unknown (every peer-tag key is kept); polling it again"
	}
	f.s.log.Warn(msg, "error", err)
}

// Info logs the end of a streak of failed reads and hands the agent's
// peer_tags list to the Relay.
func (f *forwarder) Info(info *agentclient.Info) {
	f.infoRead = true
	if f.infoStreak > 0 {
		f.s.log.Info("statsrelay: the agent's /info answers again", "failed_reads", f.infoStreak)
		f.infoStreak = 0
	}
	// No list (peer_tags null: peer_tags_aggregation off, or an agent
	// older than the list) keeps no peer tag, as the agent's own
	// concentrator keeps none then.
	f.s.relay.SetPeerTagKeys(append(make([]string, 0, len(info.PeerTags)), info.PeerTags...))
}

func (s *Server) countRequest(code string) {
	c, _ := s.requests.LoadOrStore(code, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
}

func newRuntimeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (f *forwarder) nextSeq() uint64 {
	f.seq++
	return f.seq
}
