// This file holds the relay's keys: the seeded hashes of a group's labels
// and of a payload's identity that the held state is indexed by.

package relay

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// asSorted sorts v in place, keeping duplicates: the agent (v0.85.4,
// tagsFnvHash) keys AdditionalMetricTags by the sorted list as it is, so
// ["a:1","a:1"] and ["a:1"] stay two groups there and must reach it so.
func asSorted(v []string) []string {
	if len(v) > 1 {
		slices.Sort(v)
	}
	return v
}

// asSet sorts v and drops duplicates in place: peer tags are a set.
func asSet(v []string) []string {
	if len(v) < 2 {
		return v
	}
	slices.Sort(v)
	return slices.Compact(v)
}

// hasher hashes label and identity fields with a per-relay seed, so keys
// cannot be chosen offline to collide in the relay's maps. Fields are
// appended to buf and hashed in one Write: xxhash's per-call cost exceeds
// its per-byte cost for short fields (BenchmarkAccept).
type hasher struct {
	d      xxhash.Digest
	seed   uint64
	buf    []byte
	hashes []uint64 // prepare's, for every group of one payload
}

func (h *hasher) reset() {
	h.buf = h.buf[:0]
	h.d.ResetWithSeed(h.seed)
}

// sum hashes what was appended since the last sum, continuing the digest.
func (h *hasher) sum() uint64 {
	h.d.Write(h.buf)
	h.buf = h.buf[:0]
	return h.d.Sum64()
}

// str appends v after its length: a length prefix makes the hashed bytes
// injective, so equal bytes mean equal fields.
func (h *hasher) str(v string) {
	h.buf = append(binary.AppendUvarint(h.buf, uint64(len(v))), v...)
}

func (h *hasher) num(v uint64) {
	h.buf = binary.AppendUvarint(h.buf, v)
}

func (h *hasher) strs(v []string) {
	h.num(uint64(len(v)))
	for _, s := range v {
		h.str(s)
	}
}

// group returns the hash of g's label key, every label field as it is. g's
// tag lists must be sets (asSet).
func (h *hasher) group(g *writer.Group) uint64 {
	k := &g.Key
	h.reset()
	h.str(k.Service)
	h.str(k.Name)
	h.str(k.Resource)
	h.str(k.Type)
	h.str(g.DBType)
	h.scalars(g)
	h.strs(k.PeerTags)
	h.strs(g.AdditionalMetricTags)
	h.strs(g.SpanDerivedPrimaryTags)
	return h.sum()
}

// typelessKey is what splitByType needs of a held group: the hash of the
// part of its label key the agent (v0.85.4) merges a bucket's duplicate
// groups by and cannot rewrite (key), and the hash of its
// SpanDerivedPrimaryTags.
type typelessKey struct {
	key, spanDerived uint64
}

// typeless returns the hashes of the part of g's label key the agent
// merges a bucket's duplicate groups by: every field but Type, DBType and
// SpanDerivedPrimaryTags (stats.NewAggregationFromGroup, see splitByType),
// less Resource and HTTPStatusCode, which the agent rewrites first by
// rules only it knows (writer.TypeSplitter), with Service and Name as its
// normalizeStatsGroup leaves them (writer.AppendFoldedLabels). Only a
// group new to its window needs it, so the fold is not paid per received
// group (BenchmarkAccept).
func (h *hasher) typeless(g *writer.Group) typelessKey {
	k := &g.Key
	h.reset()
	h.buf = writer.AppendFoldedLabels(h.buf, k.Service, k.Name)
	h.labels(g)
	// Tag lists by the agent's own hash of them: lists it cannot tell
	// apart are one.
	h.buf = writer.AppendTagsHash(h.buf, k.PeerTags)
	h.buf = writer.AppendTagsHash(h.buf, g.AdditionalMetricTags)
	t := typelessKey{key: h.sum()}
	if len(g.SpanDerivedPrimaryTags) > 0 {
		h.reset()
		h.strs(g.SpanDerivedPrimaryTags)
		t.spanDerived = h.sum()
	}
	return t
}

// scalars appends the label fields group takes as they are: all but the
// names and the tag lists.
func (h *hasher) scalars(g *writer.Group) {
	h.labels(g)
	h.num(uint64(g.Key.HTTPStatusCode))
}

// labels appends the label fields group and typeless both take as they
// are: all but the names, the tag lists and HTTPStatusCode.
func (h *hasher) labels(g *writer.Group) {
	k := &g.Key
	h.str(k.SpanKind)
	h.str(k.HTTPMethod)
	h.str(k.HTTPEndpoint)
	h.str(k.GRPCStatusCode)
	h.str(k.ServiceSource)
	h.num(uint64(uint32(k.IsTraceRoot))<<1 | uint64(b2u(k.Synthetics)))
}

// runtimeID returns the hash of a sender's RuntimeID (see senders).
func (h *hasher) runtimeID(id string) uint64 {
	h.reset()
	h.str(id)
	return h.sum()
}

// identity returns the hash of every field of hd but RuntimeID and
// Sequence; hd.Tags must be a set.
func (h *hasher) identity(hd *writer.Header) uint64 {
	h.reset()
	h.str(hd.Hostname)
	h.str(hd.Env)
	h.str(hd.Version)
	h.str(hd.Lang)
	h.str(hd.TracerVersion)
	h.str(hd.Service)
	h.str(hd.ContainerID)
	h.str(hd.GitCommitSha)
	h.str(hd.ImageTag)
	h.str(hd.ProcessTags)
	h.str(hd.AgentAggregation)
	h.num(hd.ProcessTagsHash)
	h.strs(hd.Tags)
	return h.sum()
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func sameGroup(a, b *writer.Group) bool {
	return a.Key.Service == b.Key.Service && a.Name == b.Name && a.Resource == b.Resource &&
		a.Type == b.Type && a.SpanKind == b.SpanKind && a.HTTPMethod == b.HTTPMethod &&
		a.HTTPEndpoint == b.HTTPEndpoint && a.GRPCStatusCode == b.GRPCStatusCode &&
		a.ServiceSource == b.ServiceSource && a.DBType == b.DBType &&
		a.HTTPStatusCode == b.HTTPStatusCode && a.Synthetics == b.Synthetics &&
		a.IsTraceRoot == b.IsTraceRoot && slices.Equal(a.PeerTags, b.PeerTags) &&
		slices.Equal(a.SpanDerivedPrimaryTags, b.SpanDerivedPrimaryTags) &&
		slices.Equal(a.AdditionalMetricTags, b.AdditionalMetricTags)
}

func sameIdentity(a, b *writer.Header) bool {
	return a.Hostname == b.Hostname && a.Env == b.Env && a.Version == b.Version &&
		a.Lang == b.Lang && a.TracerVersion == b.TracerVersion && a.Service == b.Service &&
		a.ContainerID == b.ContainerID && a.GitCommitSha == b.GitCommitSha &&
		a.ImageTag == b.ImageTag && a.ProcessTags == b.ProcessTags &&
		a.AgentAggregation == b.AgentAggregation && a.ProcessTagsHash == b.ProcessTagsHash &&
		slices.Equal(a.Tags, b.Tags)
}

// overflowGroup is the label key spans fold into at the MaxGroups bound:
// the SDK's own overflow entry's, so the agent files both alike.
var overflowGroup = writer.Group{Entry: aggregate.Entry{Key: aggregate.Key{
	Service: aggregate.BlockedValue, Name: aggregate.BlockedValue, Resource: aggregate.BlockedValue,
	Type: aggregate.BlockedValue, SpanKind: aggregate.BlockedValue, HTTPMethod: aggregate.BlockedValue,
	HTTPEndpoint: aggregate.BlockedValue, GRPCStatusCode: aggregate.BlockedValue,
	ServiceSource: aggregate.BlockedValue,
}}}

// arena copies strings into one allocation, so that what a held group or
// identity retains does not depend on how the decoder made its strings.
type arena struct {
	buf []byte
}

func (a *arena) str(s *string) {
	if len(*s) == 0 {
		// An empty string decoded from a datagram still points into it,
		// and the GC follows that pointer: held, it would keep the whole
		// read buffer alive (TestHeldStringsPinNoDatagram).
		*s = ""
		return
	}
	n := len(a.buf)
	a.buf = append(a.buf, *s...)
	*s = unsafe.String(&a.buf[n], len(*s))
}

func (a *arena) strs(v []string) []string {
	if len(v) == 0 {
		return nil
	}
	out := make([]string, len(v))
	for i := range v {
		out[i] = v[i]
		a.str(&out[i])
	}
	return out
}

func groupBytes(g *writer.Group) int {
	k := &g.Key
	n := len(k.Service) + len(k.Name) + len(k.Resource) + len(k.Type) + len(k.SpanKind) +
		len(k.HTTPMethod) + len(k.HTTPEndpoint) + len(k.GRPCStatusCode) +
		len(k.ServiceSource) + len(g.DBType)
	for _, v := range [...][]string{k.PeerTags, g.SpanDerivedPrimaryTags, g.AdditionalMetricTags} {
		for _, s := range v {
			n += len(s)
		}
	}
	return n
}

// ownGroup makes g's strings its own (one allocation for all of them).
func ownGroup(g *writer.Group) {
	a := arena{buf: make([]byte, 0, groupBytes(g))}
	k := &g.Key
	for _, s := range [...]*string{&k.Service, &k.Name, &k.Resource, &k.Type, &k.SpanKind,
		&k.HTTPMethod, &k.HTTPEndpoint, &k.GRPCStatusCode, &k.ServiceSource, &g.DBType} {
		a.str(s)
	}
	k.PeerTags = a.strs(k.PeerTags)
	g.SpanDerivedPrimaryTags = a.strs(g.SpanDerivedPrimaryTags)
	g.AdditionalMetricTags = a.strs(g.AdditionalMetricTags)
}

// headerStrBytes is the bytes of hd's strings, tags included.
func headerStrBytes(hd *writer.Header) int {
	n := len(hd.Hostname) + len(hd.Env) + len(hd.Version) + len(hd.Lang) +
		len(hd.TracerVersion) + len(hd.Service) + len(hd.ContainerID) + len(hd.GitCommitSha) +
		len(hd.ImageTag) + len(hd.ProcessTags) + len(hd.AgentAggregation)
	for _, t := range hd.Tags {
		n += len(t)
	}
	return n
}

// ownHeader makes hd's strings its own.
func ownHeader(hd *writer.Header) {
	a := arena{buf: make([]byte, 0, headerStrBytes(hd))}
	for _, s := range [...]*string{&hd.Hostname, &hd.Env, &hd.Version, &hd.Lang,
		&hd.TracerVersion, &hd.Service, &hd.ContainerID, &hd.GitCommitSha, &hd.ImageTag,
		&hd.ProcessTags, &hd.AgentAggregation} {
		a.str(s)
	}
	hd.Tags = a.strs(hd.Tags)
}
