// This file holds the retry machine: payloads waiting for a retry, the
// budget that bounds them, the 413 split, and the off state.

package agentclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/writer"
)

var (
	// ErrRetryBudget is the outcome of a payload dropped because the retry
	// budget (attempts, queued payloads or bytes) was exhausted.
	ErrRetryBudget = errors.New("retry budget exhausted, payload dropped")
	// ErrAgentOff is the outcome of a payload dropped because the agent
	// does not accept client stats (404, or /info without /v0.6/stats).
	ErrAgentOff = errors.New("agent does not accept client stats")
	// ErrOverAgentLimit is the cause of a split made before sending: the
	// body is larger than the max_request_bytes the agent's /info gives.
	ErrOverAgentLimit = errors.New("payload over the agent's max_request_bytes")
)

// Defaults shared by the SDK's sender and the relay's forwarder.
const (
	// DefaultTimeout bounds one request, as dd-trace-go does.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxRetries, with the backoff defaults, gives up on a payload
	// after about 3 s of failures (0.2+0.4+0.8+1.6 s, jittered).
	DefaultMaxRetries = 4
	// DefaultRetryBackoff is the first retry's delay.
	DefaultRetryBackoff = 200 * time.Millisecond
	// DefaultMaxRetryBackoff caps the doubling.
	DefaultMaxRetryBackoff = 5 * time.Second
	// DefaultInfoRefresh is the longest /info poll period while the agent
	// is off or /info cannot be read (see Config.InfoRefresh).
	DefaultInfoRefresh = 30 * time.Second
	// InfoRecheck × InfoRefresh (5 minutes by default) is how often the
	// SDK and the relay read /info again while the agent takes stats, for
	// its peer_tags list (Config.RecheckInfo).
	InfoRecheck = 10
)

// Config bounds the client's work. Every field must be set, but those whose
// comment gives a zero or nil meaning: the callers own the choice (from the
// defaults above) and its documentation.
type Config struct {
	Endpoint Endpoint
	// Timeout bounds one request.
	Timeout time.Duration
	// MaxRetries is how many times a payload is retried after a retryable
	// failure; RetryBackoff the first retry's delay, doubled per attempt up
	// to MaxRetryBackoff, then jittered into [d/2, d].
	MaxRetries                    int
	RetryBackoff, MaxRetryBackoff time.Duration
	// MaxRetryPayloads and MaxRetryBytes bound what waits for a retry.
	MaxRetryPayloads, MaxRetryBytes int
	// InfoRefresh is the longest /info poll period while the agent is off
	// or /info is stale (see NextDue). The first poll after the agent went
	// off, or after /info could not be read, comes after RetryBackoff when
	// a payload was taken since the last such trouble (else the wait goes
	// on from where it was: an agent whose /info lists stats but whose
	// POST answers 404 must not be polled ever faster), and each poll that
	// finds it so doubles the wait up to InfoRefresh: an agent back within
	// seconds (a restart) is seen within seconds, one that stays off is
	// polled at InfoRefresh.
	InfoRefresh time.Duration
	// RecheckInfo is how often /info is read again while the agent takes
	// stats, for a peer_tags list or a request limit changed by an agent
	// restart, which fails no request (0: never; an owner that rereads it
	// itself). InfoRecheck × InfoRefresh is the SDK's and the relay's.
	RecheckInfo time.Duration
	// Parallel is how many requests SendAll, RunDue and Final have in
	// flight at once (at least 1): a relay sends one request per identity
	// each interval, and in sequence one slow answer would delay all the
	// others by the request timeout.
	Parallel int
	// Off, when set, is the flag the client raises while the agent does not
	// accept stats, for other goroutines to read; nil gives it its own.
	Off *atomic.Bool
	// GetBuf returns an empty buffer with room for n bytes (for the halves
	// of a split); PutBuf takes back a body neither the client nor net/http
	// reads any more, from whichever goroutine let it go last (net/http's
	// own, when the agent answered before reading the whole body). Both may
	// be nil.
	GetBuf func(n int) []byte
	PutBuf func([]byte)
}

// Observer is told every outcome, from the goroutine driving the Client.
type Observer interface {
	// Sent: the agent accepted p.
	Sent(p *Payload)
	// Failed: one attempt of p failed; its fate follows (Retried, Split or
	// Dropped).
	Failed(p *Payload, err error)
	// Retried: p waits for another attempt. afterTimeout says the failed
	// attempt timed out once the request was sent: the agent may have
	// accepted p, and the retry may deliver it twice (delivery is
	// at-least-once).
	Retried(p *Payload, afterTimeout bool)
	// Split: p was refused as too large and is re-sent as smaller payloads.
	Split(p *Payload)
	// Dropped: p is given up, for err.
	Dropped(p *Payload, err error)
	// Off: the agent refused stats (a 404, or /info without the stats
	// endpoint); switched says it was accepting them until now.
	Off(switched bool)
	// On: /info lists the stats endpoint again after Off (Info of that
	// read first).
	On()
	// Info: /info was read; before On or Off of the same read.
	Info(info *Info)
	// InfoFailed: /info could not be read (no agent, a non-2xx answer but
	// 404, a body that is not its JSON); the state stays as the last read
	// left it, and /info is polled again (see Config.InfoRefresh).
	InfoFailed(err error)
}

// Payload is one complete msgpack body the client owns until its outcome.
type Payload struct {
	Body    []byte
	Hits    uint64   // spans in the body, for the Observer's accounting
	Headers *Headers // shared by the payloads of one origin
	// Waiter, when set, is told the outcome (shared by one report's payloads).
	Waiter *Waiter

	attempts int
	due      time.Time // earliest next attempt
	// timedOut: an attempt failed once sent (timed out, was cancelled, or
	// lost its connection before the answer), or the payload it was split
	// from had one (MaybeDelivered).
	timedOut bool
	// holds is the request bodies over Body net/http has not closed, less
	// one once the client is done with the payload: at -1 nobody reads
	// Body, which then goes back to PutBuf (release).
	holds atomic.Int32
}

// MaybeDelivered reports whether an attempt of p, or of the payload it
// was split from, failed after the request was sent whole (timed out, was
// cancelled by the owner, or lost its connection before the answer): the
// agent may have taken p, even if p is then dropped.
func (p *Payload) MaybeDelivered() bool { return p.timedOut }

// Waiter answers a caller (Flush, Stop) once every payload of its report is
// delivered or given up, with the first error.
type Waiter struct {
	done  chan error
	left  int
	first error
}

// NewWaiter returns a Waiter for n payloads that sends the outcome on done
// (which must have room for it, or be nil): first, if not nil, else the
// first payload's error.
func NewWaiter(done chan error, n int, first error) *Waiter {
	return &Waiter{done: done, left: n, first: first}
}

func (w *Waiter) finish(err error) {
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

// Client sends payloads to the agent and owns the ones waiting for a retry.
type Client struct {
	cfg    Config
	ep     Endpoint
	http   *http.Client
	obs    Observer
	off    *atomic.Bool
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	// readStop gives up /info reads (SetReadStop); nil from Final on.
	readStop context.Context

	retries []*Payload // waiting for their due time
	// splitParts, during a Pass, is its queue: the parts of a payload
	// split in it go out in it.
	splitParts *[]*Payload
	retryLen   int       // bytes in retries
	infoDue    time.Time // next /info poll, while off or while infoStale
	recheckDue time.Time // next /info read while the agent takes stats (RecheckInfo)
	// infoWait is the wait before the next /info poll while off or stale:
	// RetryBackoff once a payload was taken with /info readable, doubled
	// per poll up to InfoRefresh (see pollInfoLater).
	infoWait time.Duration
	// infoStale: the last /info poll failed (an agent starting after the
	// process), or the agent refused a body as too large: /info is polled
	// again, for its limit, until it answers.
	infoStale bool
	// maxBody is the agent's body limit from /info (0: unknown): a larger
	// payload is split before it is sent, as a 413 would have it.
	maxBody int64
	rng     *rand.Rand
	// cutoff, while Final runs its window, is when the window ends: a pass
	// started before it posts nothing after it (the rest waits for the
	// last attempt), so one pass cannot carry the window by its length.
	cutoff time.Time
}

// New returns a client of cfg.Endpoint reporting to obs. Ending ctx aborts
// the request in flight and fails every later one (the owner gave up).
func New(ctx context.Context, cfg Config, obs Observer) *Client {
	cfg.Parallel = max(cfg.Parallel, 1)
	c := &Client{
		cfg:  cfg,
		ep:   cfg.Endpoint,
		http: newHTTPClient(cfg.Endpoint, cfg.Timeout, cfg.Parallel),
		obs:  obs,
		off:  cfg.Off,
		rng:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	if c.off == nil {
		c.off = new(atomic.Bool)
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	return c
}

// Off reports whether the agent does not accept stats now.
func (c *Client) Off() bool { return c.off.Load() }

// MaxBody is the agent's body limit from /info, 0 while unknown: a caller
// that packs its payloads to it spares them the split before sending.
func (c *Client) MaxBody() int64 { return c.maxBody }

// Close drops, counted, what still waits for a retry (Final first gives
// it a last chance) and releases idle connections; the client must not be
// used after it.
func (c *Client) Close() {
	rs := c.retries
	c.retries, c.retryLen = nil, 0
	for _, p := range rs {
		c.drop(p, errClosed)
	}
	c.http.CloseIdleConnections()
	c.cancel()
}

// errClosed is why Close drops a payload still waiting for a retry: a
// stop, as a cancelled context is, so callers file it with those.
var errClosed = fmt.Errorf("client closed before the agent took it: %w", context.Canceled)

// Send attempts p now; a retryable failure queues it within the budget.
func (c *Client) Send(p *Payload) { c.attempt(p) }

// SendAll attempts every payload of ps now, as Send does, with up to
// Parallel requests in flight: a Pass of ps.
func (c *Client) SendAll(ps []*Payload) {
	pass := c.NewPass()
	for _, p := range ps {
		pass.Send(p)
	}
	pass.Close()
}

// A Pass attempts payloads as they are handed to it, as Send does, with up
// to Parallel requests in flight. A payload takes the first slot free, and
// each outcome is handled as it comes back, on the caller's goroutine (the
// Observer and the retry state see one goroutine): a slow request holds
// its slot, not the payloads after it (TestPassSlowRequestHoldsOneSlot).
// The parts of a payload split in the pass go out in it, as slots free.
// Open one at a time, and Close it before any other call to the Client.
type Pass struct {
	c        *Client
	queue    []*Payload // handed to the pass, or split in it, and not yet attempted
	inflight int
	done     chan posted
	outer    *[]*Payload // the Client's splitParts before the pass
}

// posted is a request's outcome, from its goroutine to the pass.
type posted struct {
	p   *Payload
	err error
}

// NewPass starts a pass.
func (c *Client) NewPass() *Pass {
	s := &Pass{c: c, done: make(chan posted, max(c.cfg.Parallel, 1)), outer: c.splitParts}
	c.splitParts = &s.queue
	return s
}

// Send attempts p in the pass: it returns once p is posted (or held,
// split or dropped without a request), handling the outcomes of earlier
// requests while it waits for a slot, so at most Parallel bodies are out.
func (s *Pass) Send(p *Payload) {
	s.queue = append(s.queue, p)
	s.pump(false)
}

// Close waits for every request of the pass and handles its outcome.
func (s *Pass) Close() {
	s.pump(true)
	s.c.splitParts = s.outer
}

// pump attempts the queued payloads as slots free, handling outcomes
// meanwhile; all: until none is queued or in flight, else until none is
// queued.
func (s *Pass) pump(all bool) {
	c := s.c
	for {
		// Outcomes that came back first: a 404 among them holds what
		// follows unposted (TestPassHandlesOutcomesBeforePosting).
		select {
		case r := <-s.done:
			s.inflight--
			c.settle(r.p, r.err)
			continue
		default:
		}
		if len(s.queue) == 0 && (!all || s.inflight == 0) {
			return
		}
		if len(s.queue) > 0 && s.inflight < max(c.cfg.Parallel, 1) {
			p := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			switch {
			case c.off.Load() || c.overLimit(p):
				c.attempt(p) // held, or split into the queue, unposted
			case c.pastCutoff():
				c.wait(p)
			default:
				s.inflight++
				go func() { s.done <- posted{p, c.post(p)} }()
			}
			continue
		}
		r := <-s.done
		s.inflight--
		c.settle(r.p, r.err) // a split queues its parts
	}
}

// pastCutoff says Final's window has ended: a pass posts nothing more.
func (c *Client) pastCutoff() bool { return !c.cutoff.IsZero() && !time.Now().Before(c.cutoff) }

// wait puts p back among the retries, due now and not attempted: Final
// gives it its last attempt.
func (c *Client) wait(p *Payload) {
	p.due = time.Now()
	c.retries = append(c.retries, p)
	c.retryLen += len(p.Body)
}

// NextDue is when RunDue has work without a new payload: the earliest
// retry, or the next /info poll while the agent is off or /info is stale
// (it failed, or a body was refused as too large), or its next read every
// RecheckInfo while the agent takes stats.
func (c *Client) NextDue() (time.Time, bool) {
	var d time.Time
	ok := false
	for _, p := range c.retries {
		if !ok || p.due.Before(d) {
			d, ok = p.due, true
		}
	}
	if info, due := c.infoPoll(); due && (!ok || info.Before(d)) {
		d, ok = info, true
	}
	return d, ok
}

// infoPoll is when /info is next read, if it is: polled while the agent is
// off or /info stale, read again every RecheckInfo (once read) otherwise.
func (c *Client) infoPoll() (time.Time, bool) {
	if c.off.Load() || c.infoStale {
		return c.infoDue, true
	}
	return c.recheckDue, c.cfg.RecheckInfo > 0 && !c.recheckDue.IsZero()
}

// RunDue polls /info if due (see NextDue) and attempts every retry due at
// now.
func (c *Client) RunDue(now time.Time) {
	var due []*Payload
	keep := c.retries[:0]
	for _, p := range c.retries {
		if now.Before(p.due) {
			keep = append(keep, p)
		} else {
			due = append(due, p)
			c.retryLen -= len(p.Body)
		}
	}
	clear(c.retries[len(keep):])
	c.retries = keep
	if at, ok := c.infoPoll(); ok && !now.Before(at) {
		c.ReadInfo()
	}
	c.SendAll(due)
}

// Final runs the payloads waiting for a retry at their due times (and the
// /info polls, while the agent is off or /info stale) until none waits,
// for at most within, or until the client's context ends (the owner's
// deadline for its stop). While the agent is off it first reads /info once, so that an agent
// back before the next poll takes what is held. No request starts after the window; then what still waits gets
// one last immediate attempt (none if the context ended); what fails is
// dropped and reported. So Final takes at most within, plus a Timeout for
// that /info read, plus a Timeout for
// the requests in flight as the window ends, plus one Timeout per
// Parallel payloads waiting (a payload the agent refuses as too large
// counting as the parts it is split into). An agent that refuses for a
// moment as the process stops (a 503, a restart) gets the retry budget,
// not one attempt; a retry is not brought forward, which would spend it on an
// agent that failed a moment ago.
func (c *Client) Final(within time.Duration) {
	c.readStop = nil // the stop has come: its reads are part of it
	if c.Off() && len(c.retries) > 0 && c.ctx.Err() == nil {
		// What is held waits for the next poll, which may be due after
		// the window: an agent back meanwhile would get none of it.
		c.ReadInfo()
	}
	deadline := time.Now().Add(within)
	c.cutoff = deadline
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
window:
	for len(c.retries) > 0 && c.ctx.Err() == nil {
		d, _ := c.NextDue()
		last := !d.Before(deadline) // due after the window: the last attempt at its end
		if last {
			d = deadline
		}
		timer.Reset(max(time.Until(d), 0))
		select {
		case <-timer.C:
			if last {
				break window
			}
			c.RunDue(time.Now())
		case <-c.ctx.Done():
		}
	}
	c.cutoff = time.Time{}
	rs := c.retries
	c.retries, c.retryLen = nil, 0
	if err := c.ctx.Err(); err != nil {
		// A request on the ended context would not go out: no attempt,
		// no failure to report, only the drop.
		for _, p := range rs {
			c.drop(p, fmt.Errorf("%w: stopped before the agent took it", err))
		}
		return
	}
	for _, p := range rs {
		p.attempts = c.cfg.MaxRetries // no further retry
	}
	c.SendAll(rs)
}

// Pending is how many payloads wait for a retry.
func (c *Client) Pending() int { return len(c.retries) }

// attempt posts p once and decides its fate. While the agent is off, p is
// held as a retry (within the budget) for the /info polls to see the agent
// back, and dropped once the budget is spent.
func (c *Client) attempt(p *Payload) {
	if err := c.ctx.Err(); err != nil {
		// A request on the ended context would not go out: no attempt, no
		// failed request to count (TestEndedContextCountsNoRequest), only
		// the drop, as for the retries Final finds.
		c.drop(p, fmt.Errorf("%w: stopped before the agent took it", err))
		return
	}
	if c.off.Load() {
		c.hold(p, ErrAgentOff, false)
		return
	}
	if c.overLimit(p) {
		c.split(p, fmt.Errorf("%w (%d bytes, limit %d)", ErrOverAgentLimit, len(p.Body), c.maxBody))
		return
	}
	c.settle(p, c.post(p))
}

// overLimit says p's body is over the agent's limit, which would refuse it.
func (c *Client) overLimit(p *Payload) bool {
	return c.maxBody > 0 && int64(len(p.Body)) > c.maxBody
}

// settle decides the fate of p, whose attempt ended with err.
func (c *Client) settle(p *Payload, err error) {
	kind := classify(err)
	if kind == sent {
		if !c.infoStale {
			c.infoWait = 0 // the agent takes stats: a later 404 polls soon again
		}
		c.obs.Sent(p)
		c.release(p)
		p.Waiter.finish(nil)
		return
	}
	c.obs.Failed(p, err)
	timedOut := maybeTaken(err)
	p.timedOut = p.timedOut || timedOut
	switch kind {
	case retry:
		if p.attempts < c.cfg.MaxRetries && c.queue(p, timedOut, true) {
			return
		}
		c.drop(p, fmt.Errorf("%w: %w", ErrRetryBudget, err))
	case tooLarge:
		// The agent's limit is lower than /info said, or was not read:
		// read it again soon (not at InfoRefresh from the last good read),
		// once: every 413 of a pass doubling the wait would put it off
		// (TestTooLargeOncePollsSoon).
		if !c.infoStale {
			c.infoStale = true
			c.pollInfoLater()
		}
		c.split(p, err)
	case notFound:
		switched := !c.off.Swap(true)
		if switched {
			c.pollInfoLater()
			c.retriesAfterPoll()
		}
		c.obs.Off(switched)
		c.hold(p, fmt.Errorf("%w: %w", ErrAgentOff, err), true) // Failed was reported
	default: // refused, cancelled
		c.drop(p, err)
	}
}

// hold keeps p while the agent is off, for a later attempt (the /info
// polls may see the agent back first), or drops it for err once the budget
// is spent. notify: an attempt was made and failed (the 404), so the
// Observer hears Retried; a payload held unposted is heard of only at its
// fate.
func (c *Client) hold(p *Payload, err error, notify bool) {
	if p.attempts < c.cfg.MaxRetries && c.queue(p, false, notify) {
		return
	}
	c.drop(p, err)
}

// pollInfoLater schedules the next /info poll while the agent is off or
// /info stale: infoWait from now, then doubled up to InfoRefresh. infoWait
// starts again from RetryBackoff only once the agent took a payload, so an
// agent that lists stats in /info but answers 404 is not polled (and
// posted to) at RetryBackoff for ever.
func (c *Client) pollInfoLater() {
	if c.infoWait <= 0 {
		c.infoWait = min(c.cfg.RetryBackoff, c.cfg.InfoRefresh)
	}
	// Jittered into [3/4, 1] of the wait: processes that met a 404
	// together (and the payloads they hold for the poll) spread out.
	c.infoDue = time.Now().Add(c.infoWait - time.Duration(rand.Int64N(int64(c.infoWait)/4+1)))
	c.infoWait = min(2*c.infoWait, c.cfg.InfoRefresh)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// queue schedules a retry of p if the retry budget allows it; notify tells
// the Observer (Retried), after a failed attempt.
func (c *Client) queue(p *Payload, afterTimeout, notify bool) bool {
	if len(c.retries) >= c.cfg.MaxRetryPayloads || c.retryLen+len(p.Body) > c.cfg.MaxRetryBytes {
		return false
	}
	// Exponential backoff with jitter in [d/2, d]: spreads the retries of
	// many processes restarting together.
	d := c.cfg.MaxRetryBackoff
	if p.attempts < 63 && c.cfg.RetryBackoff <= c.cfg.MaxRetryBackoff>>p.attempts {
		d = c.cfg.RetryBackoff << p.attempts // compared before the shift: it cannot wrap
	}
	d = d/2 + time.Duration(c.rng.Int64N(int64(d/2)+1))
	p.attempts++
	p.due = time.Now().Add(d)
	if c.off.Load() {
		// Held while the agent is off: checked right after the /info poll
		// that may see it back (RunDue polls first), not just before it.
		p.due = later(p.due, c.infoDue)
	}
	c.retries = append(c.retries, p)
	c.retryLen += len(p.Body)
	if notify {
		c.obs.Retried(p, afterTimeout)
	}
	return true
}

func (c *Client) drop(p *Payload, err error) {
	c.obs.Dropped(p, err)
	c.release(p)
	p.Waiter.finish(err)
}

// release lets go of one hold on p's body: the client's, once it is done
// with the payload, or a request body's, once net/http closes it. The last
// to let go gives the body to PutBuf: net/http may read a request body
// after Do returns (the agent answered 400, 404 or 413 before reading it
// all), so a buffer handed on at once could be written by its next owner
// while still going out (TestBodyNotReusedWhileSent).
func (c *Client) release(p *Payload) {
	if p.holds.Add(-1) == -1 && c.cfg.PutBuf != nil {
		c.cfg.PutBuf(p.Body)
	}
}

func (c *Client) getBuf(n int) []byte {
	if c.cfg.GetBuf != nil {
		return c.cfg.GetBuf(n)
	}
	return make([]byte, 0, n)
}

// split answers a 413 (or the agent's 400 for a body over its limit, or a
// body over the limit /info gave): the payload is re-encoded as complete
// payloads of about half its size. One that cannot be split (a single group) is dropped.
func (c *Client) split(p *Payload, cause error) {
	var parts []*Payload
	err := writer.Split(p.Body, c.getBuf, func(body []byte, hits uint64) {
		// A part is as maybe delivered as the whole: a timed-out attempt of
		// p may have reached the agent with the part's spans in it.
		parts = append(parts, &Payload{Body: body, Hits: hits, Headers: p.Headers, Waiter: p.Waiter,
			attempts: p.attempts, timedOut: p.timedOut})
	})
	if err != nil { // writer.ErrUnsplittable: one group
		c.drop(p, fmt.Errorf("%w (%w)", cause, err))
		return
	}
	c.obs.Split(p)
	if p.Waiter != nil {
		p.Waiter.left += len(parts) - 1 // one payload becomes several
	}
	c.release(p)
	// In a pass, the parts join its queue: within Final's window no part
	// is posted after it ends, and they go out Parallel at a time
	// (TestFinalSplitIsBounded), those of every payload the pass splits
	// together, not one payload's after another's
	// (TestSplitsOfAPassGoOutTogether); outside one, in a pass of their own.
	if c.splitParts != nil {
		*c.splitParts = append(*c.splitParts, parts...)
		return
	}
	c.SendAll(parts)
}

// ReadInfo polls the agent's /info: whether it accepts client stats, its
// body limit, and which peer tags it aggregates on. An unreachable agent leaves the state
// as it was (payloads are retried; the agent may be starting), and the
// Observer hears why (InfoFailed), unless the client's context ended: that
// failure is the owner's, not the agent's.
// Until Final, a read is given up as soon as the context SetReadStop gave
// ends.
func (c *Client) ReadInfo() {
	ctx := c.ctx
	if c.readStop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(c.ctx)
		defer cancel()
		defer context.AfterFunc(c.readStop, cancel)()
	}
	info, err := c.fetchInfo(ctx)
	if err != nil {
		c.infoStale = true
		c.pollInfoLater()
		if ctx.Err() == nil {
			c.obs.InfoFailed(fmt.Errorf("agent /info: %w", err))
		}
		return
	}
	c.infoStale = false
	if c.cfg.RecheckInfo > 0 {
		// Jittered by a tenth, so that a host's processes started together
		// do not read it together ever after.
		c.recheckDue = time.Now().Add(c.cfg.RecheckInfo - time.Duration(rand.Int64N(int64(c.cfg.RecheckInfo)/10+1)))
	}
	c.maxBody = info.Config.MaxRequestBytes
	// Before On: what the owner takes from the answer (its peer_tags list)
	// is in place when it accepts spans again.
	c.obs.Info(info)
	if slices.Contains(info.Endpoints, StatsPath) {
		c.infoDue = time.Now().Add(c.cfg.InfoRefresh)
		if c.off.Swap(false) {
			// What waits was held for this poll, or failed before the
			// agent went off: due now, not after the owner's stop.
			now := time.Now()
			for _, p := range c.retries {
				if p.due.After(now) {
					p.due = now
				}
			}
			c.obs.On()
		}
	} else {
		if !c.off.Swap(true) {
			c.obs.Off(true)
		}
		c.pollInfoLater()
		// Also when it was off already: a read that finds it still off
		// (Final's first) moves the poll later, and what waits with it.
		c.retriesAfterPoll()
	}
}

// SetReadStop gives the owner's stop (nil: none): an /info read that the
// client starts, itself (RunDue's polls) or for the owner, is given up as
// soon as stop ends, until Final, whose own read is part of the stop.
// For an owner whose stop must not wait for an agent slow to answer /info
// (the relay's forwarder, which then forwards what it holds at once). A
// read stop ended is not the agent's failure: the Observer hears nothing.
func (c *Client) SetReadStop(stop context.Context) { c.readStop = stop }

// retriesAfterPoll moves the payloads waiting for a retry past the next
// /info poll while the agent is off: queued before the switch (a 5xx), or
// for the poll a read just put off, each is checked after that poll, not
// held one attempt short of it (TestInfoOffHoldsRetriesForPoll).
func (c *Client) retriesAfterPoll() {
	for _, q := range c.retries {
		q.due = later(q.due, c.infoDue)
	}
}
