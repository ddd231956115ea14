//go:build linux

// This file holds the relay's benchmarks: its receive path against a raw
// drain, the read batch size, the whole relay at saturation, and its cost
// at the loads a host's SDKs offer.

package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
)

// relayKinds are the sockets the relay benchmarks measure, as dgram and
// the sender process name them.
var relayKinds = []string{"unixgram", "udp"}

// pollEvery is how often a round looks at its receiver's count: both sides
// are read the same way, so the polling costs them alike.
const pollEvery = time.Millisecond

// stallTimeout fails a round whose receiver stopped counting, rather than
// let it wait for the test binary's timeout.
const stallTimeout = 10 * time.Second

// receiver is one way of taking datagrams off a socket that a sender
// process writes to, for the relay benchmarks.
type receiver struct {
	name   string
	size   int // bytes per datagram
	count  func() uint64
	spans  func() uint64 // spans merged so far; nil when nothing merges
	stop   func()
	sender *senderProc
	procs  int // GOMAXPROCS during its rounds (0: the benchmark's)

	// Summed over the timed part of the rounds.
	datagrams, spansIn uint64
	elapsed, cpu       time.Duration
	// Summed from resume to the settled pause of each round.
	sent, taken uint64
	senderCPU   time.Duration
}

// openDrain is the raw drain: one goroutine calling ReadBatch on a dgram
// socket in a loop with a batch of slots of the relay's default datagram
// limit, and nothing else.
func openDrain(b *testing.B, name, kind string, slots int, d []byte) *receiver {
	return openDrainMax(b, name, kind, slots, relay.DefaultMaxDatagram, d, 0)
}

// openDrainMax is openDrain with slots of maxDatagram+1 bytes, its sender
// offering rate datagrams a second (0: as fast as the socket takes them).
func openDrainMax(b *testing.B, name, kind string, slots, maxDatagram int, d []byte, rate int) *receiver {
	c := listenBench(b, name, kind)
	var n atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		batch := dgram.NewBatch(slots, maxDatagram)
		for {
			k, err := c.ReadBatch(batch)
			if err != nil {
				readEnded(b, err)
				return
			}
			n.Add(uint64(k))
		}
	})
	r := &receiver{name: name, size: len(d), count: n.Load}
	r.sender = startSender(b, kind, c.LocalAddr().String(), d, rate)
	r.stop = func() {
		c.Drain()
		wg.Wait()
		c.Close()
	}
	return r
}

// readEnded reports err, which ended a benchmark receiver's reads, unless
// it is the end that stopping the receiver brings (Drain, Close).
func readEnded(b *testing.B, err error) {
	if !errors.Is(err, dgram.ErrDrained) && !errors.Is(err, net.ErrClosed) {
		b.Error(err)
	}
}

// listenBench opens a receiving socket of kind for the side called name.
func listenBench(b *testing.B, name, kind string) *dgram.Conn {
	var c *dgram.Conn
	var err error
	switch kind {
	case "unixgram":
		c, err = dgram.ListenUnixgram(sockdir.Path(b, name+".sock"), 0o600)
	case "udp":
		c, err = dgram.ListenUDP("127.0.0.1:0", relay.DefaultUDPRcvBuf)
	}
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// openBatchHandoff is the drain with its batches handed to a second goroutine,
// the least a reader that does not decode can do: the reader takes a free
// batch (of handoffBatches), reads it and sends it down a channel; the
// other goroutine reads the first byte of each datagram, counts them and
// sends the batch back. Nothing else: no queue accounting, no polling, no
// decoding. What it costs over the drain is the cost of the hand-over
// itself (the Go scheduler waking and parking the other goroutine, on a
// processor it may share with the sender), the floor of any receive path
// built as a reader feeding workers.
func openBatchHandoff(b *testing.B, name, kind string, d []byte) *receiver {
	c := listenBench(b, name, kind)
	free := make(chan *dgram.Batch, handoffBatches)
	work := make(chan *dgram.Batch, handoffBatches)
	for range handoffBatches {
		free <- dgram.NewBatch(dgram.DefaultBatchSize, relay.DefaultMaxDatagram)
	}
	var n, firstBytes atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		for batch := range work {
			var sum uint64
			for _, dg := range batch.Datagrams() {
				sum += uint64(dg.Data[0])
			}
			firstBytes.Add(sum)
			n.Add(uint64(len(batch.Datagrams())))
			free <- batch
		}
	})
	wg.Go(func() {
		defer close(work)
		for {
			batch := <-free
			if _, err := c.ReadBatch(batch); err != nil {
				readEnded(b, err)
				return
			}
			work <- batch
		}
	})
	r := &receiver{name: name, size: len(d), count: n.Load}
	r.sender = startSender(b, kind, c.LocalAddr().String(), d, 0)
	r.stop = func() {
		c.Drain()
		wg.Wait()
		c.Close()
		if n.Load() > 0 && firstBytes.Load() != n.Load()*uint64(d[0]) {
			b.Errorf("%s: first bytes add up to %d over %d datagrams, want %d each", name, firstBytes.Load(), n.Load(), d[0])
		}
	}
	return r
}

// handoffBatches is how many batches openBatchHandoff circulates: one being
// read, one being looked at, one spare.
const handoffBatches = 3

// openRelay is the relay's receive path: a relay.Server on one socket of
// kind (its reader, queue, decode workers and Relay.Accept), forwarding to a
// loopback agent once an hour, so not while it is measured. Datagrams count
// once Accept has merged them.
//
// With reject set the datagrams are d's size but start with a zero byte,
// which Accept rejects as malformed on its first check: what is left is the
// receive path's own cost (read, queue, hand-over, counting). slots is the
// Server's BatchSize (0: the default).
func openRelay(b *testing.B, name, kind string, d []byte, reject bool, slots int) *receiver {
	return openRelayWith(b, name, kind, d, reject, 0, func(c *relay.ServerConfig) { c.BatchSize = slots })
}

// openRelayWith is openRelay with its sender offering rate datagrams a
// second (0: as fast as the socket takes them) and the Server's config
// amended by set.
func openRelayWith(b *testing.B, name, kind string, d []byte, reject bool, rate int, set func(*relay.ServerConfig)) *receiver {
	if reject {
		d = make([]byte, len(d))
	}
	agent := statstest.New()
	cfg := relay.ServerConfig{UnixPath: "-", UDPAddr: "-", AgentURL: agent.URL(), Interval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	set(&cfg)
	t := relay.UDP
	if kind == "unixgram" {
		cfg.UnixPath, cfg.Origin, t = sockdir.Path(b, "relay.sock"), true, relay.Unix
	} else {
		cfg.UDPAddr = "127.0.0.1:0"
	}
	srv, err := relay.NewServer(cfg)
	if err != nil {
		agent.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, 5*time.Second) })
	r := &receiver{name: name, size: len(d),
		count: func() uint64 { return srv.Relay().Stats().Datagrams[t] },
		spans: func() uint64 { return srv.Relay().Stats().SpansReceived }}
	r.sender = startSender(b, kind, srv.Addr(t), d, rate)
	r.stop = func() {
		cancel()
		wg.Wait()
		agent.Close()
		st := srv.Relay().Stats()
		for reason, n := range st.Rejected {
			if reject && relay.Reason(reason) == relay.Malformed {
				if n != st.Datagrams[t] {
					b.Errorf("%s: %d of %d datagrams rejected as malformed, want all", name, n, st.Datagrams[t])
				}
			} else if n > 0 {
				b.Errorf("relay rejected %d datagrams (%v): the benchmark's datagram must be valid", n, relay.Reason(reason))
			}
		}
	}
	return r
}

func (r *receiver) close(b *testing.B) {
	r.sender.close(b)
	r.stop()
}

// round resumes the sender, waits until datagrams flow, then times the
// receiver taking n more (start and stop bracket that part), pauses the
// sender and waits until the receiver has taken what was queued.
func (r *receiver) round(b *testing.B, n int, start, stop func()) {
	if r.procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(r.procs)) // before the timed part
	}
	mark := r.resume(b)
	waitUntil(b, r.name+": the first datagrams", func() bool { return r.count() >= mark.taken+senderBatch })
	start()
	c0, t0, cpu0 := r.count(), time.Now(), cputime.Process()
	var sp0 uint64
	if r.spans != nil {
		sp0 = r.spans()
	}
	c, moved := c0, t0
	for c < c0+uint64(n) {
		time.Sleep(pollEvery)
		if now := r.count(); now != c {
			c, moved = now, time.Now()
		} else if time.Since(moved) > stallTimeout {
			stop()
			b.Fatalf("%s: the count stuck at %d for %s, %d of %d datagrams into the round", r.name, c, stallTimeout, c-c0, n)
		}
	}
	r.elapsed += time.Since(t0)
	r.cpu += cputime.Process() - cpu0
	stop()
	r.datagrams += c - c0
	if r.spans != nil {
		r.spansIn += r.spans() - sp0
	}
	r.pause(b, mark)
}

// senderMark is where a round started: the receiver's count and the
// sender's totals.
type senderMark struct {
	taken, sent uint64
	cpu         time.Duration
}

// resume starts r's sender and returns where the round started.
func (r *receiver) resume(b *testing.B) senderMark {
	m := senderMark{taken: r.count()}
	m.sent, m.cpu = r.sender.pause(b) // already paused: reads its totals
	r.sender.resume(b)
	return m
}

// pause stops r's sender, waits until the receiver has taken what was
// queued, and adds the round since m to r's sent, taken and sender CPU.
func (r *receiver) pause(b *testing.B, m senderMark) {
	sent, scpu := r.sender.pause(b)
	after := settle(r.count)
	r.sent += sent - m.sent
	r.senderCPU += scpu - m.cpu
	r.taken += after - m.taken
}

// waitUntil polls cond, failing the benchmark after ten seconds.
func waitUntil(b *testing.B, what string, cond func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(pollEvery)
	}
}

// settle waits until count stops moving (the receiver emptied the socket
// and its queue) and returns it.
func settle(count func() uint64) uint64 {
	last := count()
	for {
		time.Sleep(10 * time.Millisecond)
		c := count()
		if c == last {
			return c
		}
		last = c
	}
}

// runRounds times b.N datagrams through sides, in abRounds alternating
// rounds: a change of the host's speed hits every side alike.
func runRounds(b *testing.B, sides []*receiver) {
	b.ReportAllocs()
	b.StopTimer()
	b.ResetTimer()
	for r := range abRounds {
		for _, s := range sides {
			s.round(b, share(b.N, abRounds, r), b.StartTimer, b.StopTimer)
		}
	}
}

// report adds r's figures to b's, each unit suffixed with "-" + r.name.
func (r *receiver) report(b *testing.B, kind string) {
	if r.datagrams == 0 || r.elapsed <= 0 {
		return
	}
	s := "-" + r.name
	dps := float64(r.datagrams) / r.elapsed.Seconds()
	b.ReportMetric(dps, "datagrams/s"+s)
	b.ReportMetric(dps*float64(r.size)/1e6, "MB/s"+s)
	b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(r.datagrams), "cpu-ns/datagram"+s)
	if r.sent > 0 {
		b.ReportMetric(float64(r.senderCPU.Nanoseconds())/float64(r.sent), "sender-cpu-ns/datagram"+s)
	}
	if kind == "udp" && r.sent > 0 {
		b.ReportMetric(float64(r.sent-min(r.taken, r.sent))/float64(r.sent), "lost/sent"+s)
	}
}

// BenchmarkRelayReceive compares, for each socket kind and datagram size,
// the relay's receive path (relay.Server: its reader, queue, decode workers
// and Relay.Accept) with a raw drain of the same kind of socket (ReadBatch
// in a loop, 16 datagrams per recvmmsg, nothing else), and with the raw
// drain reading one datagram per call (a 1-slot batch: what recvmmsg
// saves), with the relay rejecting every datagram at byte 0 (its
// receive path without decoding), and with the drain handing its batches
// to a second goroutine and nothing more (openBatchHandoff: the floor of a
// reader feeding workers); the relay and the relay rejecting run on the
// benchmark's processors (statsrelay -procs 2 on this project's host) and
// again on one, as statsrelay runs by default (relay-1p, relay-reject-1p:
// GOMAXPROCS 1 during their rounds, one decode worker, no polling), beside
// the drain on one processor too (drain-1p), their baseline. A
// sender process (see TestRelaySender) writes each side's socket as fast
// as it takes. The eight sides run in alternating rounds in one process,
// b.N datagrams each in all, so that a change of the host's speed hits
// them alike; ns/op and allocs/op add the eight up and are not the
// figures to read. Per side it reports datagrams/s, MB/s and cpu-ns/datagram
// (this process's user+sys CPU: the receiver and its runtime, not the
// sender), sender-cpu-ns/datagram, and for UDP lost/sent (sent but dropped
// by the kernel); then relay-ratio (relay ÷ drain datagrams/s, target ≥
// 0.9), reject-ratio (relay rejecting ÷ drain), batch-ratio (drain ÷
// drain1), handoff-ratio (handoff ÷ drain), reject-handoff-ratio (relay
// rejecting ÷ handoff: what the receive path adds to the bare hand-over),
// relay-1p-ratio and reject-1p-ratio (the same on one processor ÷ the
// drain on one processor) and drain-1p-ratio (drain-1p ÷ drain).
//
// A Unix datagram socket queues net.unix.max_dgram_qlen datagrams (10 by
// default) before its sender blocks, so each recvmmsg there returns at most
// that many: sender and receiver hand over in small steps.
func BenchmarkRelayReceive(b *testing.B) {
	for _, kind := range relayKinds {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				d, _, _ := relayDatagram(size, time.Now().Truncate(10*time.Second))
				sides := []*receiver{
					openDrain(b, "drain", kind, dgram.DefaultBatchSize, d),
					openRelay(b, "relay", kind, d, false, 0),
					openDrain(b, "drain1", kind, 1, d),
					openRelay(b, "relay-reject", kind, d, true, 0),
					openBatchHandoff(b, "handoff", kind, d),
					// As the Server's defaults make it on one processor
					// (TestSpinWaitDefault).
					openRelayWith(b, "relay-1p", kind, d, false, 0, oneProc),
					openRelayWith(b, "relay-reject-1p", kind, d, true, 0, oneProc),
					openDrain(b, "drain-1p", kind, dgram.DefaultBatchSize, d),
				}
				sides[5].procs, sides[6].procs, sides[7].procs = 1, 1, 1
				runRounds(b, sides)
				for _, s := range sides {
					s.close(b)
					s.report(b, kind)
				}
				rate := func(s *receiver) float64 { return float64(s.datagrams) / s.elapsed.Seconds() }
				if !slices.ContainsFunc(sides, func(s *receiver) bool { return s.datagrams == 0 }) {
					b.ReportMetric(rate(sides[1])/rate(sides[0]), "relay-ratio")
					b.ReportMetric(rate(sides[0])/rate(sides[2]), "batch-ratio")
					b.ReportMetric(rate(sides[3])/rate(sides[0]), "reject-ratio")
					b.ReportMetric(rate(sides[4])/rate(sides[0]), "handoff-ratio")
					b.ReportMetric(rate(sides[3])/rate(sides[4]), "reject-handoff-ratio")
					b.ReportMetric(rate(sides[5])/rate(sides[7]), "relay-1p-ratio")
					b.ReportMetric(rate(sides[6])/rate(sides[7]), "reject-1p-ratio")
					b.ReportMetric(rate(sides[7])/rate(sides[0]), "drain-1p-ratio")
				}
			})
		}
	}
}

// oneProc and twoProcs configure a relay as the Server's defaults make it
// on one and on two processors.
func oneProc(c *relay.ServerConfig)  { c.Workers, c.SpinWait = 1, -1 }
func twoProcs(c *relay.ServerConfig) { c.Workers, c.SpinWait = 2, relay.DefaultSpinWait }

// BenchmarkRelayBatch chooses dgram.DefaultBatchSize, the datagrams per
// recvmmsg: for each socket kind and datagram size, the raw drain with 1,
// 4, 8, 16 and 32 slots of the relay's default limit, the drain with 16
// slots of the datagram's own size (what the slots' memory costs), and the
// relay rejecting at byte 0 (see BenchmarkRelayReceive) with 4, 8 and 16
// slots, in alternating rounds in one process. It reports each side's
// datagrams/s and cpu-ns/datagram, and each side's rate ÷ drain-16's.
func BenchmarkRelayBatch(b *testing.B) {
	for _, kind := range relayKinds {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				d, _, _ := relayDatagram(size, time.Now().Truncate(10*time.Second))
				var sides []*receiver
				for _, n := range []int{1, 4, 8, 16, 32} {
					sides = append(sides, openDrain(b, fmt.Sprintf("drain-%d", n), kind, n, d))
				}
				sides = append(sides, openDrainMax(b, "drain-16-small", kind, 16, len(d), d, 0))
				for _, n := range []int{4, 8, 16} {
					sides = append(sides, openRelay(b, fmt.Sprintf("reject-%d", n), kind, d, true, n))
				}
				runRounds(b, sides)
				for _, s := range sides {
					s.close(b)
				}
				base := sides[3] // drain-16
				for _, s := range sides {
					if s.datagrams == 0 || base.datagrams == 0 {
						continue
					}
					rate := float64(s.datagrams) / s.elapsed.Seconds()
					b.ReportMetric(rate, "datagrams/s-"+s.name)
					b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(s.datagrams), "cpu-ns/datagram-"+s.name)
					b.ReportMetric(rate/(float64(base.datagrams)/base.elapsed.Seconds()), "ratio-"+s.name)
				}
			})
		}
	}
}

// BenchmarkRelay is the whole relay (receive, decode, check, merge; not the
// hourly forward) taking 1 KiB datagrams from a sender process as fast as
// it can (target ≥ 100 000 datagrams/s on 2 cores), on one processor as
// statsrelay runs by default (kind/1KiB: GOMAXPROCS 1 while it runs, the
// Server's defaults for it) and on two (kind/1KiB/procs=2: statsrelay
// -procs 2). ns/op, MB/s and allocs/op are per datagram; it reports
// datagrams/s and spans/s merged, cpu-ns/datagram and cpu-ns/span (this
// process's user+sys CPU over the timed region: every goroutine of the
// relay and its runtime, not the sender), the datagram's groups and
// spans, and for UDP lost/sent.
func BenchmarkRelay(b *testing.B) {
	for _, kind := range relayKinds {
		for _, procs := range []int{1, 2} {
			name := kind + "/1KiB"
			if procs != 1 {
				name += fmt.Sprintf("/procs=%d", procs)
			}
			b.Run(name, func(b *testing.B) { benchRelay(b, kind, procs) })
		}
	}
}

// benchRelay is BenchmarkRelay on procs processors.
func benchRelay(b *testing.B, kind string, procs int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	d, groups, spans := relayDatagram(1<<10, time.Now().Truncate(10*time.Second))
	r := openRelay(b, "relay", kind, d, false, 0)
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	b.StopTimer()
	r.round(b, b.N, func() { b.ResetTimer(); b.StartTimer() }, b.StopTimer)
	r.close(b)
	if r.datagrams == 0 {
		return
	}
	sec := r.elapsed.Seconds()
	b.ReportMetric(float64(r.datagrams)/sec, "datagrams/s")
	b.ReportMetric(float64(r.spansIn)/sec, "spans/s")
	b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(r.datagrams), "cpu-ns/datagram")
	b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(max(r.spansIn, 1)), "cpu-ns/span")
	b.ReportMetric(float64(groups), "groups/datagram")
	b.ReportMetric(float64(spans), "spans/datagram")
	if r.sent > 0 {
		b.ReportMetric(float64(r.senderCPU.Nanoseconds())/float64(r.sent), "sender-cpu-ns/datagram")
	}
	if kind == "udp" && r.sent > 0 {
		b.ReportMetric(float64(r.sent-min(r.taken, r.sent))/float64(r.sent), "lost/sent")
	}
}

// Paced rounds of BenchmarkRelayPaced: each side's sender offers its rate
// for pacedWarmup unmeasured, then for pacedWindow measured.
const (
	pacedWarmup = 100 * time.Millisecond
	pacedWindow = 250 * time.Millisecond
)

// pacedRound resumes r's sender at its fixed rate and measures r over
// pacedWindow, after pacedWarmup.
func (r *receiver) pacedRound(b *testing.B) {
	if r.procs > 0 {
		// Set before the warm-up, so that the change of processors (a
		// stop of the world) falls outside the window.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(r.procs))
	}
	mark := r.resume(b)
	time.Sleep(pacedWarmup)
	c0, t0, cpu0 := r.count(), time.Now(), cputime.Process()
	var sp0 uint64
	if r.spans != nil {
		sp0 = r.spans()
	}
	b.StartTimer()
	time.Sleep(pacedWindow)
	b.StopTimer()
	c := r.count()
	r.elapsed += time.Since(t0)
	r.cpu += cputime.Process() - cpu0
	r.datagrams += c - c0
	if r.spans != nil {
		r.spansIn += r.spans() - sp0
	}
	r.pause(b, mark)
}

// BenchmarkRelayPaced is what the relay costs at the loads a host's SDKs
// offer, far below what it absorbs: a sender process offers 1 KiB
// datagrams (one 50-span group each) at a fixed rate, in a burst every
// millisecond (as the Go timer wakes it), to four receivers in
// alternating rounds in one process: the raw drain (16-slot recvmmsg,
// nothing else, on one processor), the relay as statsrelay runs it by
// default (GOMAXPROCS 1 during its rounds; one decode worker, which does
// not poll; reads coalesced, DefaultReadCoalesce), the relay on two
// processors (statsrelay -procs 2: two workers, one polling for
// SpinWait), and the default relay with coalescing off (-read-coalesce 0).
// One op is one round of the four; read the per-side figures:
// cpu-ns/datagram and cpu-ns/span (this process's user+sys CPU over the
// measured windows, every goroutine and the runtime, the benchmark's own
// sleeping included), and load (datagrams taken per second ÷ the rate
// offered); procs2-cost is the CPU per datagram of the relay on two
// processors ÷ that on one, uncoalesced-cost that of the relay with
// coalescing off ÷ the default's.
func BenchmarkRelayPaced(b *testing.B) {
	for _, kind := range relayKinds {
		for _, rate := range []int{1000, 20000, 100000} {
			b.Run(fmt.Sprintf("%s/1KiB/%d", kind, rate), func(b *testing.B) {
				d, _, _ := relayDatagram(1<<10, time.Now().Truncate(10*time.Second))
				sides := []*receiver{
					openDrainMax(b, "drain", kind, dgram.DefaultBatchSize, relay.DefaultMaxDatagram, d, rate),
					// Configured as the Server's defaults make it on
					// 1 and 2 processors (TestSpinWaitDefault): it
					// is created at the benchmark's GOMAXPROCS.
					openRelayWith(b, "relay", kind, d, false, rate, oneProc),
					openRelayWith(b, "relay-2procs", kind, d, false, rate, twoProcs),
					openRelayWith(b, "relay-uncoalesced", kind, d, false, rate, func(c *relay.ServerConfig) {
						oneProc(c)
						c.ReadCoalesce = -1
					}),
				}
				sides[0].procs, sides[1].procs, sides[2].procs, sides[3].procs = 1, 1, 2, 1
				b.ReportAllocs()
				b.StopTimer()
				b.ResetTimer()
				for range b.N {
					for _, s := range sides {
						s.pacedRound(b)
					}
				}
				for _, s := range sides {
					s.close(b)
					if s.datagrams == 0 {
						b.Fatalf("%s: no datagram taken", s.name)
					}
					b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(s.datagrams), "cpu-ns/datagram-"+s.name)
					if s.spans != nil {
						b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(max(s.spansIn, 1)), "cpu-ns/span-"+s.name)
					}
					b.ReportMetric(float64(s.datagrams)/s.elapsed.Seconds()/float64(rate), "load-"+s.name)
				}
				b.ReportMetric(sides[2].cpu.Seconds()/float64(sides[2].datagrams)/
					(sides[1].cpu.Seconds()/float64(sides[1].datagrams)), "procs2-cost")
				b.ReportMetric(sides[3].cpu.Seconds()/float64(sides[3].datagrams)/
					(sides[1].cpu.Seconds()/float64(sides[1].datagrams)), "uncoalesced-cost")
			})
		}
	}
}
