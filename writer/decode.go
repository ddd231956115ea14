// This file holds DecodePayload and Decoder: a ClientStatsPayload body
// decoded back into groups, bounded by the input's size.

package writer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tinylib/msgp/msgp"

	"github.com/spanstats/spanstats/aggregate"
)

// Limits of DecodePayload. Memory is also bounded by the input (sketches
// aside: see DecodePayload): no slice is preallocated beyond what the
// input could hold, and a payload carries at most one group per
// MinWireGroupBytes of it, one bucket per minWireBucketBytes and one
// string-array element per MinWireStringBytes (a decoded group, bucket or
// string is many times larger than the least its encoding takes).
const (
	// MaxBuckets is the most buckets one payload may carry.
	MaxBuckets = 1 << 12
	// MaxGroups is the most groups one payload may carry, over all buckets.
	MaxGroups = 1 << 20
	// MaxStrings is the most strings one string array (Tags, PeerTags, ...)
	// may carry.
	MaxStrings = 1 << 16
)

// ErrTrailingBytes: the input continues after the payload's map.
var ErrTrailingBytes = errors.New("writer: trailing bytes after the payload")

// ErrEmptyKey: a map of the payload, a bucket or a group has an empty key,
// which the agent's decoder refuses.
var ErrEmptyKey = errors.New("writer: an empty map key")

// Group is one decoded ClientGroupedStats: the entry's labels and values plus
// the fields the SDK never sets. Empty summaries decode as nil sketches and
// empty arrays as nil slices.
type Group struct {
	aggregate.Entry
	DBType                                       string
	SpanDerivedPrimaryTags, AdditionalMetricTags []string
	// Wire holds the summaries instead of Ok and Err when the Decoder has
	// WireSketches set; nil otherwise, and for a group whose summaries are
	// both empty.
	Wire *GroupSketches
}

// DecodedBucket is one decoded ClientStatsBucket.
type DecodedBucket struct {
	Start, Duration uint64
	AgentTimeShift  int64
	Groups          []Group
}

// Payload is one decoded ClientStatsPayload.
type Payload struct {
	Header
	Buckets []DecodedBucket
}

// DecodePayload decodes one complete msgpack ClientStatsPayload, the whole of
// b. It accepts what the agent's msgp decoder accepts — keys in any order,
// unknown keys skipped, str or bin keys, integers in any msgpack width that
// fits the field, nil elements in the bucket and group arrays (skipped) — and
// also nil for an array or a summary (read as empty; DecodePayloadAsAgent
// refuses it, as the agent does). It rejects a value of
// the wrong type (a summary must be bin, as the agent requires), a sketch
// that DecodeSketch rejects, more than MaxBuckets buckets, MaxGroups groups
// or MaxStrings strings in an array, truncated input and trailing bytes
// (which the agent, reading one object from the request body, ignores).
// The agent's own msgp limits are not applied: it refuses a skipped value
// nested over 100 000 levels and a summary or array over 500 000
// elements, where the budgets above bound the memory here instead; no
// tracer writes any of these.
// Bytes that do not decode win: the error of a sketch that decodes but is
// not the agent's (ErrMapping, ErrNegativeValues, ErrBadCount) is returned
// only if the rest of b decodes (the rest is read again to tell, such
// sketches as empty).
// Errors carry the field path in msgp's style (see msgp.WrapError), e.g.
// "... at Stats/0/Stats/3/OkSummary"; msgp.ErrShortBytes is returned bare,
// as msgp does.
//
// Each summary becomes a Sketch whose store spans its lowest to its highest
// bin, up to 2048 bins (8 KiB: uint32 counts), however few bins it encodes: two bins far
// apart take 40 bytes on the wire and several KiB decoded. It is meant for
// payloads this process wrote (Split) and for tests; a receiver of
// untrusted input decodes with a Decoder with WireSketches set, whose
// memory stays a small multiple of the input (the relay's
// TestWideSketchesCannotAmplify).
func DecodePayload(b []byte) (*Payload, error) { return decodePayload(b, false) }

// decodePayload is DecodePayload, refusing nil arrays and summaries if
// strict.
func decodePayload(b []byte, strict bool) (*Payload, error) {
	newDecoder := func() *decoder {
		return &decoder{groups: min(MaxGroups, groupRoom(b)), groupRoom: groupRoom(b), strs: stringBudget(b), strict: strict}
	}
	p, err := decodeInto(b, newDecoder(), new(Payload))
	if err != nil && invalidSketch(err) {
		d := newDecoder()
		d.lenient = true
		if _, merr := decodeInto(b, d, new(Payload)); merr != nil {
			return nil, merr
		}
	}
	return p, err
}

// invalidSketch reports whether err is about a sketch that decodes but
// cannot be one of the agent's latency sketches (ErrMapping,
// ErrNegativeValues, ErrBadCount), as opposed to bytes that do not decode.
func invalidSketch(err error) bool {
	return errors.Is(err, ErrMapping) || errors.Is(err, ErrNegativeValues) || errors.Is(err, ErrBadCount)
}

// MinWireStringBytes is the wire size per element the string arrays of a
// payload (Tags, PeerTags, ...) may take on average, all arrays together:
// their elements are key:value tags, four bytes at least, while a decoded
// string is sixteen bytes before its arena grows, so input claiming smaller
// ones (empty strings, one byte each) would make the decoder allocate
// about twenty times its size (TestEmptyStringsCannotAmplify).
const MinWireStringBytes = 4

// stringBudget is how many string-array elements a payload of b may carry,
// MinWireStringBytes each, and a few more for a tiny payload.
func stringBudget(b []byte) int {
	return len(b)/MinWireStringBytes + 16
}

// MinWireGroupBytes is the least a group takes on the wire from a tracer
// that writes the agent's keys (the agent's own msgp encoder writes all of
// them: over 200 bytes with empty values). A decoded Group is a few hundred
// bytes in memory, so input claiming groups smaller than this would make
// the decoder allocate far more than its size.
const MinWireGroupBytes = 48

// groupRoom is how many groups the group slices of a payload of b may
// preallocate together: one per MinWireGroupBytes, as the budget of a
// decoder of untrusted input, and a few more for a tiny payload. Groups
// within that budget are allocated once, at their number.
func groupRoom(b []byte) int {
	return len(b)/MinWireGroupBytes + 16
}

// maxSpareSketches bounds the emptied sketches a Decoder keeps: with at
// most MaxDecodedBins bins each, what it holds between payloads stays
// bounded whatever its input.
const maxSpareSketches = 256

// A Decoder decodes payloads for a receiver of many (the relay) into memory
// it keeps from one Decode to the next. A caller takes out (sets to nil)
// the sketches it keeps and copies the strings and slices it keeps. A
// Decoder is for one goroutine at a time; its zero value is ready to use.
type Decoder struct {
	// WireSketches leaves each group's summaries validated but undecoded,
	// in Group.Wire (Ok and Err stay nil), for AddSketch to add to
	// sketches the caller holds: a receiver merging payloads into its own
	// then never builds a store per summary.
	WireSketches bool

	p      Payload
	spares []*aggregate.Sketch
	// The buckets, groups and short string arrays of every Decode are
	// carved from these, kept from one Decode to the next: allocating them anew
	// was most of what a Decode allocated, and the GC work and write
	// barriers that came with it (BenchmarkAccept).
	buckets []DecodedBucket
	groups  []Group
	strs    []string
	wires   []GroupSketches
	d       decoder // kept too: a decoder escapes to the heap
	kept    [mapBuffer]binCount
	scratch aggregate.Sketch // WireSketches: each summary is validated in it
}

// An arena grows to at most these unless one slice needs more, and a
// Decoder drops one past them between payloads, so that what it keeps
// stays bounded whatever its input.
const (
	// maxKeptGroups is the most groups the relay's budget, one per
	// MinWireGroupBytes, lets a datagram of 64 KiB (its default limit)
	// carry: a Decoder reused for such datagrams keeps its arenas instead
	// of allocating them for each (TestDecoderKeepsRoomForAFullDatagram).
	maxKeptGroups  = 1<<16/MinWireGroupBytes + 1
	maxKeptStrings = 4096
	// maxCarvedStrings is the longest string array carved from the arena;
	// longer (rare) ones are allocated on their own.
	maxCarvedStrings = 64
	// maxCarvedBuckets is the longest bucket array carved and the most
	// buckets kept: a payload carries one or two.
	maxCarvedBuckets = 16
)

// Decode decodes b as DecodePayload does, with three differences. Its
// strings alias b, valid only while b is not modified. The Payload it returns
// is the Decoder's own, valid until the next Decode, which empties and
// reuses the sketches still in it and writes over its slices. It takes at
// most maxGroups groups (none if it is not positive): a decoder of untrusted input passes
// len(b)/MinWireGroupBytes, so that what it allocates stays a small multiple
// of what it received.
//
// As DecodePayload, it returns the error of a sketch that decodes but is
// not the agent's (ErrMapping, ErrNegativeValues, ErrBadCount) only if the
// rest of b decodes: a payload whose bytes do not decode further on
// returns that error, whatever sketch came before them.
func (dec *Decoder) Decode(b []byte, maxGroups int) (*Payload, error) {
	dec.start(b, maxGroups)
	p, err := decodeInto(b, &dec.d, &dec.p)
	if err != nil {
		dec.p = Payload{} // what it decoded before the error is not handed out
		if invalidSketch(err) {
			// Decoded again, such sketches read as empty: only for a
			// payload refused anyway, at most twice its cost.
			dec.start(b, maxGroups)
			dec.d.lenient = true
			_, merr := decodeInto(b, &dec.d, &dec.p)
			dec.p = Payload{}
			if merr != nil {
				return nil, merr
			}
		}
	}
	return p, err
}

// start readies dec to decode b: the previous payload's sketches go to
// the spares and the arenas are emptied (dropped when grown too large).
func (dec *Decoder) start(b []byte, maxGroups int) {
	for i := range dec.p.Buckets {
		gs := dec.p.Buckets[i].Groups
		for j := range gs {
			for _, sk := range [...]*aggregate.Sketch{gs[j].Ok, gs[j].Err} {
				if sk != nil && len(dec.spares) < maxSpareSketches {
					sk.Reset()
					dec.spares = append(dec.spares, sk)
				}
			}
		}
	}
	dec.p = Payload{}
	if cap(dec.groups) > maxKeptGroups {
		dec.groups = nil
	}
	if cap(dec.buckets) > maxCarvedBuckets {
		dec.buckets = nil
	}
	if cap(dec.strs) > maxKeptStrings {
		dec.strs = nil
	}
	if cap(dec.wires) > maxKeptGroups {
		dec.wires = nil
	}
	dec.buckets, dec.groups, dec.strs, dec.wires = dec.buckets[:0], dec.groups[:0], dec.strs[:0], dec.wires[:0]
	// Clamped at 0: decodeArray compares budgets as unsigned, so a
	// negative one would admit any number of groups.
	dec.d = decoder{groups: min(max(maxGroups, 0), MaxGroups), groupRoom: groupRoom(b), strs: stringBudget(b), alias: true, spares: &dec.spares, kept: &dec.kept,
		bucketArena: &dec.buckets, groupArena: &dec.groups, strArena: &dec.strs}
	if dec.WireSketches {
		dec.d.wireArena, dec.d.scratch = &dec.wires, &dec.scratch
	}
}

// DecodePayloadAsAgent is DecodePayload refusing, as the agent's msgp
// decoder does (answering 400), nil for an array (the buckets, the groups,
// the tags and peer tags) or a summary, which DecodePayload reads as
// empty; a nil bucket or group in its array is skipped by both. It differs
// from the agent where DecodePayload does (trailing bytes, the limits).
func DecodePayloadAsAgent(b []byte) (*Payload, error) { return decodePayload(b, true) }

// agentNil refuses, in a strict decoder, nil where the agent's msgp code
// reads an array or a bin (its ReadArrayHeaderBytes, ReadBytesBytes).
func (d *decoder) agentNil(b []byte, t msgp.Type) error {
	if d.strict && msgp.IsNil(b) {
		return msgp.TypeError{Method: t, Encoded: msgp.NilType}
	}
	return nil
}

func decodeInto(b []byte, d *decoder, p *Payload) (*Payload, error) {
	rest, err := d.payload(b, p)
	if err != nil {
		return nil, asPathError(err).wrap()
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrTrailingBytes, len(rest))
	}
	return p, nil
}

// decoder tracks how many groups the payload may still carry, for
// MaxGroups, and where to put what it decodes.
type decoder struct {
	groups    int
	groupRoom int  // groups the payload's group slices may still preallocate (groupRoom)
	strs      int  // string-array elements the payload may still carry
	alias     bool // strings alias the input (Decoder)
	// lenient reads a summary that decodes but is not the agent's
	// (invalidSketch) as empty: the second pass that tells whether the
	// rest of a payload decodes.
	lenient bool
	// strict refuses nil for an array or a summary (DecodePayloadAsAgent).
	strict bool
	spares *[]*aggregate.Sketch // emptied sketches to decode into (Decoder)
	// Where bucket and group slices and short string arrays are carved
	// (Decoder; nil: allocated).
	bucketArena *[]DecodedBucket
	groupArena  *[]Group
	strArena    *[]string
	kept        *[mapBuffer]binCount // decodeSketch's scratch (Decoder; nil: on the stack)
	// With WireSketches (Decoder), summaries are read by readWire into
	// Group.Wire, carved from wireArena, validated in scratch.
	wireArena *[]GroupSketches
	scratch   *aggregate.Sketch
}

// step is one step of a path: an array index, or a map key when index < 0.
type step struct {
	key   string
	index int
}

// pathError is an error on its way out of the decoder: each level it
// leaves adds its step, so that a payload that decodes pays nothing for
// paths (BenchmarkAccept). At the top, wrap hands the whole path to
// msgp.WrapError at once: msgp cannot add to the path of every error it
// wraps (the context of a wrapped foreign error, or of UintBelowZero, is
// set once).
type pathError struct {
	err   error
	steps []step // innermost first
}

func (e *pathError) Error() string { return e.wrap().Error() }

// at returns err (a pathError or not yet) with s added as the step outside
// the ones it has.
func at(err error, s step) error {
	e := asPathError(err)
	e.steps = append(e.steps, s)
	return e
}

// asPathError returns err as a pathError, making it one if needed.
func asPathError(err error) *pathError {
	if e, ok := err.(*pathError); ok {
		return e
	}
	return &pathError{err: err}
}

// wrap returns the error with its path, as msgp would have wrapped it.
func (e *pathError) wrap() error {
	ctx := make([]any, len(e.steps))
	for i, s := range e.steps {
		c := any(s.index)
		if s.index < 0 {
			c = fieldName(s.key)
		}
		ctx[len(ctx)-1-i] = c
	}
	return msgp.WrapError(e.err, ctx...)
}

// fieldName is the context for an error in the value of key k: the key, or
// nothing for a skipped unknown key (which may be arbitrary bytes).
func fieldName(k string) any {
	switch k {
	case "srv_src":
		return "ServiceSource" // the agent's name for it in its error paths
	}
	for _, c := range k {
		if c < 0x20 || c > 0x7e {
			return "?"
		}
	}
	return k
}

// Each level of a payload is a decodeMap given the level's keys; its arrays
// are read by decodeArray.

// The keys of each level (fixstr header included), in the order AppendPayload
// writes them, which is the agent's own encoder's; the field indexes below
// follow it.
var (
	payloadKeys = newMapKeys(kHostname, kEnv, kVersion, kStats, kLang, kTracerVersion,
		kRuntimeID, kSequence, kAgentAggregation, kService, kContainerID, kTags, kGitCommitSha,
		kImageTag, kProcessTagsHash, kProcessTags)
	bucketKeys = newMapKeys(kStart, kDuration, kStats, kAgentTimeShift)
	groupKeys  = newMapKeys(kService, kName, kResource, kHTTPStatusCode, kType, kDBType,
		kHits, kErrors, kDuration, kOkSummary, kErrorSummary, kSynthetics, kTopLevelHits,
		kSpanKind, kPeerTags, kIsTraceRoot, kGRPCStatusCode, kHTTPMethod, kHTTPEndpoint,
		kServiceSource, kSpanDerivedPrimaryTags, kAdditionalMetricTags)
)

const (
	pHostname = iota
	pEnv
	pVersion
	pStats
	pLang
	pTracerVersion
	pRuntimeID
	pSequence
	pAgentAggregation
	pService
	pContainerID
	pTags
	pGitCommitSha
	pImageTag
	pProcessTagsHash
	pProcessTags
)

const (
	bStart = iota
	bDuration
	bStats
	bAgentTimeShift
)

const (
	gService = iota
	gName
	gResource
	gHTTPStatusCode
	gType
	gDBType
	gHits
	gErrors
	gDuration
	gOkSummary
	gErrorSummary
	gSynthetics
	gTopLevelHits
	gSpanKind
	gPeerTags
	gIsTraceRoot
	gGRPCStatusCode
	gHTTPMethod
	gHTTPEndpoint
	gServiceSource
	gSpanDerivedPrimaryTags
	gAdditionalMetricTags
)

// decodeMap reads a msgpack map whose known keys are keys: field is given
// the index in keys of each known key and b at its value, reads the value
// and returns the rest of b; the value of an unknown key is skipped. Each
// key is first compared, byte for byte, with the one the writer writes
// after the previous key: every key of the SDK's own payloads matches so,
// and is neither read as a string nor looked up (BenchmarkAccept). A key
// that does not is read the general way (another tracer's order, a
// missing, unknown or str8 key), and the expected key then follows it.
// group, the hot level, has the same loop with its fields inline.
func (d *decoder) decodeMap(b []byte, keys []mapKey, field func(i int, b []byte) ([]byte, error)) ([]byte, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, asPathError(err)
	}
	next := 0
	for ; n > 0; n-- {
		var i int
		if next < len(keys) && keys[next].at(b) {
			i, b = next, b[keys[next].n:]
		} else if i, b, err = otherKey(b, keys); err != nil {
			return b, err
		} else if i < 0 {
			continue
		}
		next = i + 1
		if b, err = field(i, b); err != nil {
			return b, at(err, step{key: keys[i].name, index: -1})
		}
	}
	return b, nil
}

// otherKey reads a map key that is not the one expected next: the index in
// keys of a known one, or -1 with its value skipped.
func otherKey(b []byte, keys []mapKey) (int, []byte, error) {
	key, b, err := readMapKey(b)
	if err != nil {
		return -1, b, asPathError(err)
	}
	i := keyIndex(keys, key)
	if i < 0 {
		if b, err = skip(b); err != nil {
			return -1, b, at(err, step{key: string(key), index: -1})
		}
	}
	return i, b, nil
}

// keyIndex is the index of the key named key among keys, or -1.
func keyIndex(keys []mapKey, key []byte) int {
	for i := range keys {
		if string(key) == keys[i].name {
			return i
		}
	}
	return -1
}

// mapKey is a key as the writer encodes it (a fixstr of at most 24 bytes
// with its header), held as three little-endian words and their masks so
// that at compares it with the input in three loads, not a call to memequal
// per key (BenchmarkAccept).
type mapKey struct {
	enc  string // the key with its header
	name string // the key, without its header
	n    int    // len(enc)
	w, m [3]uint64
}

func newMapKeys(encoded ...string) []mapKey {
	keys := make([]mapKey, len(encoded))
	for i, e := range encoded {
		if len(e) > 24 || len(e) == 0 || int(e[0]&0x1f) != len(e)-1 {
			panic("writer: map key " + e + " is not a fixstr of at most 24 bytes")
		}
		k := mapKey{enc: e, name: e[1:], n: len(e)}
		var buf [24]byte
		copy(buf[:], e)
		for j := range k.w {
			k.w[j] = binary.LittleEndian.Uint64(buf[8*j:])
			for b := range 8 {
				if 8*j+b < len(e) {
					k.m[j] |= 0xff << (8 * b)
				}
			}
		}
		keys[i] = k
	}
	return keys
}

// at reports whether b starts with k.
func (k *mapKey) at(b []byte) bool {
	if len(b) < 24 {
		return len(b) >= k.n && string(b[:k.n]) == k.enc
	}
	return binary.LittleEndian.Uint64(b)&k.m[0] == k.w[0] &&
		binary.LittleEndian.Uint64(b[8:])&k.m[1] == k.w[1] &&
		binary.LittleEndian.Uint64(b[16:])&k.m[2] == k.w[2]
}

// decodeArray reads a msgpack array (nil: empty) of at most *budget
// elements, which it takes from *budget, with elem reading each element;
// with skipNil a nil element is skipped, as msgp does for the bucket and
// group arrays. It preallocates for at most *room elements, which it takes
// from *room: the caller sizes room to the input, so that a hostile header
// cannot make it allocate beyond a small multiple of the input's size,
// while an array within it is allocated once, at its length. The
// preallocation is carved from arena when it is not nil and holds at most
// maxCarve elements; the arena grows to at most maxKept (see carve).
func decodeArray[T any](b []byte, budget, room *int, skipNil bool,
	arena *[]T, maxCarve, maxKept int, elem func(b []byte, v *T) ([]byte, error)) ([]T, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, b, asPathError(err)
	}
	if uint64(n) > uint64(*budget) {
		return nil, b, asPathError(msgp.ErrLimitExceeded)
	}
	if n == 0 {
		return nil, b, nil
	}
	*budget -= int(n)
	var out []T
	var c int
	if arena != nil && int(n) <= maxCarve && int(n) <= cap(*arena)-len(*arena) {
		c = int(n) // room the arena already has costs nothing
	} else {
		c = min(int(n), *room)
		*room -= c
	}
	if arena != nil && c <= maxCarve {
		out = carve(arena, c, maxKept)
	} else {
		out = make([]T, 0, c)
	}
	for i := 0; i < int(n); i++ {
		if skipNil && msgp.IsNil(b) {
			b = b[1:]
			continue
		}
		if len(out) == cap(out) && arena != nil && int(n) <= maxCarve {
			// More elements than room: grow from the arena, which
			// keeps the room for the next Decode.
			need := min(2*cap(out)+16, int(n))
			if cap(*arena)-len(*arena) < need {
				// Sized to this array, not doubled: an arena past
				// maxKept would be dropped, not kept.
				*arena = make([]T, 0, need)
			}
			out = append(carve(arena, need, maxKept), out...)
		}
		out = append(out, *new(T))
		if b, err = elem(b, &out[len(out)-1]); err != nil {
			return nil, b, at(err, step{index: i})
		}
	}
	if len(out) == 0 { // every element nil: empty, so nil whatever was carved
		return nil, b, nil
	}
	return out, b, nil
}

// carve returns an empty slice of capacity n from the unused tail of
// *arena, replacing the arena by a larger one when it has no room (slices
// carved before keep the old one): twice as large, up to maxKept, so that
// the last one holds what a Decode carved and a reused Decoder converges
// on an arena it keeps. An element may hold a stale value until it is
// appended over.
func carve[T any](arena *[]T, n, maxKept int) []T {
	a := *arena
	if cap(a)-len(a) < n {
		a = make([]T, 0, max(n, min(max(2*cap(a), 16), maxKept)))
	}
	l := len(a)
	*arena = a[:l+n]
	return a[l : l : l+n]
}

// minWireBucketBytes is less than the least a valid bucket takes on the
// wire: a map of one Duration key (9 bytes) and its value.
const minWireBucketBytes = 8

func (d *decoder) payload(b []byte, p *Payload) ([]byte, error) {
	h := &p.Header
	// A bucket decodes into 48 bytes; input claiming more than one per
	// minWireBucketBytes (empty maps, one byte each) would make a small
	// datagram allocate 48 times its size. The budget is the payload's, not
	// each Stats key's: a repeated key would get it afresh.
	buckets := min(MaxBuckets, len(b)/minWireBucketBytes+1)
	room := len(b) // a bucket takes a byte at least
	return d.decodeMap(b, payloadKeys, func(i int, b []byte) (_ []byte, err error) {
		switch i {
		case pHostname:
			h.Hostname, b, err = d.readString(b)
		case pEnv:
			h.Env, b, err = d.readString(b)
		case pVersion:
			h.Version, b, err = d.readString(b)
		case pStats:
			if err = d.agentNil(b, msgp.ArrayType); err == nil {
				p.Buckets, b, err = decodeArray(b, &buckets, &room, true, d.bucketArena, maxCarvedBuckets, maxCarvedBuckets, d.bucket)
			}
		case pLang:
			h.Lang, b, err = d.readString(b)
		case pTracerVersion:
			h.TracerVersion, b, err = d.readString(b)
		case pRuntimeID:
			h.RuntimeID, b, err = d.readString(b)
		case pSequence:
			h.Sequence, b, err = msgp.ReadUint64Bytes(b)
		case pAgentAggregation:
			h.AgentAggregation, b, err = d.readString(b)
		case pService:
			h.Service, b, err = d.readString(b)
		case pContainerID:
			h.ContainerID, b, err = d.readString(b)
		case pTags:
			h.Tags, b, err = d.strings(b)
		case pGitCommitSha:
			h.GitCommitSha, b, err = d.readString(b)
		case pImageTag:
			h.ImageTag, b, err = d.readString(b)
		case pProcessTagsHash:
			h.ProcessTagsHash, b, err = msgp.ReadUint64Bytes(b)
		case pProcessTags:
			h.ProcessTags, b, err = d.readString(b)
		}
		return b, err
	})
}

func (d *decoder) bucket(b []byte, bk *DecodedBucket) ([]byte, error) {
	return d.decodeMap(b, bucketKeys, func(i int, b []byte) (_ []byte, err error) {
		switch i {
		case bStart:
			bk.Start, b, err = msgp.ReadUint64Bytes(b)
		case bDuration:
			bk.Duration, b, err = msgp.ReadUint64Bytes(b)
		case bStats:
			if err = d.agentNil(b, msgp.ArrayType); err == nil {
				bk.Groups, b, err = decodeArray(b, &d.groups, &d.groupRoom, true, d.groupArena, MaxGroups, maxKeptGroups, d.group)
			}
		case bAgentTimeShift:
			bk.AgentTimeShift, b, err = msgp.ReadInt64Bytes(b)
		}
		return b, err
	})
}

// group is decodeMap for a group, with the field reads in its loop: a
// datagram carries hundreds of groups, and a call of a field closure per
// key was a fifth of the relay's decoding (BenchmarkAccept).
func (d *decoder) group(b []byte, g *Group) ([]byte, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, asPathError(err)
	}
	k := &g.Key
	next := 0
	for ; n > 0; n-- {
		var i int
		if next < len(groupKeys) && groupKeys[next].at(b) {
			i, b = next, b[groupKeys[next].n:]
		} else if i, b, err = otherKey(b, groupKeys); err != nil {
			return b, err
		} else if i < 0 {
			continue
		}
		next = i + 1
		switch i {
		case gService:
			k.Service, b, err = d.readString(b)
		case gName:
			k.Name, b, err = d.readString(b)
		case gResource:
			k.Resource, b, err = d.readString(b)
		case gHTTPStatusCode:
			k.HTTPStatusCode, b, err = msgp.ReadUint32Bytes(b)
		case gType:
			k.Type, b, err = d.readString(b)
		case gDBType:
			g.DBType, b, err = d.readString(b)
		case gHits:
			g.Hits, b, err = msgp.ReadUint64Bytes(b)
		case gErrors:
			g.Errors, b, err = msgp.ReadUint64Bytes(b)
		case gDuration:
			g.Duration, b, err = msgp.ReadUint64Bytes(b)
		case gOkSummary:
			if d.scratch != nil {
				b, err = d.readWire(b, g, false)
			} else {
				g.Ok, b, err = d.readSummary(b)
			}
		case gErrorSummary:
			if d.scratch != nil {
				b, err = d.readWire(b, g, true)
			} else {
				g.Err, b, err = d.readSummary(b)
			}
		case gSynthetics:
			k.Synthetics, b, err = msgp.ReadBoolBytes(b)
		case gTopLevelHits:
			g.TopLevelHits, b, err = msgp.ReadUint64Bytes(b)
		case gSpanKind:
			k.SpanKind, b, err = d.readString(b)
		case gPeerTags:
			k.PeerTags, b, err = d.strings(b)
		case gIsTraceRoot:
			var v int32
			v, b, err = msgp.ReadInt32Bytes(b)
			k.IsTraceRoot = aggregate.Trilean(v)
		case gGRPCStatusCode:
			k.GRPCStatusCode, b, err = d.readString(b)
		case gHTTPMethod:
			k.HTTPMethod, b, err = d.readString(b)
		case gHTTPEndpoint:
			k.HTTPEndpoint, b, err = d.readString(b)
		case gServiceSource:
			k.ServiceSource, b, err = d.readString(b)
		case gSpanDerivedPrimaryTags:
			g.SpanDerivedPrimaryTags, b, err = d.strings(b)
		case gAdditionalMetricTags:
			g.AdditionalMetricTags, b, err = d.strings(b)
		}
		if err != nil {
			return b, at(err, step{key: groupKeys[i].name, index: -1})
		}
	}
	return b, nil
}

// readSummary reads a bin (or nil) summary and decodes its sketch; an empty
// sketch is nil, as an entry's sketch stays nil until its first value.
func (d *decoder) readSummary(b []byte) (*aggregate.Sketch, []byte, error) {
	if err := d.agentNil(b, msgp.BinType); err != nil {
		return nil, b, err
	}
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	v, b, err := readBytes(b)
	if err != nil || len(v) == 0 || bytes.Equal(v, emptySketch) {
		return nil, b, err
	}
	var s *aggregate.Sketch
	if d.spares != nil && len(*d.spares) > 0 {
		sp := *d.spares
		s, *d.spares = sp[len(sp)-1], sp[:len(sp)-1]
	} else {
		s = new(aggregate.Sketch)
	}
	if err := d.decodeSketch(v, s); err != nil || s.Count() == 0 {
		if d.spares != nil && len(*d.spares) < maxSpareSketches {
			s.Reset()
			*d.spares = append(*d.spares, s)
		}
		if d.lenient && invalidSketch(err) {
			err = nil
		}
		return nil, b, err
	}
	return s, b, nil
}

// decodeSketch is DecodeSketch with a Decoder's scratch when it has one.
func (d *decoder) decodeSketch(v []byte, s *aggregate.Sketch) error {
	if d.kept == nil {
		return DecodeSketch(v, s)
	}
	return decodeSketch(v, s, d.kept)
}

// strings reads an array (or nil) of at most MaxStrings strings, taken
// from the payload's d.strs; an empty array is nil.
func (d *decoder) strings(b []byte) ([]string, []byte, error) {
	if len(b) > 0 && b[0] == 0x90 { // an empty fixarray: the writer's two unset lists of every group
		return nil, b[1:], nil
	}
	if err := d.agentNil(b, msgp.ArrayType); err != nil {
		return nil, b, err
	}
	limit := min(MaxStrings, d.strs)
	budget, room := limit, len(b) // a string takes a byte at least
	out, b, err := decodeArray(b, &budget, &room, false, d.strArena, maxCarvedStrings, maxKeptStrings, func(b []byte, s *string) (_ []byte, err error) {
		*s, b, err = d.readString(b)
		return b, err
	})
	d.strs -= limit - budget
	return out, b, err
}

func readString(b []byte) (string, []byte, error) {
	if err := fits(b); err != nil {
		return "", b, err
	}
	return msgp.ReadStringBytes(b)
}
