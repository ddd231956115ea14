// This file checks, field by field over the agent's own struct definitions,
// that every exported field of a ClientStatsPayload, its buckets and its
// groups survives the relay: one the writer's decoder does not know (today,
// or after an agent upgrade adds it) would otherwise be dropped silently.

package peer

import (
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/spanstats/spanstats/internal/relay"
)

// relayRewrites are the fields the relay does not forward as it received
// them, by struct and field, each with why and what it sends instead.
var relayRewrites = map[string]struct {
	why   string
	check func(sent, got reflect.Value) error
}{
	"ClientStatsPayload.RuntimeID": {"the relay's own: an identity is every payload field but RuntimeID and Sequence (relay doc.go)",
		func(sent, got reflect.Value) error {
			if got.String() == "" || got.String() == sent.String() {
				return fmt.Errorf("%q; want the relay's own runtime id", got.String())
			}
			return nil
		}},
	"ClientStatsPayload.Sequence": {"the relay's own count of its requests (relay doc.go, forward.go)",
		func(_, got reflect.Value) error {
			if got.Uint() != 1 {
				return fmt.Errorf("%d; want 1, the relay's first request", got.Uint())
			}
			return nil
		}},
	// Found by this test, now in the relay's doc.go. Only the agent sets it
	// (and v0.85.4 ignores it on input); a merged window has no one shift.
	"ClientStatsBucket.AgentTimeShift": {"forwarded as 0: a window keeps no shift (relay doc.go)",
		func(_, got reflect.Value) error {
			if got.Int() != 0 {
				return fmt.Errorf("%d; want 0, as the relay sends every bucket", got.Int())
			}
			return nil
		}},
}

// knownAgentFields are the exported fields of agent v0.85.4's structs: the
// walk must find at least these, so that it cannot pass by finding none.
var knownAgentFields = map[string][]string{
	"ClientStatsPayload": {"Hostname", "Env", "Version", "Stats", "Lang", "TracerVersion", "RuntimeID", "Sequence",
		"AgentAggregation", "Service", "ContainerID", "Tags", "GitCommitSha", "ImageTag", "ProcessTagsHash", "ProcessTags"},
	"ClientStatsBucket": {"Start", "Duration", "Stats", "AgentTimeShift"},
	"ClientGroupedStats": {"Service", "Name", "Resource", "HTTPStatusCode", "Type", "DBType", "Hits", "Errors", "Duration",
		"OkSummary", "ErrorSummary", "Synthetics", "TopLevelHits", "SpanKind", "PeerTags", "IsTraceRoot", "GRPCStatusCode",
		"HTTPMethod", "HTTPEndpoint", "ServiceSource", "SpanDerivedPrimaryTags", "AdditionalMetricTags"},
}

// TestRelayKeepsEveryAgentField fills every exported field of the agent's
// payload, bucket and group structs (found by reflection) with a distinct
// non-zero value, sends the agent-encoded payload to a relay over UDP, and
// requires the one request the relay forwards to decode in the agent with
// every field as sent, but relayRewrites. Tag lists are compared as sets
// (the relay keys them so and sends them sorted) and summaries as sketches
// (the relay merges and re-encodes them).
func TestRelayKeepsEveryAgentField(t *testing.T) {
	const interval = 10 * time.Second
	// The previous window, off its boundaries, so that Start and Duration
	// are seen kept as they are.
	window := time.Now().Truncate(interval).Add(-interval)
	okVals, errVals := spread(7, 2e5, 4e8), spread(4, 5e6, 2e9)
	_, okSummary := agentSketch(t, nil, 0, okVals...)
	_, errSummary := agentSketch(t, nil, 0, errVals...)
	var total float64
	for _, v := range append(slices.Clone(okVals), errVals...) {
		total += v
	}
	// The fields whose values must satisfy the relay's checks (check.go):
	// errors and top-level hits within hits, sketch counts adding up to
	// hits, a bucket not in the future nor longer than an hour.
	constrained := map[string]any{
		"ClientStatsBucket.Start":         uint64(window.UnixNano()) + 1_234_567,
		"ClientStatsBucket.Duration":      uint64(interval) - 2_345_678,
		"ClientGroupedStats.Hits":         uint64(len(okVals) + len(errVals)),
		"ClientGroupedStats.Errors":       uint64(len(errVals)),
		"ClientGroupedStats.TopLevelHits": uint64(len(okVals) + len(errVals) - 2),
		"ClientGroupedStats.Duration":     uint64(total),
		"ClientGroupedStats.OkSummary":    okSummary,
		"ClientGroupedStats.ErrorSummary": errSummary,
	}

	sent := &pb.ClientStatsPayload{}
	found := map[string][]string{}
	n := 0
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		st := v.Type()
		for i := range st.NumField() {
			sf := st.Field(i)
			if !sf.IsExported() { // protoimpl's state, sizeCache, unknownFields
				continue
			}
			found[st.Name()] = append(found[st.Name()], sf.Name)
			fv, fpath := v.Field(i), path+sf.Name
			n++
			if c, ok := constrained[st.Name()+"."+sf.Name]; ok {
				cv := reflect.ValueOf(c)
				if !cv.Type().AssignableTo(fv.Type()) {
					t.Fatalf("%s is a %s now, not the %s this test gives it: teach the test", fpath, fv.Type(), cv.Type())
				}
				fv.Set(cv)
				continue
			}
			switch k := fv.Kind(); {
			case k == reflect.String:
				fv.SetString(fmt.Sprintf("%s-%d", strings.ToLower(sf.Name), n))
			case k == reflect.Bool:
				fv.SetBool(true)
			case k == reflect.Uint32 || k == reflect.Uint64:
				fv.SetUint(uint64(1000 + n))
			case k == reflect.Int64:
				fv.SetInt(int64(-1000 - n))
			case k == reflect.Int32:
				e, isEnum := fv.Interface().(protoreflect.Enum)
				if !isEnum {
					fv.SetInt(int64(1000 + n))
					break
				}
				// An enum takes one of its own values: its last.
				vals := e.Descriptor().Values()
				fv.SetInt(int64(vals.Get(vals.Len() - 1).Number()))
			case k == reflect.Slice && fv.Type().Elem().Kind() == reflect.String:
				// Two key:value tags, out of order: the relay sorts them.
				name := strings.ToLower(sf.Name)
				fv.Set(reflect.ValueOf([]string{fmt.Sprintf("%s.b:%d", name, n), fmt.Sprintf("%s.a:%d", name, n)}))
			case k == reflect.Slice && fv.Type().Elem().Kind() == reflect.Pointer &&
				fv.Type().Elem().Elem().Kind() == reflect.Struct:
				e := reflect.New(fv.Type().Elem().Elem())
				fill(e.Elem(), fmt.Sprintf("%s[0].", fpath))
				fv.Set(reflect.Append(reflect.MakeSlice(fv.Type(), 0, 1), e))
			default:
				// A []byte other than the summaries, a map, a new
				// message kind: what a valid value is must be taught.
				t.Fatalf("%s of type %s: the test knows no valid value for it; teach it", fpath, fv.Type())
			}
			if fv.IsZero() {
				t.Fatalf("%s: filled with its zero value", fpath)
			}
		}
	}
	fill(reflect.ValueOf(sent).Elem(), "")
	for typ, names := range knownAgentFields {
		for _, name := range names {
			if !slices.Contains(found[typ], name) {
				t.Errorf("the walk did not find %s.%s (found %q)", typ, name, found[typ])
			}
		}
	}
	for key := range relayRewrites {
		typ, name, _ := strings.Cut(key, ".")
		if !slices.Contains(found[typ], name) {
			t.Errorf("relayRewrites names %s, which the agent's structs no longer have", key)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Its /info lists the keys of the filled peer tags, which the relay
	// would otherwise cut once it has read the list.
	var keys []string
	for _, tag := range sent.Stats[0].Stats[0].PeerTags {
		k, _, _ := strings.Cut(tag, ":")
		keys = append(keys, k)
	}
	rec := newStatsRecorder(t, keys...)
	srv, stopRelay := runRelay(t, relay.ServerConfig{UDPAddr: "127.0.0.1:0", AgentURL: rec.srv.URL,
		Interval: interval, Logger: slog.New(slog.DiscardHandler)})

	body, err := sent.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Over UDP the relay has no sender credentials to correct ContainerID
	// from: the payload's claim stands, so it is compared as any field.
	udp, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if _, err := udp.Write(body); err != nil { // bare, as another tracer sends
		t.Fatal(err)
	}
	hits := sent.Stats[0].Stats[0].Hits
	deadline := time.Now().Add(20 * time.Second)
	for st := srv.Relay().Stats(); st.SpansReceived != hits; st = srv.Relay().Stats() {
		if time.Now().After(deadline) || st.Rejected != [relay.NumReasons]uint64{} {
			t.Fatalf("relay received %d spans, want %d: %+v", st.SpansReceived, hits, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stopRelay(); err != nil { // the stop forwards what is held
		t.Fatalf("relay Run: %v", err)
	}
	if st := srv.Relay().Stats(); st.SpansForwarded != hits || st.SpansPending != 0 {
		t.Fatalf("relay stats %+v; want all %d spans forwarded", st, hits)
	}

	bodies, _, other := rec.snapshot()
	if len(other) > 0 {
		t.Errorf("unexpected requests: %q", other)
	}
	if len(bodies) != 1 {
		t.Fatalf("%d requests, want 1", len(bodies))
	}
	var got pb.ClientStatsPayload
	if rest, err := got.UnmarshalMsg(bodies[0]); err != nil || len(rest) != 0 {
		t.Fatalf("agent UnmarshalMsg: %v, %d bytes left over", err, len(rest))
	}
	compared := 0
	var compare func(sent, got reflect.Value, path string)
	compare = func(sent, got reflect.Value, path string) {
		st := sent.Type()
		for i := range st.NumField() {
			sf := st.Field(i)
			if !sf.IsExported() {
				continue
			}
			compared++
			sv, gv, fpath := sent.Field(i), got.Field(i), path+sf.Name
			if rw, ok := relayRewrites[st.Name()+"."+sf.Name]; ok {
				if err := rw.check(sv, gv); err != nil {
					t.Errorf("%s: %v (%s)", fpath, err, rw.why)
				}
				continue
			}
			switch {
			case sv.Kind() == reflect.Slice && sv.Type().Elem().Kind() == reflect.Uint8:
				if err := sameSummary(sv.Bytes(), gv.Bytes()); err != nil {
					t.Errorf("%s: %v", fpath, err)
				}
			case sv.Kind() == reflect.Slice && sv.Type().Elem().Kind() == reflect.String:
				want, have := slices.Sorted(slices.Values(sv.Interface().([]string))), gv.Interface().([]string)
				if !slices.Equal(have, want) {
					t.Errorf("%s: forwarded %q, want %q (the set sent, sorted)", fpath, have, want)
				}
			case sv.Kind() == reflect.Slice:
				if gv.Len() != sv.Len() {
					t.Errorf("%s: %d forwarded, want %d", fpath, gv.Len(), sv.Len())
					break
				}
				for j := range sv.Len() {
					if gv.Index(j).IsNil() {
						t.Errorf("%s[%d]: forwarded nil", fpath, j)
						continue
					}
					compare(sv.Index(j).Elem(), gv.Index(j).Elem(), fmt.Sprintf("%s[%d].", fpath, j))
				}
			default:
				if !gv.Equal(sv) {
					t.Errorf("%s: forwarded %#v, want %#v", fpath, gv.Interface(), sv.Interface())
				}
			}
		}
	}
	compare(reflect.ValueOf(sent).Elem(), reflect.ValueOf(&got).Elem(), "")
	if compared != n {
		t.Errorf("compared %d fields of the %d filled", compared, n)
	}
	t.Logf("%d fields walked, %d of them the relay rewrites; %d-byte payload forwarded as %d bytes",
		n, len(relayRewrites), len(body), len(bodies[0]))
}

// sameSummary reports how the forwarded summary got differs from sent,
// both decoded as the agent does.
func sameSummary(sent, got []byte) error {
	want, err := decodeSummary(sent)
	if err != nil {
		return fmt.Errorf("sent: %w", err)
	}
	have, err := decodeSummary(got)
	if err != nil {
		return fmt.Errorf("forwarded: %w", err)
	}
	return sameSketch(have, want)
}
