// This file tests the merge into the held state: identities, windows and
// groups, the buckets that keep the agent's duplicates apart, the bounds on
// groups and bytes with the overflow group, and late windows.

package relay

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

func TestMergeTwoSenders(t *testing.T) {
	r := newTestRelay(Config{})
	a := []float64{1, 2, 3, 4, 5, 6}
	b := []float64{10, 20, 30, 40}
	ea := entry(key("GET /"), 7, 1, a...) // one error without a sketch value
	eb := entry(key("GET /"), 4, 0, b...)
	mustAccept(t, r, datagram(1, header("rt-a"), bucket(w0, 10*sec, ea)), 0, Unix)
	mustAccept(t, r, datagram(1, header("rt-b"), bucket(w0, 10*sec, eb)), 0, UDP)
	if s := checkAccounting(t, r); s.SpansReceived != 11 || s.SpansPending != 11 || s.Groups != 1 || s.Senders != 2 {
		t.Fatalf("stats %+v", s)
	}

	out := r.Harvest(t0)
	if len(out) != 1 || len(out[0].Buckets) != 1 || len(out[0].Buckets[0].Groups) != 1 {
		t.Fatalf("harvest = %+v, want one batch of one bucket of one group", out)
	}
	bt := out[0]
	if bt.Hits != 11 || bt.RuntimeID != "" || bt.Env != "prod" || bt.HasContainer() {
		t.Fatalf("batch hits %d runtime %q env %q container %v", bt.Hits, bt.RuntimeID, bt.Env, bt.HasContainer())
	}
	g := bt.Buckets[0].Groups[0]
	if g.Hits != 11 || g.Errors != 1 || g.TopLevelHits != 11 || g.Duration != ea.Duration+eb.Duration {
		t.Fatalf("group values %+v", g.Entry)
	}
	union := slices.Concat(a, b)
	sort.Float64s(union)
	if g.Ok.Count() != uint64(len(union)) {
		t.Fatalf("merged sketch count %d, want %d", g.Ok.Count(), len(union))
	}
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		want := union[int(q*float64(len(union)-1))] * 1e6
		if got := g.Ok.Quantile(q); math.Abs(got-want) > 0.01*want {
			t.Errorf("p%v = %v, want %v ±1 %%", q*100, got, want)
		}
	}
	if s := checkAccounting(t, r); s.SpansPending != 11 || s.Groups != 1 {
		t.Fatalf("after harvest: pending %d groups %d, want 11 and the harvested group held", s.SpansPending, s.Groups)
	}
	r.Release(&out[0]) // encoded: the forwarder lets its groups go
	if s := checkAccounting(t, r); s.Groups != 0 || s.HeldBytes != 0 {
		t.Fatalf("after release: groups %d, %d bytes held", s.Groups, s.HeldBytes)
	}
	r.Forwarded(6)
	r.Dropped(5, "retries_exhausted")
	if s := checkAccounting(t, r); s.SpansPending != 0 || s.SpansForwarded != 6 || s.SpansDropped["retries_exhausted"] != 5 {
		t.Fatalf("after outcome: %+v", s)
	}
}

func TestIdentitiesStayApart(t *testing.T) {
	r := newTestRelay(Config{})
	h2 := header("rt-b")
	h2.Env = "staging"
	h3 := header("rt-c")
	h3.Tags = []string{"a:1", "b:2", "a:1"} // the same set as header's
	mustAccept(t, r, datagram(1, header("rt-a"), bucket(w0, 10*sec, entry(key("GET /"), 1, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, h2, bucket(w0, 10*sec, entry(key("GET /"), 2, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, h3, bucket(w0, 10*sec, entry(key("GET /"), 4, 0))), 0, UDP)
	out := harvestAll(t, r)
	got := map[string]uint64{}
	for _, b := range out {
		got[b.Env] += b.Hits
		if len(b.Buckets) != 1 || len(b.Buckets[0].Groups) != 1 {
			t.Fatalf("batch %s: %d buckets", b.Env, len(b.Buckets))
		}
	}
	if len(out) != 2 || got["prod"] != 5 || got["staging"] != 2 {
		t.Fatalf("batches %d, hits by env %v; want 2, prod 5 staging 2", len(out), got)
	}
}

func TestWindowMergesSplitBuckets(t *testing.T) {
	r := newTestRelay(Config{})
	// A Flush at +4 s splits one sender's bucket; another sender's runs 1–9 s;
	// a third bucket starts in the next window.
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 4*sec, entry(key("GET /"), 1, 0)),
		bucket(w0+4*sec, 6*sec, entry(key("GET /"), 2, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("b"), bucket(w0+1*sec, 8*sec, entry(key("GET /"), 4, 0)),
		bucket(w0+10*sec, 3*sec, entry(key("GET /"), 8, 0))), 0, UDP)
	out := r.Harvest(t0) // w0+10 s: the first window only
	if len(out) != 1 || len(out[0].Buckets) != 1 {
		t.Fatalf("harvest = %+v", out)
	}
	bk := out[0].Buckets[0]
	if bk.Start != w0 || bk.Duration != 10*sec || len(bk.Groups) != 1 || bk.Groups[0].Hits != 7 {
		t.Fatalf("bucket start %d dur %d groups %d, want %d, 10 s, one of 7 hits", bk.Start, bk.Duration, len(bk.Groups), w0)
	}
	r.Forwarded(out[0].Hits)
	if s := checkAccounting(t, r); s.SpansPending != 8 {
		t.Fatalf("pending %d, want 8 (the next window)", s.SpansPending)
	}
	if out := r.Harvest(t0.Add(9 * time.Second)); len(out) != 0 {
		t.Fatalf("window not ended yet, harvested %d", len(out))
	}
	out = harvestAll(t, r)
	if bk := out[0].Buckets[0]; bk.Start != w0+10*sec || bk.Duration != 3*sec || bk.Groups[0].Hits != 8 {
		t.Fatalf("second window bucket %+v", bk)
	}
}

// TestMergedBucketRunsEarliestToLatest: the merged bucket runs from the
// earliest start to the latest end of its window's buckets, not over the
// whole window (TestWindowMergesSplitBuckets' buckets fill it exactly).
func TestMergedBucketRunsEarliestToLatest(t *testing.T) {
	r := newTestRelay(Config{})
	mustAccept(t, r, datagram(1, header("a"), bucket(w0+2*sec, 3*sec, entry(key("GET /"), 1, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("b"), bucket(w0+3*sec, 4*sec, entry(key("GET /"), 2, 0))), 0, UDP)
	out := harvestAll(t, r)
	if len(out) != 1 || len(out[0].Buckets) != 1 {
		t.Fatalf("harvest = %+v", out)
	}
	if bk := out[0].Buckets[0]; bk.Start != w0+2*sec || bk.Duration != 5*sec || bk.Groups[0].Hits != 3 {
		t.Fatalf("bucket +%d s for %d s, %d hits; want +2 s for 5 s, 3 hits", (bk.Start-w0)/sec, bk.Duration/sec, bk.Groups[0].Hits)
	}
}

// TestFutureEndIsNotHeld: a bucket that starts now and ends an hour ahead
// (a hostile one; an SDK's whose clock is behind ends up to an interval
// ahead) is accepted and forwarded at the next round, in the window of the
// relay's clock: held until its end, its groups would count against
// -max-groups for the hour, pushing other senders' into the overflow.
func TestFutureEndIsNotHeld(t *testing.T) {
	clock := t0
	r := newTestRelay(Config{MaxGroups: 64, Now: func() time.Time { return clock }})
	var es []*aggregate.Entry
	for i := range 61 { // all below the bound less its reserve
		es = append(es, entry(key(fmt.Sprint("long", i)), 1, 0))
	}
	now := uint64(t0.UnixNano())
	mustAccept(t, r, datagram(1, header("a"), bucket(now, uint64(MaxBucketDuration), es...)), 0, UDP)
	clock = t0.Add(10 * time.Second)
	out := r.Harvest(clock)
	hits := uint64(0)
	for i := range out {
		hits += out[i].Hits
		r.Forwarded(out[i].Hits)
		r.Release(&out[i])
	}
	if s := checkAccounting(t, r); hits != 61 || s.Groups != 0 || s.SpansPending != 0 {
		t.Fatalf("the next round forwarded %d spans, holds %d groups, %d pending; want 61, 0, 0", hits, s.Groups, s.SpansPending)
	}
	// Every other sender's groups find room at once.
	mustAccept(t, r, datagram(1, header("b"), bucket(uint64(clock.UnixNano())-10*sec, 10*sec, entry(key("GET /"), 10, 0))), 0, UDP)
	if s := r.Stats(); s.FoldedSpans != 0 || s.Groups != 1 {
		t.Fatalf("after it: %d spans folded, %d groups; want 0, 1", s.FoldedSpans, s.Groups)
	}
}

// TestSpanlessBucketLeavesWindowAlone: a bucket that adds no span to a
// window (zero-hit groups, or none) leaves the merged bucket's times as
// they are: any sender of the identity could otherwise misdate every other
// sender's spans by up to MaxBucketDuration.
func TestSpanlessBucketLeavesWindowAlone(t *testing.T) {
	r := newTestRelay(Config{})
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(key("GET /"), 5, 0))), 0, UDP)
	early := w0 + 5*sec - 3540*sec // ends in w0's window, started 59 minutes before
	mustAccept(t, r, datagram(1, header("b"), bucket(early, 3540*sec, entry(key("z"), 0, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("c"), bucket(early, 3540*sec)), 0, UDP)
	out := harvestAll(t, r)
	if len(out) != 1 || len(out[0].Buckets) != 1 {
		t.Fatalf("harvest = %+v", out)
	}
	if bk := out[0].Buckets[0]; bk.Start != w0 || bk.Duration != 10*sec || bk.Groups[0].Hits != 5 {
		t.Fatalf("bucket %+d s for %d s, %d hits; want +0 s for 10 s, 5 hits", (int64(bk.Start)-int64(w0))/int64(sec), bk.Duration/sec, bk.Groups[0].Hits)
	}
}

// TestLongBucketMisdatesNoOne: a bucket that began before the window its
// end falls in (a sender at BucketInterval 20 s beside 10 s ones; a single
// span in a 59-minute bucket) starts its window's merged bucket no earlier
// than the window: the agent would file every sender's spans of it in the
// interval before, where it files a bucket older than its oldest open one.
func TestLongBucketMisdatesNoOne(t *testing.T) {
	for _, tc := range []struct {
		name            string
		start, duration uint64
	}{
		{"a 20 s bucket beside 10 s ones", w0 - 10*sec, 20 * sec},
		{"one span in a 59-minute bucket", w0 + 5*sec - 3540*sec, 3540 * sec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRelay(Config{})
			mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(key("GET /"), 5, 0))), 0, UDP)
			mustAccept(t, r, datagram(1, header("b"), bucket(tc.start, tc.duration, entry(key("GET /"), 1, 0))), 0, UDP)
			out := harvestAll(t, r)
			if len(out) != 1 || len(out[0].Buckets) != 1 {
				t.Fatalf("harvest = %+v", out)
			}
			if bk := out[0].Buckets[0]; bk.Start != w0 || bk.Duration != 10*sec || bk.Groups[0].Hits != 6 {
				t.Fatalf("bucket %+d s for %d s, %d hits; want +0 s for 10 s, 6 hits",
					(int64(bk.Start)-int64(w0))/int64(sec), bk.Duration/sec, bk.Groups[0].Hits)
			}
		})
	}
}

func TestPeerTagsAreASet(t *testing.T) {
	r := newTestRelay(Config{})
	k1, k2 := key("GET /"), key("GET /")
	k1.PeerTags = []string{"peer.service:db", "db.instance:a"}
	k2.PeerTags = []string{"db.instance:a", "peer.service:db", "db.instance:a"}
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(k1, 1, 0), entry(k2, 2, 0))), 0, UDP)
	out := harvestAll(t, r)
	gs := out[0].Buckets[0].Groups
	if len(gs) != 1 || gs[0].Hits != 3 || !slices.Equal(gs[0].PeerTags, []string{"db.instance:a", "peer.service:db"}) {
		t.Fatalf("groups %+v", gs)
	}
}

// The agent (v0.85.4) merges a bucket's duplicate groups by a key without
// Type, DBType and SpanDerivedPrimaryTags: groups differing only in those
// must reach it in separate buckets.
func TestTypeOnlyDifferenceSplitsBuckets(t *testing.T) {
	r := newTestRelay(Config{})
	web, http, db := key("GET /"), key("GET /"), key("GET /")
	web.Type, http.Type, db.Type = "web", "http", "db"
	other := key("other")
	other.Name = "other.op" // another operation: no twin of the others
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec,
		entry(web, 1, 0), entry(http, 2, 0), entry(other, 4, 0), entry(db, 8, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(http, 16, 0))), 0, UDP)
	out := harvestAll(t, r)
	bks := out[0].Buckets
	if len(bks) != 3 {
		t.Fatalf("%d buckets, want 3", len(bks))
	}
	var got []string
	for i, bk := range bks {
		if bk.Start != w0 || bk.Duration != 10*sec {
			t.Fatalf("bucket %d+%d, want all at %d+10 s", bk.Start, bk.Duration, w0)
		}
		for _, g := range bk.Groups {
			got = append(got, fmt.Sprintf("%d:%s/%s=%d", i, g.Resource, g.Type, g.Hits))
		}
	}
	want := []string{"0:GET //web=1", "0:other/=4", "1:GET //http=18", "2:GET //db=8"}
	if !slices.Equal(got, want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
	if out[0].Hits != 31 {
		t.Fatalf("hits %d, want 31", out[0].Hits)
	}
}

// TestJoinedTagTwinsSplitBuckets: the agent keys a group's peer tags and
// additional metric tags by a hash of them joined with 0 bytes
// (tagsFnvHash), so lists that join alike (a NUL inside a tag) are twins to
// it: of types web and http, they must reach it in separate buckets.
func TestJoinedTagTwinsSplitBuckets(t *testing.T) {
	for _, field := range []string{"PeerTags", "AdditionalMetricTags"} {
		r := newTestRelay(Config{})
		for i, tags := range [][]string{{"a:1", "b:2"}, {"a:1\x00b:2"}} {
			var g writer.Group
			g.Service, g.Name, g.Resource, g.Type, g.Hits = "web", "op", "r", []string{"web", "http"}[i], uint64(1+i)
			if field == "PeerTags" {
				g.PeerTags = tags
			} else {
				g.AdditionalMetricTags = tags
			}
			pl := writer.Payload{Header: header(strconv.Itoa(i)),
				Buckets: []writer.DecodedBucket{{Start: w0, Duration: 10 * sec, Groups: []writer.Group{g}}}}
			mustAccept(t, r, pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})), 0, UDP)
		}
		out := harvestAll(t, r)
		var got []string
		for i, bk := range out[0].Buckets {
			for _, g := range bk.Groups {
				got = append(got, fmt.Sprintf("%d:%s=%d", i, g.Type, g.Hits))
			}
		}
		if want := []string{"0:web=1", "1:http=2"}; !slices.Equal(got, want) {
			t.Errorf("%s: buckets %v, want %v (the agent merges them)", field, got, want)
		}
	}
}

// TestAdditionalMetricTagsKeepDuplicates: peer tags are a set, but the
// agent keys additional metric tags by the sorted list as it is
// (tagsFnvHash), so a list with a tag twice is another group than the
// list with it once: the relay keeps them apart and sends each intact.
func TestAdditionalMetricTagsKeepDuplicates(t *testing.T) {
	r := newTestRelay(Config{})
	for i, tags := range [][]string{{"b:2", "a:1", "a:1"}, {"a:1", "b:2"}, {"a:1", "a:1", "b:2"}} {
		var g writer.Group
		g.Service, g.Name, g.Resource, g.Hits = "web", "op", "r", uint64(1+i)
		g.AdditionalMetricTags = tags
		pl := writer.Payload{Header: header(strconv.Itoa(i)),
			Buckets: []writer.DecodedBucket{{Start: w0, Duration: 10 * sec, Groups: []writer.Group{g}}}}
		mustAccept(t, r, pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})), 0, UDP)
	}
	got := map[string]uint64{}
	for _, bk := range harvestAll(t, r)[0].Buckets {
		for _, g := range bk.Groups {
			got[strings.Join(g.AdditionalMetricTags, ",")] += g.Hits
		}
	}
	if want := map[string]uint64{"a:1,a:1,b:2": 4, "a:1,b:2": 2}; !maps.Equal(got, want) {
		t.Fatalf("groups by additional metric tags %v, want %v", got, want)
	}
}

// TestEmptyResourceTwinSplitsBuckets: the agent gives a group without a
// resource its name before it merges duplicates (normalizeStatsGroup), so
// {op, ""} and {op, op} of different types are twins to it and must reach
// it in separate buckets; held apart, not merged, within the relay.
func TestEmptyResourceTwinSplitsBuckets(t *testing.T) {
	r := newTestRelay(Config{})
	bare, named, sameType := key("op"), key("op"), key("op")
	bare.Resource, named.Resource, sameType.Resource = "", "op", ""
	bare.Name, named.Name, sameType.Name = "op", "op", "op"
	bare.Type, named.Type, sameType.Type = "web", "http", "web"
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec,
		entry(bare, 1, 0), entry(named, 2, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(sameType, 4, 0))), 0, UDP)
	out := harvestAll(t, r)
	var got []string
	for i, bk := range out[0].Buckets {
		for _, g := range bk.Groups {
			got = append(got, fmt.Sprintf("%d:%s/%s=%d", i, g.Resource, g.Type, g.Hits))
		}
	}
	if want := []string{"0:/web=5", "1:op/http=2"}; !slices.Equal(got, want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
}

// TestNormalizedLabelTwinsSplitBuckets: the agent normalizes Service and
// Name (normalizeStatsGroup) before it merges duplicates, so groups from
// two senders whose labels differ only in what the normalizer takes out are
// twins to it: of types web and http, they must reach it in separate
// buckets, each with its own counts and raw labels.
func TestNormalizedLabelTwinsSplitBuckets(t *testing.T) {
	for _, tc := range []struct{ service, name, resource, service2, name2, resource2 string }{
		{"Web", "op", "r", "web", "op", "r"},               // service lowercased
		{"my service", "op", "r", "my_service", "op", "r"}, // invalid char → '_'
		{"web", "op!", "r", "web", "op", "r"},              // trailing '_' trimmed from the name
		{"web", "1op", "r", "web", "op", "r"},              // leading non-letters skipped
		{"web", "op!", "", "web", "op", "op"},              // empty resource: the normalized name
	} {
		r := newTestRelay(Config{})
		web, http := key(tc.resource), key(tc.resource2)
		web.Service, web.Name, web.Type = tc.service, tc.name, "web"
		http.Service, http.Name, http.Type = tc.service2, tc.name2, "http"
		mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(web, 1, 0))), 0, UDP)
		mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(http, 2, 0))), 0, UDP)
		out := harvestAll(t, r)
		var got []string
		for i, bk := range out[0].Buckets {
			if bk.Start != w0 || bk.Duration != 10*sec {
				t.Fatalf("bucket %d+%d, want all at %d+10 s", bk.Start, bk.Duration, w0)
			}
			for _, g := range bk.Groups {
				got = append(got, fmt.Sprintf("%d:%s/%s/%s/%s=%d", i, g.Service, g.Name, g.Resource, g.Type, g.Hits))
			}
		}
		want := []string{
			fmt.Sprintf("0:%s/%s/%s/web=1", tc.service, tc.name, tc.resource),
			fmt.Sprintf("1:%s/%s/%s/http=2", tc.service2, tc.name2, tc.resource2),
		}
		if !slices.Equal(got, want) {
			t.Errorf("buckets %q, want %q (the agent merges them)", got, want)
		}
	}
}

// TestObfuscatedResourceTwinsSplitBuckets: the agent obfuscates the
// resource of an sql or cassandra group and quantizes that of a redis or
// valkey group before it merges duplicates, so groups of such a Type and
// of another whose resources it makes equal are twins to it, whatever
// their folds: they must reach it in separate buckets. Groups of one Type
// still share a bucket, however many resources they have.
func TestObfuscatedResourceTwinsSplitBuckets(t *testing.T) {
	// The agent's obfuscator (v0.85.4) makes each pair's resources equal.
	for _, tc := range []struct{ typ, resource, typ2, resource2 string }{
		{"sql", "SELECT * FROM t WHERE id = 42", "web", "SELECT * FROM t WHERE id = ?"},
		{"sql", "SELECT 1", "cassandra", "SELECT 2"},
		{"redis", "SET k v", "cache", "SET"},
		{"valkey", "GET a", "sql", "GET"},
	} {
		r := newTestRelay(Config{})
		a, b := key(tc.resource), key(tc.resource2)
		a.Type, b.Type = tc.typ, tc.typ2
		mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(a, 1, 0))), 0, UDP)
		mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(b, 2, 0))), 0, UDP)
		if bks := harvestAll(t, r)[0].Buckets; len(bks) != 2 {
			t.Errorf("%s %q and %s %q: %d buckets, want 2 (the agent merges them)", tc.typ, tc.resource, tc.typ2, tc.resource2, len(bks))
		}
	}
	r := newTestRelay(Config{})
	var groups []*aggregate.Entry
	for i := range 100 {
		sql, web := key(fmt.Sprintf("SELECT %d FROM t%d", i, i)), key(fmt.Sprintf("GET /%d", i))
		sql.Type, web.Type = "sql", "web"
		groups = append(groups, entry(sql, 1, 0), entry(web, 1, 0))
	}
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, groups...)), 0, UDP)
	n, bks := 0, harvestAll(t, r)[0].Buckets
	for _, bk := range bks {
		n += len(bk.Groups)
	}
	if len(bks) > 2 || n != len(groups) {
		t.Fatalf("%d buckets of %d groups; want at most 2 (one a Type) of %d", len(bks), n, len(groups))
	}
}

// TestRewrittenLabelTwinsSplitBuckets: the operator's replace rules in the
// agent (DD_APM_REPLACE_TAGS on resource.name, http.status_code or "*")
// rewrite Resource and HTTPStatusCode before it merges duplicates, and a
// relay cannot read them: groups of two Types from two senders that differ
// in those alone reach it in separate buckets, each with its own counts.
func TestRewrittenLabelTwinsSplitBuckets(t *testing.T) {
	r := newTestRelay(Config{})
	web, http := key("GET /u/1"), key("GET /u/2")
	web.Type, web.HTTPStatusCode = "web", 200
	http.Type, http.HTTPStatusCode = "http", 201
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(web, 1, 0))), 0, UDP)
	mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(http, 2, 0))), 0, UDP)
	var got []string
	for i, bk := range harvestAll(t, r)[0].Buckets {
		for _, g := range bk.Groups {
			got = append(got, fmt.Sprintf("%d:%s/%d/%s=%d", i, g.Resource, g.HTTPStatusCode, g.Type, g.Hits))
		}
	}
	if want := []string{"0:GET /u/1/200/web=1", "1:GET /u/2/201/http=2"}; !slices.Equal(got, want) {
		t.Fatalf("buckets %q, want %q (a rule may make them one group to the agent)", got, want)
	}
}

// TestOneTypeGroupsShareBucket: groups of one Type never need separate
// buckets, whatever the agent merges of them, so groups whose labels fold
// alike (resources that differ only outside ASCII letters and digits, in
// case or punctuation) are forwarded in one bucket when their Type is the
// same.
func TestOneTypeGroupsShareBucket(t *testing.T) {
	r := newTestRelay(Config{})
	var groups []*aggregate.Entry
	for i, res := range []string{"запрос", "получить", "GET /a", "get /a", "GET /a/", "GET-/a", "é", "É"} {
		k := key(res)
		k.Type = "web"
		groups = append(groups, entry(k, uint64(i+1), 0))
	}
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, groups...)), 0, UDP)
	if bks := harvestAll(t, r)[0].Buckets; len(bks) != 1 || len(bks[0].Groups) != len(groups) {
		t.Fatalf("%d groups of one Type forwarded in %d buckets, want 1", len(groups), len(bks))
	}
}

// TestAgentDuplicateKeySplitsBuckets: groups that differ in Type and also
// in DBType or SpanDerivedPrimaryTags (none of which the agent's duplicate
// key holds) are split across buckets too.
func TestAgentDuplicateKeySplitsBuckets(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(g *writer.Group)
	}{
		{"DBType", func(g *writer.Group) { g.DBType = "postgresql" }},
		{"SpanDerivedPrimaryTags", func(g *writer.Group) { g.SpanDerivedPrimaryTags = []string{"region:eu"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRelay(Config{})
			web := writer.Group{Entry: *entry(key("GET /"), 1, 0)}
			sql := writer.Group{Entry: *entry(key("GET /"), 2, 0)}
			web.Type, sql.Type = "web", "sql"
			tc.set(&sql)
			pl := writer.Payload{Header: header("a"), Buckets: []writer.DecodedBucket{
				{Start: w0, Duration: 10 * sec, Groups: []writer.Group{web, sql}}}}
			mustAccept(t, r, pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})), 0, UDP)
			out := harvestAll(t, r)
			if bks := out[0].Buckets; len(bks) != 2 || len(bks[0].Groups) != 1 || len(bks[1].Groups) != 1 {
				t.Fatalf("%d buckets %+v; want the two groups in two buckets of the same start", len(bks), bks)
			}
		})
	}
}

func TestMaxGroupsFoldsIntoOverflow(t *testing.T) {
	// MaxGroups 5: 3 label groups, 2 kept for overflow groups.
	r := newTestRelay(Config{MaxGroups: 5})
	var es []*aggregate.Entry
	for i := range 5 {
		es = append(es, entry(key(string(rune('a'+i))), uint64(i+1), 0, float64(i+1)))
	}
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, es...)), 0, UDP)
	s := checkAccounting(t, r)
	if s.Groups != 4 || s.FoldedSpans != 9 || s.OverflowGroups != 1 || s.SpansPending != 15 {
		t.Fatalf("groups %d folded %d overflow %d pending %d; want 4, 9, 1, 15", s.Groups, s.FoldedSpans, s.OverflowGroups, s.SpansPending)
	}
	// A known group still merges; a new identity at the bound folds into
	// the last overflow group the reserve has room for, and the next has
	// no room even for one: dropped, counted.
	mustAccept(t, r, datagram(2, header("a"), bucket(w0, 10*sec, entry(key("a"), 10, 0))), 0, UDP)
	other := header("b")
	other.Service = "api"
	mustAccept(t, r, datagram(1, other, bucket(w0, 10*sec, entry(key("x"), 100, 0))), 0, UDP)
	third := header("c")
	third.Service = "db"
	mustAccept(t, r, datagram(1, third, bucket(w0, 10*sec, entry(key("y"), 1000, 0))), 0, UDP)
	s = checkAccounting(t, r)
	if s.Groups != 5 || s.FoldedSpans != 109 || s.SpansDropped[DropMaxGroups] != 1000 || s.SpansPending != 125 {
		t.Fatalf("groups %d folded %d dropped %v pending %d; want 5, 109, 1000 max_groups, 125",
			s.Groups, s.FoldedSpans, s.SpansDropped, s.SpansPending)
	}
	out := harvestAll(t, r)
	if len(out) != 2 {
		t.Fatalf("%d batches", len(out))
	}
	if out[0].Service != "web" {
		out[0], out[1] = out[1], out[0]
	}
	gs := out[0].Buckets[0].Groups
	ov := gs[len(gs)-1]
	if len(gs) != 4 || ov.Resource != aggregate.BlockedValue || ov.Service != aggregate.BlockedValue ||
		ov.Hits != 9 || ov.Ok.Count() != 2 || gs[0].Hits != 11 {
		t.Fatalf("groups %+v", gs)
	}
}

func TestZeroHitGroupsAreNotHeld(t *testing.T) {
	r := newTestRelay(Config{})
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(key("x"), 0, 0))), 0, UDP)
	if s := checkAccounting(t, r); s.Groups != 0 || s.SpansReceived != 0 {
		t.Fatalf("stats %+v", s)
	}
	if out := r.Harvest(t0.Add(time.Hour)); len(out) != 0 {
		t.Fatalf("harvested %d batches of nothing", len(out))
	}
}

// Every Header field but RuntimeID and Sequence separates identities, and
// every label field separates groups: a field added to writer's types and
// not to the keys fails here.
func TestKeysCoverEveryField(t *testing.T) {
	h := hasher{seed: 1}
	base := header("rt")
	base.Tags = asSet(base.Tags)
	forEachField(t, &base, func(name string, mod *writer.Header) {
		same := sameIdentity(&base, mod) && h.identity(&base) == h.identity(mod)
		if want := name == "RuntimeID" || name == "Sequence"; same != want {
			t.Errorf("Header.%s: same identity = %v, want %v", name, same, want)
		}
	})
	g := writer.Group{Entry: *entry(key("r"), 1, 0)}
	forEachField(t, &g, func(name string, mod *writer.Group) {
		f1, t1 := h.group(&g), h.typeless(&g)
		f2, t2 := h.group(mod), h.typeless(mod)
		values := name == "Hits" || name == "Errors" || name == "TopLevelHits" || name == "Duration" || name == "Ok" || name == "Err" || name == "Wire"
		if same := sameGroup(&g, mod) && f1 == f2; same != values {
			t.Errorf("Group.%s: same group = %v, want %v", name, same, values)
		}
		agentMerges := name == "Type" || name == "DBType" || name == "SpanDerivedPrimaryTags" // left out of its duplicate key
		rewritten := name == "Resource" || name == "HTTPStatusCode"                           // the agent's rules rewrite them first
		if typeless := t1.key == t2.key; typeless != (values || agentMerges || rewritten) {
			t.Errorf("Group.%s: same typeless hash = %v", name, typeless)
		}
	})
}

// TestMaxHeldBytesFoldsIntoOverflow: groups of long labels fill the byte
// bound long before the group bound; past it new keys fold into the
// overflow group, nothing is lost, what is held stays within the bound, and
// a harvest gives every byte back.
func TestMaxHeldBytesFoldsIntoOverflow(t *testing.T) {
	const maxBytes = 1 << 20
	r := newTestRelay(Config{MaxHeldBytes: maxBytes})
	long := strings.Repeat("x", 4000)
	const n = 400 // 400 × 4 KB of resources: 1.6 MB of labels
	for i := range n {
		e := entry(key(fmt.Sprintf("%s/%d", long, i)), 2, 1, 1, 2)
		mustAccept(t, r, datagram(uint64(i+1), header("a"), bucket(w0, 10*sec, e)), 0, UDP)
	}
	s := checkAccounting(t, r)
	if s.HeldBytes > maxBytes || s.SpansPending != 2*n || s.OverflowGroups != 1 || s.FoldedSpans == 0 {
		t.Fatalf("held %d bytes (bound %d), pending %d, overflow groups %d, folded %d",
			s.HeldBytes, maxBytes, s.SpansPending, s.OverflowGroups, s.FoldedSpans)
	}
	labelled := uint64(s.Groups - 1)
	if labelled*4000 > maxBytes-maxBytes/16 || labelled < 200 || s.FoldedSpans != 2*(n-labelled) {
		t.Fatalf("%d label groups, %d spans folded", labelled, s.FoldedSpans)
	}
	// A known key still merges while its sketch has room.
	mustAccept(t, r, datagram(n+1, header("a"), bucket(w0, 10*sec, entry(key(long+"/0"), 5, 0, 1))), 0, UDP)
	if s2 := checkAccounting(t, r); s2.FoldedSpans != s.FoldedSpans || s2.Groups != s.Groups {
		t.Fatalf("a known key folded: %d → %d folded", s.FoldedSpans, s2.FoldedSpans)
	}
	out := harvestAll(t, r)
	gs := out[0].Buckets[0].Groups
	if ov := gs[len(gs)-1]; ov.Resource != aggregate.BlockedValue || ov.Hits != s.FoldedSpans || ov.Ok.Count() != s.FoldedSpans {
		t.Fatalf("overflow group %+v", ov)
	}
	if gs[0].Hits != 7 || gs[0].Ok.Count() != 3 {
		t.Fatalf("first group %d hits, %d in its sketch", gs[0].Hits, gs[0].Ok.Count())
	}
	if s := r.Stats(); s.HeldBytes != 0 {
		t.Fatalf("%d bytes held after the harvest", s.HeldBytes)
	}
}

// TestMaxHeldBytesSketchGrowth: past the bound a held group whose sketch
// would grow folds the span into the overflow group instead; one whose
// sketch covers it merges in place.
func TestMaxHeldBytesSketchGrowth(t *testing.T) {
	const maxBytes = 1 << 20
	r := newTestRelay(Config{MaxHeldBytes: maxBytes})
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(key("narrow"), 1, 0, 10))), 0, UDP)
	long := strings.Repeat("y", 8000)
	for i := 0; r.Stats().HeldBytes <= maxBytes-maxBytes/16; i++ { // fill to the bound
		mustAccept(t, r, datagram(uint64(i+2), header("a"), bucket(w0, 10*sec, entry(key(fmt.Sprint(long, i)), 1, 0))), 0, UDP)
	}
	before := checkAccounting(t, r)
	// 10 ms again: the narrow group's one-bin store covers it.
	mustAccept(t, r, datagram(1000, header("a"), bucket(w0, 10*sec, entry(key("narrow"), 1, 0, 10))), 0, UDP)
	// 1 µs to 100 s: its store would grow by hundreds of bins.
	mustAccept(t, r, datagram(1001, header("a"), bucket(w0, 10*sec, entry(key("narrow"), 2, 0, 1e-3, 1e5))), 0, UDP)
	s := checkAccounting(t, r)
	if s.FoldedSpans != before.FoldedSpans+2 || s.HeldBytes > maxBytes {
		t.Fatalf("folded %d → %d, held %d", before.FoldedSpans, s.FoldedSpans, s.HeldBytes)
	}
	for _, g := range harvestAll(t, r)[0].Buckets[0].Groups {
		switch g.Resource {
		case "narrow":
			if g.Hits != 2 || g.Ok.Count() != 2 {
				t.Fatalf("narrow group: %d hits, %d in its sketch; want 2, 2", g.Hits, g.Ok.Count())
			}
		case aggregate.BlockedValue:
			if g.Hits != s.FoldedSpans || g.Ok.Count() != 2 {
				t.Fatalf("overflow group: %d hits, %d in its sketch", g.Hits, g.Ok.Count())
			}
		}
	}
}

// TestSenderOverflowIsNotFolded: past the byte bound, a sender's own
// overflow-keyed group that would widen the relay's overflow group merges
// into it without counting as folded by the relay, however near the bound
// the held bytes are: its spans reach the same group either way.
// The sender's group comes after the relay made its overflow group
// (first=false), or before, making it (first=true).
func TestSenderOverflowIsNotFolded(t *testing.T) {
	for _, first := range []bool{false, true} {
		t.Run(fmt.Sprintf("first=%v", first), func(t *testing.T) {
			const maxBytes = 1 << 20
			r := newTestRelay(Config{MaxHeldBytes: maxBytes})
			seq := uint64(0)
			send := func(e *aggregate.Entry) {
				seq++
				mustAccept(t, r, datagram(seq, header("a"), bucket(w0, 10*sec, e)), 0, UDP)
			}
			var sent uint64 // hits of the sender's own overflow entries
			if first {
				send(entry(overflowGroup.Key, 1, 0, 10))
				sent++
			}
			// Fill until a long key folds, then short ones until one
			// folds too: within a short group's cost of the bound.
			long := strings.Repeat("z", 8000)
			for i := 0; r.Stats().FoldedSpans == 0; i++ {
				send(entry(key(fmt.Sprint(long, i)), 1, 0, 10))
			}
			for i, f := 0, r.Stats().FoldedSpans; r.Stats().FoldedSpans == f; i++ {
				send(entry(key(fmt.Sprint("s", i)), 1, 0, 10))
			}
			before := checkAccounting(t, r)
			// The SDK's overflow entry, its latencies 1 µs to 100 s:
			// hundreds of bins wider than the group it meets holds.
			send(entry(overflowGroup.Key, 3, 0, 1e-3, 1, 1e5))
			sent += 3
			s := checkAccounting(t, r)
			if s.FoldedSpans != before.FoldedSpans || s.SpansPending != before.SpansPending+3 || s.HeldBytes > maxBytes {
				t.Fatalf("folded %d → %d, pending %d → %d, held %d; want folded unchanged, +3, at most %d",
					before.FoldedSpans, s.FoldedSpans, before.SpansPending, s.SpansPending, s.HeldBytes, maxBytes)
			}
			var ovs []writer.Group // one group of the overflow key, wherever it is
			for _, g := range harvestAll(t, r)[0].Buckets[0].Groups {
				if g.Resource == aggregate.BlockedValue {
					ovs = append(ovs, g)
				}
			}
			if len(ovs) != 1 || ovs[0].Hits != before.FoldedSpans+sent || ovs[0].Ok.Count() != before.FoldedSpans+sent {
				t.Fatalf("%d overflow groups; want one of %d hits and as many in its sketch", len(ovs), before.FoldedSpans+sent)
			}
		})
	}
}

// TestSenderOverflowGrowthBounded: a sender's own overflow-keyed group held
// as a label group (the SDK's entry arrived before the relay folded
// anything) grows within MaxHeldBytes like any group. Each of many
// identities first holds a narrow one, then receives one with an ok and an
// error sketch a bin per value over nine decades; unchecked, their growth
// took the held bytes to 8× the bound. Past it, those spans are dropped as
// max_bytes, counted.
func TestSenderOverflowGrowthBounded(t *testing.T) {
	const maxBytes = 256 << 10
	r := newTestRelay(Config{MaxHeldBytes: maxBytes})
	var durs []float64
	for v := 1e-6; v < 1e3; v *= 1.03 {
		durs = append(durs, v)
	}
	wide := entry(overflowGroup.Key, uint64(2*len(durs)), uint64(len(durs)), durs...)
	wide.Err = new(aggregate.Sketch)
	for _, d := range durs {
		wide.Err.Add(d * 1e6)
	}
	ident := func(i int) writer.Header {
		h := header(fmt.Sprint("rt", i))
		h.Env = fmt.Sprint("env", i)
		return h
	}
	n := 0 // identities holding a narrow overflow-keyed group
	for ; ; n++ {
		before := r.Stats().Groups
		mustAccept(t, r, datagram(1, ident(n), bucket(w0, 10*sec, entry(overflowGroup.Key, 1, 0, 10))), 0, UDP)
		if r.Stats().Groups == before {
			break
		}
	}
	if n < 20 {
		t.Fatalf("only %d identities held a group; the test needs many", n)
	}
	for i := range n {
		mustAccept(t, r, datagram(2, ident(i), bucket(w0, 10*sec, wide)), 0, UDP)
	}
	s := checkAccounting(t, r)
	if s.HeldBytes > maxBytes || s.SpansDropped["max_bytes"] == 0 {
		t.Fatalf("%d identities: held %d bytes, %d spans dropped as max_bytes; want at most %d held and some dropped",
			n, s.HeldBytes, s.SpansDropped["max_bytes"], maxBytes)
	}
}

// TestHeldMemoryBoundedByBytes: a flood of datagrams each carrying a new
// group of a 20 KB resource, a new identity of a 20 KB version and a 20 KB
// RuntimeID (3 000 of them: 180 MB if held) keeps the relay's heap within MaxHeldBytes (16 MiB)
// plus 16 MiB of slack for the decoders and the runtime.
func TestHeldMemoryBoundedByBytes(t *testing.T) {
	const maxBytes = 16 << 20
	r := newTestRelay(Config{MaxHeldBytes: maxBytes})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	big := strings.Repeat("z", 20_000)
	for i := range 3000 {
		h := header(fmt.Sprint(i, big))
		h.Version = fmt.Sprint(i, big)
		e := entry(key(fmt.Sprint(i, big)), 1, 0, 1)
		mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, e)), 0, UDP)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	s := checkAccounting(t, r)
	// Each new identity needs room for itself and a group: past the bound
	// there is none, even for an overflow group, and its span is dropped.
	if s.HeldBytes > maxBytes || s.SpansPending+s.SpansDropped[DropMaxBytes] != 3000 || s.SpansPending < 300 {
		t.Fatalf("held %d bytes (bound %d), pending %d, dropped %v", s.HeldBytes, maxBytes, s.SpansPending, s.SpansDropped)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("held %d bytes (bound %d); heap grew by %d", s.HeldBytes, maxBytes, grew)
	if grew > 2*maxBytes {
		t.Fatalf("heap grew by %d MiB, bound %d MiB", grew>>20, 2*maxBytes>>20)
	}
	if s.SpansDropped[DropMaxBytes] == 0 || s.Senders != 3000 {
		t.Fatalf("dropped %v, senders %d: the flood did not reach the bound", s.SpansDropped, s.Senders)
	}
}

// TestHeldBytesCountSmallWindows: a flood of new identities of one or five
// one-letter groups each holds more in its maps and in the slack of its
// windows' arrays than in its strings (they held 1.25× and 1.55× what
// MaxHeldBytes counted); the heap it takes stays within MaxHeldBytes and
// an eighth.
func TestHeldBytesCountSmallWindows(t *testing.T) {
	const maxBytes = 8 << 20
	for _, groups := range []int{1, 5} {
		r := newTestRelay(Config{MaxHeldBytes: maxBytes, MaxGroups: 1 << 30})
		before := heapAlloc()
		for i := range 40000 / groups {
			var es []*aggregate.Entry
			for j := range groups {
				es = append(es, &aggregate.Entry{Key: aggregate.Key{Resource: strconv.Itoa(j)}, Hits: 1})
			}
			mustAccept(t, r, datagram(1, writer.Header{Hostname: strconv.Itoa(i)}, bucket(w0, 10*sec, es...)), 0, UDP)
		}
		grew := int64(heapAlloc()) - int64(before)
		s := checkAccounting(t, r)
		t.Logf("%d per identity: %d groups, %d bytes counted (bound %d); heap grew by %d (%.2f× the bound)",
			groups, s.Groups, s.HeldBytes, maxBytes, grew, float64(grew)/maxBytes)
		if s.SpansDropped[DropMaxBytes] == 0 {
			t.Fatalf("%d per identity: dropped %v: the flood did not reach the bound", groups, s.SpansDropped)
		}
		if grew > maxBytes+maxBytes/8 {
			t.Errorf("%d per identity: heap grew by %d KiB, bound %d KiB (MaxHeldBytes and an eighth)",
				groups, grew>>10, (maxBytes+maxBytes/8)>>10)
		}
		runtime.KeepAlive(r)
	}
}

// TestNewGroupSketchesFitTheirValues: the decoder reuses the sketches of
// groups merged into held ones, stores and all; a new group decoded into
// the store of a wide sketch holds no more than its own values need.
func TestNewGroupSketchesFitTheirValues(t *testing.T) {
	r := newTestRelay(Config{})
	var wide []float64 // 1 µs .. 100 s: about 900 bins
	for v := 1e-3; v < 1e5; v *= 1.5 {
		wide = append(wide, v)
	}
	// The second merges into the first's group: its decoded sketch goes
	// back to the decoder as a spare with a store of ~900 bins.
	for seq := uint64(1); seq <= 2; seq++ {
		mustAccept(t, r, datagram(seq, header("a"), bucket(w0, 10*sec, entry(key("wide"), uint64(len(wide)), 0, wide...))), 0, UDP)
	}
	before := r.Stats().HeldBytes
	mustAccept(t, r, datagram(3, header("a"), bucket(w0, 10*sec, entry(key("narrow"), 2, 0, 10, 11))), 0, UDP)
	s := checkAccounting(t, r)
	if grew := s.HeldBytes - before; grew > 1024 {
		t.Fatalf("a group of two close values holds %d bytes", grew)
	}
	for _, g := range harvestAll(t, r)[0].Buckets[0].Groups {
		if want := map[string]uint64{"wide": 2 * uint64(len(wide)), "narrow": 2}[g.Resource]; g.Ok.Count() != want {
			t.Errorf("%s: %d values, want %d", g.Resource, g.Ok.Count(), want)
		}
	}
}

// TestHeldBytesOfTypicalGroups: what a group of a tracer's labels holds,
// by how many decades its 1 000 latencies span (the figures in
// DefaultMaxHeldBytes's doc), and that DefaultMaxGroups such groups of up
// to four decades fit DefaultMaxHeldBytes.
func TestHeldBytesOfTypicalGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		decades  float64
		min, max int // bytes per group
	}{{1, 1300, 2300}, {3, 3100, 4100}, {4, 4100, 5200}, {5, 5100, 6300}, {6, 5900, 7200}} {
		r := newTestRelay(Config{})
		const groups = 200
		for i := range groups {
			e := entry(key(fmt.Sprint("GET /api/v1/items/", i)), 1020, 20)
			e.Ok, e.Err = new(aggregate.Sketch), new(aggregate.Sketch)
			for j := range 1020 {
				v := 1e6 * math.Pow(10, tc.decades*rng.Float64()) // from 1 ms
				if j < 20 {
					e.Err.Add(v)
				} else {
					e.Ok.Add(v)
				}
			}
			mustAccept(t, r, datagram(uint64(i+1), header("rt"), bucket(w0, 10*sec, e)), 0, UDP)
		}
		per := r.Stats().HeldBytes / groups
		t.Logf("%v decades: %d bytes per group", tc.decades, per)
		if per < tc.min || per > tc.max {
			t.Errorf("%v decades: %d bytes per group, want %d..%d", tc.decades, per, tc.min, tc.max)
		}
		// New groups stop at the limit less its reserve, not at the limit.
		if room := DefaultMaxHeldBytes - bytesReserve(DefaultMaxHeldBytes); tc.decades <= 4 && per*DefaultMaxGroups > room {
			t.Errorf("%v decades: %d groups of %d bytes exceed the %d bytes DefaultMaxHeldBytes leaves new groups", tc.decades, DefaultMaxGroups, per, room)
		}
	}
}

// TestBoundariesEndWindows: the forwarder's boundary after t is the end of
// the merge window holding t, for intervals that divide a day and for ones
// that do not (time.Truncate aligns on Go's zero time, 3 s off the epoch
// modulo 7 s, which split an SDK's bucket across two forwards).
func TestBoundariesEndWindows(t *testing.T) {
	at := time.Unix(1_800_000_000, 123_456_789)
	for _, iv := range []time.Duration{time.Second, 7 * time.Second, 10 * time.Second, 11 * time.Second, 70 * time.Second, time.Hour} {
		for _, t0 := range []time.Time{at, at.Add(iv / 2), at.Add(-time.Nanosecond)} {
			ts := uint64(t0.UnixNano())
			want := windowOf(ts, uint64(iv)) + uint64(iv)
			if got := uint64(boundaryAfter(t0, iv).UnixNano()); got != want {
				t.Errorf("interval %v at %v: boundary %d, want the window's end %d (off by %v)", iv, t0, got, want, time.Duration(int64(got-want)))
			}
			if want%uint64(iv) != 0 {
				t.Errorf("interval %v: window end %d is not on the epoch's alignment", iv, want)
			}
		}
	}
}

// TestLateWindowIsCounted: a bucket of a window that a round has already
// forwarded (its sender's report came after the grace) is merged afresh,
// counted in LateSpans, and forwarded at the next round in a bucket of its
// own start; a bucket of a window not yet forwarded is not late.
func TestLateWindowIsCounted(t *testing.T) {
	r := newTestRelay(Config{Now: func() time.Time { return t0.Add(15 * time.Second) }})
	mustAccept(t, r, datagram(1, header("rt"), bucket(w0, 10*sec, entry(key("a"), 5, 0))), 0, UDP)
	first := r.Harvest(t0) // the round of the boundary t0 forwards [w0, t0)
	for _, b := range first {
		r.Forwarded(b.Hits)
	}
	if len(first) != 1 || first[0].Hits != 5 || r.Stats().LateSpans != 0 {
		t.Fatalf("first round: %d batches, late %d; want one of 5 spans, none late", len(first), r.Stats().LateSpans)
	}
	mustAccept(t, r, datagram(2, header("rt"),
		bucket(w0, 10*sec, entry(key("a"), 3, 0)),        // its window forwarded: late
		bucket(w0+10*sec, 5*sec, entry(key("a"), 4, 0))), // the next window: on time
		0, UDP)
	if got := r.Stats().LateSpans; got != 3 {
		t.Fatalf("LateSpans %d, want the 3 spans of the forwarded window", got)
	}
	out := harvestAll(t, r)
	starts := map[uint64]uint64{}
	for _, b := range out {
		for _, bk := range b.Buckets {
			for _, g := range bk.Groups {
				starts[bk.Start] += g.Hits
			}
		}
	}
	if len(starts) != 2 || starts[w0] != 3 || starts[w0+10*sec] != 4 {
		t.Fatalf("next round forwarded %v by bucket start, want 3 at w0 and 4 at w0+10s", starts)
	}
}

// TestLongBucketIsNotLate: a bucket longer than the interval, or one that
// crosses a window's boundary (an SDK's BucketInterval that the -interval
// is no multiple of), is merged by the window its end falls in: reported
// within the grace after its end, it is not late, and the round of that
// window forwards it whole. Windows of its start, forwarded before the
// bucket had even closed, made every such span late however long -grace.
func TestLongBucketIsNotLate(t *testing.T) {
	for _, tc := range []struct {
		name             string
		interval, bucket time.Duration
	}{
		{"30s buckets, 10s interval", 10 * time.Second, 30 * time.Second},
		{"2s buckets, 5s interval", 5 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, bl := uint64(tc.interval), uint64(tc.bucket)
			// A bucket that ends a few windows after t0 and crosses a
			// window's boundary (or is longer than a window).
			end := windowOf(uint64(t0.UnixNano()), iv) + 3*iv
			for end%bl != 0 || windowOf(end-bl, iv) == windowOf(end-1, iv) {
				end += sec
			}
			start := end - bl
			clock := time.Unix(0, int64(end)) // the SDK reports at its end, well within the grace
			r := newTestRelay(Config{Interval: tc.interval, Now: func() time.Time { return clock }})
			// The rounds before the bucket's end have run: every boundary
			// up to the last one before it.
			for b := windowOf(start, iv) + iv; b < end; b += iv {
				if out := r.Harvest(time.Unix(0, int64(b))); len(out) != 0 {
					t.Fatalf("round at +%v harvested %d batches of nothing merged", time.Duration(b-start), len(out))
				}
			}
			mustAccept(t, r, datagram(1, header("rt"), bucket(start, bl, entry(key("a"), 5, 0))), 0, UDP)
			if got := r.Stats().LateSpans; got != 0 {
				t.Fatalf("LateSpans %d, want 0: the bucket came right at its end", got)
			}
			out := r.Harvest(time.Unix(0, int64(windowOf(end-1, iv)+iv)))
			if len(out) != 1 || out[0].Hits != 5 || len(out[0].Buckets) != 1 {
				t.Fatalf("the round after its end: %+v, want one batch of 5 spans", out)
			}
			// It starts at its window's start (startIn), which it began before.
			ws := windowOf(end-1, iv)
			if bk := out[0].Buckets[0]; bk.Start != ws || bk.Duration != end-ws {
				t.Fatalf("bucket at %d for %v, want %d for %v", bk.Start, time.Duration(bk.Duration), ws, time.Duration(end-ws))
			}
			r.Forwarded(out[0].Hits)
			checkAccounting(t, r)
		})
	}
}

// TestOneSenderFoldsInTwoWindows: at a -max-groups under 64, one sender
// whose previous window is still held (its grace) and full folds the new
// keys of its current window into that window's overflow group, as in
// the first: the reserve holds both windows' overflow groups.
func TestOneSenderFoldsInTwoWindows(t *testing.T) {
	r := newTestRelay(Config{MaxGroups: 30})
	var es []*aggregate.Entry
	for i := range 40 {
		es = append(es, entry(key("prev"+strconv.Itoa(i)), 1, 0, 1))
	}
	mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, es...)), 0, UDP)
	es = es[:0]
	for i := range 5 {
		es = append(es, entry(key("cur"+strconv.Itoa(i)), 1, 0, 1))
	}
	mustAccept(t, r, datagram(2, header("a"), bucket(w0+10*sec, 5*sec, es...)), 0, UDP)
	s := checkAccounting(t, r)
	if len(s.SpansDropped) != 0 || s.OverflowGroups != 2 || s.FoldedSpans != 40-28+5 || s.Groups != 30 {
		t.Errorf("one sender, two windows, -max-groups 30: dropped %v, %d overflow groups, %d spans folded, %d groups; want none, 2, 17, 30",
			s.SpansDropped, s.OverflowGroups, s.FoldedSpans, s.Groups)
	}
}

// TestHarvestKeepsHeaderBytesCharged: a harvested identity's header goes
// on in its batch, charged with it until Release: senders whose headers
// are most of what they send (a 30 KiB ProcessTags, one group) fold or
// drop while a round holds their predecessors', not fill the bound anew.
func TestHarvestKeepsHeaderBytesCharged(t *testing.T) {
	r := newTestRelay(Config{MaxHeldBytes: 1 << 20})
	send := func(tag string, n int) {
		for i := range n {
			h := header("rt-" + tag + fmt.Sprint(i))
			h.Env = tag + fmt.Sprint(i)
			h.ProcessTags = strings.Repeat("p", 30<<10)
			mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("a"), 1, 0))), 0, UDP)
		}
	}
	send("a", 30)
	before := checkAccounting(t, r)
	out := r.Harvest(t0)
	if s := checkAccounting(t, r); len(out) != 30 || s.HeldBytes != before.HeldBytes || s.Groups != before.Groups {
		t.Fatalf("harvested %d batches; held %d bytes in %d groups, want %d in %d until released",
			len(out), s.HeldBytes, s.Groups, before.HeldBytes, before.Groups)
	}
	send("b", 30)
	s := checkAccounting(t, r)
	if n := s.FoldedSpans + s.SpansDropped[DropMaxBytes] - before.FoldedSpans - before.SpansDropped[DropMaxBytes]; n < 28 {
		t.Errorf("while the harvest is held, %d of 30 new senders' spans folded or dropped; held %d bytes", n, s.HeldBytes)
	}
	for i := range out {
		r.Forwarded(out[i].Hits)
		r.Release(&out[i])
	}
	if s := harvestAll(t, r); len(s) == 0 {
		t.Fatal("nothing held from the second senders")
	}
}

// TestTwinHarvestDoesNotCopyGroups: a window with Type twins is harvested
// as several buckets; the groups are moved into them in place, not copied
// out of the window (about 68 MB at -max-groups' 200 000, under the lock).
// 10 000 groups and one twin: each group in exactly one bucket, the twins
// apart, and the harvest allocating less than the groups' own size.
func TestTwinHarvestDoesNotCopyGroups(t *testing.T) {
	r := newTestRelay(Config{MaxGroups: 20_000})
	const perDatagram, datagrams = 100, 100
	var want uint64
	for d := range datagrams {
		var es []*aggregate.Entry
		for i := range perDatagram {
			n := d*perDatagram + i
			es = append(es, entry(key(fmt.Sprintf("GET /r/%d", n)), uint64(n%7+1), 0))
			want += uint64(n%7 + 1)
		}
		mustAccept(t, r, datagram(uint64(d+1), header("a"), bucket(w0, 10*sec, es...)), 0, UDP)
	}
	twin := key("GET /r/5")
	twin.Type = "http"
	mustAccept(t, r, datagram(datagrams+1, header("a"), bucket(w0, 10*sec, entry(twin, 1000, 0))), 0, UDP)
	want += 1000

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out := r.Harvest(t0.Add(time.Hour))
	runtime.ReadMemStats(&after)
	if len(out) != 1 || len(out[0].Buckets) != 2 {
		t.Fatalf("%d batches (want 1), buckets %d (want 2)", len(out), len(out[0].Buckets))
	}
	seen := map[string]int{}
	var hits uint64
	for i, bk := range out[0].Buckets {
		for _, g := range bk.Groups {
			seen[g.Resource+"/"+g.Type]++
			hits += g.Hits
			if g.Resource == "GET /r/5" && (g.Type == "http") != (i == 1) {
				t.Errorf("GET /r/5 of Type %q in bucket %d: the twins share a bucket", g.Type, i)
			}
		}
	}
	if len(seen) != datagrams*perDatagram+1 || hits != want {
		t.Fatalf("%d distinct groups, %d hits; want %d and %d", len(seen), hits, datagrams*perDatagram+1, want)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("group %s in %d buckets", k, n)
		}
	}
	groups := uint64(datagrams*perDatagram+1) * uint64(unsafe.Sizeof(writer.Group{}))
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc >= groups {
		t.Errorf("the harvest allocated %d bytes, at least its %d groups' %d: it copies them", alloc, datagrams*perDatagram+1, groups)
	}
	r.Forwarded(out[0].Hits)
	r.Release(&out[0])
	checkAccounting(t, r)
}
