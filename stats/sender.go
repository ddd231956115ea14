package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// StatsPath is the agent endpoint for client-side stats.
const StatsPath = "/v0.6/stats"

// InfoPath is the agent endpoint that lists its endpoints and peer tags.
const InfoPath = "/info"

var (
	// ErrRetryBudget is the outcome of a payload dropped because the retry
	// budget (attempts, queued payloads or bytes) was exhausted.
	ErrRetryBudget = errors.New("stats: retry budget exhausted, payload dropped")
	// ErrStatsDisabled is the outcome of a payload dropped because the agent
	// does not accept client stats (404, or /info without /v0.6/stats).
	ErrStatsDisabled = errors.New("stats: agent does not accept client stats")
)

// AgentError is returned (by Flush) when the agent answers a payload with a
// non-2xx status.
type AgentError struct {
	StatusCode int
	Body       string // the start of the answer, for the log
}

// Error gives the status and the start of the agent's answer.
func (e *AgentError) Error() string {
	return fmt.Sprintf("stats: agent answered %d: %s", e.StatusCode, e.Body)
}

func newHTTPClient(ep endpoint, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil, // the agent is local; never route stats through a proxy
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if ep.unixSocket != "" {
		sock := ep.unixSocket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		tr.DialContext = d.DialContext
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// outcome is what happened to one attempt.
type outcome int

const (
	sent      outcome = iota
	retry             // 408, 429, 5xx, network errors and timeouts
	tooLarge          // 413: split and resend
	notFound          // 404: the agent does not do stats
	rejected          // other 4xx: the agent will never take this payload
	cancelled         // Stop gave up waiting
)

func classify(err error) outcome {
	var ae *AgentError
	switch {
	case err == nil:
		return sent
	case errors.As(err, &ae):
		switch c := ae.StatusCode; {
		case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
			return retry
		case c == http.StatusRequestEntityTooLarge:
			return tooLarge
		case c == http.StatusNotFound:
			return notFound
		default:
			return rejected
		}
	case errors.Is(err, context.Canceled):
		return cancelled
	default:
		return retry
	}
}

// pending is a payload the sender still owns.
type pending struct {
	body     []byte
	hits     uint64
	attempts int
	due      time.Time // earliest next attempt
	waiter   *waiter   // shared by the payloads of one report
}

// waiter answers a Flush or Stop once every payload of its report is
// delivered or given up.
type waiter struct {
	done  chan error
	left  int
	first error
}

func (w *waiter) finish(err error) {
	if w == nil {
		return
	}
	if err != nil && w.first == nil {
		w.first = err
	}
	w.left--
	if w.left == 0 && w.done != nil {
		w.done <- w.first
	}
}

// sender is the state of the goroutine that talks to the agent. Nothing
// else touches it; it reaches the table only through signals.
type sender struct {
	a        *Aggregator
	retries  []*pending // waiting for their due time, oldest first
	retryLen int        // bytes in retries
	infoDue  time.Time  // next /info poll while disabled
	rng      *rand.Rand
}

// send is the sender goroutine: it posts each report's payloads, retries
// failures within the budget, and answers the waiting Flush or Stop.
func (a *Aggregator) send() {
	defer close(a.senderDone)
	defer a.client.CloseIdleConnections()
	s := &sender{a: a, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	m := &emitter{client: a.cfg.Metrics, namespace: a.cfg.MetricsNamespace}
	defer func() { m.emit(a.Health()) }()
	s.readInfo()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wake <-chan time.Time
		if d, ok := s.nextDue(); ok {
			timer.Reset(max(time.Until(d), 0))
			wake = timer.C
		}
		select {
		case r, ok := <-a.sendCh:
			if !ok {
				s.final()
				return
			}
			w := &waiter{done: r.done, left: len(r.parts)}
			for _, p := range r.parts {
				s.attempt(&pending{body: p.body, hits: p.hits, waiter: w})
			}
			m.emit(a.Health())
		case <-wake:
			s.runDue(time.Now())
		}
	}
}

// nextDue is when the sender must wake up next without a new report.
func (s *sender) nextDue() (time.Time, bool) {
	var d time.Time
	ok := false
	if len(s.retries) > 0 {
		d, ok = s.retries[0].due, true
		for _, p := range s.retries[1:] {
			if p.due.Before(d) {
				d = p.due
			}
		}
	}
	if s.a.disabled.Load() && (!ok || s.infoDue.Before(d)) {
		d, ok = s.infoDue, true
	}
	return d, ok
}

func (s *sender) runDue(now time.Time) {
	if s.a.disabled.Load() && !now.Before(s.infoDue) {
		s.readInfo()
	}
	due := s.retries[:0:0]
	keep := s.retries[:0]
	for _, p := range s.retries {
		if now.Before(p.due) {
			keep = append(keep, p)
		} else {
			due = append(due, p)
			s.retryLen -= len(p.body)
		}
	}
	clear(s.retries[len(keep):])
	s.retries = keep
	for _, p := range due {
		s.attempt(p)
	}
}

// final runs at Stop: every payload waiting for a retry gets one last
// immediate attempt; what still fails is dropped and counted.
func (s *sender) final() {
	rs := s.retries
	s.retries, s.retryLen = nil, 0
	for _, p := range rs {
		p.attempts = s.a.cfg.MaxRetries // no further retry
		s.attempt(p)
	}
}

// attempt posts p once and decides its fate.
func (s *sender) attempt(p *pending) {
	a := s.a
	if a.disabled.Load() {
		s.drop(p, ErrStatsDisabled)
		return
	}
	err := a.postOnce(p.body)
	switch classify(err) {
	case sent:
		a.c.payloadsSent.Add(1)
		a.c.bytesSent.Add(uint64(len(p.body)))
		a.c.spansSent.Add(p.hits)
		a.putBuf(p.body)
		p.waiter.finish(nil)
		return
	case retry:
		a.c.payloadsFailed.Add(1)
		if p.attempts < a.cfg.MaxRetries && s.queue(p) {
			return
		}
		s.drop(p, fmt.Errorf("%w: %w", ErrRetryBudget, err))
	case tooLarge:
		a.c.payloadsFailed.Add(1)
		s.split(p, err)
	case notFound:
		a.c.payloadsFailed.Add(1)
		a.disable()
		s.drop(p, fmt.Errorf("%w: %w", ErrStatsDisabled, err))
	default: // rejected, cancelled
		a.c.payloadsFailed.Add(1)
		s.drop(p, err)
	}
}

// queue schedules a retry of p if the retry budget allows it.
func (s *sender) queue(p *pending) bool {
	a := s.a
	if len(s.retries) >= a.cfg.MaxRetryPayloads || s.retryLen+len(p.body) > a.cfg.MaxRetryBytes {
		return false
	}
	// Exponential backoff with full jitter in [d/2, d): spreads the retries
	// of many processes restarting together.
	d := a.cfg.RetryBackoff << p.attempts
	if d > a.cfg.MaxRetryBackoff || d <= 0 {
		d = a.cfg.MaxRetryBackoff
	}
	d = d/2 + time.Duration(s.rng.Int64N(int64(d/2)+1))
	p.attempts++
	p.due = time.Now().Add(d)
	s.retries = append(s.retries, p)
	s.retryLen += len(p.body)
	a.c.payloadsRetried.Add(1)
	return true
}

func (s *sender) drop(p *pending, err error) {
	a := s.a
	a.c.payloadsDropped.Add(1)
	a.c.spansUnsent.Add(p.hits)
	a.putBuf(p.body)
	p.waiter.finish(err)
}

// split answers a 413: the payload is decoded and re-encoded as two
// complete payloads carrying half the groups each. A payload of one group
// cannot be split and is dropped.
func (s *sender) split(p *pending, cause error) {
	pl, err := writer.DecodePayload(p.body)
	if err != nil {
		s.drop(p, fmt.Errorf("stats: splitting after %w: %w", cause, err))
		return
	}
	var groups []*aggregate.Entry
	for i := range pl.Buckets {
		for j := range pl.Buckets[i].Groups {
			groups = append(groups, &pl.Buckets[i].Groups[j].Entry)
		}
	}
	if len(groups) < 2 {
		s.drop(p, cause)
		return
	}
	// Keep each group in its own bucket: halves are split by group order
	// across the buckets.
	halves := [2][]writer.Bucket{}
	n, mid := 0, len(groups)/2
	for _, b := range pl.Buckets {
		for j := range b.Groups {
			h := 0
			if n >= mid {
				h = 1
			}
			n++
			hb := &halves[h]
			if len(*hb) == 0 || (*hb)[len(*hb)-1].Start != b.Start {
				*hb = append(*hb, writer.Bucket{Start: b.Start, Duration: b.Duration, AgentTimeShift: b.AgentTimeShift})
			}
			last := &(*hb)[len(*hb)-1]
			last.Groups = append(last.Groups, &b.Groups[j].Entry)
		}
	}
	if p.waiter != nil {
		p.waiter.left++ // one payload becomes two
	}
	a := s.a
	a.c.payloadsSplit.Add(1)
	for _, hb := range halves {
		var hits uint64
		for _, b := range hb {
			for _, g := range b.Groups {
				hits += g.Hits
			}
		}
		body := writer.AppendPayload(a.getBuf(len(p.body)), &pl.Header, hb) // a half fits in the whole
		s.attempt(&pending{body: body, hits: hits, attempts: p.attempts, waiter: p.waiter})
	}
	a.putBuf(p.body)
}

// disable makes the aggregator quiet until /info lists the stats endpoint
// again, and clears the table through the consumer.
func (a *Aggregator) disable() {
	if !a.disabled.Swap(true) {
		a.c.disabledTimes.Add(1)
	}
	a.Clear()
}

// readInfo polls the agent's /info: whether it accepts client stats, and
// which peer tags it aggregates on. An unreachable agent leaves the state
// as it was (payloads are retried; the agent may be starting).
func (s *sender) readInfo() {
	a := s.a
	s.infoDue = time.Now().Add(a.cfg.InfoRefresh)
	info, err := a.fetchInfo()
	if err != nil {
		return
	}
	a.c.infoReads.Add(1)
	if len(a.cfg.PeerTagKeys) == 0 && info.PeerTags != nil {
		keys := slices.Clone(info.PeerTags)
		a.peerTagKeys.Store(&keys)
	}
	if slices.Contains(info.Endpoints, StatsPath) {
		a.disabled.Store(false)
	} else if !a.disabled.Swap(true) {
		a.c.disabledTimes.Add(1)
	}
}

type agentInfo struct {
	Endpoints []string `json:"endpoints"`
	PeerTags  []string `json:"peer_tags"`
}

func (a *Aggregator) fetchInfo() (*agentInfo, error) {
	req, err := http.NewRequestWithContext(a.sendCtx, http.MethodGet, a.ep.base+InfoPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		// An agent too old to have /info has no client stats either.
		return &agentInfo{}, nil
	}
	if resp.StatusCode/100 != 2 {
		return nil, &AgentError{StatusCode: resp.StatusCode}
	}
	var info agentInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("stats: agent /info: %w", err)
	}
	return &info, nil
}

func (a *Aggregator) postOnce(body []byte) error {
	req, err := http.NewRequestWithContext(a.sendCtx, http.MethodPost, a.ep.base+StatsPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	h := req.Header
	h.Set("Content-Type", "application/msgpack")
	h.Set("Datadog-Meta-Lang", a.cfg.Lang)
	h.Set("Datadog-Meta-Lang-Version", a.cfg.LangVersion)
	h.Set("Datadog-Meta-Tracer-Version", a.cfg.TracerVersion)
	if a.cfg.ContainerID != "" {
		h.Set("Datadog-Container-ID", a.cfg.ContainerID)
	}
	if a.cfg.EntityID != "" {
		h.Set("Datadog-Entity-ID", a.cfg.EntityID)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode/100 != 2 {
		return &AgentError{StatusCode: resp.StatusCode, Body: string(bytes.TrimSpace(msg))}
	}
	return nil
}
