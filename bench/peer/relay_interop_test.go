// This file checks what statsrelay forwards with the agent's own decoder:
// SDKs send over Unix and UDP datagrams, another tracer sends payloads the
// agent's msgp encoder wrote, and every request the relay makes must decode
// in the agent into exactly what was published, merged.

package peer

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/tinylib/msgp/msgp"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
)

// TestRelayForwardsDecodeWithAgent: three SDK aggregators of one identity
// (two over the relay's Unix socket, one over UDP) publish the interop
// workload, and a foreign tracer sends two agent-encoded payloads over UDP
// with the fields the SDK never sets (DB type, span-derived primary tags,
// additional metric tags). Every request the relay sends decodes with the
// agent's UnmarshalMsg and DecodeMsg alike, with nothing left over and
// the agent's wire shape; its headers and payload header carry the
// senders' identity (the relay's own runtime id and a sequence counting
// its requests); per key, hits, errors, top-level hits and durations are
// those published by all three SDKs together, and the sketches, merged by
// the relay, have exactly the bins of the agent's own sketch of every
// duration. The foreign group arrives merged with its fields intact.
func TestRelayForwardsDecodeWithAgent(t *testing.T) {
	const (
		senders     = 3
		perProducer = 6_000
		phases      = 2
	)
	rec := newStatsRecorder(t)
	srv, stopRelay := runRelay(t, relay.ServerConfig{UnixPath: sockdir.Path(t, "relay.sock"),
		UDPAddr: "127.0.0.1:0", AgentURL: rec.srv.URL, Logger: slog.New(slog.DiscardHandler)})

	base := stats.Config{Env: "interop", Service: "web", Version: "1.2.3", Hostname: "peer-host",
		TracerVersion: "v0.0.1-peer", ContainerID: "cid-42", Tags: []string{"team:apm", "region:eu"},
		GitCommitSha: "abc123", ImageTag: "v7", ProcessTags: "entrypoint.name:web", InboxSize: 1 << 14,
		SendJitter: 10 * time.Millisecond}
	urls := []string{"unixgram://" + srv.Addr(relay.Unix), "unixgram://" + srv.Addr(relay.Unix), "udp://" + srv.Addr(relay.UDP)}
	aggs := make([]*stats.Aggregator, senders)
	ps := make([]*producer, senders)
	for i, u := range urls {
		cfg := base
		cfg.AgentURL, cfg.RuntimeID = u, "sdk-"+string(rune('a'+i))
		var err error
		if aggs[i], err = stats.New(cfg); err != nil {
			t.Fatal(err)
		}
		aggs[i].Start()
		t.Cleanup(func() { _ = aggs[i].Stop(context.Background()) })
		ps[i] = newProducer(uint64(100 + i))
	}

	// The foreign tracer: two payloads of one identity, encoded by the
	// agent's msgp code, each a group the relay must merge into one.
	start := uint64(time.Now().Truncate(10 * time.Second).UnixNano())
	foreignVals := [][]float64{spread(40, 2e5, 3e8), spread(25, 1e6, 9e9)}
	udp, err := net.Dial("udp", srv.Addr(relay.UDP))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for i, vals := range foreignVals {
		_, okB := agentSketch(t, nil, 0, vals...)
		g := &pb.ClientGroupedStats{Service: "billing", Name: "postgres.query", Resource: "SELECT ?", Type: "sql",
			DBType: "postgresql", SpanKind: "client", Hits: uint64(len(vals)), Duration: 1000 * uint64(len(vals)),
			OkSummary: okB, IsTraceRoot: pb.Trilean_FALSE,
			PeerTags:               [][]string{{"db.instance:ledger", "peer.hostname:pg-1"}, {"peer.hostname:pg-1", "db.instance:ledger"}}[i],
			SpanDerivedPrimaryTags: []string{"region:eu"}, AdditionalMetricTags: []string{"tenant:a"}}
		p := &pb.ClientStatsPayload{Hostname: "jhost", Env: "foreign", Lang: "java", TracerVersion: "1.40.0",
			RuntimeID: "java-" + string(rune('a'+i)), Sequence: 1, Service: "billing",
			Stats: []*pb.ClientStatsBucket{{Start: start, Duration: uint64(10 * time.Second), Stats: []*pb.ClientGroupedStats{g}}}}
		body, err := p.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := udp.Write(body); err != nil { // bare: an unsequenced payload
			t.Fatal(err)
		}
	}

	for phase := range phases {
		var wg sync.WaitGroup
		errs := make([]error, senders)
		for i, p := range ps {
			wg.Go(func() { errs[i] = p.run(aggs[i], workloadTemplates(), perProducer/phases) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
			if phase < phases-1 {
				if err := aggs[i].Flush(context.Background()); err != nil {
					t.Fatalf("Flush: %v", err)
				}
			}
		}
	}
	want := map[groupKey]*tally{}
	var accepted uint64
	for i, p := range ps {
		if err := aggs[i].Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if h := aggs[i].Health(); h.SpansSent != p.accepted || h.PayloadsDropped != 0 {
			t.Fatalf("aggregator %d (%s) accepted %d spans; health %+v", i, urls[i], p.accepted, h)
		}
		accepted += p.accepted
		for k, tl := range p.want {
			if want[k] == nil {
				want[k] = &tally{}
			}
			want[k].add(tl)
		}
	}
	foreignHits := uint64(len(foreignVals[0]) + len(foreignVals[1]))
	deadline := time.Now().Add(20 * time.Second)
	for srv.Relay().Stats().SpansReceived != accepted+foreignHits {
		if time.Now().After(deadline) {
			t.Fatalf("relay received %d spans, want %d: %+v", srv.Relay().Stats().SpansReceived, accepted+foreignHits, srv.Relay().Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stopRelay(); err != nil {
		t.Fatalf("relay Run: %v", err)
	}
	st := srv.Relay().Stats()
	if st.SpansForwarded != accepted+foreignHits || st.SpansPending != 0 || st.Rejected != [relay.NumReasons]uint64{} {
		t.Fatalf("relay stats %+v; want every one of %d spans forwarded", st, accepted+foreignHits)
	}

	bodies, headers, other := rec.snapshot()
	if len(other) > 0 {
		t.Errorf("unexpected requests: %q", other)
	}
	// The relay keys an identity by its tags as a set, and sends them sorted.
	sortedTags := slices.Sorted(slices.Values(base.Tags))
	got := map[groupKey]*decodedGroup{}
	var foreign *decodedGroup
	relayRuntimeID := ""
	seqs := map[uint64]bool{} // the relay's, one per request; arrival order is free (-forward-parallel)
	for i, body := range bodies {
		var p pb.ClientStatsPayload
		rest, err := p.UnmarshalMsg(body)
		if err != nil || len(rest) != 0 {
			t.Fatalf("request %d: agent UnmarshalMsg: %v, %d bytes left over", i, err, len(rest))
		}
		var ps pb.ClientStatsPayload
		if err := msgp.Decode(bytes.NewReader(body), &ps); err != nil || !proto.Equal(&p, &ps) {
			t.Fatalf("request %d: agent DecodeMsg: %v (or it disagrees with UnmarshalMsg)", i, err)
		}
		if err := checkWireShape(body); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		h := headers[i]
		if h.Get("Content-Type") != "application/msgpack" || h.Get("Content-Encoding") != "" || h.Get("Datadog-Meta-Lang") != p.Lang ||
			h.Get("Datadog-Meta-Tracer-Version") != p.TracerVersion || h.Get("Datadog-Container-ID") != p.ContainerID {
			t.Errorf("request %d: headers %v for a payload of %s %s container %q", i, h, p.Lang, p.TracerVersion, p.ContainerID)
		}
		if relayRuntimeID == "" {
			relayRuntimeID = p.RuntimeID
		}
		if p.RuntimeID != relayRuntimeID || p.RuntimeID == "" || p.Sequence < 1 || p.Sequence > uint64(len(bodies)) || seqs[p.Sequence] {
			t.Errorf("request %d: runtime id %q sequence %d; want the relay's own (%q), one of 1..%d not seen before",
				i, p.RuntimeID, p.Sequence, relayRuntimeID, len(bodies))
		}
		seqs[p.Sequence] = true
		switch p.Env {
		case "foreign":
			if p.Lang != "java" || p.TracerVersion != "1.40.0" || p.Hostname != "jhost" || p.Service != "billing" || p.ContainerID != "" {
				t.Errorf("request %d: foreign header (%q %q %q %q %q)", i, p.Lang, p.TracerVersion, p.Hostname, p.Service, p.ContainerID)
			}
		case base.Env:
			if p.Service != base.Service || p.Version != base.Version || p.Hostname != base.Hostname || p.Lang != "go" ||
				p.TracerVersion != base.TracerVersion || p.ContainerID != base.ContainerID || !slices.Equal(p.Tags, sortedTags) ||
				p.GitCommitSha != base.GitCommitSha || p.ImageTag != base.ImageTag || p.ProcessTags != base.ProcessTags {
				t.Errorf("request %d: header (%q %q %q %q %q %q %q %q %q %q %q) does not match the SDKs'", i, p.Service, p.Version,
					p.Hostname, p.Lang, p.TracerVersion, p.ContainerID, p.Tags, p.GitCommitSha, p.ImageTag, p.ProcessTags, p.Env)
			}
		default:
			t.Fatalf("request %d: env %q sent by nobody", i, p.Env)
		}
		for _, b := range p.Stats {
			for _, g := range b.Stats {
				ok, err := decodeSummary(g.OkSummary)
				if err != nil {
					t.Fatalf("request %d %s/%s: OkSummary: %v", i, g.Service, g.Resource, err)
				}
				es, err := decodeSummary(g.ErrorSummary)
				if err != nil {
					t.Fatalf("request %d %s/%s: ErrorSummary: %v", i, g.Service, g.Resource, err)
				}
				if ok.GetCount() != float64(g.Hits-g.Errors) || es.GetCount() != float64(g.Errors) {
					t.Errorf("request %d %s/%s: sketch counts %v and %v for %d hits, %d errors", i, g.Service, g.Resource,
						ok.GetCount(), es.GetCount(), g.Hits, g.Errors)
				}
				var d *decodedGroup
				if p.Env == "foreign" {
					if g.DBType != "postgresql" || !slices.Equal(g.SpanDerivedPrimaryTags, []string{"region:eu"}) ||
						!slices.Equal(g.AdditionalMetricTags, []string{"tenant:a"}) ||
						peerSet(g.PeerTags) != "db.instance:ledger\npeer.hostname:pg-1" {
						t.Errorf("request %d: foreign group lost a field: DB type %q, primary tags %q, metric tags %q, peer tags %q",
							i, g.DBType, g.SpanDerivedPrimaryTags, g.AdditionalMetricTags, g.PeerTags)
					}
					if foreign == nil {
						foreign = &decodedGroup{ok: ok, errs: es}
					}
					d = foreign
				} else {
					k := agentGroupKey(g)
					if d = got[k]; d == nil {
						d = &decodedGroup{ok: ok, errs: es}
						got[k] = d
					}
				}
				if d.seen > 0 {
					if err := d.ok.MergeWith(ok); err != nil {
						t.Fatal(err)
					}
					if err := d.errs.MergeWith(es); err != nil {
						t.Fatal(err)
					}
				}
				d.seen++
				d.hits += g.Hits
				d.errors += g.Errors
				d.topLevel += g.TopLevelHits
				d.duration += g.Duration
			}
		}
	}
	bodyBytes := 0
	for _, b := range bodies {
		bodyBytes += len(b)
	}
	t.Logf("%d spans from %d SDKs (%d datagrams, %d bytes to the relay) in %d groups, %d foreign; %d requests, %d bytes to the agent",
		accepted, senders, st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP], st.Bytes[relay.Unix]+st.Bytes[relay.UDP],
		len(want), foreignHits, len(bodies), bodyBytes)
	if len(bodies) >= int(st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP]) {
		t.Errorf("%d requests for %d datagrams: nothing was merged", len(bodies), st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP])
	}
	checkGroups(t, want, got)
	if foreign == nil || foreign.hits != foreignHits || foreign.errors != 0 || foreign.duration != 1000*foreignHits {
		t.Fatalf("foreign group %+v; want %d hits", foreign, foreignHits)
	}
	if err := sameSketch(foreign.ok, referenceSketch(t, append(slices.Clone(foreignVals[0]), foreignVals[1]...))); err != nil {
		t.Errorf("foreign ok sketch: %v", err)
	}
}

// runRelay starts a relay.Server with cfg and returns it with its stop,
// which forwards what it holds and returns Run's error; the test's cleanup
// stops it too.
func runRelay(t *testing.T, cfg relay.ServerConfig) (*relay.Server, func() error) {
	t.Helper()
	srv, err := relay.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, 10*time.Second) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })
	return srv, stop
}
