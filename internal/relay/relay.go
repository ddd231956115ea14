// This file holds Relay, its Config and Stats: Accept decodes, checks and
// merges one datagram, and the accounting that every span received is
// forwarded, dropped or pending.

package relay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/writer"
)

// Transport is the socket a datagram came from.
type Transport uint8

// Transports, as the metrics label them.
const (
	Unix Transport = iota
	UDP
	NumTransports
)

// String is the transport as the metrics' transport label names it.
func (t Transport) String() string {
	switch t {
	case Unix:
		return "unix"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("Transport(%d)", t)
}

// Defaults of Config.
const (
	DefaultInterval  = 10 * time.Second
	DefaultMaxGroups = 200000
	// DefaultMaxHeldBytes holds DefaultMaxGroups groups of a tracer's
	// labels whose latencies span up to about four decades (4.7 KB a
	// group, most of it its sketches; five decades take 5.7 KB:
	// TestHeldBytesOfTypicalGroups): the group bound binds first unless
	// labels are long or sketches wider.
	DefaultMaxHeldBytes = 1 << 30
	DefaultMaxDatagram  = 65536
)

// Config configures a Relay; the zero value is usable.
type Config struct {
	// Interval is the window length buckets are merged by (zero: 10 s),
	// windows starting on its multiples since the Unix epoch.
	Interval time.Duration
	// MaxGroups bounds the groups held over all identities (zero: 200 000).
	MaxGroups int
	// MaxHeldBytes bounds what the held groups take, their label strings
	// and sketches included, approximately (zero: 1 GiB): without it
	// MaxGroups groups of 64 KiB labels or 2048-bin sketches could hold
	// gigabytes. Past fifteen sixteenths of it, new label keys and merges
	// that would grow a held sketch fold into overflow groups, which the
	// last sixteenth holds; past all of it spans are dropped (DropMaxBytes).
	MaxHeldBytes int
	// MaxDatagram is the longest datagram accepted, envelope included
	// (zero: 65 536); a longer one is Truncated.
	MaxDatagram int
	// Origins maps a Unix sender's pid to its container id; nil disables
	// origin detection. The relay looks pids up at its own clock's time
	// (Now), not at the one given to NewOrigins.
	Origins *Origins
	// LocalApart keeps the payloads of senders sharing the relay's cgroup
	// (Batch.Local) apart from others of the same identity: set where that
	// decides their fate, forwarding over the agent's Unix socket from a
	// relay in a container; elsewhere one identity is one POST.
	LocalApart bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// InFlight is the most datagrams the receive path feeding Accept holds
	// between reading and merging (zero: the Server's default queue and
	// batches with eight workers): a sender first met further than that
	// above sequence 1 that then sends 1 has restarted, since no reordering
	// can bring its 1 in after them.
	InFlight int
}

// Stats is a snapshot of a Relay's counters. SpansReceived = SpansForwarded +
// the sum of SpansDropped + SpansPending, always.
type Stats struct {
	Datagrams [NumTransports]uint64 // read, rejected ones included
	Bytes     [NumTransports]uint64
	Rejected  [NumReasons]uint64
	// Unsequenced counts accepted datagrams without an envelope (a bare
	// body) or without a RuntimeID to track.
	Unsequenced uint64

	SpansReceived, SpansForwarded, SpansPending uint64
	SpansDropped                                map[string]uint64 // by reason

	// Groups counts the groups held, those a round harvested and has not
	// yet Released included; Senders the senders tracked.
	Groups, Senders int
	// HeldBytes is what the held groups take (see Config.MaxHeldBytes),
	// those a round harvested and has not yet Released included.
	HeldBytes int
	// PeerTagKeys is how many keys the agent's peer_tags list in effect
	// holds (SetPeerTagKeys; 0: an empty list, no peer tag kept); -1 until
	// it is known, every key kept.
	PeerTagKeys int
	// SeqGaps counts datagrams missing between two of one sender, once
	// missing at two harvests in a row (see sender), or at stop
	// (CloseSequences), or, sooner, when the
	// sender has maxRuns holes open (with more than about eight decode
	// workers, -procs, a sender whose report spans many datagrams can open
	// that many by reordering alone: then counted here, and later in
	// SeqLate, though none was lost); SeqRestarts the
	// senders that started over at sequence 1; SeqLate the datagrams whose
	// sequence (not 1) was received before or already counted as a gap:
	// duplicated, or delayed past two harvests.
	SeqGaps     uint64
	SeqRestarts uint64
	SeqLate     uint64
	// SendersForgotten counts senders evicted from a full sender table
	// (MaxSenders) although not idle: their next datagram starts them
	// afresh, so the datagrams they lost in between, and their holes
	// younger than a harvest, count in no gap. (A datagram of theirs that
	// another worker merges after the eviction starts them afresh at its
	// sequence, below the next: the sequences between count as one hole.)
	SendersForgotten uint64
	// SenderDroppedPayloads and SenderDroppedSpans sum what senders report
	// in their envelopes.
	SenderDroppedPayloads, SenderDroppedSpans uint64
	// FoldedSpans went to an overflow group at MaxGroups or MaxHeldBytes;
	// OverflowGroups is how many such groups were created.
	FoldedSpans, OverflowGroups uint64
	// LateSpans reached the relay after the round that forwarded their
	// window (a sender's report delayed past the grace): they go to the
	// agent at the next round, in a bucket of their own of that start.
	LateSpans uint64
	// ContainerMismatches counts payloads whose ContainerID differed from
	// their sender's credentials (corrected: credentials win).
	ContainerMismatches uint64
}

// Relay decodes, checks and merges datagrams; see the package doc.
type Relay struct {
	maxDatagram int
	origins     *Origins
	localApart  bool // Config.LocalApart
	now         func() time.Time
	seed        uint64
	ov          overflowHashes
	// Per-datagram scratch, reused: *hasher (its buffers) and
	// *writer.Decoder (its payload, slices and scratch sketch: at most
	// ~655 KB kept each, see writer.maxKeptGroups), held until the merge
	// ends: the payload's summaries are added from its bytes.
	hashers, decoders sync.Pool

	datagrams, bytes [NumTransports]atomic.Uint64
	rejected         [NumReasons]atomic.Uint64
	// peerKeys is the agent's peer_tags list (nil until known: every key
	// kept), as the SDK applies it when it posts itself (SetPeerTagKeys).
	peerKeys atomic.Pointer[map[string]struct{}]

	// One mutex over the merge: decode, check and hashing, the costly part,
	// run outside it on each worker.
	mu          sync.Mutex
	st          state
	senders     senders
	received    uint64
	forwarded   uint64
	outstanding uint64 // harvested, not yet Forwarded or Dropped
	dropped     map[string]uint64
	mismatches  uint64
}

// New returns a Relay.
func New(c Config) *Relay {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxGroups <= 0 {
		c.MaxGroups = DefaultMaxGroups
	}
	if c.MaxDatagram <= 0 {
		c.MaxDatagram = DefaultMaxDatagram
	}
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	r := &Relay{
		maxDatagram: c.MaxDatagram, origins: c.Origins, localApart: c.LocalApart, now: c.Now, seed: rand.Uint64(),
		st:      state{interval: uint64(c.Interval), maxGroups: c.MaxGroups, maxBytes: c.MaxHeldBytes},
		dropped: make(map[string]uint64),
	}
	r.senders.idle = int64(max(SenderIdle, senderIdleIntervals*c.Interval))
	r.senders.inFlight = uint64(max(c.InFlight, 0))
	h := hasher{seed: r.seed}
	r.ov.full, r.ov.typeless = h.group(&overflowGroup), h.typeless(&overflowGroup)
	r.hashers.New = func() any { return &hasher{seed: r.seed} }
	// Summaries stay on the wire until merged: decoding a datagram builds
	// no sketch store (TestWideSketchesCannotAmplify).
	r.decoders.New = func() any { return &writer.Decoder{WireSketches: true} }
	return r
}

// Accept takes one whole datagram read from transport t, sent by pid (from
// the Unix socket's credentials; 0 when unknown, and for UDP). It returns
// nil if the datagram was merged, or a *RejectError. d may be reused once
// it returns: what the relay holds is copied out of it. A pooled decoder's
// arenas may keep d reachable until their slots are reused, up to one
// datagram per slot (thousands): read into reused buffers, as Server does.
func (r *Relay) Accept(d []byte, pid int32, t Transport) error {
	if t >= NumTransports {
		panic("BUG: relay: unknown transport")
	}
	r.datagrams[t].Add(1)
	r.bytes[t].Add(uint64(len(d)))
	if reason, err := r.accept(d, pid, t, r.now()); err != nil {
		r.rejected[reason].Add(1)
		return &RejectError{Reason: reason, Err: err}
	}
	return nil
}

// acceptBatch is Accept over a read batch, counting once per batch: the
// counters are shared by the decode workers, so each add moves a cache line.
func (r *Relay) acceptBatch(ds []dgram.Datagram, t Transport) {
	var bytes uint64
	var rejected [NumReasons]uint64
	now := r.now() // one clock read per batch: the datagrams were read together
	for i := range ds {
		bytes += uint64(ds[i].Size) // a truncated one's whole length
		if reason, err := r.accept(ds[i].Data, ds[i].PID, t, now); err != nil {
			rejected[reason]++
		}
	}
	for reason, n := range rejected {
		if n > 0 {
			r.rejected[reason].Add(n)
		}
	}
	r.bytes[t].Add(bytes)
	// Last: whoever sees a datagram counted sees its reject counted too.
	r.datagrams[t].Add(uint64(len(ds)))
}

// accept is Accept without the datagram counters: the reason it rejects d,
// or a nil error once d is merged. The pooled decoder and hasher go back
// without defers, and merge takes the lock, so that the one defer left is
// open-coded: too many defers and returns in one function make every call
// pay the runtime's deferred calls (BenchmarkAccept).
func (r *Relay) accept(d []byte, pid int32, t Transport, now time.Time) (Reason, error) {
	if len(d) > r.maxDatagram {
		if env, _, sequenced, err := writer.ParseDatagram(d); err == nil && sequenced {
			r.rejectedEnvelope(env, "", now.UnixNano()) // the header is whole: the cut is at the end
		}
		return Truncated, errTooLong
	}
	dec := r.decoders.Get().(*writer.Decoder)
	reason, err := r.decode(dec, d, pid, t, now)
	r.decoders.Put(dec) // after the merge: the payload aliases dec
	return reason, err
}

// decode decodes and checks d with dec, then merges it, at now.
func (r *Relay) decode(dec *writer.Decoder, d []byte, pid int32, t Transport, now time.Time) (Reason, error) {
	env, body, sequenced, err := writer.ParseDatagram(d)
	if err != nil {
		return Malformed, err
	}
	if len(body) == 0 || !mapHeader(body[0]) {
		// Decoding would allocate the payload before reading this byte.
		if sequenced {
			r.rejectedEnvelope(env, "", now.UnixNano())
		}
		return Malformed, errNotMap
	}
	// Groups of fewer wire bytes than a tracer writes would cost far more
	// decoded than received: the bound keeps a hostile datagram's cost a
	// small multiple of its size.
	p, err := dec.Decode(body, len(body)/writer.MinWireGroupBytes+1)
	if err != nil {
		if sequenced {
			r.rejectedEnvelope(env, "", now.UnixNano())
		}
		return decodeReason(err), err
	}
	if err := check(p, uint64(max(now.UnixNano(), 0))); err != nil {
		if sequenced {
			r.rejectedEnvelope(env, p.RuntimeID, now.UnixNano())
		}
		return Invalid, err
	}
	// As net/http will send it: a claim of white space alone would go out
	// as an empty Datadog-Container-ID, which the agent over its Unix
	// socket replaces with the relay's own container (TestBlankClaimIsNoClaim).
	p.ContainerID = strings.Trim(p.ContainerID, " \t") // a line break stays, refused below
	claimed := p.ContainerID
	mismatch, local := false, false
	if t == Unix && r.origins != nil && pid > 0 {
		if o := r.origins.originAt(pid, now.UnixNano()); o.known {
			// Credentials win, but for a sender in the cgroup of a
			// relay in a container that its cgroup does not name: they
			// cannot contradict its claim (that very container).
			if o.id != "" || !o.local || !r.origins.contained {
				mismatch = claimed != "" && claimed != o.id
				p.ContainerID = o.id
			}
			// Local only matters without a container id: with one, the
			// payload is of the same identity as any other of that id.
			local = r.localApart && o.local && p.ContainerID == ""
		}
	}
	if err := checkClaim(p); err != nil {
		if sequenced {
			r.rejectedEnvelope(env, p.RuntimeID, now.UnixNano())
		}
		return Invalid, err // a claim that stands: UDP, or no credentials
	}
	h := r.hashers.Get().(*hasher)
	pp := prepare(p, h, local, r.peerKeys.Load())
	pp.dec = dec
	sender := h.runtimeID(p.RuntimeID)
	r.merge(&pp, env, sequenced, sender, mismatch, now.UnixNano())
	r.hashers.Put(h) // after the merge: pp holds h's hashes
	return 0, nil
}

// merge counts a checked, prepared payload's sender and merges it, under
// the lock.
func (r *Relay) merge(pp *prepared, env writer.Envelope, sequenced bool, sender uint64, mismatch bool, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mismatch {
		r.mismatches++
	}
	s := &r.senders
	if sequenced && pp.p.RuntimeID != "" {
		s.observe(sender, env.Sequence, env.Final(), now)
	} else {
		s.unsequenced++
	}
	s.droppedPayloads += uint64(env.DroppedPayloads)
	s.droppedSpans += uint64(env.DroppedSpans)
	r.received += pp.hits
	groups, bytes := r.st.merge(pp, r.ov, uint64(max(now, 0)))
	if groups > 0 {
		r.dropped[DropMaxGroups] += groups
	}
	if bytes > 0 {
		r.dropped[DropMaxBytes] += bytes
	}
}

// rejectedEnvelope keeps what the envelope of a rejected datagram says:
// the drops its sender reports there, which it reports once, and, when the
// body named the sender (runtimeID), its sequence, so that the datagram
// the reject counts does not count again as a gap. A truncated or
// undecodable body names none (a payload's RuntimeID follows its
// buckets): its sequence, missing from no known sender, counts as a gap
// too, as README says.
func (r *Relay) rejectedEnvelope(env writer.Envelope, runtimeID string, now int64) {
	var sender uint64
	if runtimeID != "" {
		h := r.hashers.Get().(*hasher)
		sender = h.runtimeID(runtimeID)
		r.hashers.Put(h)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.senders
	if runtimeID != "" {
		s.observe(sender, env.Sequence, env.Final(), now)
	}
	s.droppedPayloads += uint64(env.DroppedPayloads)
	s.droppedSpans += uint64(env.DroppedSpans)
}

// mapHeader reports whether c starts a msgpack map (fixmap, map16, map32).
func mapHeader(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// SetPeerTagKeys keeps, from the payloads merged from now on, only the
// peer tags whose key is in keys: the agent's /info peer_tags, which an
// SDK sending to the relay cannot read, and which the agent itself does
// not apply to client stats. nil keeps every tag.
func (r *Relay) SetPeerTagKeys(keys []string) {
	if keys == nil {
		r.peerKeys.Store(nil)
		return
	}
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	r.peerKeys.Store(&m)
}

// keepPeerKeys filters tags in place to those whose key ("key" of
// "key:value") is in keys. As the SDK's table (and the agent's
// peerTagKeysToAggregateForSpan) does, an internal span or one without
// kind keeps its _dd.base_service tag whether keys holds that key or not,
// if it names a service; an empty list keeps nothing.
func keepPeerKeys(tags []string, keys map[string]struct{}, kind string) []string {
	base := len(keys) > 0 && aggregate.BaseServiceKind(kind)
	kept := tags[:0]
	for _, t := range tags {
		k := t
		if c := strings.IndexByte(t, ':'); c >= 0 {
			k = t[:c]
		}
		if _, ok := keys[k]; ok || base && k == aggregate.BaseServiceKey && len(t) > len(k)+1 {
			kept = append(kept, t)
		}
	}
	clear(tags[len(kept):])
	return kept
}

// prepare makes p's tag lists sets, keeps of its peer tags those whose key
// is in peerKeys (when not nil), and hashes its identity and the groups
// that have hits (the only ones merged): hostile groups of no hits cost no
// hash memory, so the hashes take at most 8 bytes per 6 bytes of input.
func prepare(p *writer.Payload, h *hasher, local bool, peerKeys *map[string]struct{}) prepared {
	p.Tags = asSet(p.Tags)
	pp := prepared{p: p, h: h, local: local, idHash: h.identity(&p.Header) ^ uint64(b2u(local))}
	n := 0
	for i := range p.Buckets {
		for j := range p.Buckets[i].Groups {
			if p.Buckets[i].Groups[j].Hits > 0 {
				n++
			}
		}
	}
	h.hashes = slices.Grow(h.hashes[:0], n)
	pp.full = h.hashes[:0:n] // h's: valid until h goes back to the pool
	for bi := range p.Buckets {
		gs := p.Buckets[bi].Groups
		for gi := range gs {
			g := &gs[gi]
			if g.Hits == 0 {
				continue
			}
			if peerKeys != nil {
				g.PeerTags = keepPeerKeys(g.PeerTags, *peerKeys, g.SpanKind)
			}
			g.PeerTags = asSet(g.PeerTags)
			g.SpanDerivedPrimaryTags = asSorted(g.SpanDerivedPrimaryTags)
			g.AdditionalMetricTags = asSorted(g.AdditionalMetricTags)
			pp.full = append(pp.full, h.group(g))
			pp.hits += g.Hits
		}
	}
	return pp
}

// Harvest removes the merged windows that ended at or before boundary and
// returns them, one Batch per identity; the spans in them stay pending until
// the forwarder reports them with Forwarded or Dropped, and their groups
// held until it Releases the batch. It also forgets the
// senders idle for SenderIdle (or three intervals, if longer).
func (r *Relay) Harvest(boundary time.Time) []Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.st.hits
	now := r.now().UnixNano()
	out := r.st.harvest(uint64(max(boundary.UnixNano(), 0)), uint64(max(now, 0)), nil)
	r.outstanding += before - r.st.hits
	r.senders.harvest(now)
	return out
}

// Release ends the charge of a harvested batch against MaxGroups and
// MaxHeldBytes (Stats.Groups, Stats.HeldBytes): call it once the batch is
// encoded or given up, and drop the batch, whose groups are then garbage.
// Until then, or until the next Harvest, its groups count as held, so
// that a round slow to send what it harvested (an agent slow to answer)
// does not let new groups fill the bounds anew beside them. Releasing a
// batch (the same *Batch) twice, or after the next Harvest, does nothing.
func (r *Relay) Release(b *Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.round != r.st.round {
		b.groups, b.bytes = 0, 0 // a batch of an earlier round
		return
	}
	r.st.groups -= b.groups
	r.st.bytes -= b.bytes
	r.st.outGroups -= b.groups
	r.st.outBytes -= b.bytes
	b.groups, b.bytes = 0, 0
}

// CloseSequences counts the holes still open in every sender's sequence
// as gaps (Stats.SeqGaps), which a harvest counts only once two saw them
// missing: for the stop, once every datagram read is merged.
func (r *Relay) CloseSequences() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.senders.closeAll()
}

// Forwarded records that the agent took hits spans of harvested batches.
func (r *Relay) Forwarded(hits uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(hits)
	r.forwarded += hits
}

// Dropped records that hits spans of harvested batches were given up, for
// reason (a metrics label, e.g. DropRetryBudget).
func (r *Relay) Dropped(hits uint64, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(hits)
	r.dropped[reason] += hits
}

func (r *Relay) settle(hits uint64) {
	if hits > r.outstanding {
		panic("BUG: relay: more spans reported forwarded or dropped than harvested")
	}
	r.outstanding -= hits
}

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() Stats {
	var s Stats
	for t := range NumTransports {
		s.Datagrams[t], s.Bytes[t] = r.datagrams[t].Load(), r.bytes[t].Load()
	}
	for i := range NumReasons {
		s.Rejected[i] = r.rejected[i].Load()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Unsequenced = r.senders.unsequenced
	s.SpansReceived, s.SpansForwarded = r.received, r.forwarded
	s.SpansPending = r.st.hits + r.outstanding
	s.SpansDropped = make(map[string]uint64, len(r.dropped))
	for k, v := range r.dropped {
		s.SpansDropped[k] = v
	}
	s.Groups, s.Senders, s.HeldBytes = r.st.groups, len(r.senders.m), r.st.bytes
	s.PeerTagKeys = -1
	if k := r.peerKeys.Load(); k != nil {
		s.PeerTagKeys = len(*k)
	}
	s.SeqGaps, s.SeqRestarts, s.SeqLate = r.senders.gaps, r.senders.restarts, r.senders.late
	s.SendersForgotten = r.senders.forgottenSenders
	s.SenderDroppedPayloads, s.SenderDroppedSpans = r.senders.droppedPayloads, r.senders.droppedSpans
	s.FoldedSpans, s.OverflowGroups = r.st.folded, r.st.overflowed
	s.LateSpans = r.st.late
	s.ContainerMismatches = r.mismatches
	return s
}
