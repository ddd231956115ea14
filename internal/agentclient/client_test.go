// This file tests the agent client's retry machine: retries and their
// budget, splits of payloads too large, the off state and /info polls,
// Final's window; and holds TestMain and the counting Observer.

package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/writer"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting is an Observer that counts each outcome.
type counting struct {
	sent, failed, retried, split, dropped, off, on, info int
	retriedAfterTimeout, infoFailed                      int
	lastErr, lastInfoErr                                 error
}

func (o *counting) Sent(*Payload)          { o.sent++ }
func (o *counting) Failed(*Payload, error) { o.failed++ }
func (o *counting) Retried(_ *Payload, afterTimeout bool) {
	o.retried++
	if afterTimeout {
		o.retriedAfterTimeout++
	}
}
func (o *counting) Split(*Payload)              { o.split++ }
func (o *counting) Dropped(_ *Payload, e error) { o.dropped++; o.lastErr = e }
func (o *counting) Off(bool)                    { o.off++ }
func (o *counting) On()                         { o.on++ }
func (o *counting) Info(*Info)                  { o.info++ }
func (o *counting) InfoFailed(err error)        { o.infoFailed++; o.lastInfoErr = err }

func testConfig(url string) Config {
	ep, err := ParseURL(url)
	if err != nil {
		panic(err)
	}
	return Config{Endpoint: ep, Timeout: 2 * time.Second, MaxRetries: 4,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 80 * time.Millisecond,
		MaxRetryPayloads: 8, MaxRetryBytes: 1 << 20, InfoRefresh: time.Second}
}

// TestCloseDropsWaitingRetries: Close without Final drops a payload that
// waits for a retry, counted and its Waiter answered: otherwise it would
// be neither sent nor dropped, and a Flush would wait for ever.
func TestCloseDropsWaitingRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(srv.URL), obs)
	done := make(chan error, 1)
	c.Send(&Payload{Body: splitBody(), Hits: 120, Waiter: NewWaiter(done, 1, nil)})
	if c.Pending() != 1 || obs.retried != 1 {
		t.Fatalf("pending %d, retried %d after a 503; want the payload waiting", c.Pending(), obs.retried)
	}
	c.Close()
	if c.Pending() != 0 || obs.dropped != 1 || obs.sent != 0 || !errors.Is(obs.lastErr, errClosed) || !errors.Is(obs.lastErr, context.Canceled) {
		t.Fatalf("after Close: pending %d, dropped %d (%v), sent %d; want the one dropped as closed", c.Pending(), obs.dropped, obs.lastErr, obs.sent)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the waiter answered nil for a dropped payload")
		}
	default:
		t.Fatal("the waiter is not answered")
	}
}

// TestRetryBackoff: the n-th retry of a payload waits RetryBackoff×2ⁿ,
// capped at MaxRetryBackoff, jittered into [d/2, d], and the jitter
// spreads the waits.
func TestRetryBackoff(t *testing.T) {
	const base, ceiling = 10 * time.Millisecond, 80 * time.Millisecond
	cfg := testConfig("http://127.0.0.1:1")
	cfg.MaxRetryPayloads, cfg.MaxRetries = 1, 100
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.rng = rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for trial := range 50 {
		p := &Payload{Body: make([]byte, 10)}
		for n := range 6 {
			before := time.Now()
			if !c.queue(p, false, true) {
				t.Fatalf("trial %d retry %d refused", trial, n)
			}
			after := time.Now()
			d := min(base<<n, ceiling)
			// queue read the clock between before and after, so the wait
			// it chose lies in [due-after, due-before]: fail only when that
			// whole range is outside [d/2, d] (a slow run widens it).
			if lo, hi := p.due.Sub(after), p.due.Sub(before); lo > d || hi < d/2 {
				t.Fatalf("retry %d waits %s..%s, want within [%s, %s]", n, lo, hi, d/2, d)
			}
			if n == 0 {
				seen[p.due.Sub(before).Round(time.Millisecond)] = true
			}
			if p.attempts != n+1 {
				t.Fatalf("attempts %d after retry %d", p.attempts, n)
			}
			c.retries, c.retryLen = c.retries[:0], 0 // as if it was attempted again
		}
	}
	if len(seen) < 3 {
		t.Fatalf("first waits over 50 payloads took %d distinct values (ms): no jitter", len(seen))
	}
	if obs.retried != 300 {
		t.Fatalf("Retried %d times, want 300", obs.retried)
	}
}

// TestFinalLastAttemptIsLast: Final gives a payload waiting for a retry one
// last attempt; when that fails too (a 503), the payload is dropped for its
// retry budget at once, not queued again for a Close to drop as a stop.
func TestFinalLastAttemptIsLast(t *testing.T) {
	var posts atomic.Int32
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer agent.Close()
	obs := &counting{}
	cfg := testConfig(agent.URL)
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Hour, time.Hour
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	c.Final(50 * time.Millisecond)
	if c.Pending() != 0 || obs.dropped != 1 || !errors.Is(obs.lastErr, ErrRetryBudget) || posts.Load() != 2 {
		t.Fatalf("pending %d, dropped %d (%v), posts %d; want 0, 1 for the retry budget, 2 (the first attempt and the last)",
			c.Pending(), obs.dropped, obs.lastErr, posts.Load())
	}
}

// TestSplitWaiterWaitsForEveryPart: a payload split after a 413 answers its
// waiter once every part is settled, with a part's error: one part taken
// and the others refused is no success.
func TestSplitWaiterWaitsForEveryPart(t *testing.T) {
	body := splitBody()
	var parts atomic.Int32
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch {
		case len(b) == len(body):
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case parts.Add(1) > 1:
			w.WriteHeader(http.StatusForbidden) // refused: not retried
		}
	}))
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: body, Hits: 120, Waiter: NewWaiter(done, 1, nil)})
	select {
	case err := <-done:
		if n := int(parts.Load()); err == nil || n < 2 || obs.sent != 1 || obs.dropped != n-1 {
			t.Fatalf("waiter answered %v after %d parts (%d sent, %d dropped); want a refused part's error once all are settled", err, n, obs.sent, obs.dropped)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never answered")
	}
}

// TestSplitKeepsEveryField: a payload the agent refuses as too large is
// re-sent as complete halves that keep the fields the SDK never sets
// (DBType, SpanDerivedPrimaryTags, AdditionalMetricTags), every hit once.
func TestSplitKeepsEveryField(t *testing.T) {
	var groups []writer.Group
	for i := range 6 {
		g := writer.Group{DBType: "postgres", SpanDerivedPrimaryTags: []string{"region:eu"},
			AdditionalMetricTags: []string{"team:core"}}
		g.Service, g.Name, g.Resource, g.Hits = "db", "query", strconv.Itoa(i), uint64(i+1)
		groups = append(groups, g)
	}
	pl := &writer.Payload{Header: writer.Header{Service: "db"},
		Buckets: []writer.DecodedBucket{{Start: 10, Duration: 10, Groups: groups}}}
	body := pl.Append(nil)
	var mu sync.Mutex
	var got []writer.Group
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) > len(body)*2/3 {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		p, err := writer.DecodePayload(b)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, p.Buckets[0].Groups...)
		mu.Unlock()
	}))
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: body, Hits: 21, Waiter: NewWaiter(done, 1, nil)})
	if err := <-done; err != nil || obs.split != 1 || obs.sent < 2 || obs.dropped != 0 {
		t.Fatalf("outcome %v; split %d sent %d dropped %d", err, obs.split, obs.sent, obs.dropped)
	}
	var hits uint64
	for _, g := range got {
		hits += g.Hits
		if g.DBType != "postgres" || len(g.SpanDerivedPrimaryTags) != 1 || len(g.AdditionalMetricTags) != 1 {
			t.Fatalf("group %s lost a field in the split: %+v", g.Resource, g)
		}
	}
	if len(got) != 6 || hits != 21 {
		t.Fatalf("agent got %d groups, %d hits; want 6 and 21", len(got), hits)
	}
}

// TestRetryAfterTimeoutCounted: the agent reads a payload, then answers
// only after the client's timeout; the client retries and the agent
// receives the same body twice. Exactly that retry is reported as after a
// timeout; a 503's retry and a refused connection's (nothing sent) are not.
func TestRetryAfterTimeoutCounted(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		n := len(bodies)
		mu.Unlock()
		switch n {
		case 1: // accepted, but the answer comes after the client gave up
			<-r.Context().Done()
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Timeout = 500 * time.Millisecond // long enough that only the stalled attempt times out
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.Send(&Payload{Body: []byte("payload-1"), Hits: 1})
	for obs.sent == 0 && obs.dropped == 0 {
		d, ok := c.NextDue()
		if !ok {
			t.Fatal("nothing due and nothing sent")
		}
		time.Sleep(time.Until(d))
		c.RunDue(time.Now())
	}
	mu.Lock()
	defer mu.Unlock()
	if obs.sent != 1 || obs.retried != 2 || obs.retriedAfterTimeout != 1 || len(bodies) != 3 {
		t.Fatalf("sent %d, retried %d (%d after a timeout), agent read %d bodies; want 1, 2 (1), 3",
			obs.sent, obs.retried, obs.retriedAfterTimeout, len(bodies))
	}
	if string(bodies[0]) != "payload-1" || string(bodies[2]) != "payload-1" {
		t.Fatalf("bodies %q: want the payload delivered twice", bodies)
	}

	// Nothing listens: the connection is refused before anything is sent.
	cfg = testConfig("http://127.0.0.1:1")
	obs = &counting{}
	c2 := New(context.Background(), cfg, obs)
	defer c2.Close()
	c2.Send(&Payload{Body: []byte("x"), Hits: 1})
	if obs.retried != 1 || obs.retriedAfterTimeout != 0 {
		t.Fatalf("refused connection: retried %d (%d after a timeout), want 1 (0)", obs.retried, obs.retriedAfterTimeout)
	}
}

// TestMaybeTaken: which errors may hide a delivered payload.
func TestMaybeTaken(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}, false},
		{&url.Error{Op: "Post", Err: &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}}, true},
		{&url.Error{Op: "Post", Err: context.DeadlineExceeded}, true},
		{errors.New("connection reset"), false},
		{fmt.Errorf("%w: %w", errLostOnceSent, errors.New("connection reset")), true},
		{unsentError{errors.New("connection reset")}, false},
		{&AgentError{StatusCode: 503}, false},
	} {
		if got := maybeTaken(c.err); got != c.want {
			t.Errorf("maybeTaken(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestOffThenOn: /info without the stats endpoint switches the client off
// (Off once, however often it is read so), and listing it again switches it
// on (On once).
func TestOffThenOn(t *testing.T) {
	var listed atomic.Bool
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		endpoints := `["/v0.4/traces"]`
		if listed.Load() {
			endpoints = `["/v0.4/traces", "` + StatsPath + `"]`
		}
		_, _ = io.WriteString(w, `{"endpoints": `+endpoints+`}`)
	}))
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	for _, step := range []struct {
		listed      bool
		off, on     int
		wantOffFlag bool
	}{
		{false, 1, 0, true}, {false, 1, 0, true}, {true, 1, 1, false}, {true, 1, 1, false}, {false, 2, 1, true},
	} {
		listed.Store(step.listed)
		c.ReadInfo()
		if obs.off != step.off || obs.on != step.on || c.Off() != step.wantOffFlag {
			t.Fatalf("listed %v: Off %d On %d, Off() %v; want %d %d %v", step.listed, obs.off, obs.on, c.Off(),
				step.off, step.on, step.wantOffFlag)
		}
	}
}

// ordered is an Observer that records the Hits of each payload sent, in
// the order the outcomes arrive.
type ordered struct {
	counting
	sentHits []uint64
}

func (o *ordered) Sent(p *Payload) { o.counting.Sent(p); o.sentHits = append(o.sentHits, p.Hits) }

// TestSendAllParallel: SendAll has exactly Parallel requests in flight while
// the agent holds them, no more, and hands each outcome to the Observer as
// it returns: a failed one is queued for a retry, the others are sent.
func TestSendAllParallel(t *testing.T) {
	const parallel, payloads, failing = 4, 10, 6
	var inFlight, peak, started atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		if r.Header.Get("Datadog-Meta-Lang") == "fail" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Parallel = parallel
	obs := &ordered{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	var ps []*Payload
	for i := range payloads {
		h := &Headers{Lang: "go"}
		if i == failing {
			h.Lang = "fail"
		}
		ps = append(ps, &Payload{Body: []byte{0x80}, Hits: uint64(100 + i), Headers: h})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.SendAll(ps)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for inFlight.Load() < parallel {
		if time.Now().After(deadline) {
			close(release)
			<-done
			t.Fatalf("%d requests in flight after 10 s, want %d", inFlight.Load(), parallel)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a request beyond the bound to show
	if n := started.Load(); n != parallel {
		t.Errorf("%d requests started while %d were held, want %d", n, parallel, parallel)
	}
	close(release)
	<-done
	if p := peak.Load(); p != parallel {
		t.Errorf("peak in flight %d, want %d", p, parallel)
	}
	var want []uint64
	for i := range payloads {
		if i != failing {
			want = append(want, uint64(100+i))
		}
	}
	if got := slices.Sorted(slices.Values(obs.sentHits)); obs.sent != payloads-1 || obs.failed != 1 || obs.retried != 1 ||
		obs.dropped != 0 || !slices.Equal(got, want) {
		t.Fatalf("outcomes %+v sent in order %v, want %v sent and one retried", obs.counting, obs.sentHits, want)
	}
	if len(c.retries) != 1 || c.retries[0].Hits != 100+failing {
		t.Fatalf("retries %v, want payload %d", c.retries, failing)
	}
}

// TestBodyNotReusedWhileSent: an agent that answers (400 here; 404 and 413
// alike) before it has read the whole body leaves net/http writing the
// body after Do returns. The body goes back to PutBuf, whose next owner
// writes into it (the SDK's next report), only once net/http is done with
// it: no byte of that owner's reaches the wire, and every payload's buffer
// comes back exactly once.
func TestBodyNotReusedWhileSent(t *testing.T) {
	for round := range 6 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		const size = 8 << 20
		got := make(chan []byte, 1)
		go func() {
			defer close(got)
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err != nil {
				return
			}
			io.WriteString(conn, "HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad")
			var all []byte
			buf := make([]byte, 32<<10)
			for {
				n, err := req.Body.Read(buf)
				all = append(all, buf[:n]...)
				if err != nil {
					break
				}
				if round%2 == 0 {
					time.Sleep(200 * time.Microsecond) // a slow reader
				}
			}
			got <- all
		}()
		cfg := testConfig("http://" + ln.Addr().String())
		returned := make(chan struct{}, 2)
		cfg.PutBuf = func(b []byte) {
			b = b[:cap(b)]
			for i := range b { // the pool's next owner writes into it
				b[i] = 0xee
			}
			returned <- struct{}{}
		}
		obs := &counting{}
		c := New(context.Background(), cfg, obs)
		body := bytes.Repeat([]byte{'a'}, size)
		c.Send(&Payload{Body: body})
		if obs.dropped != 1 {
			t.Fatalf("dropped %d, want 1 (the agent answered 400)", obs.dropped)
		}
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("the body never came back to PutBuf")
		}
		if all := <-got; bytes.IndexByte(all, 0xee) >= 0 {
			t.Fatalf("round %d: bytes written by PutBuf's next owner went out in the request body", round)
		}
		c.Close()
		ln.Close()
		if len(returned) != 0 {
			t.Fatal("a body came back to PutBuf twice")
		}
	}
}

// limitAgent answers as the agent (v0.85.4) does to a body over its
// max_request_bytes: 400 with the limited reader's error wrapped by the
// decoder. It serves /info with that limit when advertise is set, and
// records the size of every stats body it takes.
func limitAgent(t *testing.T, limit int, advertise bool) (*httptest.Server, func() (posts int, taken []int)) {
	var mu sync.Mutex
	var posts int
	var taken []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == InfoPath {
			cfg := ""
			if advertise {
				cfg = `, "config": {"max_request_bytes": ` + strconv.Itoa(limit) + `}`
			}
			_, _ = io.WriteString(w, `{"endpoints": ["`+StatsPath+`"]`+cfg+`}`)
			return
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
		mu.Lock()
		defer mu.Unlock()
		posts++
		if len(b) > limit {
			http.Error(w, "read limit reached at PeerTags at Stats/51", http.StatusBadRequest)
			return
		}
		if _, err := writer.DecodePayload(b); err != nil {
			t.Errorf("agent: %v", err)
		}
		taken = append(taken, len(b))
	}))
	return srv, func() (int, []int) {
		mu.Lock()
		defer mu.Unlock()
		return posts, slices.Clone(taken)
	}
}

// splitBody is a payload of 16 groups, 120 hits, about 3 KiB.
func splitBody() []byte {
	var groups []writer.Group
	for i := range 16 {
		var g writer.Group
		g.Service, g.Name, g.Resource, g.Hits = "svc", "op", strings.Repeat("r", 150)+strconv.Itoa(i), uint64(i)
		groups = append(groups, g)
	}
	pl := &writer.Payload{Header: writer.Header{Service: "svc"},
		Buckets: []writer.DecodedBucket{{Start: 10, Duration: 10, Groups: groups}}}
	return pl.Append(nil)
}

// TestAgentReadLimit400Splits: the agent's answer to a body over its limit
// is a 400 naming the read limit, not a 413; the client splits on it as on
// a 413 until every part fits, and every hit arrives.
func TestAgentReadLimit400Splits(t *testing.T) {
	body := splitBody()
	limit := len(body) / 3
	agent, got := limitAgent(t, limit, false)
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: body, Hits: 120, Waiter: NewWaiter(done, 1, nil)})
	if err := <-done; err != nil || obs.dropped != 0 || obs.split < 2 {
		t.Fatalf("outcome %v; split %d sent %d dropped %d", err, obs.split, obs.sent, obs.dropped)
	}
	posts, taken := got()
	if posts != len(taken)+obs.split || obs.sent != len(taken) {
		t.Fatalf("%d posts, %d taken, %d splits, %d sent: every refusal must be one split", posts, len(taken), obs.split, obs.sent)
	}
	// Any other 400 is a refusal, not split.
	if classify(&AgentError{StatusCode: 400, Body: "decode: msgp: attempted to decode type \"int\" with method for \"str\""}) != refused {
		t.Fatal("a decoding 400 must be refused, not split")
	}
}

// TestInfoLimitSplitsBeforeSending: with max_request_bytes in /info, a
// larger payload is split before it is sent: the agent never sees a body
// over its limit, and every hit arrives.
func TestInfoLimitSplitsBeforeSending(t *testing.T) {
	body := splitBody()
	limit := len(body) / 3
	agent, got := limitAgent(t, limit, true)
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	c.ReadInfo()
	if c.maxBody != int64(limit) {
		t.Fatalf("limit from /info %d, want %d", c.maxBody, limit)
	}
	done := make(chan error, 3)
	// Through both ways in: Send, and SendAll with requests in parallel
	// (two payloads: one alone takes Send's way).
	c.Send(&Payload{Body: body, Hits: 120, Waiter: NewWaiter(done, 1, nil)})
	c.cfg.Parallel = 4
	c.SendAll([]*Payload{{Body: slices.Clone(body), Hits: 120, Waiter: NewWaiter(done, 1, nil)},
		{Body: slices.Clone(body), Hits: 120, Waiter: NewWaiter(done, 1, nil)}})
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	posts, taken := got()
	if posts != len(taken) || obs.failed != 0 || obs.dropped != 0 || obs.split < 6 {
		t.Fatalf("%d posts, %d taken, failed %d dropped %d split %d: nothing over the limit may be sent",
			posts, len(taken), obs.failed, obs.dropped, obs.split)
	}
	for _, n := range taken {
		if n > limit {
			t.Fatalf("a body of %d bytes went out over the limit %d", n, limit)
		}
	}
	// A single group over the limit cannot be split: dropped, with the cause.
	var g writer.Group
	g.Service, g.Resource, g.Hits = "svc", strings.Repeat("r", limit), 1
	one := (&writer.Payload{Buckets: []writer.DecodedBucket{{Start: 10, Duration: 10, Groups: []writer.Group{g}}}}).Append(nil)
	c.Send(&Payload{Body: one, Hits: 1})
	if obs.dropped != 1 || !errors.Is(obs.lastErr, ErrOverAgentLimit) || !errors.Is(obs.lastErr, writer.ErrUnsplittable) {
		t.Fatalf("dropped %d, %v; want 1 for ErrOverAgentLimit and ErrUnsplittable", obs.dropped, obs.lastErr)
	}
	if p, _ := got(); p != posts {
		t.Fatal("the unsplittable payload was sent over the limit")
	}
}

// TestStaleInfoPolledAgain: an /info that fails at start (an agent starting
// after the process) is polled again at InfoRefresh although the agent is
// on, until it answers: its limit then splits payloads before they are
// sent. A body refused as too large makes /info stale again.
func TestStaleInfoPolledAgain(t *testing.T) {
	body := splitBody()
	limit := len(body) / 3
	var infoCalls atomic.Int32
	inner, got := limitAgent(t, limit, true)
	defer inner.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == InfoPath && infoCalls.Add(1) == 1 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	c.ReadInfo()
	due, ok := c.NextDue()
	if c.Off() || c.maxBody != 0 || !ok || due.After(time.Now().Add(c.cfg.InfoRefresh)) {
		t.Fatalf("after a failed /info: off %v, limit %d, next due %v (%v); want on, unknown, a poll within InfoRefresh",
			c.Off(), c.maxBody, due, ok)
	}
	c.RunDue(due)
	if infoCalls.Load() != 2 || c.maxBody != int64(limit) {
		t.Fatalf("/info calls %d, limit %d; want 2 calls and the limit %d", infoCalls.Load(), c.maxBody, limit)
	}
	if _, ok := c.NextDue(); ok {
		t.Fatal("nothing is due once /info answered")
	}
	c.Send(&Payload{Body: body, Hits: 120})
	if posts, taken := got(); posts != len(taken) || obs.sent != len(taken) || obs.dropped != 0 {
		t.Fatalf("%d posts, %d taken, sent %d dropped %d: nothing over the limit may be sent", posts, len(taken), obs.sent, obs.dropped)
	}
	// A refusal as too large (here a 413 from an agent whose limit went down
	// since) makes /info due again.
	c.settle(&Payload{Body: splitBody(), Hits: 120}, &AgentError{StatusCode: http.StatusRequestEntityTooLarge})
	if _, ok := c.NextDue(); !ok {
		t.Fatal("no /info poll due after a body refused as too large")
	}
}

// switchAgent answers POST /v0.6/stats with the status code in post (200
// when 0), and /info listing the stats endpoint while listed is true. It
// records the bodies it took (200) and the times /info was read.
type switchAgent struct {
	srv    *httptest.Server
	post   atomic.Int32
	listed atomic.Bool
	mu     sync.Mutex
	posts  int
	taken  [][]byte
	infos  []time.Time
}

func newSwitchAgent(t *testing.T) *switchAgent {
	a := &switchAgent{}
	a.listed.Store(true)
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if r.URL.Path == InfoPath {
			a.infos = append(a.infos, time.Now())
			endpoints := `["/v0.4/traces"]`
			if a.listed.Load() {
				endpoints = `["/v0.4/traces", "` + StatsPath + `"]`
			}
			_, _ = io.WriteString(w, `{"endpoints": `+endpoints+`}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		a.posts++
		if code := int(a.post.Load()); code != 0 {
			w.WriteHeader(code)
			return
		}
		a.taken = append(a.taken, body)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *switchAgent) counts() (posts, taken, infos int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.posts, len(a.taken), len(a.infos)
}

// runDue drives c as its owner does, until no payload waits for a retry.
func runDue(t *testing.T, c *Client) {
	deadline := time.Now().Add(10 * time.Second)
	for c.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("retries still pending after 10 s")
		}
		d, _ := c.NextDue()
		time.Sleep(max(time.Until(d), 0))
		c.RunDue(time.Now())
	}
}

// TestNotFoundHoldsUntilBack: a 404 switches the client off and holds the
// payload (not dropped, not posted again while off); /info is polled
// RetryBackoff later, not at InfoRefresh, and once it lists the stats
// endpoint again the held payload goes out, exactly once.
func TestNotFoundHoldsUntilBack(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.InfoRefresh = time.Hour // the polls must not wait for it
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.ReadInfo()
	ag.post.Store(http.StatusNotFound)
	ag.listed.Store(false)
	body := splitBody()
	c.Send(&Payload{Body: body, Hits: 120})
	if !c.Off() || obs.off != 1 || obs.dropped != 0 || c.Pending() != 1 {
		t.Fatalf("after the 404: off %v (Off %d), dropped %d, pending %d; want off once, nothing dropped, 1 held",
			c.Off(), obs.off, obs.dropped, c.Pending())
	}
	if d, ok := c.NextDue(); !ok || time.Until(d) > cfg.RetryBackoff {
		t.Fatalf("next due in %v (%v): want within RetryBackoff (%v)", time.Until(d), ok, cfg.RetryBackoff)
	}
	// Off for a poll or two, then back.
	time.Sleep(cfg.RetryBackoff)
	c.RunDue(time.Now())
	ag.post.Store(0)
	ag.listed.Store(true)
	runDue(t, c)
	posts, taken, _ := ag.counts()
	if posts != 2 || taken != 1 || !bytes.Equal(ag.taken[0], body) || obs.sent != 1 || obs.dropped != 0 || obs.on != 1 || c.Off() {
		t.Fatalf("posts %d taken %d (same body: %v), sent %d dropped %d On %d off %v; want 2 posts (the 404, then the held payload), 1 taken, sent 1, none dropped, On once",
			posts, taken, taken == 1 && bytes.Equal(ag.taken[0], body), obs.sent, obs.dropped, obs.on, c.Off())
	}
}

// TestHeldRetriesDueWhenBack: a payload held by a 404 is due again as soon
// as a read of /info finds the stats endpoint listed, not at the wait it
// was held for (an hour here).
func TestHeldRetriesDueWhenBack(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.RetryBackoff, cfg.MaxRetryBackoff, cfg.InfoRefresh = time.Hour, time.Hour, time.Hour
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.ReadInfo()
	ag.post.Store(http.StatusNotFound)
	ag.listed.Store(false)
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	if d, ok := c.NextDue(); !c.Off() || c.Pending() != 1 || !ok || time.Until(d) < time.Hour/2 {
		t.Fatalf("after the 404: off %v, pending %d, next due in %v; want off, 1 held for about an hour", c.Off(), c.Pending(), time.Until(d))
	}
	ag.post.Store(0)
	ag.listed.Store(true)
	c.ReadInfo()
	if d, ok := c.NextDue(); c.Off() || !ok || d.After(time.Now()) {
		t.Fatalf("back: off %v, next due in %v (%v); want on, the held payload due now", c.Off(), time.Until(d), ok)
	}
	c.RunDue(time.Now())
	if posts, taken, _ := ag.counts(); posts != 2 || taken != 1 || obs.sent != 1 || c.Pending() != 0 {
		t.Fatalf("posts %d, taken %d, sent %d, pending %d; want the 404, then the held payload taken", posts, taken, obs.sent, c.Pending())
	}
}

// TestNotFoundHeldWithinBudget: an agent that stays off gets no second
// POST; the held payload is dropped as ErrAgentOff once its retries are
// spent, and /info is polled at waits that start at RetryBackoff and double
// up to InfoRefresh.
//
// The waits are the ones the client schedules (its infoDue, set by the
// step that read the 404 or polled /info), bracketed by the clock read
// before and after that step: the gaps between the polls' arrivals at the
// agent add the sleep's overshoot and two HTTP round trips, which on a
// loaded machine under -race run to tens of milliseconds.
func TestNotFoundHeldWithinBudget(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.InfoRefresh = 80 * time.Millisecond
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	ag.post.Store(http.StatusNotFound)
	ag.listed.Store(false)
	type span struct{ lo, hi time.Duration } // the scheduled wait is within
	var waits []span
	// step runs f and, if it scheduled a new /info poll, notes its wait:
	// infoDue is now+wait for a now between before and after.
	step := func(f func()) {
		due := c.infoDue
		before := time.Now()
		f()
		after := time.Now()
		if c.off.Load() && !c.infoDue.Equal(due) {
			waits = append(waits, span{c.infoDue.Sub(after), c.infoDue.Sub(before)})
		}
	}
	step(func() { c.Send(&Payload{Body: splitBody(), Hits: 120}) })
	deadline := time.Now().Add(10 * time.Second)
	for c.Pending() > 0 { // runDue, step by step
		if time.Now().After(deadline) {
			t.Fatal("retries still pending after 10 s")
		}
		d, _ := c.NextDue()
		time.Sleep(max(time.Until(d), 0))
		step(func() { c.RunDue(time.Now()) })
	}
	if posts, _, _ := ag.counts(); posts != 1 || obs.dropped != 1 || !errors.Is(obs.lastErr, ErrAgentOff) || obs.sent != 0 {
		t.Fatalf("posts %d, dropped %d (%v), sent %d; want the one 404, then the payload dropped as ErrAgentOff", posts, obs.dropped, obs.lastErr, obs.sent)
	}
	// Go on polling while off: the waits double from RetryBackoff (10 ms)
	// and stop growing at InfoRefresh (80 ms).
	for range 6 {
		d, ok := c.NextDue()
		if !ok {
			t.Fatal("no /info poll due while the agent is off")
		}
		time.Sleep(max(time.Until(d), 0))
		step(func() { c.RunDue(time.Now()) })
	}
	if _, _, infos := ag.counts(); infos < 6 || len(waits) < 6 {
		t.Fatalf("%d /info polls, %d waits scheduled, want at least 6", infos, len(waits))
	}
	want := cfg.RetryBackoff
	for i, w := range waits {
		// Jittered into [3/4, 1] of the wait (pollInfoLater).
		if want*3/4 > w.hi || want < w.lo {
			t.Fatalf("poll wait %d scheduled between %v and %v, want within [%v, %v]: waits %v, from RetryBackoff (%v) doubling up to InfoRefresh (%v)",
				i, w.lo, w.hi, want*3/4, want, waits, cfg.RetryBackoff, cfg.InfoRefresh)
		}
		want = min(2*want, cfg.InfoRefresh)
	}
}

// TestFinalRetriesWithinContext: Final gives the payloads waiting for a
// retry their remaining retries at their due times, not one attempt: an
// agent that answers 503 twice and then 200 gets the payload. Then an agent
// that never answers 200: Final returns once the client's context ends, and
// the payload is dropped.
func TestFinalRetriesWithinContext(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	c := New(context.Background(), testConfig(ag.srv.URL), obs)
	ag.post.Store(http.StatusServiceUnavailable)
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	go func() {
		for {
			if posts, _, _ := ag.counts(); posts >= 2 {
				ag.post.Store(0)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	c.Final(time.Minute)
	c.Close()
	if posts, taken, _ := ag.counts(); obs.sent != 1 || obs.dropped != 0 || taken != 1 || posts < 3 {
		t.Fatalf("sent %d dropped %d, agent posts %d taken %d; want the payload taken after its 503s", obs.sent, obs.dropped, posts, taken)
	}

	ag.post.Store(http.StatusServiceUnavailable)
	obs = &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c = New(ctx, cfg, obs)
	defer c.Close()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	start := time.Now()
	c.Final(time.Minute)
	if took := time.Since(start); took > 400*time.Millisecond || obs.dropped != 1 || obs.sent != 0 || c.Pending() != 0 {
		t.Fatalf("Final took %v, dropped %d sent %d pending %d; want it back at the context's end (50 ms), the payload dropped",
			took, obs.dropped, obs.sent, c.Pending())
	}
}

// midJitter is a rand.Source whose jitter lands every retry at 0.75 of its
// backoff: a deterministic timeline.
type midJitter struct{}

func (midJitter) Uint64() uint64 { return 1 << 63 }

// TestHeldPayloadChecksInfoFirst: the payload held at a 404 and /info both
// back off from RetryBackoff, the payload's checks (jittered into [d/2, d])
// coming just before the polls. The agent back at 175 ms, after the third
// poll (140 ms) but before the payload's last check (225 ms): that check
// reads /info first, and the payload goes out.
func TestHeldPayloadChecksInfoFirst(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.RetryBackoff, cfg.MaxRetryBackoff, cfg.InfoRefresh = 20*time.Millisecond, time.Second, time.Second
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.rng = rand.New(midJitter{})
	c.ReadInfo()
	ag.post.Store(http.StatusNotFound)
	ag.listed.Store(false)
	back := time.AfterFunc(175*time.Millisecond, func() { ag.post.Store(0); ag.listed.Store(true) })
	defer back.Stop()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	runDue(t, c)
	if posts, taken, _ := ag.counts(); obs.sent != 1 || obs.dropped != 0 || taken != 1 || posts != 2 {
		t.Fatalf("sent %d dropped %d (%v), posts %d taken %d; want the held payload delivered on the second post",
			obs.sent, obs.dropped, obs.lastErr, posts, taken)
	}
}

// TestHoldReportsNoAttempt: a payload sent while /info says the agent is
// off is never posted: the Observer hears no Failed and no Retried, only
// its drop once the budget is spent.
func TestHoldReportsNoAttempt(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	c := New(context.Background(), testConfig(ag.srv.URL), obs)
	defer c.Close()
	ag.listed.Store(false)
	c.ReadInfo()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	runDue(t, c)
	if posts, _, _ := ag.counts(); posts != 0 || obs.failed != 0 || obs.retried != 0 || obs.dropped != 1 || !errors.Is(obs.lastErr, ErrAgentOff) {
		t.Fatalf("posts %d, failed %d, retried %d, dropped %d (%v); want nothing posted or reported but the drop as ErrAgentOff",
			posts, obs.failed, obs.retried, obs.dropped, obs.lastErr)
	}
}

// TestNotFoundWhileListedBacksOff: an agent whose /info lists the stats
// endpoint but whose POST answers 404 switches the client off and on at
// every poll. The polls (and the posts after them) still back off towards
// InfoRefresh: only a payload taken starts them again from RetryBackoff.
func TestNotFoundWhileListedBacksOff(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL) // RetryBackoff 10 ms, InfoRefresh 1 s
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.ReadInfo()
	ag.post.Store(http.StatusNotFound)
	deadline := time.Now().Add(cfg.InfoRefresh / 2)
	next := time.Now()
	for time.Now().Before(deadline) {
		if !time.Now().Before(next) { // a report every 100 ms
			c.Send(&Payload{Body: splitBody(), Hits: 120})
			next = next.Add(100 * time.Millisecond)
		}
		d, ok := c.NextDue()
		if !ok || d.After(next) {
			d = next
		}
		time.Sleep(max(time.Until(d), 0))
		c.RunDue(time.Now())
	}
	// Doubling from 10 ms, the polls of 500 ms are at most about 6 (10,
	// 20, 40, 80, 160, 320 ms); at RetryBackoff they were about 50.
	if posts, _, infos := ag.counts(); infos > 8 {
		t.Fatalf("in %v: %d /info polls, %d posts; want the polls backing off", cfg.InfoRefresh/2, infos, posts)
	}
}

// TestFinalWithinAndAfterContext: Final spends at most its window on
// retries (none brought forward: the first is due in 0.5-1 s), then gives
// one last attempt; once the client's context has ended it posts nothing
// more, and reports no failed attempt for it.
func TestFinalWithinAndAfterContext(t *testing.T) {
	ag := newSwitchAgent(t)
	ag.post.Store(http.StatusServiceUnavailable)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Second, time.Second
	c := New(context.Background(), cfg, obs)
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	start := time.Now()
	c.Final(50 * time.Millisecond)
	c.Close()
	posts, _, _ := ag.counts()
	if took := time.Since(start); took > 400*time.Millisecond || posts != 2 || obs.dropped != 1 || obs.failed != 2 {
		t.Fatalf("Final(50ms) took %v, posts %d, failed %d, dropped %d; want the first and the last attempt, then the drop",
			took, posts, obs.failed, obs.dropped)
	}

	obs = &counting{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c = New(ctx, cfg, obs)
	defer c.Close()
	before, _, _ := ag.counts()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	c.Final(time.Minute)
	after, _, _ := ag.counts()
	if after-before != 1 || obs.failed != 1 || obs.dropped != 1 || !errors.Is(obs.lastErr, context.DeadlineExceeded) {
		t.Fatalf("posts %d, failed %d, dropped %d (%v); want the first attempt, none after the context ended",
			after-before, obs.failed, obs.dropped, obs.lastErr)
	}
}

// TestEndedContextCountsNoRequest: a payload sent once the client's
// context has ended is dropped with the context's error and no request,
// failed or otherwise, is counted: none went out, so a stop's cancel must
// not read as the agent failing.
func TestEndedContextCountsNoRequest(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, testConfig(ag.srv.URL), obs)
	defer c.Close()
	cancel()
	before, _, _ := ag.counts()
	for range 3 {
		c.Send(&Payload{Body: splitBody(), Hits: 120})
	}
	after, _, _ := ag.counts()
	if after != before || obs.failed != 0 || obs.dropped != 3 || !errors.Is(obs.lastErr, context.Canceled) {
		t.Fatalf("posts %d, failed %d, dropped %d (%v); want no post, no failure, 3 drops for the cancel",
			after-before, obs.failed, obs.dropped, obs.lastErr)
	}
}

// TestFinalHungAgentIsBounded: an agent that reads each body and never
// answers; four payloads wait. No request starts after the window, and
// the last attempt goes to each payload once: Final takes the window, the
// requests in flight as it ends, and one Timeout per payload, not passes
// begun in the window running on past it.
func TestFinalHungAgentIsBounded(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	for _, parallel := range []int{1, 2} {
		posts.Store(0)
		cfg := testConfig(srv.URL)
		cfg.Timeout, cfg.Parallel = 200*time.Millisecond, parallel
		cfg.RetryBackoff, cfg.MaxRetryBackoff = 10*time.Millisecond, 10*time.Millisecond
		obs := &counting{}
		c := New(context.Background(), cfg, obs)
		const n, within = 4, 50 * time.Millisecond
		ps := make([]*Payload, n)
		for i := range ps {
			ps[i] = &Payload{Body: splitBody(), Hits: 1}
		}
		c.SendAll(ps) // each times out and waits for a retry
		before := posts.Load()
		start := time.Now()
		c.Final(within)
		took := time.Since(start)
		c.Close()
		// The window, the requests in flight at its end (one Timeout), the
		// last attempts (n/parallel Timeouts), and room for a slow host.
		bound := within + cfg.Timeout + time.Duration(n/parallel)*cfg.Timeout + 400*time.Millisecond
		if took > bound || obs.dropped != n || obs.sent != 0 {
			t.Errorf("parallel %d: Final(%v) took %v (bound %v), %d posts, dropped %d of %d",
				parallel, within, took, bound, posts.Load()-before, obs.dropped, n)
		}
		// Within the window at most one pass (a request each); then one
		// last attempt each.
		if got := posts.Load() - before; got < n || got > 2*n {
			t.Errorf("parallel %d: %d posts in Final for %d payloads, want %d..%d", parallel, got, n, n, 2*n)
		}
	}
}

// TestStaleInfoBacksOffWhileSending: an /info that keeps failing (a proxy
// in front of the agent blocks it) while the agent takes every payload is
// polled at doubling waits towards InfoRefresh: a payload taken does not
// start them over.
func TestStaleInfoBacksOffWhileSending(t *testing.T) {
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == InfoPath {
			http.Error(w, "blocked", http.StatusInternalServerError)
		}
	}))
	defer agent.Close()
	obs := &counting{}
	cfg := testConfig(agent.URL) // RetryBackoff 10 ms, InfoRefresh 1 s
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	for range 10 {
		c.Send(&Payload{Body: splitBody(), Hits: 120})
		c.ReadInfo()
	}
	if gap := time.Until(c.infoDue); obs.sent != 10 || gap < cfg.InfoRefresh/2 {
		t.Fatalf("sent %d; after 10 failed /info polls the next is %v away, want about InfoRefresh (%v)", obs.sent, gap, cfg.InfoRefresh)
	}
}

// TestRetryQueuedBeforeOffWaitsForPoll: a payload queued after a 503, then
// another answered 404 (the agent goes off): the first is checked after
// the /info poll, not held one attempt short of it.
func TestRetryQueuedBeforeOffWaitsForPoll(t *testing.T) {
	ag := newSwitchAgent(t)
	c := New(context.Background(), testConfig(ag.srv.URL), &counting{})
	defer c.Close()
	b := &Payload{Body: splitBody(), Hits: 1}
	c.settle(b, &AgentError{StatusCode: http.StatusServiceUnavailable})
	c.settle(&Payload{Body: splitBody(), Hits: 2}, &AgentError{StatusCode: http.StatusNotFound})
	if !c.Off() || b.due.Before(c.infoDue) {
		t.Fatalf("off %v; the 503's retry due %v before the poll at %v", c.Off(), b.due, c.infoDue)
	}
}

// maybeDelivered records MaybeDelivered of each payload dropped.
type maybeDelivered struct {
	counting
	drops []bool
}

func (o *maybeDelivered) Dropped(p *Payload, err error) {
	o.counting.Dropped(p, err)
	o.drops = append(o.drops, p.MaybeDelivered())
}

// TestSplitKeepsMaybeDelivered: a payload whose attempt timed out once sent
// and that is then split (here a 413 on the retry) may be at the agent
// already; so may each part, which says so when it is dropped.
func TestSplitKeepsMaybeDelivered(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		switch posts.Add(1) {
		case 1: // read, but answered after the client gave up
			<-r.Context().Done()
		case 2:
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Timeout, cfg.MaxRetries = 300*time.Millisecond, 1
	obs := &maybeDelivered{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	for c.Pending() > 0 {
		d, _ := c.NextDue()
		time.Sleep(time.Until(d))
		c.RunDue(time.Now())
	}
	if obs.split != 1 || len(obs.drops) < 2 {
		t.Fatalf("split %d, dropped %d: want the payload split and its parts dropped", obs.split, len(obs.drops))
	}
	for i, md := range obs.drops {
		if !md {
			t.Errorf("part %d dropped without MaybeDelivered, though the whole may be at the agent", i)
		}
	}
}

// TestPassSlowRequestHoldsOneSlot: in a pass, a request the agent is slow
// to answer holds its slot, not the payloads after it: with Parallel 2 and
// the first of twenty held, the other nineteen are sent through the other
// slot, and all but the last one's outcomes handled, before it is released. SendAll used to
// wait for a whole chunk's requests before handing on the next.
func TestPassSlowRequestHoldsOneSlot(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Datadog-Meta-Lang") == "slow" {
			<-release
		}
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Parallel = 2
	obs := &ordered{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	pass := c.NewPass()
	for i := range 20 {
		h := &Headers{Lang: "go"}
		if i == 0 {
			h.Lang = "slow"
		}
		pass.Send(&Payload{Body: []byte{0x80}, Hits: uint64(100 + i), Headers: h})
	}
	// Every Send returned with the slow request still held: the other
	// slot took the rest; all but the last two outcomes are handled.
	if obs.sent < 18 || slices.Contains(obs.sentHits, 100) {
		close(release)
		pass.Close()
		t.Fatalf("with the first request held: %d sent (%v), want at least 18, not the held one", obs.sent, obs.sentHits)
	}
	close(release)
	pass.Close()
	if obs.sent != 20 || obs.sentHits[len(obs.sentHits)-1] != 100 && obs.sentHits[len(obs.sentHits)-2] != 100 {
		t.Fatalf("after the release: %d sent in order %v, want 20, the held one among the last", obs.sent, obs.sentHits)
	}
}

// TestPassHandlesOutcomesBeforePosting: a 404 that came back while the
// pass had a slot free is handled before the next payload is posted: the
// agent is off, and that payload is held, not posted to it.
func TestPassHandlesOutcomesBeforePosting(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Parallel = 4
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	pass := c.NewPass()
	pass.Send(&Payload{Body: []byte{0x80}, Hits: 1})
	for posts.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the 404 is back, waiting in done
	pass.Send(&Payload{Body: []byte{0x80}, Hits: 2})
	pass.Close() // the second payload's request, if any, has returned
	got := posts.Load()
	if got != 1 {
		t.Fatalf("%d POSTs after the first 404 had come back (off seen: %v at the end); want 1, the second payload held unposted",
			got, c.Off())
	}
}

// TestTooLargeOncePollsSoon: a pass whose eight payloads the agent refuses
// as too large reads /info again about RetryBackoff later, as the first
// refusal asks: each refusal used to double the wait.
func TestTooLargeOncePollsSoon(t *testing.T) {
	body := splitBody()
	limit := len(body) * 2 / 3
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) > limit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Parallel = 8
	cfg.RetryBackoff, cfg.InfoRefresh = 10*time.Millisecond, 10*time.Second
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	ps := make([]*Payload, 8)
	for i := range ps {
		ps[i] = &Payload{Body: append([]byte(nil), body...), Hits: 120}
	}
	start := time.Now()
	c.SendAll(ps)
	due, ok := c.NextDue()
	if wait := due.Sub(start); !ok || wait > 10*cfg.RetryBackoff {
		t.Fatalf("after one pass of %d 413s (split %d, sent %d) the /info re-read is due in %v; want about RetryBackoff %v",
			len(ps), obs.split, obs.sent, wait, cfg.RetryBackoff)
	}
}

// TestFinalSplitIsBounded: a payload waiting for its retry meets, in
// Final's window, an agent that refuses large bodies and never answers
// small ones. Its parts are posted as any pass's payloads, Parallel at a
// time and none after the window, so Final takes the window, the requests
// in flight as it ends, and one Timeout per Parallel parts, not every
// part's Timeout one after another, in the window and then again.
func TestFinalSplitIsBounded(t *testing.T) {
	body := splitBody()
	limit := len(body) / 5 // 16 groups: parts of 2 groups fit, 8 of them
	var refusing atomic.Bool
	var posts atomic.Int32
	srv := tooLargeAgent(limit, &refusing, func() { posts.Add(1) }, func(done <-chan struct{}) { <-done })
	defer srv.Close()
	for _, parallel := range []int{1, 2} {
		refusing.Store(false)
		cfg := testConfig(srv.URL)
		cfg.Timeout, cfg.Parallel = 200*time.Millisecond, parallel
		cfg.MaxRetryPayloads = 32
		obs := &counting{}
		c := New(context.Background(), cfg, obs)
		c.Send(&Payload{Body: body, Hits: 120}) // a 503: it waits for a retry
		refusing.Store(true)
		start := time.Now()
		c.Final(50 * time.Millisecond)
		took := time.Since(start)
		c.Close()
		const parts = 8
		bound := 50*time.Millisecond + cfg.Timeout + parts/time.Duration(parallel)*cfg.Timeout + 400*time.Millisecond
		if took > bound || obs.dropped != parts || obs.sent != 0 {
			t.Errorf("parallel %d: Final took %v (bound %v), %d posts, split %d, dropped %d, want %d parts dropped",
				parallel, took, bound, posts.Load(), obs.split, obs.dropped, parts)
		}
	}
}

// tooLargeAgent answers 503 until refusing is set, then 413 to a body
// over limit and, to the rest, hangs (until done: the request's end).
// posted runs on every request.
func tooLargeAgent(limit int, refusing *atomic.Bool, posted func(), hang func(done <-chan struct{})) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posted()
		b, _ := io.ReadAll(r.Body)
		switch {
		case !refusing.Load():
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case len(b) > limit:
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		default:
			hang(r.Context().Done())
		}
	}))
}

// TestSplitsOfAPassGoOutTogether: eight payloads posted together (Parallel
// 8), each refused as too large, are split; their sixteen parts go out
// eight at a time, so an agent that then hangs costs Final two Timeouts,
// as its doc says. The parts of each payload used to be posted in a pass
// of their own, one payload after another: two requests in flight, eight
// Timeouts (1.6 s).
func TestSplitsOfAPassGoOutTogether(t *testing.T) {
	body := splitBody()
	limit := len(body) * 2 / 3 // halves fit
	var refusing atomic.Bool
	var inflight, most atomic.Int32
	srv := tooLargeAgent(limit, &refusing, func() {}, func(done <-chan struct{}) {
		n := inflight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-done
		inflight.Add(-1)
	})
	defer srv.Close()
	const parallel, payloads = 8, 8
	cfg := testConfig(srv.URL)
	cfg.Timeout, cfg.Parallel, cfg.MaxRetryPayloads = 200*time.Millisecond, parallel, 64
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	for range payloads {
		c.Send(&Payload{Body: body, Hits: 120}) // a 503: each waits for a retry
	}
	refusing.Store(true)
	start := time.Now()
	c.Final(0) // no window: one last pass of all eight
	took := time.Since(start)
	c.Close()
	bound := cfg.Timeout + 2*payloads/parallel*cfg.Timeout + 300*time.Millisecond
	if took > bound || obs.split != payloads || obs.dropped != 2*payloads || obs.sent != 0 || most.Load() < parallel {
		t.Fatalf("Final took %v (bound %v), split %d, dropped %d, sent %d, at most %d parts in flight; want %d split, %d dropped, %d in flight at once",
			took, bound, obs.split, obs.dropped, obs.sent, most.Load(), payloads, 2*payloads, parallel)
	}
}

// TestTimeoutWhileWritingIsNotMaybeDelivered: an agent that accepts the
// connection but never reads makes the attempt time out before the body is
// written whole; the agent cannot have decoded a body it never got, so the
// drop is not counted as maybe delivered.
func TestTimeoutWhileWritingIsNotMaybeDelivered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // held open, never read
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-acceptDone
		mu.Lock()
		for _, conn := range conns {
			conn.Close()
		}
		mu.Unlock()
	}()
	cfg := testConfig("http://" + ln.Addr().String())
	cfg.Timeout, cfg.MaxRetries = 300*time.Millisecond, 0
	obs := &maybeDelivered{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	// Far more than the socket buffers of both ends hold.
	c.Send(&Payload{Body: make([]byte, 32<<20), Hits: 7})
	if len(obs.drops) != 1 {
		t.Fatalf("dropped %d, want 1", len(obs.drops))
	}
	if obs.drops[0] {
		t.Fatal("dropped as maybe delivered, though the agent never read the body")
	}
}

// TestReadInfoFailureIsReported: each /info read that fails (a 5xx, a body
// that is not /info's JSON, no agent) is told to the Observer with its
// cause, and leaves /info stale for the polls; a 404 (an agent too old for
// /info) is an answer, not a failure, and so is nothing the client did
// itself once closed.
func TestReadInfoFailureIsReported(t *testing.T) {
	var mode atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case 0:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 1:
			_, _ = io.WriteString(w, "<html>not json</html>")
		case 2:
			http.NotFound(w, r)
		default:
			_, _ = io.WriteString(w, `{"endpoints":["/v0.6/stats"]}`)
		}
	}))
	defer srv.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(srv.URL), obs)
	defer c.Close()

	c.ReadInfo()
	var ae *AgentError
	if obs.infoFailed != 1 || !errors.As(obs.lastInfoErr, &ae) || ae.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("503: %d failures reported, last %v; want 1, the 503", obs.infoFailed, obs.lastInfoErr)
	}
	if !strings.Contains(obs.lastInfoErr.Error(), "/info") {
		t.Errorf("error %q does not say it is /info's", obs.lastInfoErr)
	}
	if _, ok := c.NextDue(); !ok || obs.info != 0 {
		t.Fatalf("after a failed read: no poll scheduled, or %d reads told", obs.info)
	}
	mode.Store(1)
	c.ReadInfo()
	var se *json.SyntaxError
	if obs.infoFailed != 2 || !errors.As(obs.lastInfoErr, &se) {
		t.Fatalf("bad JSON: %d failures reported, last %v; want 2, a JSON syntax error", obs.infoFailed, obs.lastInfoErr)
	}
	mode.Store(2)
	c.ReadInfo()
	if obs.infoFailed != 2 || obs.info != 1 {
		t.Fatalf("404: %d failures, %d reads; want 2 and 1 (an old agent's answer)", obs.infoFailed, obs.info)
	}
	mode.Store(3)
	c.ReadInfo()
	if obs.infoFailed != 2 || obs.info != 2 {
		t.Fatalf("200: %d failures, %d reads; want 2 and 2", obs.infoFailed, obs.info)
	}

	addr := srv.Listener.Addr().String()
	srv.Close()
	gone := New(context.Background(), testConfig("http://"+addr), obs)
	gone.ReadInfo()
	if obs.infoFailed != 3 || obs.lastInfoErr == nil {
		t.Fatalf("no agent: %d failures reported, last %v; want 3", obs.infoFailed, obs.lastInfoErr)
	}
	gone.Close()
	gone.ReadInfo()
	if obs.infoFailed != 3 {
		t.Fatalf("closed client: %d failures reported, want still 3 (the owner gave up; not the agent's failure)", obs.infoFailed)
	}
}

// TestFinalPollsAnAgentBackFromOff: a payload held while the agent is off,
// whose next /info poll is due after Final's window, reaches an agent back
// by then: Final reads /info first instead of waiting for that poll, for
// the SDK's Stop and the relay's alike.
func TestFinalPollsAnAgentBackFromOff(t *testing.T) {
	ag := newSwitchAgent(t)
	obs := &counting{}
	cfg := testConfig(ag.srv.URL)
	// The polls back off from RetryBackoff: the next is an hour away.
	cfg.RetryBackoff, cfg.MaxRetryBackoff, cfg.InfoRefresh = time.Hour, time.Hour, time.Hour
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	ag.listed.Store(false)
	c.ReadInfo()
	c.Send(&Payload{Body: splitBody(), Hits: 120})
	if d, ok := c.NextDue(); !ok || time.Until(d) < time.Second {
		t.Fatalf("the held payload is due in %v (%v); want it held past Final's window", time.Until(d), ok)
	}
	ag.listed.Store(true)
	c.Final(500 * time.Millisecond)
	if _, taken, _ := ag.counts(); obs.sent != 1 || obs.dropped != 0 || taken != 1 || c.Off() {
		t.Fatalf("sent %d dropped %d (%v), taken %d, off %v; want the held payload delivered by Final",
			obs.sent, obs.dropped, obs.lastErr, taken, c.Off())
	}
}

// TestConnectionLostOnceSentMayDuplicate: the agent reads the whole body
// and takes it, then the connection breaks before any answer (the agent
// killed, a proxy's reset). As after a timeout once sent, the retry may
// deliver the payload twice, and is counted so (RetriesAfterTimeout).
func TestConnectionLostOnceSentMayDuplicate(t *testing.T) {
	var takes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if takes.Add(1) == 1 {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // taken, then no answer
			}
		}
	}))
	defer srv.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(srv.URL), obs)
	defer c.Close()
	done := make(chan error, 1)
	p := &Payload{Body: splitBody(), Hits: 120, Waiter: NewWaiter(done, 1, nil)}
	c.Send(p)
	for c.Pending() > 0 {
		d, _ := c.NextDue()
		time.Sleep(time.Until(d))
		c.RunDue(time.Now())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if takes.Load() != 2 || obs.sent != 1 || obs.retried != 1 || obs.retriedAfterTimeout != 1 || !p.MaybeDelivered() {
		t.Fatalf("agent took the body %d times; sent %d, retried %d (%d that may duplicate), maybe delivered %v; want 2; 1, 1 (1), true",
			takes.Load(), obs.sent, obs.retried, obs.retriedAfterTimeout, p.MaybeDelivered())
	}
}

// TestInfoPollJittered: the /info polls while the agent is off are
// jittered into [3/4, 1] of their wait, so that processes that met a 404
// together, and the payloads they hold for the poll, do not poll and
// retry in lockstep.
func TestInfoPollJittered(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1")
	cfg.RetryBackoff, cfg.InfoRefresh = 100*time.Millisecond, time.Second
	c := New(context.Background(), cfg, &counting{})
	defer c.Close()
	seen := map[time.Duration]bool{}
	for range 50 {
		c.infoWait = 0 // the first poll's wait: RetryBackoff
		before := time.Now()
		c.pollInfoLater()
		after := time.Now()
		lo, hi := c.infoDue.Sub(after), c.infoDue.Sub(before)
		if hi < cfg.RetryBackoff*3/4 || lo > cfg.RetryBackoff {
			t.Fatalf("a poll scheduled %v..%v ahead, want within [%v, %v]", lo, hi, cfg.RetryBackoff*3/4, cfg.RetryBackoff)
		}
		seen[hi.Round(time.Millisecond)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("50 polls scheduled at %d distinct waits (to the ms): not jittered", len(seen))
	}
}

// TestInfoOffHoldsRetriesForPoll: a retry queued before the agent goes
// off waits for the /info poll that may see it back, whether the switch
// came from a 404 or from an /info read without the stats endpoint: it is
// not held one attempt short of that poll and dropped at its last.
func TestInfoOffHoldsRetriesForPoll(t *testing.T) {
	for _, via404 := range []bool{true, false} {
		ag := newSwitchAgent(t)
		obs := &counting{}
		cfg := testConfig(ag.srv.URL)
		cfg.MaxRetries = 1
		cfg.InfoRefresh = time.Hour
		c := New(context.Background(), cfg, obs)
		// An earlier off spell with no payload taken since: the poll
		// wait has doubled to 40 ms (pollInfoLater keeps it until a
		// payload is taken).
		ag.listed.Store(false)
		c.ReadInfo()
		c.ReadInfo()
		ag.listed.Store(true)
		c.ReadInfo()
		if c.Off() {
			t.Fatal("still off")
		}
		ag.post.Store(http.StatusServiceUnavailable)
		c.Send(&Payload{Body: splitBody(), Hits: 120}) // queued: its last attempt due in ≤ 10 ms
		ag.listed.Store(false)
		if via404 {
			// another payload's 404 switches the client off
			ag.post.Store(http.StatusNotFound)
			c.Send(&Payload{Body: splitBody(), Hits: 120})
		} else {
			c.ReadInfo() // a poll / recheck that finds no stats endpoint
		}
		// the agent is back before the next poll
		ag.post.Store(0)
		ag.listed.Store(true)
		runDue(t, c)
		c.Close()
		if obs.sent == 0 {
			t.Errorf("via404=%v: the queued payload was dropped (%v) before the /info poll that saw the agent back; sent %d dropped %d",
				via404, obs.lastErr, obs.sent, obs.dropped)
		}
	}
}

// TestFinalFirstInfoReadKeepsHeld: Final's first /info read finds the
// agent still off and puts the next poll off; the held payload waits for
// that poll too, which finds the agent back within the window, and is
// sent rather than dropped at its last attempt.
func TestFinalFirstInfoReadKeepsHeld(t *testing.T) {
	var listed, flip atomic.Bool
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == InfoPath {
			ep := `[]`
			if listed.Load() {
				ep = `["` + StatsPath + `"]`
			}
			if flip.Load() {
				listed.Store(true) // back for the next poll
			}
			io.WriteString(w, `{"endpoints":`+ep+`}`)
			return
		}
		posts.Add(1)
		io.Copy(io.Discard, r.Body)
		if !listed.Load() {
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	obs := &counting{}
	cfg := testConfig(srv.URL)
	cfg.MaxRetries = 1
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	c.Send(&Payload{Body: splitBody(), Hits: 120}) // 404: held for the poll
	if !c.Off() || c.Pending() != 1 {
		t.Fatal("not held")
	}
	flip.Store(true)
	c.Final(time.Second)
	if obs.sent != 1 {
		t.Errorf("sent %d dropped %d (%v), %d posts, on %d: the held payload was dropped before the in-window poll that saw the agent back",
			obs.sent, obs.dropped, obs.lastErr, posts.Load(), obs.on)
	}
}
