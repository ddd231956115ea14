// This file checks, field by field over Span's definition, that each field
// a tracer sets reaches the agent with its documented effect.

package stats

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// TestEverySpanFieldReachesTheAgent walks Span's exported fields by
// reflection. For each, one aggregator gets a valid, eligible base span and
// a copy of it with only that field changed, and the groups the fake agent
// decodes must show the field's documented effect and nothing else: a
// field added to Span without a case here, or one whose copy in snapshot
// is lost, fails naming the field.
func TestEverySpanFieldReachesTheAgent(t *testing.T) {
	// The consumer's clock: it begins its buckets at t0, then reads t1, in
	// the grace of the hour t0 is in, so both the previous bucket and the
	// current one are open and a span's end picks between them. An hour
	// (MaxBucketInterval) keeps the real timers from firing meanwhile.
	const interval = time.Hour
	s1 := time.Date(2025, 6, 2, 10, 0, 0, 0, time.UTC) // the current bucket's start
	t0, t1 := s1.Add(-30*time.Minute), s1.Add(time.Minute)
	prevBucket, curBucket := window{t0, s1}, window{s1, t1} // as reported: from t0's Flush on
	// Durations of few significant bits: the sketch holds exactly
	// float64(d), so the expected sketch is built with Sketch.Add.
	const dur, dur2 = 3 << 20, 5 << 22

	base := Span{
		Service: "checkout", Name: "http.request", Resource: "GET /users/{id}", Type: "http",
		SpanKind: "client", HTTPStatusCode: 200, HTTPMethod: "GET", HTTPEndpoint: "/users/{id}",
		PeerTags: []string{"peer.service:users-api"},
		Start:    s1.Add(10 * time.Second).UnixNano(), Duration: dur,
	}
	if !base.Eligible() {
		t.Fatal("the base span is not eligible")
	}
	// The base's group: a client span keeps its peer tags; TraceRoot false
	// is the agent's False, not NotSet.
	baseKey := aggregate.Key{
		Resource: "GET /users/{id}", Service: "checkout", Name: "http.request", Type: "http", SpanKind: "client",
		HTTPMethod: "GET", HTTPEndpoint: "/users/{id}", HTTPStatusCode: 200,
		IsTraceRoot: aggregate.False, PeerTags: []string{"peer.service:users-api"},
	}
	baseGroup := wantGroup{bucket: curBucket, key: baseKey, ok: []int64{dur}}
	// label is the base's group and the changed span's apart from it, with
	// the key the change gives it.
	label := func(change func(*aggregate.Key)) []wantGroup {
		g := baseGroup
		g.key.PeerTags = slices.Clone(baseKey.PeerTags)
		change(&g.key)
		return []wantGroup{baseGroup, g}
	}
	// merged is one group holding both spans: a field the key leaves out.
	merged := func(change func(*wantGroup)) []wantGroup {
		g := baseGroup
		g.ok = []int64{dur, dur}
		change(&g)
		return []wantGroup{g}
	}

	type fieldCase struct {
		value any // the changed span's value of the field
		// base, when set, replaces the base for this field (with why).
		base func(Span) Span
		want []wantGroup
		// counted and ineligible are Health's counts (default 2 and 0).
		counted, ineligible uint64
	}
	cases := map[string]fieldCase{
		"Service":        {value: "billing", want: label(func(k *aggregate.Key) { k.Service = "billing" })},
		"Name":           {value: "http.client.request", want: label(func(k *aggregate.Key) { k.Name = "http.client.request" })},
		"Resource":       {value: "POST /orders", want: label(func(k *aggregate.Key) { k.Resource = "POST /orders" })},
		"Type":           {value: "custom", want: label(func(k *aggregate.Key) { k.Type = "custom" })},
		"SpanKind":       {value: "producer", want: label(func(k *aggregate.Key) { k.SpanKind = "producer" })}, // keeps its peer tags too
		"HTTPStatusCode": {value: uint32(503), want: label(func(k *aggregate.Key) { k.HTTPStatusCode = 503 })},
		"HTTPMethod":     {value: "POST", want: label(func(k *aggregate.Key) { k.HTTPMethod = "POST" })},
		"HTTPEndpoint":   {value: "/orders/{id}", want: label(func(k *aggregate.Key) { k.HTTPEndpoint = "/orders/{id}" })},
		// Grouped by its number (CanonicalGRPCCode).
		"GRPCStatusCode": {value: "NOT_FOUND", want: label(func(k *aggregate.Key) { k.GRPCStatusCode = "5" })},
		"ServiceSource":  {value: "opt.service_mapping", want: label(func(k *aggregate.Key) { k.ServiceSource = "opt.service_mapping" })},
		// Another tag of a kept key (Config.PeerTagKeys below): the group's
		// peer tags are the set of both.
		"PeerTags": {value: []string{"peer.service:users-api", "peer.hostname:users.internal"},
			want: label(func(k *aggregate.Key) {
				k.PeerTags = []string{"peer.hostname:users.internal", "peer.service:users-api"}
			})},
		// Counted in the bucket of its end: 20 minutes earlier is the
		// previous bucket, still open for its grace.
		"Start": {value: base.Start - int64(20*time.Minute), want: func() []wantGroup {
			g := baseGroup
			g.bucket = prevBucket
			return []wantGroup{baseGroup, g}
		}()},
		// Duration, Error and TopLevel are no part of the key: both spans
		// are in the base's group, the changed one's in its sums and sketch.
		"Duration": {value: int64(dur2), want: merged(func(g *wantGroup) { g.ok = []int64{dur, dur2} })},
		"Error":    {value: true, want: merged(func(g *wantGroup) { g.ok, g.err = []int64{dur}, []int64{dur} })},
		"TopLevel": {value: true, want: merged(func(g *wantGroup) { g.top = 1 })},
		// Measured decides eligibility only, which the client base has by
		// its kind: here the base is an internal span (without peer tags,
		// which it would not keep), not counted unless measured.
		"Measured": {value: true,
			base: func(s Span) Span { s.SpanKind, s.PeerTags = "internal", nil; return s },
			want: func() []wantGroup {
				g := baseGroup
				g.key.SpanKind, g.key.PeerTags = "internal", nil
				return []wantGroup{g}
			}(),
			counted: 1, ineligible: 1},
		"TraceRoot":  {value: true, want: label(func(k *aggregate.Key) { k.IsTraceRoot = aggregate.True })},
		"Synthetics": {value: true, want: label(func(k *aggregate.Key) { k.Synthetics = true })},
	}
	// Span's fields today: the walk must find each (a field renamed or
	// removed must not pass as "nothing left to check").
	knownToday := []string{"Service", "Name", "Resource", "Type", "SpanKind", "HTTPStatusCode",
		"HTTPMethod", "HTTPEndpoint", "GRPCStatusCode", "ServiceSource", "PeerTags",
		"Start", "Duration", "Error", "TopLevel", "Measured", "TraceRoot", "Synthetics"}

	// The walk: every exported field needs a case, and its changed span.
	type fieldRun struct {
		name          string
		base, changed Span
		c             fieldCase
	}
	var runs []fieldRun
	st := reflect.TypeFor[Span]()
	found := map[string]bool{}
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() {
			continue
		}
		found[f.Name] = true
		c, ok := cases[f.Name]
		if !ok {
			t.Errorf("Span.%s: add its expected effect here", f.Name)
			continue
		}
		if reflect.TypeOf(c.value) != f.Type {
			t.Errorf("Span.%s is a %s, its case's value a %T", f.Name, f.Type, c.value)
			continue
		}
		b := base
		if c.base != nil {
			b = c.base(base)
		}
		changed := b
		reflect.ValueOf(&changed).Elem().Field(i).Set(reflect.ValueOf(c.value))
		if reflect.DeepEqual(changed, b) {
			t.Errorf("Span.%s: its case's value is the base's", f.Name)
			continue
		}
		if c.counted == 0 {
			c.counted = 2
		}
		runs = append(runs, fieldRun{f.Name, b, changed, c})
	}
	for _, name := range knownToday {
		if !found[name] {
			t.Errorf("Span.%s was not found by the walk (%d fields found)", name, len(found))
		}
	}
	for name := range cases {
		if !found[name] {
			t.Errorf("the case of Span.%s names no exported field of Span", name)
		}
	}

	// publish runs one aggregator on the test's clock, publishes spans
	// after its buckets began at t0, stops it and returns the groups the
	// agent decoded, sorted, and the aggregator's Health.
	publish := func(t *testing.T, spans ...Span) ([][]attr, Health) {
		t.Helper()
		ag := statstest.New()
		defer ag.Close()
		var clock atomic.Int64
		clock.Store(t0.UnixNano())
		a := newStarted(t, Config{AgentURL: ag.URL(), BucketInterval: interval,
			// Fixed, so the keys kept do not wait on /info.
			PeerTagKeys: []string{"peer.service", "peer.hostname"}},
			func(a *Aggregator) { a.cons.clock = func() time.Time { return time.Unix(0, clock.Load()).UTC() } })
		// Answered once the consumer runs: its buckets began at t0.
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Store(t1.UnixNano())
		for _, s := range spans {
			if !a.Publish(&s) {
				t.Fatalf("Publish(%+v) dropped the span", s)
			}
		}
		stop(t, a)
		return agentGroups(t, ag, s1), a.Health()
	}

	// The base alone first: a field whose copy is lost shows here, named,
	// rather than in every case below at once.
	if !t.Run("base", func(t *testing.T) {
		got, _ := publish(t, base)
		want := baseGroup.attrs(s1)
		if len(got) != 1 {
			t.Fatalf("the base span reached the agent as %d groups, want 1:\n\t%s\nwant\n\t%s",
				len(got), lines(got), line(want))
		}
		for i, w := range want {
			if g := got[0][i]; g.value != w.value {
				field := "no Span field"
				if w.field != "" {
					field = "Span." + w.field
				}
				t.Errorf("%s: the base span's group has %s %s, want %s", field, w.name, g.value, w.value)
			}
		}
	}) {
		t.FailNow()
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			got, h := publish(t, r.base, r.changed)
			var want [][]attr
			for _, g := range r.c.want {
				want = append(want, g.attrs(s1))
			}
			if g, w := lines(got), lines(sortGroups(want)); g != w {
				t.Errorf("Span.%s = %#v: the agent got groups\n\t%s\nwant\n\t%s", r.name, r.c.value, g, w)
			}
			if h.Counted != r.c.counted || h.Ineligible != r.c.ineligible || h.LateSpans != 0 {
				t.Errorf("Span.%s: Health counted %d, ineligible %d, late %d; want %d, %d, 0",
					r.name, h.Counted, h.Ineligible, h.LateSpans, r.c.counted, r.c.ineligible)
			}
		})
	}
}

// window is a reported bucket's [start, end).
type window struct{ start, end time.Time }

// wantGroup is an expected group: its bucket, key and the durations of its ok
// and error spans.
type wantGroup struct {
	bucket  window
	key     aggregate.Key
	ok, err []int64
	top     uint64
}

// attrs are g's attributes, as groupAttrs gives a decoded group's.
func (g wantGroup) attrs(epoch time.Time) []attr {
	var ok, errs aggregate.Sketch
	var sum uint64
	for _, d := range g.ok {
		ok.Add(float64(d))
		sum += uint64(d)
	}
	for _, d := range g.err {
		errs.Add(float64(d))
		sum += uint64(d)
	}
	e := aggregate.Entry{Key: g.key, Hits: uint64(len(g.ok) + len(g.err)), Errors: uint64(len(g.err)),
		TopLevelHits: g.top, Duration: sum, Ok: &ok, Err: &errs}
	b := writer.DecodedBucket{Start: uint64(g.bucket.start.UnixNano()), Duration: uint64(g.bucket.end.Sub(g.bucket.start))}
	return groupAttrs(epoch, &b, &writer.Group{Entry: e})
}

// attr is one attribute of a decoded group: its name, its value as text,
// and the Span field whose documented effect it shows ("" for none).
type attr struct{ field, name, value string }

// agentGroups returns the attributes of every group of every payload the
// agent accepted, sorted; a request it did not accept fails the test.
func agentGroups(t *testing.T, ag *statstest.Agent, epoch time.Time) [][]attr {
	t.Helper()
	var out [][]attr
	for _, r := range ag.Requests() {
		if r.Payload == nil || r.Status != http.StatusOK {
			t.Fatalf("the agent answered %d: %v", r.Status, r.Err)
		}
		for i := range r.Payload.Buckets {
			b := &r.Payload.Buckets[i]
			for j := range b.Groups {
				out = append(out, groupAttrs(epoch, b, &b.Groups[j]))
			}
		}
	}
	return sortGroups(out)
}

// groupAttrs returns a group's attributes: its bucket from epoch, every key
// field, its counts and its sketches' bins.
func groupAttrs(epoch time.Time, b *writer.DecodedBucket, g *writer.Group) []attr {
	start := time.Unix(0, int64(b.Start)).Sub(epoch)
	k := &g.Key
	q := strconv.Quote
	return []attr{
		{"Start", "bucket", fmt.Sprintf("[%v,%v)", start, start+time.Duration(b.Duration))},
		{"Service", "service", q(k.Service)}, {"Name", "name", q(k.Name)},
		{"Resource", "resource", q(k.Resource)}, {"Type", "type", q(k.Type)},
		{"SpanKind", "span_kind", q(k.SpanKind)},
		{"HTTPStatusCode", "http_status_code", fmt.Sprint(k.HTTPStatusCode)},
		{"HTTPMethod", "http_method", q(k.HTTPMethod)}, {"HTTPEndpoint", "http_endpoint", q(k.HTTPEndpoint)},
		{"GRPCStatusCode", "grpc_status_code", q(k.GRPCStatusCode)},
		{"ServiceSource", "service_source", q(k.ServiceSource)},
		{"PeerTags", "peer_tags", "[" + statstest.PeerTagsKey(k.PeerTags...) + "]"},
		{"TraceRoot", "is_trace_root", fmt.Sprint(k.IsTraceRoot)},
		{"Synthetics", "synthetics", fmt.Sprint(k.Synthetics)},
		{"", "db_type", q(g.DBType)},
		{"", "span_derived_primary_tags", "[" + statstest.PeerTagsKey(g.SpanDerivedPrimaryTags...) + "]"},
		{"", "additional_metric_tags", "[" + statstest.PeerTagsKey(g.AdditionalMetricTags...) + "]"},
		{"", "hits", fmt.Sprint(g.Hits)},
		{"Error", "errors", fmt.Sprint(g.Errors)},
		{"TopLevel", "top_level_hits", fmt.Sprint(g.TopLevelHits)},
		{"Duration", "duration", fmt.Sprint(g.Duration)},
		{"Duration", "ok_summary", sketchText(g.Ok)},
		{"Error", "error_summary", sketchText(g.Err)},
	}
}

// sketchText writes a sketch's count, zeros and bins ("-" for none).
func sketchText(s *aggregate.Sketch) string {
	if s == nil || s.Count() == 0 {
		return "-"
	}
	lo, counts := s.Bins()
	return fmt.Sprintf("%d(zeros:%d,bins@%d:%v)", s.Count(), s.ZeroCount(), lo, counts)
}

// line writes a group's attributes on one line.
func line(a []attr) string {
	var b strings.Builder
	for i, x := range a {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x.name + "=" + x.value)
	}
	return b.String()
}

// lines writes groups one a line, for a message.
func lines(gs [][]attr) string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = line(g)
	}
	return strings.Join(out, "\n\t")
}

// sortGroups sorts groups by their lines: the agent's order is no part of
// a field's effect.
func sortGroups(gs [][]attr) [][]attr {
	slices.SortFunc(gs, func(a, b []attr) int { return strings.Compare(line(a), line(b)) })
	return gs
}
