// This file tests the datagram transport to a relay: reports split into
// datagrams, the envelope's sequence, drop counts and final flag, and full,
// missing, restarted or moved relays.

package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// relaySocket is a stand-in relay: a datagram socket the test reads itself.
type relaySocket struct {
	conn  *dgram.Conn
	batch *dgram.Batch
	url   string
}

func listenRelay(t *testing.T, network string) *relaySocket {
	t.Helper()
	var (
		c   *dgram.Conn
		err error
		url string
	)
	if network == "unixgram" {
		path := sockdir.Path(t, "relay.sock")
		c, err = dgram.ListenUnixgram(path, 0o600)
		url = "unixgram://" + path
	} else {
		c, err = dgram.ListenUDP("127.0.0.1:0", 4<<20)
		if c != nil {
			url = "udp://" + c.LocalAddr().String()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes), url: url}
}

// received is what one datagram carried.
type received struct {
	env  writer.Envelope
	hits uint64
	size int
}

// read returns the datagrams waiting, decoding each; it waits up to 2 s for
// at least one.
func (r *relaySocket) read(t *testing.T) []received {
	t.Helper()
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			r.conn.Close() // unblocks ReadBatch with an error
		}
	}()
	n, err := r.conn.ReadBatch(r.batch)
	close(done)
	if err != nil {
		t.Fatalf("reading the relay socket: %v", err)
	}
	var out []received
	for _, d := range r.batch.Datagrams()[:n] {
		if d.Truncated {
			t.Fatalf("a datagram of more than %d bytes", r.batch.MaxDatagram())
		}
		env, body, sequenced, err := writer.ParseDatagram(d.Data)
		if err != nil || !sequenced {
			t.Fatalf("datagram: sequenced %v, %v", sequenced, err)
		}
		p, err := writer.DecodePayload(body)
		if err != nil {
			t.Fatalf("payload: %v", err)
		}
		rc := received{env: env, size: len(d.Data)}
		for _, b := range p.Buckets {
			for _, g := range b.Groups {
				rc.hits += g.Hits
			}
		}
		out = append(out, rc)
	}
	return out
}

// TestDatagramsToRelay: over a Unix socket and UDP, a report too large for
// one datagram arrives as several complete payloads, each within
// MaxDatagramBytes, sequenced 1, 2, 3 …, carrying every span.
func TestDatagramsToRelay(t *testing.T) {
	for _, network := range []string{"unixgram", "udp"} {
		t.Run(network, func(t *testing.T) {
			r := listenRelay(t, network)
			const limit = 40 << 10
			a := newStarted(t, Config{AgentURL: r.url, MaxDatagramBytes: limit, SendQueue: 8})
			const keys, per = 600, 3 // ~600 groups: several datagrams
			for k := range keys {
				publishN(a, per, "GET /r/"+string(rune('a'+k%26))+string(rune('a'+k/26)))
			}
			flushed := make(chan error, 1)
			go func() { flushed <- a.Flush(context.Background()) }()
			var got []received
			var hits uint64
			for hits < keys*per {
				for _, rc := range r.read(t) {
					got = append(got, rc)
					hits += rc.hits
				}
			}
			if err := <-flushed; err != nil {
				t.Fatalf("Flush: %v", err)
			}
			stop(t, a)
			if len(got) < 2 {
				t.Fatalf("%d datagrams, want the report split into several", len(got))
			}
			for i, rc := range got {
				if rc.env.Sequence != uint64(i+1) || rc.size > limit || rc.env.DroppedPayloads != 0 {
					t.Fatalf("datagram %d: sequence %d, %d bytes, dropped %d; want sequence %d, <= %d bytes, 0",
						i, rc.env.Sequence, rc.size, rc.env.DroppedPayloads, i+1, limit)
				}
			}
			h := a.Health()
			if hits != keys*per || h.SpansSent != hits || h.PayloadsSent != uint64(len(got)) {
				t.Fatalf("relay got %d hits in %d datagrams; Health: sent %d spans in %d payloads", hits, len(got), h.SpansSent, h.PayloadsSent)
			}
			checkConservation(t, h)
		})
	}
}

// TestRelayURLFromEnvironment: with SPANSTATS_RELAY_URL naming a relay's
// Unix socket and DD_TRACE_AGENT_URL an HTTP agent (as the tracer needs it
// for traces), a Config that names neither sends its report to the relay as
// a sequenced datagram, and the agent receives nothing.
func TestRelayURLFromEnvironment(t *testing.T) {
	r := listenRelay(t, "unixgram")
	agent := statstest.New()
	defer agent.Close()
	t.Setenv(EnvRelayURL, r.url)
	t.Setenv(EnvAgentURL, agent.URL())
	a := newStarted(t, Config{Logger: slog.New(slog.DiscardHandler)})
	publishN(a, 7, "GET /env")
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(context.Background()) }()
	got := r.read(t)
	if err := <-flushed; err != nil {
		t.Fatalf("Flush: %v", err)
	}
	stop(t, a)
	if len(got) != 1 || got[0].hits != 7 || got[0].env.Sequence != 1 {
		t.Fatalf("relay got %+v, want one datagram of 7 hits, sequence 1", got)
	}
	if n := len(agent.Requests()); n != 0 {
		t.Fatalf("the HTTP agent got %d requests, want none", n)
	}
	checkConservation(t, a.Health())
}

// TestDatagramFullSocketDropsAndTells: a relay that does not read fills its
// socket's queue; the sender retries for at most datagramPatience, drops
// and counts the rest, and the next datagram it writes says how many
// payloads and spans were dropped.
func TestDatagramFullSocketDropsAndTells(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1, SendQueue: 64})
	const reports = 16 // > net.unix.max_dgram_qlen (10): the queue fills
	for i := range reports {
		publishN(a, 2, "r")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_ = a.Flush(ctx) // some fail with the full socket: that is the point
		cancel()
		if d := time.Since(start); d > datagramPatience+500*time.Millisecond {
			t.Fatalf("flush %d took %s: the sender waited past its patience", i, d)
		}
	}
	h := a.Health()
	if h.PayloadsDropped == 0 || h.SpansUnsent != 2*h.PayloadsDropped {
		t.Fatalf("dropped %d payloads, %d spans unsent; want some, 2 spans each", h.PayloadsDropped, h.SpansUnsent)
	}
	// Drain the queue, then one more report: its envelope tells the drops.
	var queued []received
	for len(queued) < int(h.PayloadsSent) {
		queued = append(queued, r.read(t)...)
	}
	publishN(a, 1, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after draining: %v", err)
	}
	last := r.read(t)
	if len(last) != 1 || last[0].env.DroppedPayloads != uint32(h.PayloadsDropped) || last[0].env.DroppedSpans != uint32(h.SpansUnsent) ||
		last[0].env.Sequence != h.PayloadsSent+1 {
		t.Fatalf("after the drops: %+v; want one datagram telling %d payloads / %d spans dropped, sequence %d",
			last, h.PayloadsDropped, h.SpansUnsent, h.PayloadsSent+1)
	}
	stop(t, a)
	checkConservation(t, a.Health())
}

// TestDatagramRetryWallTime: toward a relay whose queue stays full, the
// sleeps of one report add up to its patience, the timer's lateness
// included: a sleep that ends 600 µs late (as Go's timer does on an idle
// host) is charged so, where charging only the sleep asked for let a
// 16-part report sleep 120 ms for a patience of 100 ms.
func TestDatagramRetryWallTime(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1, MaxDatagramBytes: 40 << 10})
	fillRelay(t, r)
	const late = 600 * time.Microsecond
	var slept time.Duration // the sender goroutine's alone, read after Flush returns
	sleeps := 0
	a.snd.out.(*datagramOut).sleep = func(d time.Duration) {
		time.Sleep(d + late)
		slept += d + late
		sleeps++
	}
	for i := range 3000 {
		publishN(a, 1, fmt.Sprintf("%0200d", i)) // 3000 groups: several parts
	}
	err := a.Flush(context.Background())
	h := a.Health()
	if !errors.Is(err, dgram.ErrWouldBlock) || h.PayloadsSent != 0 || h.PayloadsDropped < 2 {
		t.Fatalf("Flush = %v, sent %d, dropped %d; want every part of several dropped on the full socket", err, h.PayloadsSent, h.PayloadsDropped)
	}
	if h.DatagramWaits != uint64(sleeps) || sleeps == 0 {
		t.Fatalf("%d waits on the full socket counted, %d slept", h.DatagramWaits, sleeps)
	}
	// Each sleep is charged at least d+late and at most d+sleepSlack, so
	// the sleeps end within one pause after the patience, however loaded
	// the host, and go on for most of it.
	if slept > datagramPatience+datagramBusyPause+late || slept < datagramPatience/2 {
		t.Fatalf("%d sleeps took %s at least, want at most the %s patience and one pause", sleeps, slept, datagramPatience)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = a.Stop(ctx)
	checkConservation(t, a.Health())
}

// TestAbstractRelayNameRefused: on Linux "@name" is an abstract socket
// name, on which the relay refuses to listen (it has no file for the mode
// to guard). New refuses such an AgentURL, in either spelling, with
// ErrBadConfig saying the relay listens on a file path, rather than
// sending to a name no relay can hold ("no relay listening" at every
// report). A file whose name starts with "@" is a path like any other: a
// sender reaches the relay listening there.
func TestAbstractRelayNameRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract socket names are Linux's; elsewhere @name is a relative path")
	}
	name := "@spanstats-test-" + strconv.Itoa(os.Getpid())
	if c, err := dgram.ListenUnixgram(name, 0o600); err == nil {
		c.Close()
		t.Fatalf("the relay's listen took %s", name)
	}
	for _, raw := range []string{"unixgram:" + name, "unixgram://" + name} {
		a, err := New(Config{AgentURL: raw})
		if a != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = a.Stop(ctx)
			cancel()
		}
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "abstract") ||
			!strings.Contains(err.Error(), "file path") || !strings.Contains(err.Error(), strconv.Quote(raw)) {
			t.Errorf("New(AgentURL %q) = %v; want ErrBadConfig quoting the URL as given, naming %s an abstract name and asking for the relay's file path", raw, err, name)
		}
	}

	path := filepath.Join(sockdir.Dir(t), name)
	c, err := dgram.ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
	a := newStarted(t, Config{AgentURL: "unixgram://" + path, SendJitter: -1})
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush to %s: %v", path, err)
	}
	if got := r.read(t); len(got) != 1 || got[0].hits != 3 {
		t.Fatalf("the relay at %s read %+v; want one datagram of 3 spans", path, got)
	}
	stop(t, a)
}

// TestDatagramNoRelay: with nothing listening, a report is retried for at
// most datagramPatience, then dropped and counted; Flush says why.
func TestDatagramNoRelay(t *testing.T) {
	a := newStarted(t, Config{AgentURL: "unixgram://" + sockdir.Path(t, "none.sock")})
	publishN(a, 3, "r")
	start := time.Now()
	err := a.Flush(context.Background())
	if d := time.Since(start); !errors.Is(err, dgram.ErrNoRelay) || d > datagramPatience+500*time.Millisecond {
		t.Fatalf("Flush = %v after %s; want ErrNoRelay within ~%s", err, d, datagramPatience)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsDropped != 1 || h.SpansUnsent != 3 || h.SpansSent != 0 {
		t.Fatalf("dropped %d, unsent %d, sent %d; want 1 3 0", h.PayloadsDropped, h.SpansUnsent, h.SpansSent)
	}
	// Every failed attempt but the last was retried, as over HTTP.
	if h.PayloadsFailed < 2 || h.PayloadsRetried != h.PayloadsFailed-h.PayloadsDropped {
		t.Fatalf("failed %d, retried %d, dropped %d; want retried = failed - dropped, some retries", h.PayloadsFailed, h.PayloadsRetried, h.PayloadsDropped)
	}
	checkConservation(t, h)
}

// TestDatagramRelayRestart: the relay restarts (an upgrade of the
// sidecar: its socket closed, a new one bound at the same path) while an
// SDK has sent to the old one. The next report reaches the new relay
// (on Linux each datagram is addressed to the path; elsewhere the sender
// dials again when the old socket refuses), nothing is dropped, and the
// sequence goes on where it was, so the new relay counts no gap.
func TestDatagramRelayRestart(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	old, err := dgram.ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	r := &relaySocket{conn: old, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
	a := newStarted(t, Config{AgentURL: "unixgram://" + path, SendJitter: -1})
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush to the first relay: %v", err)
	}
	if got := r.read(t); len(got) != 1 || got[0].hits != 3 || got[0].env.Sequence != 1 {
		t.Fatalf("first relay got %+v; want one datagram of 3 spans, sequence 1", got)
	}
	old.Close()
	renewed, err := dgram.ListenUnixgram(path, 0o600) // replaces the stale socket file
	if err != nil {
		t.Fatal(err)
	}
	defer renewed.Close()
	r = &relaySocket{conn: renewed, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
	publishN(a, 4, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after the restart: %v", err)
	}
	if got := r.read(t); len(got) != 1 || got[0].hits != 4 || got[0].env.Sequence != 2 || got[0].env.DroppedPayloads != 0 {
		t.Fatalf("restarted relay got %+v; want one datagram of 4 spans, sequence 2, nothing dropped", got)
	}
	stop(t, a)
	h := a.Health()
	if h.SpansSent != 7 || h.PayloadsDropped != 0 {
		t.Fatalf("sent %d spans, dropped %d payloads; want 7, 0", h.SpansSent, h.PayloadsDropped)
	}
	checkConservation(t, h)
}

// publishBigGroup publishes spans of one key whose group alone encodes to
// about 50 KiB: a resource at MaxResourceLen, MaxPeerTags peer tags at
// MaxTagLen, and both sketches at their bin cap. It returns how many
// Publish took. Give a one bucket for the whole test (a one-hour
// interval): spans published across a boundary make two groups, one small
// enough to send.
func publishBigGroup(a *Aggregator) uint64 {
	tags := make([]string, MaxPeerTags)
	for i := range tags {
		tags[i] = fmt.Sprintf("k%02d:", i) + strings.Repeat("v", MaxTagLen-4)
	}
	resource := strings.Repeat("R", MaxResourceLen)
	var n uint64
	for _, isErr := range []bool{false, true} {
		for i := range 2100 { // durations ~2 % apart: one bin each
			d := int64(math.Pow(1.0202, float64(i)))
			if d <= 0 || d > math.MaxInt64/4 {
				break
			}
			if a.Publish(&Span{Service: "s", Name: "op", Resource: resource, SpanKind: "client", PeerTags: tags, Duration: max(d, 1), Error: isErr}) {
				n++
			}
		}
	}
	return n
}

// TestFinalFlagAfterOversizedLastPart: when Stop's last part is one group
// over MaxDatagramBytes, dropped and counted, the final flag and that drop
// still reach the relay, on a datagram of the header alone.
func TestFinalFlagAfterOversizedLastPart(t *testing.T) {
	r := listenRelay(t, "unixgram")
	const limit = 40 << 10
	// One bucket (see publishBigGroup).
	a := newStarted(t, Config{AgentURL: r.url, MaxDatagramBytes: limit, InboxSize: 1 << 14, SendJitter: -1, BucketInterval: time.Hour})
	big := publishBigGroup(a)
	stop(t, a)
	if h := a.Health(); h.PayloadsDropped != 1 || h.SpansUnsent != big {
		t.Fatalf("Health: dropped %d payloads / %d spans, want 1 / %d", h.PayloadsDropped, h.SpansUnsent, big)
	}
	got := r.read(t)
	last := got[len(got)-1]
	if len(got) != 1 || !last.env.Final() || last.env.DroppedPayloads != 1 || uint64(last.env.DroppedSpans) != big || last.hits != 0 {
		t.Fatalf("relay got %+v; want one datagram of no spans, final, telling of 1 payload / %d spans dropped", got, big)
	}
}

// TestFinalFlagWithShortJitter: Stop's report held by the sender for a
// jitter that ends before the sender sees its queue closed still goes out
// with the final flag (the sender's timer and the closed queue are ready
// together, and either may be taken first).
func TestFinalFlagWithShortJitter(t *testing.T) {
	const iv = 10 * time.Second
	for i := range 20 {
		r := listenRelay(t, "unixgram")
		a, err := New(Config{AgentURL: r.url, BucketInterval: iv, SendJitter: iv/graceDivisor + time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		at := epoch.Add(3 * time.Second)
		d := &driven{t: t, a: a, c: a.cons, now: at}
		d.c.clock = func() time.Time { return d.now }
		d.c.begin(at)
		d.publish("x", epoch.Add(4*time.Second))
		d.c.finish()
		a.snd.run()
		d.c.timer.Stop()
		got := r.read(t)
		if len(got) != 1 || got[0].hits != 1 || !got[0].env.Final() {
			t.Fatalf("run %d: relay got %+v; want one datagram of 1 span, final", i, got)
		}
	}
}

// TestDatagramGroupOverLimit: a group too large alone for MaxDatagramBytes
// is not sent over the limit (the relay would drop it as truncated while
// this SDK counted it sent): its payload is dropped, counted, returned by
// Flush and announced in the next datagram's envelope; the other groups
// of the report go out.
func TestDatagramGroupOverLimit(t *testing.T) {
	r := listenRelay(t, "unixgram")
	const limit = 40 << 10
	// One bucket (see publishBigGroup).
	a := newStarted(t, Config{AgentURL: r.url, MaxDatagramBytes: limit, InboxSize: 1 << 14, SendJitter: -1, BucketInterval: time.Hour})
	big := publishBigGroup(a)
	publishN(a, 5, "GET /small")
	if err := a.Flush(context.Background()); !errors.Is(err, ErrDatagramTooLarge) {
		t.Fatalf("Flush = %v, want ErrDatagramTooLarge", err)
	}
	publishN(a, 1, "GET /after")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("the next Flush: %v", err)
	}
	var got []received
	for len(got) < 2 {
		got = append(got, r.read(t)...)
	}
	var hits, droppedPayloads, droppedSpans uint64
	for _, rc := range got {
		if rc.size > limit {
			t.Fatalf("a datagram of %d bytes, over MaxDatagramBytes %d", rc.size, limit)
		}
		hits += rc.hits
		droppedPayloads += uint64(rc.env.DroppedPayloads)
		droppedSpans += uint64(rc.env.DroppedSpans)
	}
	if hits != 6 || droppedPayloads != 1 || droppedSpans != big {
		t.Fatalf("relay got %d hits and was told of %d payloads / %d spans dropped; want 6 and 1 / %d", hits, droppedPayloads, droppedSpans, big)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsDropped != 1 || h.SpansUnsent != big || h.SpansSent != 6 {
		t.Fatalf("Health: dropped %d, unsent %d, sent %d; want 1, %d, 6", h.PayloadsDropped, h.SpansUnsent, h.SpansSent, big)
	}
	checkConservation(t, h)
}

// TestDatagramLargeLimitUnix: with MaxDatagramBytes at its maximum, the
// Unix socket's send buffer is sized for it, so a datagram far over the
// default limit goes out whole.
func TestDatagramLargeLimitUnix(t *testing.T) {
	r := listenRelay(t, "unixgram")
	r.batch = dgram.NewBatch(1, MaxMaxDatagramBytes)
	a := newStarted(t, Config{AgentURL: r.url, MaxDatagramBytes: MaxMaxDatagramBytes, SendJitter: -1})
	const groups = 200
	for k := range groups {
		publishN(a, 1, fmt.Sprintf("%04d", k)+strings.Repeat("R", 4000))
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	got := r.read(t)
	if len(got) != 1 || got[0].hits != groups || got[0].size < groups*4000 {
		t.Fatalf("got %+v; want one datagram of %d hits, over %d bytes", got, groups, groups*4000)
	}
	stop(t, a)
	checkConservation(t, a.Health())
}

// gatedOut holds each send until its gate opens: the sender is busy.
type gatedOut struct {
	transport
	entered, gate chan struct{}
}

func (g *gatedOut) send(r *report, last bool) {
	g.entered <- struct{}{}
	<-g.gate
	g.transport.send(r, last)
}

// TestDatagramQueueFullDropTold: a report the consumer drops because the
// send queue is full (the sender busy) is announced to the relay too, in
// the next datagram's envelope, not only counted in Health.
func TestDatagramQueueFullDropTold(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a, err := New(Config{AgentURL: r.url, SendQueue: 1, SendJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedOut{transport: a.snd.out, entered: make(chan struct{}, 4), gate: make(chan struct{})}
	a.snd.out = g
	a.Start()
	flushes := make(chan error, 2)
	publishN(a, 5, "A")
	go func() { flushes <- a.Flush(context.Background()) }() // the sender takes it, held at the gate
	<-g.entered
	publishN(a, 4, "B")
	go func() { flushes <- a.Flush(context.Background()) }() // waits in the queue
	waitFor(t, "the second report to be queued", func() bool { return len(a.snd.in) == 1 })
	publishN(a, 3, "C")
	if err := a.Flush(context.Background()); !errors.Is(err, ErrSendQueueFull) {
		t.Fatalf("third Flush = %v, want ErrSendQueueFull", err)
	}
	close(g.gate)
	for range 2 {
		if err := <-flushes; err != nil {
			t.Fatalf("a held Flush: %v", err)
		}
	}
	var got []received
	for len(got) < 2 {
		got = append(got, r.read(t)...)
	}
	stop(t, a)
	var told, toldSpans, hits uint64
	for _, rc := range got {
		told += uint64(rc.env.DroppedPayloads)
		toldSpans += uint64(rc.env.DroppedSpans)
		hits += rc.hits
	}
	if hits != 9 || told != 1 || toldSpans != 3 {
		t.Fatalf("relay got %d hits, told of %d payloads / %d spans dropped; want 9, 1 / 3", hits, told, toldSpans)
	}
	h := a.Health()
	if h.PayloadsDropped != 1 || h.SpansUnsent != 3 {
		t.Fatalf("Health: %d payloads / %d spans dropped, want 1 / 3", h.PayloadsDropped, h.SpansUnsent)
	}
	checkConservation(t, h)
}

// TestDatagramFinalFlag: Stop's last datagram carries the envelope's final
// flag, whether Stop had groups left to send or not (after a Flush, it
// sends the header alone) and whether the reports are jittered or not.
func TestDatagramFinalFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter time.Duration
		flush  bool
		hits   uint64 // in the last datagram
	}{
		{"groups left, no jitter", -1, false, 10},
		{"groups left, jitter", 5 * time.Millisecond, false, 10},
		{"after a Flush, no jitter", -1, true, 0},
		{"after a Flush, jitter", 5 * time.Millisecond, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := listenRelay(t, "unixgram")
			a := newStarted(t, Config{AgentURL: r.url, SendJitter: tc.jitter})
			publishN(a, 10, "GET /x")
			want := uint64(1)
			if tc.flush {
				if err := a.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				want = 2
			}
			stop(t, a)
			var got []received
			for uint64(len(got)) < want {
				got = append(got, r.read(t)...)
			}
			for i, rc := range got {
				if final := i == len(got)-1; rc.env.Final() != final || rc.env.Sequence != uint64(i+1) {
					t.Fatalf("datagram %d of %d: sequence %d, final %v; want %d, %v", i+1, len(got), rc.env.Sequence, rc.env.Final(), i+1, final)
				}
			}
			if last := got[len(got)-1]; last.hits != tc.hits {
				t.Fatalf("the final datagram holds %d hits, want %d", last.hits, tc.hits)
			}
			checkConservation(t, a.Health())
		})
	}
}

// flushHeldToMissingRelay runs a sender toward a missing relay, holding a
// 1-span report for its jitter, then queues a Flush's report of own parts
// (none: a Flush with nothing new), and returns the Flush's answer and how
// long it took.
func flushHeldToMissingRelay(t *testing.T, own []part) (*Aggregator, time.Duration, error) {
	t.Helper()
	a, err := New(Config{AgentURL: "unixgram://" + sockdir.Path(t, "none.sock"), BucketInterval: time.Hour, SendJitter: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *report, 2)
	s := a.snd
	s.in = in
	go s.run()
	in <- &report{parts: []part{{body: make([]byte, 64), hits: 1}}} // held
	done := make(chan error, 1)
	start := time.Now()
	in <- &report{parts: own, done: done}
	err = <-done
	took := time.Since(start)
	close(in)
	<-s.done
	return a, took, err
}

// TestHeldReportsKeepTheirPatience: toward a missing relay, a Flush that
// takes a report held for its jitter along (sender.withHeld) waits for the
// relay as long as the two reports would each have: one patience apiece,
// not one shared, and both are dropped, counted.
func TestHeldReportsKeepTheirPatience(t *testing.T) {
	a, took, err := flushHeldToMissingRelay(t, []part{{body: make([]byte, 64), hits: 2}})
	if !errors.Is(err, dgram.ErrNoRelay) || took < 2*datagramPatience*3/4 {
		t.Fatalf("Flush = %v after %s; want ErrNoRelay after about %s, two reports' patience", err, took, 2*datagramPatience)
	}
	if h := a.Health(); h.PayloadsDropped != 2 || h.SpansUnsent != 3 {
		t.Fatalf("dropped %d payloads, %d spans; want 2, 3", h.PayloadsDropped, h.SpansUnsent)
	}
}

// TestEmptyFlushHeldPatience: a Flush with nothing new of its own that
// takes one held report along waits one report's patience, not two.
func TestEmptyFlushHeldPatience(t *testing.T) {
	_, took, err := flushHeldToMissingRelay(t, nil)
	if !errors.Is(err, dgram.ErrNoRelay) || took > datagramPatience*3/2 {
		t.Fatalf("Flush = %v after %s; want ErrNoRelay within about %s", err, took, datagramPatience)
	}
}

// TestDatagramUDPRelayGone: a UDP relay that took one report closes; the
// next reports are not counted sent into nothing: each is retried within
// its patience, then dropped and counted, with ErrNoRelay as the last
// error, and Flush says so. The first may slip through: on a host busy
// enough that the kernel defers the loopback's ICMP error past the send
// (CI under -race), its datagram counts as sent, and the error fails the
// next one.
func TestDatagramUDPRelayGone(t *testing.T) {
	r := listenRelay(t, "udp")
	a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1})
	publishN(a, 10, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.read(t); len(got) != 1 || got[0].hits != 10 {
		t.Fatalf("relay got %+v, want one datagram of 10 spans", got)
	}
	r.conn.Close()
	slipped := uint64(0)
	for i := range 3 {
		publishN(a, 10, "r")
		err := a.Flush(context.Background())
		if i == 0 && err == nil {
			slipped = 1
			continue
		}
		if !errors.Is(err, dgram.ErrNoRelay) {
			t.Fatalf("Flush %d to the gone relay = %v, want ErrNoRelay", i+1, err)
		}
	}
	stop(t, a)
	h := a.Health()
	if h.SpansSent != 10+10*slipped || h.SpansUnsent != 30-10*slipped || h.PayloadsDropped != 3-slipped ||
		!errors.Is(h.LastSendError, dgram.ErrNoRelay) {
		t.Fatalf("sent %d unsent %d dropped %d, last error %v; want %d %d %d, ErrNoRelay", h.SpansSent, h.SpansUnsent,
			h.PayloadsDropped, h.LastSendError, 10+10*slipped, 30-10*slipped, 3-slipped)
	}
	checkConservation(t, h)
}

// fillRelay fills the relay's queue from a socket of its own, so that the
// next datagram finds it full (EAGAIN), and returns how many it queued.
func fillRelay(t *testing.T, r *relaySocket) int {
	t.Helper()
	s, err := dgram.DialUnixgram(strings.TrimPrefix(r.url, "unixgram://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for n := range 1 << 16 {
		if err := s.Write([]byte{0xc0}); errors.Is(err, dgram.ErrWouldBlock) {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the relay's queue never filled")
	return 0
}

// skipRelay reads and discards the next n datagrams (fillRelay's).
func skipRelay(t *testing.T, r *relaySocket, n int) {
	for n > 0 {
		k, err := r.conn.ReadBatch(dgram.NewBatch(n, 16))
		if err != nil {
			t.Error(err)
			return
		}
		n -= k
	}
}

// TestFinalFlagWaitsForFullSocket: Stop with no group left sends the final
// flag, and the drops since the previous datagram, on the header alone. A
// relay whose queue is full for a moment (many processes stopping) still
// gets it: that datagram waits for room within its patience, as a
// report's would, rather than being tried once and lost unannounced.
func TestFinalFlagWaitsForFullSocket(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a, err := New(Config{AgentURL: r.url, SendJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	filled := fillRelay(t, r)
	var armed atomic.Bool
	a.snd.out.(*datagramOut).sleep = func(d time.Duration) {
		if armed.CompareAndSwap(true, false) {
			skipRelay(t, r, filled) // the relay reads its queue while the sender waits
		}
		time.Sleep(d)
	}
	a.Start()
	publishN(a, 2, "r")
	if err := a.Flush(context.Background()); !errors.Is(err, dgram.ErrWouldBlock) {
		t.Fatalf("Flush to a full relay = %v, want ErrWouldBlock", err)
	}
	armed.Store(true)
	stop(t, a)
	if armed.Load() {
		t.Fatal("Stop's final datagram found the relay's queue full and never waited for room")
	}
	got := r.read(t)
	if len(got) != 1 || !got[0].env.Final() || got[0].env.DroppedPayloads != 1 || got[0].env.DroppedSpans != 2 || got[0].env.Sequence != 1 {
		t.Fatalf("relay got %+v; want the final datagram, sequence 1, telling of 1 payload / 2 spans dropped", got)
	}
	checkConservation(t, a.Health())
}

// fakeDNS runs a DNS server on loopback UDP and returns a resolver that
// asks it alone, and the count of queries it got. It gives answer() (an
// IPv4 address) to every A query, and no AAAA; with answer nil it never
// answers: an unreachable DNS server, which a resolver waits on for seconds.
func fakeDNS(t *testing.T, answer func() netip.Addr) (*net.Resolver, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			queries.Add(1)
			if answer == nil {
				continue
			}
			if reply := dnsReply(buf[:n], answer()); reply != nil {
				pc.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	server := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialDNS(ctx, "udp", server)
	}}, &queries
}

// dnsReply answers query's first question: ip for type A, no record
// otherwise; nil if the query is malformed.
func dnsReply(query []byte, ip netip.Addr) []byte { return dnsReplyAll(query, ip) }

// dnsReplyAll answers query's first question with the addresses of its
// type, A or AAAA, among ips; nil if the query is malformed.
func dnsReplyAll(query []byte, ips ...netip.Addr) []byte {
	if len(query) < 12 {
		return nil
	}
	end := 12
	for end < len(query) && query[end] != 0 {
		end += 1 + int(query[end]) // a label
	}
	end += 1 + 4 // the root label, type and class
	if end > len(query) {
		return nil
	}
	qtype := query[end-3]                                     // 1: A, 28: AAAA
	reply := append([]byte(nil), query[:2]...)                // id
	reply = append(reply, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0) // a response, recursion available; one question
	reply = append(reply, query[12:end]...)
	for _, ip := range ips {
		if query[end-4] != 0 || !(qtype == 1 && ip.Is4() || qtype == 28 && ip.Is6()) {
			continue
		}
		reply[7]++ // one more answer
		b := ip.AsSlice()
		reply = append(reply, 0xc0, 12, 0, qtype, 0, 1, 0, 0, 0, 60, 0, byte(len(b)))
		reply = append(reply, b...)
	}
	return reply
}

// startWithResolver is newStarted with the relay looked up by r.
func startWithResolver(t *testing.T, cfg Config, r *net.Resolver, set ...func(*datagramOut)) *Aggregator {
	t.Helper()
	return newStarted(t, cfg, func(a *Aggregator) {
		d := a.snd.out.(*datagramOut)
		d.resolver = r
		for _, f := range set {
			f(d)
		}
	})
}

// TestDatagramRelayLookupBounded: a relay named by host whose DNS server
// never answers costs a report its patience, not the resolver's timeout
// (seconds): Flush, and Stop with a report to send, return within about
// datagramPatience, and the report is dropped as finding no relay, counted.
func TestDatagramRelayLookupBounded(t *testing.T) {
	const bound = datagramPatience + 150*time.Millisecond
	for _, flush := range []bool{true, false} {
		t.Run(map[bool]string{true: "Flush", false: "Stop"}[flush], func(t *testing.T) {
			r, queries := fakeDNS(t, nil)
			a := startWithResolver(t, Config{AgentURL: "udp://some-name.invalid-test:8127", SendJitter: -1}, r)
			publishN(a, 3, "r")
			if flush {
				start := time.Now()
				err := a.Flush(context.Background())
				took := time.Since(start)
				t.Logf("Flush took %s", took)
				if !errors.Is(err, dgram.ErrNoRelay) || took > bound {
					t.Fatalf("Flush = %v after %s; want ErrNoRelay within %s", err, took, bound)
				}
			}
			start := time.Now()
			stop(t, a)
			took := time.Since(start)
			t.Logf("Stop took %s", took)
			if took > bound {
				t.Fatalf("Stop took %s; want at most %s", took, bound)
			}
			h := a.Health()
			if queries.Load() == 0 || h.PayloadsDropped != 1 || h.SpansUnsent != 3 || h.SpansSent != 0 || !errors.Is(h.LastSendError, dgram.ErrNoRelay) {
				t.Fatalf("%d DNS queries; dropped %d, unsent %d, sent %d, last error %v; want some queries, 1 3 0, ErrNoRelay",
					queries.Load(), h.PayloadsDropped, h.SpansUnsent, h.SpansSent, h.LastSendError)
			}
			checkConservation(t, h)
		})
	}
}

// TestDatagramRelayByName: a relay named by host is reached at the address
// DNS gives; one named by IP never asks DNS.
func TestDatagramRelayByName(t *testing.T) {
	relay := listenRelay(t, "udp")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(relay.url, "udp://"))
	for _, tc := range []struct {
		url     string
		lookups bool
	}{
		{"udp://relay.invalid-test:" + port, true},
		{relay.url, false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			r, queries := fakeDNS(t, func() netip.Addr { return netip.MustParseAddr("127.0.0.1") })
			a := startWithResolver(t, Config{AgentURL: tc.url, SendJitter: -1}, r)
			publishN(a, 3, "r")
			if err := a.Flush(context.Background()); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if got := relay.read(t); len(got) != 1 || got[0].hits != 3 {
				t.Fatalf("relay got %+v; want one datagram of 3 spans", got)
			}
			stop(t, a)
			relay.read(t) // the final flag
			if n := queries.Load(); (n > 0) != tc.lookups {
				t.Fatalf("%d DNS queries; want some: %v", n, tc.lookups)
			}
			if h := a.Health(); h.SpansSent != 3 || h.PayloadsDropped != 0 {
				t.Fatalf("sent %d spans, dropped %d payloads; want 3, 0", h.SpansSent, h.PayloadsDropped)
			}
		})
	}
}

// TestDatagramRelayMoved: the relay's name comes to give another address
// (a Service recreated on redeploy). A relay that refuses a datagram has the
// name looked up again, within the same report's patience when
// relayLookupGap allows; one that still takes datagrams (UDP into a gone
// Service IP is lost without an error) is left after relayLookupEvery.
func TestDatagramRelayMoved(t *testing.T) {
	for _, refused := range []bool{true, false} {
		t.Run(map[bool]string{true: "refused", false: "silent"}[refused], func(t *testing.T) {
			first := listenRelay(t, "udp")
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(first.url, "udp://"))
			c, err := dgram.ListenUDP("127.0.0.2:"+port, 0)
			if err != nil {
				t.Skipf("no second loopback address: %v", err)
			}
			t.Cleanup(func() { c.Close() })
			second := &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
			var at atomic.Pointer[netip.Addr]
			at.Store(ptr(netip.MustParseAddr("127.0.0.1")))
			r, _ := fakeDNS(t, func() netip.Addr { return *at.Load() })
			a := startWithResolver(t, Config{AgentURL: "udp://relay.invalid-test:" + port, SendJitter: -1}, r, func(d *datagramOut) {
				if refused {
					d.lookupGap = 0
				} else {
					d.lookupEvery = 0
				}
			})
			publishN(a, 3, "r")
			if err := a.Flush(context.Background()); err != nil {
				t.Fatalf("Flush to the first relay: %v", err)
			}
			if got := first.read(t); len(got) != 1 || got[0].hits != 3 {
				t.Fatalf("first relay got %+v; want one datagram of 3 spans", got)
			}
			at.Store(ptr(netip.MustParseAddr("127.0.0.2")))
			if refused {
				first.conn.Close()
			}
			publishN(a, 4, "r")
			if err := a.Flush(context.Background()); err != nil {
				t.Fatalf("Flush after the move: %v", err)
			}
			if got := second.read(t); len(got) != 1 || got[0].hits != 4 || got[0].env.Sequence != 2 {
				t.Fatalf("second relay got %+v; want one datagram of 4 spans, sequence 2", got)
			}
			stop(t, a)
			if h := a.Health(); h.SpansSent != 7 || h.PayloadsDropped != 0 {
				t.Fatalf("sent %d spans, dropped %d payloads; want 7, 0", h.SpansSent, h.PayloadsDropped)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestDatagramErrorNamesRelay: a datagram refused by the socket (a UDP
// relay gone: the kernel's port unreachable; a Unix relay's queue full)
// fails with an errno alone; the error Flush and Health give names the
// relay the sender could not reach.
func TestDatagramErrorNamesRelay(t *testing.T) {
	for _, network := range []string{"udp", "unixgram"} {
		t.Run(network, func(t *testing.T) {
			r := listenRelay(t, network)
			a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1})
			want := strings.TrimPrefix(r.url, network+"://")
			if network == "udp" {
				r.conn.Close()
			} else {
				fillRelay(t, r)
			}
			publishN(a, 4, "r")
			err := a.Flush(context.Background())
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Flush = %v, want an error naming the relay %s", err, want)
			}
			stop(t, a)
			h := a.Health()
			if h.PayloadsDropped != 1 || h.SpansUnsent != 4 || !strings.Contains(fmt.Sprint(h.LastSendError), want) {
				t.Fatalf("dropped %d, unsent %d, last error %v; want 1, 4, naming %s", h.PayloadsDropped, h.SpansUnsent, h.LastSendError, want)
			}
			checkConservation(t, h)
		})
	}
}

// TestDatagramOverSendBuffer: a datagram larger than the Unix socket's
// send buffer (the kernel caps it at net.core.wmem_max, which can be
// below twice MaxDatagramBytes) is dropped and counted, and the error
// says what to change rather than only "message too long". The test
// dials the socket itself with a small buffer, standing for that cap.
func TestDatagramOverSendBuffer(t *testing.T) {
	r := listenRelay(t, "unixgram")
	path := strings.TrimPrefix(r.url, "unixgram://")
	a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1, Logger: slog.New(slog.DiscardHandler)}, func(a *Aggregator) {
		conn, err := dgram.DialUnixgram(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		shrinkSendBuffer(t, conn, 4096)
		a.snd.out.(*datagramOut).conn = conn
	})
	const groups = 100
	for k := range groups {
		publishN(a, 1, fmt.Sprintf("%04d", k)+strings.Repeat("R", 200)) // ~30 KiB in all
	}
	err := a.Flush(context.Background())
	if !errors.Is(err, syscall.EMSGSIZE) || !strings.Contains(err.Error(), "net.core.wmem_max") || !strings.Contains(err.Error(), "MaxDatagramBytes") {
		t.Fatalf("Flush = %v; want EMSGSIZE, saying to raise net.core.wmem_max or lower MaxDatagramBytes", err)
	}
	stop(t, a)
	h := a.Health()
	if h.PayloadsDropped != 1 || h.SpansUnsent != groups || h.SpansSent != 0 {
		t.Fatalf("dropped %d payloads, %d spans unsent, %d sent; want 1, %d, 0", h.PayloadsDropped, h.SpansUnsent, h.SpansSent, groups)
	}
	checkConservation(t, h)
}

// TestFullRelayErrorSaysWhy: a report dropped because the relay's queue
// stayed full past the sender's patience says so, and names the kernel
// limit that bounds a Unix relay's queue, not only "resource temporarily
// unavailable".
func TestFullRelayErrorSaysWhy(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a, err := New(Config{AgentURL: r.url, SendJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	filled := fillRelay(t, r)
	a.Start()
	publishN(a, 3, "r")
	err = a.Flush(context.Background())
	if !errors.Is(err, dgram.ErrWouldBlock) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Flush to a full relay = %v, want ErrWouldBlock wrapping EAGAIN", err)
	}
	for _, want := range []string{"not reading", "net.unix.max_dgram_qlen", r.url[len("unixgram://"):]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	skipRelay(t, r, filled)
	stop(t, a)
	if h := a.Health(); h.PayloadsDropped != 1 || h.SpansUnsent != 3 {
		t.Fatalf("dropped %d payloads, %d spans unsent; want 1, 3", h.PayloadsDropped, h.SpansUnsent)
	}
	checkConservation(t, a.Health())
}

// TestDatagramRelookupSurvivesCutShortLookup: the relay refuses a datagram,
// and the look-up that follows is cut short by the report's patience (the
// DNS server does not answer), so the report goes to the address it had,
// where a socket now takes datagrams silently (UDP into a gone Service IP).
// The look-up is still owed: the next report looks the name up and reaches
// the relay where it moved, not the silent address until relayLookupEvery.
func TestDatagramRelookupSurvivesCutShortLookup(t *testing.T) {
	first := listenRelay(t, "udp")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(first.url, "udp://"))
	c, err := dgram.ListenUDP("127.0.0.2:"+port, 0)
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	moved := &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
	answering, answered := fakeDNS(t, func() netip.Addr { return netip.MustParseAddr("127.0.0.2") })
	silent, unanswered := fakeDNS(t, nil)
	var stalled atomic.Bool
	stalled.Store(true)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		if stalled.Load() {
			return silent.Dial(ctx, network, address)
		}
		return answering.Dial(ctx, network, address)
	}}
	// The silent socket is bound at the old address in the pause after the
	// refusal, before the redial: the old relay's port taken by another.
	var rebind atomic.Bool
	var old *relaySocket
	a := startWithResolver(t, Config{AgentURL: "udp://relay.invalid-test:" + port, SendJitter: -1}, r, func(d *datagramOut) {
		d.addr = netip.MustParseAddrPort("127.0.0.1:" + port) // looked up before
		d.lookedUp = time.Now()
		d.lookupGap = 0
		d.sleep = func(p time.Duration) {
			if rebind.CompareAndSwap(true, false) {
				c, err := dgram.ListenUDP("127.0.0.1:"+port, 0)
				if err != nil {
					t.Error(err)
				} else {
					old = &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
				}
			}
			time.Sleep(p)
		}
	})
	t.Cleanup(func() {
		if old != nil {
			old.conn.Close()
		}
	})
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush to the first relay: %v", err)
	}
	if got := first.read(t); len(got) != 1 || got[0].hits != 3 {
		t.Fatalf("first relay got %+v; want one datagram of 3 spans", got)
	}

	first.conn.Close()
	rebind.Store(true)
	publishN(a, 4, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after the refusal: %v", err)
	}
	if old == nil {
		t.Fatal("the sender never paused after the refusal")
	}
	if got := old.read(t); len(got) != 1 || got[0].hits != 4 {
		t.Fatalf("the old address got %+v; want the report of 4 spans, sent there after the cut-short look-up", got)
	}
	if unanswered.Load() == 0 {
		t.Fatal("no look-up after the refusal")
	}

	stalled.Store(false)
	publishN(a, 5, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush once DNS answers: %v", err)
	}
	if got := moved.read(t); len(got) != 1 || got[0].hits != 5 || got[0].env.Sequence != 3 {
		t.Fatalf("the moved relay got %+v; want one datagram of 5 spans, sequence 3", got)
	}
	if answered.Load() == 0 {
		t.Fatal("the name was not looked up again")
	}
	stop(t, a)
	moved.read(t) // the final flag
	if h := a.Health(); h.SpansSent != 12 || h.PayloadsDropped != 0 {
		t.Fatalf("sent %d spans, dropped %d payloads; want 12, 0", h.SpansSent, h.PayloadsDropped)
	}
}

// TestDatagramDropsBeyondEnvelopeField: the envelope carries what was
// dropped in 32 bits; more than that is told on the next datagrams, not
// forgotten once one is written.
func TestDatagramDropsBeyondEnvelopeField(t *testing.T) {
	r := listenRelay(t, "unixgram")
	to, err := parseAgentURL(r.url)
	if err != nil {
		t.Fatal(err)
	}
	d := newDatagramOut(context.Background(), to, DefaultMaxDatagramBytes, &counters{}, newBufPool())
	defer d.stop()
	const over = 5
	d.droppedPayloads, d.droppedSpans = 3, 1<<32-1+over
	var told []writer.Envelope
	for range 2 {
		patience := time.Second
		if err := d.write(part{body: make([]byte, writer.EnvelopeSize+8)}, 0, &patience); err != nil {
			t.Fatal(err)
		}
		n, err := r.conn.ReadBatch(r.batch)
		if err != nil || n != 1 {
			t.Fatalf("read %d datagrams: %v", n, err)
		}
		env, _, _, err := writer.ParseDatagram(r.batch.Datagrams()[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		told = append(told, env)
	}
	if told[0].DroppedPayloads != 3 || told[0].DroppedSpans != 1<<32-1 ||
		told[1].DroppedPayloads != 0 || told[1].DroppedSpans != over {
		t.Fatalf("envelopes told %d/%d then %d/%d dropped payloads/spans; want 3/%d then 0/%d",
			told[0].DroppedPayloads, told[0].DroppedSpans, told[1].DroppedPayloads, told[1].DroppedSpans, uint32(1<<32-1), over)
	}
}

// TestFinalFlagRetriesMissingRelay: the final flag on the header alone
// (Stop with nothing left, or after the last part was dropped) is retried
// while a relay restarts, as a report's parts are: it is the only datagram
// left to tell the relay what was dropped.
func TestFinalFlagRetriesMissingRelay(t *testing.T) {
	header := func() []byte { return append(make([]byte, writer.EnvelopeSize), 0x80) } // an empty msgpack map
	for name, r := range map[string]*report{
		"header only": {parts: []part{{body: header()}}, final: true, headerOnly: true},
		"fallback": {parts: []part{{body: make([]byte, DefaultMaxDatagramBytes+1), hits: 4}},
			final: true, fallback: header()},
	} {
		t.Run(name, func(t *testing.T) {
			path := sockdir.Path(t, "relay.sock")
			to, err := parseAgentURL("unixgram://" + path)
			if err != nil {
				t.Fatal(err)
			}
			d := newDatagramOut(context.Background(), to, DefaultMaxDatagramBytes, &counters{}, newBufPool())
			defer d.stop()
			d.droppedPayloads, d.droppedSpans = 2, 7
			var relay *relaySocket
			var slept time.Duration
			d.sleep = func(p time.Duration) {
				slept += p
				if relay == nil { // the relay is back after the first pause
					c, err := dgram.ListenUnixgram(path, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					relay = &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
				}
			}
			d.send(r, true)
			if relay == nil {
				t.Fatal("the final flag was given up without a pause for the relay")
			}
			if slept > datagramPatience {
				t.Fatalf("slept %v, over the patience %v", slept, datagramPatience)
			}
			n, err := relay.conn.ReadBatch(relay.batch)
			if err != nil || n != 1 {
				t.Fatalf("relay read %d datagrams: %v; want 1", n, err)
			}
			env, _, _, err := writer.ParseDatagram(relay.batch.Datagrams()[0].Data)
			wantPayloads, wantSpans := uint32(2), uint32(7)
			if r.fallback != nil {
				wantPayloads, wantSpans = 3, 11 // and the part too large
			}
			if err != nil || env.Flags&writer.FlagFinal == 0 || env.Sequence != 1 ||
				env.DroppedPayloads != wantPayloads || env.DroppedSpans != wantSpans {
				t.Fatalf("envelope %+v, %v; want the final flag, sequence 1, %d/%d dropped", env, err, wantPayloads, wantSpans)
			}
		})
	}
}

// TestDatagramRelayNameWithTwoFamilies: "localhost" is often both ::1 and
// 127.0.0.1, ::1 first, while the relay listens on 127.0.0.1 (its
// default): an address that refuses is left for the next one the name
// has, as net.Dial does for TCP, rather than every report being dropped.
func TestDatagramRelayNameWithTwoFamilies(t *testing.T) {
	if c, err := net.ListenPacket("udp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		c.Close()
	}
	relay := listenRelay(t, "udp")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(relay.url, "udp://"))
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			// ::1 first, as RFC 6724 sorts them on a host with IPv6.
			if reply := dnsReplyAll(buf[:n], netip.IPv6Loopback(), netip.MustParseAddr("127.0.0.1")); reply != nil {
				pc.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	server := pc.LocalAddr().String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialDNS(ctx, "udp", server)
	}}
	a := startWithResolver(t, Config{AgentURL: "udp://relay.invalid-test:" + port, SendJitter: -1}, r)
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := relay.read(t); len(got) != 1 || got[0].hits != 3 || got[0].env.Sequence != 1 {
		t.Fatalf("relay on 127.0.0.1 got %+v; want one datagram of 3 spans, sequence 1", got)
	}
	stop(t, a)
	if h := a.Health(); h.SpansSent != 3 || h.PayloadsDropped != 0 {
		t.Fatalf("sent %d spans, dropped %d payloads; want 3, 0", h.SpansSent, h.PayloadsDropped)
	}
}

// undialable is an address whose connect fails on Linux (link-local
// without a zone: EINVAL), as ::1 does on a host without IPv6.
var undialable = netip.MustParseAddr("fe80::1")

// TestDatagramRelayNameUndialableAddress: a name whose first address cannot
// be dialed (an /etc/hosts answer, which the resolver does not sort) moves
// on to the next within the report's patience: the first report reaches
// the relay on 127.0.0.1, and none is dropped.
func TestDatagramRelayNameUndialableAddress(t *testing.T) {
	relay := listenRelay(t, "udp")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(relay.url, "udp://"))
	p, _ := strconv.ParseUint(port, 10, 16)
	r, _ := fakeDNS(t, func() netip.Addr { return netip.MustParseAddr("127.0.0.1") })
	a := startWithResolver(t, Config{AgentURL: "udp://relay.invalid-test:" + port, SendJitter: -1}, r, func(d *datagramOut) {
		d.addrs = []netip.Addr{undialable, netip.MustParseAddr("127.0.0.1")}
		d.addr = netip.AddrPortFrom(undialable, uint16(p))
		d.lookedUp = time.Now()
	})
	publishN(a, 2, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := relay.read(t); len(got) != 1 || got[0].hits != 2 || got[0].env.Sequence != 1 {
		t.Fatalf("relay on 127.0.0.1 got %+v; want one datagram of 2 spans, sequence 1", got)
	}
	stop(t, a)
	if h := a.Health(); h.SpansSent != 2 || h.PayloadsDropped != 0 || h.PayloadsRetried != 1 {
		t.Fatalf("sent %d spans, dropped %d payloads, retried %d; want 2, 0, 1 (the undialable address)",
			h.SpansSent, h.PayloadsDropped, h.PayloadsRetried)
	}
}

// TestDatagramRelayNameLookedUpWithoutSocket: the name is looked up again
// every relayLookupEvery even while no socket is open (the address in use
// could not be dialed), so a relay that moved is found.
func TestDatagramRelayNameLookedUpWithoutSocket(t *testing.T) {
	relay := listenRelay(t, "udp")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(relay.url, "udp://"))
	p, _ := strconv.ParseUint(port, 10, 16)
	r, queries := fakeDNS(t, func() netip.Addr { return netip.MustParseAddr("127.0.0.1") })
	a := startWithResolver(t, Config{AgentURL: "udp://relay.invalid-test:" + port, SendJitter: -1}, r, func(d *datagramOut) {
		// What an earlier look-up gave, the relay since gone from it.
		d.addrs = []netip.Addr{undialable}
		d.addr = netip.AddrPortFrom(undialable, uint16(p))
		d.lookedUp = time.Now().Add(-time.Hour)
		d.lookupEvery = time.Minute
	})
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := relay.read(t); len(got) != 1 || got[0].hits != 3 {
		t.Fatalf("relay on 127.0.0.1 got %+v; want one datagram of 3 spans", got)
	}
	stop(t, a)
	if n := queries.Load(); n < 1 {
		t.Fatalf("%d DNS queries; want the name looked up again", n)
	}
	if h := a.Health(); h.SpansSent != 3 || h.PayloadsDropped != 0 || h.PayloadsRetried != 0 {
		t.Fatalf("sent %d spans, dropped %d payloads, retried %d; want 3, 0, 0: the name looked up before the first dial",
			h.SpansSent, h.PayloadsDropped, h.PayloadsRetried)
	}
}

// TestMinDatagramRoom pins what MinDatagramBytes leaves room for: a group
// with both sketches at their bin cap and every label at its length limit
// (no peer tags) fits beside a header of 1 KiB, and not beside one of
// 4 KiB, which New still accepts (a quarter of the limit): that group is
// then dropped and counted.
func TestMinDatagramRoom(t *testing.T) {
	for _, c := range []struct {
		headerTags int // 100-byte tags
		fits       bool
	}{{10, true}, {40, false}} {
		t.Run(strconv.Itoa(c.headerTags*100), func(t *testing.T) {
			r := listenRelay(t, "unixgram")
			var tags []string
			for i := range c.headerTags {
				tags = append(tags, fmt.Sprintf("k%03d:%s", i, strings.Repeat("v", 95)))
			}
			// An hour's buckets: a boundary passing while the spans are
			// published would split them into two reports, the smaller
			// of which fits (seen on a loaded host).
			a := newStarted(t, Config{AgentURL: r.url, MaxDatagramBytes: MinDatagramBytes, SendJitter: -1, Tags: tags,
				BucketInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
			s := Span{Service: strings.Repeat("s", MaxServiceLen), Name: strings.Repeat("n", MaxNameLen),
				Resource: strings.Repeat("r", MaxResourceLen), Type: strings.Repeat("t", MaxTypeLen), SpanKind: "server",
				HTTPMethod: strings.Repeat("m", MaxTagLen), HTTPEndpoint: strings.Repeat("e", MaxTagLen),
				ServiceSource: strings.Repeat("x", MaxTagLen), HTTPStatusCode: 500, GRPCStatusCode: "16"}
			var hits uint64
			// Durations a bin apart, past the cap, in both sketches.
			for i := range 2 * aggregate.MaxBins {
				s.Duration = int64(math.Ceil(math.Pow(1.0202, float64(i)/2)))
				for _, e := range []bool{false, true} {
					s.Error = e
					a.Publish(&s)
					hits++
				}
			}
			err := a.Flush(context.Background())
			if c.fits {
				if got := r.read(t); err != nil || len(got) != 1 || got[0].hits != hits {
					t.Fatalf("Flush = %v, relay got %+v; want nil, one datagram of %d hits", err, got, hits)
				}
			}
			stop(t, a)
			h := a.Health()
			if c.fits {
				if h.SpansSent != hits {
					t.Fatalf("SpansSent %d, want %d", h.SpansSent, hits)
				}
			} else if !errors.Is(err, ErrDatagramTooLarge) || h.SpansUnsent != hits {
				t.Fatalf("Flush = %v, SpansUnsent %d; want ErrDatagramTooLarge, %d", err, h.SpansUnsent, hits)
			}
			checkConservation(t, h)
		})
	}
}

// TestDatagramDefaultLimit: left at zero, MaxDatagramBytes is the
// transport's largest, envelope included: 65 536 bytes to a Unix relay and
// UDP's 65 507 (a UDP datagram over it fails with EMSGSIZE). A report of
// several datagrams arrives whole, none over the limit, and the split
// fills them to within two groups of it.
func TestDatagramDefaultLimit(t *testing.T) {
	for _, tc := range []struct {
		network string
		limit   int
	}{{"unixgram", 65536}, {"udp", 65507}} {
		t.Run(tc.network, func(t *testing.T) {
			r := listenRelay(t, tc.network)
			a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1})
			// Long labels: the split bounds each group's size from above,
			// and the bound is tight when the strings dominate.
			const groups, resource = 120, 4000
			for k := range groups {
				publishN(a, 1, fmt.Sprintf("%04d", k)+strings.Repeat("R", resource))
			}
			flushed := make(chan error, 1)
			go func() { flushed <- a.Flush(context.Background()) }()
			var got []received
			var hits uint64
			for hits < groups {
				for _, rc := range r.read(t) {
					got = append(got, rc)
					hits += rc.hits
				}
			}
			if err := <-flushed; err != nil {
				t.Fatalf("Flush: %v", err)
			}
			stop(t, a)
			largest := 0
			for _, rc := range got {
				largest = max(largest, rc.size)
			}
			if len(got) < 3 || largest > tc.limit || largest < tc.limit-2*resource {
				t.Fatalf("%d datagrams, the largest %d bytes; want several, the largest within two groups under %d", len(got), largest, tc.limit)
			}
			if h := a.Health(); h.SpansSent != groups || h.PayloadsDropped != 0 {
				t.Fatalf("Health: %d spans sent, %d payloads dropped; want %d, 0", h.SpansSent, h.PayloadsDropped, groups)
			}
			checkConservation(t, a.Health())
		})
	}
}

// TestDatagramRelayBackTellsEveryDrop: reports sent while no relay
// listens (no socket file: ENOENT; a stale one: ECONNREFUSED; a closed UDP
// port: ECONNREFUSED) are dropped and counted. When a relay comes up, the
// next report reaches it, and its datagram, the first written, has
// sequence 1 and tells every drop, including those the failed datagrams
// were to tell; the one after it tells none.
func TestDatagramRelayBackTellsEveryDrop(t *testing.T) {
	for _, tc := range []struct {
		name string
		// gone returns the URL of a relay not listening yet and the
		// function that starts it.
		gone func(t *testing.T) (url string, up func() *relaySocket)
	}{
		{"unixgram no file", func(t *testing.T) (string, func() *relaySocket) {
			path := sockdir.Path(t, "relay.sock")
			return "unixgram://" + path, func() *relaySocket { return listenRelayAt(t, "unixgram", path) }
		}},
		{"unixgram stale file", func(t *testing.T) (string, func() *relaySocket) {
			path := sockdir.Path(t, "relay.sock")
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			c.Close() // a datagram socket leaves its file: connecting is refused
			return "unixgram://" + path, func() *relaySocket { return listenRelayAt(t, "unixgram", path) }
		}},
		{"udp closed port", func(t *testing.T) (string, func() *relaySocket) {
			r := listenRelay(t, "udp")
			addr := strings.TrimPrefix(r.url, "udp://")
			r.conn.Close()
			return r.url, func() *relaySocket { return listenRelayAt(t, "udp", addr) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, up := tc.gone(t)
			a := newStarted(t, Config{AgentURL: url, SendJitter: -1, Logger: slog.New(slog.DiscardHandler)})
			for i := 1; i <= 3; i++ {
				publishN(a, i, "r")
				if err := a.Flush(context.Background()); !errors.Is(err, dgram.ErrNoRelay) {
					t.Fatalf("Flush %d with no relay = %v, want ErrNoRelay", i, err)
				}
			}
			r := up()
			for i, want := range []writer.Envelope{
				{Sequence: 1, DroppedPayloads: 3, DroppedSpans: 6},
				{Sequence: 2},
			} {
				publishN(a, 4, "r")
				if err := a.Flush(context.Background()); err != nil {
					t.Fatalf("Flush %d once the relay is up: %v", i, err)
				}
				got := r.read(t)
				if len(got) != 1 || got[0].hits != 4 || got[0].env != want {
					t.Fatalf("datagram %d: %+v; want one of 4 spans with envelope %+v", i, got, want)
				}
			}
			stop(t, a)
			h := a.Health()
			if h.PayloadsDropped != 3 || h.SpansUnsent != 6 || h.SpansSent != 8 {
				t.Fatalf("Health: dropped %d payloads, %d spans unsent, %d sent; want 3, 6, 8", h.PayloadsDropped, h.SpansUnsent, h.SpansSent)
			}
			checkConservation(t, h)
		})
	}
}

// listenRelayAt is listenRelay at a given path or UDP address.
func listenRelayAt(t *testing.T, network, addr string) *relaySocket {
	t.Helper()
	var (
		c   *dgram.Conn
		err error
	)
	if network == "unixgram" {
		c, err = dgram.ListenUnixgram(addr, 0o600)
	} else {
		c, err = dgram.ListenUDP(addr, 4<<20)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &relaySocket{conn: c, batch: dgram.NewBatch(0, DefaultMaxDatagramBytes)}
}

// TestDatagramConservationSeenByRelay: with producers publishing while
// the relay stops reading (its queue full, reports dropped past the
// patience), what the relay reads once it reads again accounts for every
// span Health counted: the hits in its datagrams are Health.SpansSent,
// the drops the envelopes tell are PayloadsDropped and SpansUnsent, and
// the sequence has no gap (a Unix socket loses nothing silently).
func TestDatagramConservationSeenByRelay(t *testing.T) {
	r := listenRelay(t, "unixgram")
	a := newStarted(t, Config{AgentURL: r.url, SendJitter: -1, SendQueue: 1, Logger: slog.New(slog.DiscardHandler)})
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				publishN(a, 1, fmt.Sprintf("p%d/k%d", p, i%50))
			}
		})
	}
	// Flushes from several goroutines, over the relay's queue: the sender
	// drops reports past its patience, and the consumer those it finds the
	// send queue full for.
	for f := range 3 {
		wg.Go(func() {
			for i := range 8 {
				publishN(a, 5, fmt.Sprintf("f%d/%d", f, i)) // no Flush finds nothing to send
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = a.Flush(ctx)
				cancel()
			}
		})
	}
	wg.Wait()
	// Concurrent Flushes may share a report: a few more, one at a time,
	// if the queue has room left.
	waitFor(t, "a payload dropped", func() bool {
		publishN(a, 1, "last")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = a.Flush(ctx)
		return a.Health().PayloadsDropped > 0
	})

	// The relay reads again: Stop's final datagram tells what is left.
	var (
		mu                            sync.Mutex
		hits, toldPayloads, toldSpans uint64
		seqs                          []uint64
		final                         bool
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			n, err := r.conn.ReadBatch(r.batch)
			if err != nil {
				return
			}
			mu.Lock()
			for _, d := range r.batch.Datagrams()[:n] {
				env, body, _, err := writer.ParseDatagram(d.Data)
				if err != nil {
					continue
				}
				seqs = append(seqs, env.Sequence)
				toldPayloads += uint64(env.DroppedPayloads)
				toldSpans += uint64(env.DroppedSpans)
				final = final || env.Final()
				if p, err := writer.DecodePayload(body); err == nil {
					for _, b := range p.Buckets {
						for _, g := range b.Groups {
							hits += g.Hits
						}
					}
				}
			}
			mu.Unlock()
		}
	}()
	stop(t, a)
	waitFor(t, "the final datagram", func() bool { mu.Lock(); defer mu.Unlock(); return final })
	r.conn.Close()
	<-readDone

	h := a.Health()
	checkConservation(t, h)
	if hits != h.SpansSent || toldPayloads != h.PayloadsDropped || toldSpans != h.SpansUnsent {
		t.Fatalf("the relay read %d hits and was told %d payloads / %d spans dropped; Health: %d sent, %d payloads / %d spans dropped",
			hits, toldPayloads, toldSpans, h.SpansSent, h.PayloadsDropped, h.SpansUnsent)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("datagram %d has sequence %d: a gap", i+1, s)
		}
	}
}
