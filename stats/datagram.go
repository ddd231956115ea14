// This file holds the datagram transport: each payload of a report goes to
// a relay (cmd/statsrelay) as one datagram, in the envelope of
// writer.AppendEnvelope.

package stats

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/writer"
)

// Bounds of the wait for a full socket or a missing relay: the sender is
// charged at most datagramPatience in all retrying a report's datagrams,
// per report (and per held report a Flush takes along), then drops what
// is left (counted, and announced in the next datagram's envelope). A
// sleep's lateness past sleepSlack is not charged (see pauseFor): a sender
// starved of CPU may wait longer.
const (
	datagramPatience   = 100 * time.Millisecond
	datagramFirstPause = 500 * time.Microsecond
	datagramMaxPause   = 10 * time.Millisecond
	datagramBusyPause  = 4 * time.Millisecond
	sleepSlack         = time.Millisecond // see pauseFor
)

// A relay named by host (udp://statsrelay.svc.cluster.local:8127) is looked
// up by the sender itself, never by a dial: a slow or unreachable DNS server
// would hold the sender for the resolver's timeout (seconds), past a
// report's patience and Stop's deadline. A lookup waits at most what is
// left of the report's patience (and Stop's context), and the address is
// kept: looked up again every relayLookupEvery (a Service recreated on
// redeploy gets a new IP, and UDP into the old one is lost without an
// error), and before dialing again after the relay refused a datagram,
// but at most once per relayLookupGap: a relay that is down must not cost
// its DNS server a query per retry. A lookup that fails keeps the address
// it had; with none, the report finds no relay (ErrNoRelay: retried within
// its patience, then dropped). An IP literal or a Unix path is never
// looked up.
const (
	relayLookupEvery = 30 * time.Second
	relayLookupGap   = time.Second
)

// ErrDatagramTooLarge is the error (Health.LastSendError, Flush) of a
// payload dropped because it holds one group larger than MaxDatagramBytes
// alone, which no split can bring under the limit.
var ErrDatagramTooLarge = errors.New("stats: group too large for a datagram, dropped")

// relayResolver is the system's resolver, its DNS sockets closed when a
// lookup is given up: Go's resolver would read an unanswered one until its
// own timeout (resolv.conf's, seconds), a goroutine left behind past Stop.
// Where the platform's resolver serves lookups instead (macOS and Windows
// by default, a cgo build as nsswitch.conf asks), Dial is not used: the
// lookup still returns when its context ends, but the platform's call runs
// on to its own timeout in the background. PreferGo is not forced: on
// macOS the Go resolver's own DNS queries can prompt the firewall.
var relayResolver = &net.Resolver{Dial: dialDNS}

func dialDNS(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err == nil {
		context.AfterFunc(ctx, func() { c.Close() })
	}
	return c, err
}

// datagramOut writes reports to a relay. It runs on the sender goroutine.
type datagramOut struct {
	to    target
	ctx   context.Context // ends when Stop gives up
	ctr   *counters
	bufs  bufPool
	conn  *dgram.Sender
	limit int    // Config.MaxDatagramBytes, envelope included
	seq   uint64 // of the last datagram written
	sleep func(time.Duration)

	// The UDP relay by name: host is "" for an IP literal (addr, fixed) or
	// a Unix path; addr is then the last address looked up, at lookedUp.
	host     string
	port     uint16
	addr     netip.AddrPort
	addrs    []netip.Addr // the name's addresses at the last lookup, in its order
	lookedUp time.Time
	// relookup: the relay refused a datagram, and no look-up has been
	// answered since: look up before dialing, or before the next write.
	relookup bool
	lookErr  error // of the last lookup; nil after one that succeeded
	resolver *net.Resolver
	// relayLookupEvery and relayLookupGap; tests shorten them.
	lookupEvery, lookupGap time.Duration

	// What was dropped and not yet told in a written datagram's envelope
	// (more than its 32 bits hold waits for the next).
	droppedPayloads, droppedSpans uint64
}

func newDatagramOut(ctx context.Context, to target, limit int, ctr *counters, bufs bufPool) *datagramOut {
	d := &datagramOut{to: to, ctx: ctx, limit: limit, ctr: ctr, bufs: bufs, sleep: time.Sleep,
		resolver: relayResolver, lookupEvery: relayLookupEvery, lookupGap: relayLookupGap}
	if to.network == "udp" {
		// parseAgentURL checked the host and the port.
		host, port, _ := net.SplitHostPort(to.address)
		p, _ := strconv.ParseUint(port, 10, 16)
		d.port = uint16(p)
		if ip, err := netip.ParseAddr(host); err == nil {
			d.addr = netip.AddrPortFrom(ip, d.port)
		} else {
			d.host = host
		}
	}
	return d
}

func (d *datagramOut) start()                     {}
func (d *datagramOut) nextDue() (time.Time, bool) { return time.Time{}, false }
func (d *datagramOut) runDue(time.Time)           {}

func (d *datagramOut) stop() {
	if d.conn != nil {
		d.conn.Close()
	}
}

// dial connects to the relay; the socket's send buffer is raised so that
// two datagrams of the limit fit in it (the kernel caps it at
// net.core.wmem_max; a datagram beyond the buffer fails, counted).
func (d *datagramOut) dial(patience *time.Duration) error {
	var err error
	if d.to.network == "unixgram" {
		d.conn, err = dgram.DialUnixgram(d.to.address, 2*d.limit)
		return err
	}
	if d.host != "" && (d.relookup || !d.addr.IsValid() || time.Since(d.lookedUp) >= d.lookupEvery) &&
		time.Since(d.lookedUp) >= d.lookupGap {
		d.lookup(patience)
	}
	if !d.addr.IsValid() {
		return d.lookErr
	}
	d.conn, err = dgram.DialUDP(d.addr, 2*d.limit)
	if err != nil && d.host != "" {
		// An address of the name that cannot be dialed (::1 on a host
		// without IPv6, a route gone) is one refused: the next one is
		// tried, within the report's patience, and the name looked up again.
		d.conn = nil
		d.relookup = true
		d.nextAddr()
		if !errors.Is(err, dgram.ErrNoRelay) {
			err = fmt.Errorf("%w: %w", dgram.ErrNoRelay, err)
		}
	}
	return err
}

// lookup looks the relay's host up, waiting at most the patience left
// (which it spends) and until Stop gives up. A look-up skipped or cut short
// so leaves relookup set: the DNS server has not answered it.
func (d *datagramOut) lookup(patience *time.Duration) {
	if *patience <= 0 || d.ctx.Err() != nil {
		if d.lookErr == nil {
			d.lookErr = fmt.Errorf("%w: no patience left to look up %s", dgram.ErrNoRelay, d.host)
		}
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, *patience)
	start := time.Now()
	ips, err := d.resolver.LookupNetIP(ctx, "ip", d.host)
	cut := err != nil && ctx.Err() != nil
	cancel()
	take(patience, time.Since(start))
	d.lookedUp = time.Now()
	if !cut {
		d.relookup = false
	}
	if err == nil && len(ips) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		d.lookErr = fmt.Errorf("%w: looking up %s: %w", dgram.ErrNoRelay, d.host, err)
		return
	}
	// The first, as net.Dial would take: the resolver orders them (RFC 6724);
	// but the one in use while the name still has it (see nextAddr).
	d.addrs, d.lookErr = d.addrs[:0], nil
	for _, ip := range ips {
		d.addrs = append(d.addrs, ip.Unmap())
	}
	if !slices.Contains(d.addrs, d.addr.Addr()) {
		d.addr = netip.AddrPortFrom(d.addrs[0], d.port)
	}
}

// nextAddr moves to the name's next address after one refused: "localhost"
// is often ::1 first, then 127.0.0.1, where the relay listens by default,
// and UDP has no dial that fails over as net.Dial does for TCP.
func (d *datagramOut) nextAddr() {
	if i := slices.Index(d.addrs, d.addr.Addr()); i >= 0 && len(d.addrs) > 1 {
		d.addr = netip.AddrPortFrom(d.addrs[(i+1)%len(d.addrs)], d.port)
	}
}

// send writes each part as one datagram. A full socket is waited for, a
// missing relay retried with growing pauses, until the report's patience
// runs out; what is left is then dropped and counted.
func (d *datagramOut) send(r *report, last bool) {
	// The patience is time slept waiting for the relay: a sender starved of
	// CPU (a thousand processes flushing at once) is not a full socket.
	patience := datagramPatience * time.Duration(1+r.merged) // per report, held ones merged in included
	pause := datagramFirstPause
	first, lastErr := r.answer, error(nil)
	if r.headerOnly {
		// The final flag without spans (consumer.sendFinal): neither a
		// payload sent nor one dropped if it fails, but it waits for a full
		// socket and a missing relay as a report does: it is the last
		// chance to tell the drops.
		_ = d.retry(r.parts[0], writer.FlagFinal, &patience, &pause, false)
		d.bufs.put(r.parts[0].body)
		return
	}
	for i, p := range r.parts {
		flags := uint8(0)
		if last && i == len(r.parts)-1 {
			flags = writer.FlagFinal
		}
		var err error
		if len(p.body) > d.limit {
			// One group alone over the limit (labels at their caps, many
			// long peer tags): the relay would drop it as truncated while
			// this sender counted it sent.
			err = fmt.Errorf("%w: a payload of one group is %d bytes, over MaxDatagramBytes %d", ErrDatagramTooLarge, len(p.body), d.limit)
		} else {
			err = d.retry(p, flags, &patience, &pause, true)
		}
		if err == nil {
			d.ctr.payloadsSent.Add(1)
			d.ctr.bytesSent.Add(uint64(len(p.body)))
			d.ctr.spansSent.Add(p.hits)
		} else {
			d.ctr.noteError(err)
			d.ctr.payloadsFailed.Add(1)
			d.ctr.payloadsDropped.Add(1)
			d.ctr.spansUnsent.Add(p.hits)
			d.droppedPayloads++
			d.droppedSpans += p.hits
			if first == nil {
				first = err
			}
		}
		d.bufs.put(p.body)
		lastErr = err
	}
	if r.fallback != nil {
		if last && lastErr != nil {
			// The final flag, and what was just dropped, on the header
			// alone, within what is left of the report's patience.
			_ = d.retry(part{body: r.fallback}, writer.FlagFinal, &patience, &pause, false)
		}
		d.bufs.put(r.fallback)
	}
	if r.done != nil {
		r.done <- first
	}
}

// retry writes p, and again after growing pauses while no relay listens
// and the patience lasts, counting each attempt retried when p is a
// payload. The header alone (the final flag) is retried too: it is the
// last datagram that can tell the relay what was dropped.
func (d *datagramOut) retry(p part, flags uint8, patience, pause *time.Duration, payload bool) error {
	err := d.write(p, flags, patience)
	for errors.Is(err, dgram.ErrNoRelay) && *patience >= *pause && d.ctx.Err() == nil {
		if payload {
			d.ctr.noteError(err)
			d.ctr.payloadsFailed.Add(1)
			d.ctr.payloadsRetried.Add(1)
		}
		// Jittered: a host's senders that lost the relay together must
		// not retry together.
		d.pauseFor(patience, *pause/2+rand.N(*pause/2+1))
		*pause = min(2**pause, datagramMaxPause)
		err = d.write(p, flags, patience)
	}
	return err
}

// write sends one part, dialing first if needed. The envelope goes into the
// room the consumer left before the payload; the sequence advances only
// when the datagram is written, so the relay's gaps count what the network
// lost and the envelope what this sender dropped, never both.
func (d *datagramOut) write(p part, flags uint8, patience *time.Duration) error {
	// A look-up owed since a refusal (see lookup) is made here too: the
	// dial that followed it kept the old address, and may have a socket
	// that writes into it without an error.
	if d.conn != nil && d.host != "" && (time.Since(d.lookedUp) >= d.lookupEvery ||
		d.relookup && time.Since(d.lookedUp) >= d.lookupGap) {
		was := d.addr
		d.lookup(patience)
		if d.addr != was {
			d.conn.Close() // the relay moved
			d.conn = nil
		}
	}
	if d.conn == nil {
		if err := d.dial(patience); err != nil {
			return err
		}
	}
	// What the consumer dropped (a full send queue) is told as well.
	d.droppedPayloads += d.ctr.unannouncedPayloads.Swap(0)
	d.droppedSpans += d.ctr.unannouncedSpans.Swap(0)
	tellPayloads, tellSpans := sat32(d.droppedPayloads), sat32(d.droppedSpans)
	writer.AppendEnvelope(p.body[:0], writer.Envelope{
		Flags:           flags,
		Sequence:        d.seq + 1,
		DroppedPayloads: tellPayloads,
		DroppedSpans:    tellSpans,
	})
	err := d.writeCharged(p.body, patience)
	// A full socket (the relay's queue: net.unix.max_dgram_qlen, often 10)
	// is retried after short jittered pauses, not waited for in the
	// netpoller: the kernel wakes every waiting sender at each read, and a
	// burst of senders woken together spends its patience in a herd
	// (TestBurstOfThousandSenders).
	for pause := datagramFirstPause; errors.Is(err, dgram.ErrWouldBlock); pause = min(2*pause, datagramBusyPause) {
		if *patience <= 0 || d.ctx.Err() != nil {
			break
		}
		d.ctr.datagramWaits.Add(1)
		d.pauseFor(patience, pause/2+rand.N(pause/2+1))
		err = d.writeCharged(p.body, patience)
	}
	if errors.Is(err, dgram.ErrNoRelay) {
		// The relay went away (or restarted on a new socket): dial again
		// on the next attempt.
		d.conn.Close()
		d.conn = nil
		d.relookup = true
		d.nextAddr()
	}
	if errors.Is(err, syscall.EMSGSIZE) && d.to.network == "udp" {
		// Within MaxDatagramBytes: over the send buffer dial asked for
		// and the system cut down, or more than the route carries.
		return fmt.Errorf("sending %d bytes to relay %s: %w: over the socket's send buffer, which the system caps "+
			"(net.core.wmem_max on Linux, kern.ipc.maxsockbuf on macOS and FreeBSD), or over what the route carries: "+
			"lower MaxDatagramBytes", len(p.body), d.relay(), err)
	}
	if errors.Is(err, syscall.EMSGSIZE) && d.to.network == "unixgram" {
		// Within MaxDatagramBytes, so over the send buffer dial asked for
		// and the kernel cut down to net.core.wmem_max.
		return fmt.Errorf("sending %d bytes to relay %s: %w: over the socket's send buffer, "+
			"which the kernel caps at net.core.wmem_max: raise it to at least %d, or lower MaxDatagramBytes",
			len(p.body), d.relay(), err, 2*d.limit)
	}
	if errors.Is(err, dgram.ErrWouldBlock) && d.to.network == "unixgram" {
		return fmt.Errorf("sending to relay %s: %w: its queue stayed full while the report could wait: "+
			"the relay is not reading fast enough; its queue holds net.unix.max_dgram_qlen datagrams",
			d.relay(), err)
	}
	if err != nil {
		// The socket's error is an errno alone (a dial's names the relay).
		return fmt.Errorf("sending to relay %s: %w", d.relay(), err)
	}
	d.seq++
	// Less what was told, not zeroed: beyond the envelope's 32 bits (4 G
	// spans, an hour without a relay at 1 M spans/s) the rest is told next.
	d.droppedPayloads -= uint64(tellPayloads)
	d.droppedSpans -= uint64(tellSpans)
	return nil
}

// relay names the relay for errors: its address, and the one looked up
// for a name.
func (d *datagramOut) relay() string {
	if d.host != "" && d.addr.IsValid() {
		return d.to.network + " " + d.to.address + " (" + d.addr.String() + ")"
	}
	return d.to.network + " " + d.to.address
}

// pauseFor sleeps want, or what is left of the patience if less, and
// charges the patience what the sleep took, at most sleepSlack more than
// asked: the timer's lateness is charged, so a report's sleeps add up to
// its patience (TestDatagramRetryWallTime), while a sender starved of CPU,
// whose sleeps end much later, keeps most of it.
func (d *datagramOut) pauseFor(patience *time.Duration, want time.Duration) {
	want = min(want, *patience)
	start := time.Now()
	d.sleep(want)
	*patience -= min(max(time.Since(start), want), want+sleepSlack)
}

// writeCharged writes b, charging the patience for a write that found the socket
// full: off Linux a write waits for room up to what is left of the
// patience (dgram's sendWait at most, its minSendWait at least), which the
// report's bound must cover; on Linux it returns at once.
func (d *datagramOut) writeCharged(b []byte, patience *time.Duration) error {
	start := time.Now()
	err := d.conn.WriteWithin(b, *patience)
	if errors.Is(err, dgram.ErrWouldBlock) {
		take(patience, time.Since(start))
	}
	return err
}

// take spends up to d of the patience left and returns what it spent.
func take(patience *time.Duration, d time.Duration) time.Duration {
	d = min(d, *patience)
	*patience -= d
	return d
}

func sat32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }
