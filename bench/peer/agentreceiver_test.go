// This file runs the agent's own HTTP receiver (pkg/trace/api, v0.85.4, as
// the trace-agent starts it) in place of a stand-in: the SDK reads its
// /info and posts to its /v0.6/stats handler, which may time out as a
// backed-up trace-agent's does, the relay forwards to it over TCP and its
// Unix socket, and the tests check what the receiver hands its stats
// processor (every payload, and the language, tracer version and container
// it files each under) and what the agent's ClientStatsAggregator, fed those
// payloads (without the normalization the trace-agent runs first), makes of
// the SDKs' reports.

package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/comp/core/tagger/origindetection"
	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/DataDog/datadog-agent/pkg/trace/api"
	"github.com/DataDog/datadog-agent/pkg/trace/config"
	"github.com/DataDog/datadog-agent/pkg/trace/sampler"
	agentstats "github.com/DataDog/datadog-agent/pkg/trace/stats"
	"github.com/DataDog/datadog-agent/pkg/trace/telemetry"
	"github.com/DataDog/datadog-agent/pkg/trace/timing"
	"github.com/DataDog/datadog-go/v5/statsd"
	"github.com/DataDog/sketches-go/ddsketch"
	"google.golang.org/protobuf/proto"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// received is one call of the receiver's stats processor: a decoded
// payload and what the receiver read from the request around it.
type received struct {
	p                                *pb.ClientStatsPayload
	lang, tracerVersion, containerID string
}

// agentReceiver is the agent's HTTPReceiver serving on loopback TCP or a
// Unix socket, recording what its stats handler passes on.
type agentReceiver struct {
	r   *api.HTTPReceiver
	url string // for stats.Config.AgentURL and relay.ServerConfig.AgentURL

	mu   sync.Mutex
	got  []received
	busy int // payloads still to refuse as a backed-up trace-agent does
	// refused counts the payloads refused so.
	refused int
	// forward, when set, gets every payload taken, as the trace-agent's
	// ProcessStats queues it for its client stats aggregator (here without
	// the agent's normalization first).
	forward chan<- *pb.ClientStatsPayload
}

// ProcessStats is the receiver's StatsProcessor, called as the trace-agent's
// own is (Agent.ProcessStats, which normalizes the payload with these
// arguments before it queues it for its client stats aggregator). While busy, it
// does what the trace-agent's does when that aggregator's queue stays full:
// waits out the request's timeout and returns the context's error, which
// the receiver answers with 408.
func (a *agentReceiver) ProcessStats(ctx context.Context, p *pb.ClientStatsPayload, lang, tracerVersion, containerID, _ string) error {
	a.mu.Lock()
	if a.busy > 0 {
		a.busy--
		a.refused++
		a.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	forward := a.forward
	a.mu.Unlock()
	if forward != nil {
		select {
		case forward <- proto.Clone(p).(*pb.ClientStatsPayload):
		case <-ctx.Done():
			return ctx.Err() // answered 408: not taken
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, received{p: p, lang: lang, tracerVersion: tracerVersion, containerID: containerID})
	return nil
}

// set changes the receiver's behaviour under its lock, as its handlers
// read it.
func (a *agentReceiver) set(f func(*agentReceiver)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

func (a *agentReceiver) received() []received {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// startAgentReceiver starts the agent's receiver with config.New()'s
// defaults as edit leaves them, on loopback TCP, or on a Unix socket at
// socket (no TCP) when socket is not empty. Container features are on, as
// in a containerized agent: the receiver reads the container headers, and
// over its Unix socket the sender's credentials.
func startAgentReceiver(t *testing.T, socket string, edit func(*config.AgentConfig)) *agentReceiver {
	t.Helper()
	conf := config.New()
	conf.HasContainerFeatures = true
	conf.ContainerProcRoot = "/proc"
	conf.ReceiverHost = "127.0.0.1"
	// config.New leaves it 0, which the receiver's listeners take as one
	// connection at a time; the trace-agent's configuration sets 1000
	// unless apm_config.max_connections says otherwise.
	conf.MaxConnections = 1000
	if edit != nil {
		edit(conf)
	}
	client := &statsd.NoOpClient{}
	tm := timing.New(client)
	a := &agentReceiver{}
	a.r = api.NewHTTPReceiver(conf, sampler.NewDynamicConfig(), make(chan *api.Payload, 8), make(chan *api.PayloadV1, 8),
		a, telemetry.NewNoopCollector(), client, tm)
	if socket != "" {
		conf.ReceiverPort = 0
		conf.ReceiverSocket = socket
		a.url = "unix://" + socket
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conf.ReceiverPort = ln.Addr().(*net.TCPAddr).Port
		a.r.SetTCPListener(ln)
		a.url = "http://" + ln.Addr().String()
	}
	a.r.Start()
	t.Cleanup(func() {
		if err := a.r.Stop(); err != nil {
			t.Errorf("agent receiver Stop: %v", err)
		}
		tm.Stop()
	})
	return a
}

// The agent of the two limit tests lists three more peer-tag keys than its
// defaults and takes bodies of at most limitBody bytes; they report
// limitResources groups of ~120 bytes (~50 KiB) of limitPerGroup spans.
const (
	limitResources = 400
	limitPerGroup  = 3
	limitBody      = 24 << 10
)

func limitedAgent(c *config.AgentConfig) {
	c.PeerTags = []string{"team.shard", "tenant", "zone.name"}
	c.MaxRequestBytes = limitBody
}

// publishLimited publishes the limit tests' client spans, with peer tags
// the agent lists and one it does not, and stops agg.
func publishLimited(t *testing.T, agg *stats.Aggregator) {
	t.Helper()
	now := time.Now()
	for i := range limitResources {
		for range limitPerGroup {
			agg.Publish(&stats.Span{Service: "web", Name: "http.client", Resource: "GET /items/" + strconv.Itoa(i),
				SpanKind: "client", Start: now.Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond),
				PeerTags: []string{"peer.service:billing", "tenant:acme", "unlisted.key:dropped", "team.shard:7"}})
		}
	}
	if err := agg.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkLimited checks what the limited agent took: at least 3 bodies (the
// smallest split under its limit; the receiver refuses a longer one), each
// filed under container and tracerVersion (lang go), every group with the
// listed peer tags only, and every resource's hits.
func checkLimited(t *testing.T, got []received, container, tracerVersion string) {
	t.Helper()
	if len(got) < 3 {
		t.Fatalf("the receiver took %d payloads; want the report split in at least 3", len(got))
	}
	wantTags := []string{"peer.service:billing", "team.shard:7", "tenant:acme"}
	hits := map[string]uint64{}
	for _, r := range got {
		if r.lang != "go" || r.tracerVersion != tracerVersion || r.containerID != container {
			t.Fatalf("payload filed under lang %q, tracer version %q, container %q; want go, %s, %s",
				r.lang, r.tracerVersion, r.containerID, tracerVersion, container)
		}
		for _, b := range r.p.Stats {
			for _, g := range b.Stats {
				if tags := slices.Sorted(slices.Values(g.PeerTags)); !slices.Equal(tags, wantTags) {
					t.Fatalf("group %q has peer tags %q; want %q (the keys the agent's /info lists)", g.Resource, tags, wantTags)
				}
				hits[g.Resource] += g.Hits
			}
		}
	}
	if len(hits) != limitResources {
		t.Fatalf("%d resources reached the agent; want %d", len(hits), limitResources)
	}
	for res, n := range hits {
		if n != limitPerGroup {
			t.Fatalf("%s: %d hits; want %d", res, n, limitPerGroup)
		}
	}
}

// TestAgentReceiverTakesSDKReports: the SDK against the limited agent's
// receiver over TCP. The SDK reads that /info (before any span is
// published), keeps of each client span's peer tags those the list names,
// and splits its report into bodies under the limit: the handler decodes
// every one (a longer one it would refuse), files each under the language,
// tracer version and container the SDK's headers give, and the hits of every
// group are those published.
func TestAgentReceiverTakesSDKReports(t *testing.T) {
	ag := startAgentReceiver(t, "", limitedAgent)
	agg, err := stats.New(stats.Config{AgentURL: ag.url, Env: "interop", Service: "web", Version: "1.2.3",
		Hostname: "peer-host", TracerVersion: "v0.0.1-receiver", ContainerID: "cid-42", InfoRefresh: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	t.Cleanup(func() { _ = agg.Stop(context.Background()) })
	for deadline := time.Now().Add(10 * time.Second); agg.Health().InfoReads == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the SDK never read the agent's /info: %+v", agg.Health())
		}
	}
	publishLimited(t, agg)
	const spans = limitResources * limitPerGroup
	// No failed attempt: every body was under the limit (the receiver
	// answers a longer one 400, which the SDK would then split).
	if h := agg.Health(); h.Counted != spans || h.SpansSent != spans || h.PayloadsFailed != 0 || h.PayloadsDropped != 0 || h.InfoFailures != 0 {
		t.Fatalf("health %+v; want %d spans counted and sent, no attempt failed, no /info failure", h, spans)
	}
	checkLimited(t, ag.received(), "cid-42", "v0.0.1-receiver")
}

// TestFakeAgentInfoIsTheAgents: the /info of statstest's fake agent has the
// shape of a default agent's where the SDK reads it: the same peer_tags
// list (which decides the peer tags the SDK keeps), client_drop_p0s, the
// stats endpoint and no /info among the endpoints.
func TestFakeAgentInfoIsTheAgents(t *testing.T) {
	ag := startAgentReceiver(t, "", nil)
	fake := statstest.New()
	defer fake.Close()
	info := func(base string) map[string]any {
		resp, err := http.Get(base + "/info")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	agent, got := info(ag.url), info(fake.URL())
	for _, k := range []string{"peer_tags", "client_drop_p0s"} {
		if !reflect.DeepEqual(got[k], agent[k]) {
			t.Errorf("%s: fake %v, agent %v", k, got[k], agent[k])
		}
	}
	for _, m := range []map[string]any{agent, got} {
		eps, _ := m["endpoints"].([]any)
		if !slices.Contains(eps, any("/v0.6/stats")) || slices.Contains(eps, any("/info")) {
			t.Errorf("endpoints %v", eps)
		}
	}
}

// TestAgentReceiverTimeoutIsRetried: a trace-agent whose client stats
// aggregator is backed up lets the stats handler's timeout (here 250 ms)
// expire and answers 408 without taking the payload. The SDK retries it,
// after its backoff, and every span reaches the agent once: nothing dropped,
// no retry counted as one after a timeout of its own (the answer came).
func TestAgentReceiverTimeoutIsRetried(t *testing.T) {
	const spans = 25
	ag := startAgentReceiver(t, "", func(c *config.AgentConfig) { c.ReceiverTimeoutDuration = 250 * time.Millisecond })
	ag.set(func(a *agentReceiver) { a.busy = 2 })
	agg, err := stats.New(stats.Config{AgentURL: ag.url, Service: "web", RetryBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	t.Cleanup(func() { _ = agg.Stop(context.Background()) })
	for range spans {
		agg.Publish(&stats.Span{Service: "web", Name: "op", SpanKind: "server",
			Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond)})
	}
	if err := agg.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := agg.Health()
	got := ag.received()
	var hits uint64
	for _, r := range got {
		for _, b := range r.p.Stats {
			for _, g := range b.Stats {
				hits += g.Hits
			}
		}
	}
	ag.mu.Lock()
	refused := ag.refused
	ag.mu.Unlock()
	if refused != 2 || len(got) != 1 || hits != spans || h.SpansSent != spans || h.PayloadsFailed != 2 ||
		h.PayloadsRetried != 2 || h.RetriesAfterTimeout != 0 || h.PayloadsDropped != 0 {
		t.Fatalf("agent refused %d and took %d payloads of %d spans; SDK health %+v; want 2 refused (408), then 1 taken with all %d spans, 2 failed and retried, none dropped",
			refused, len(got), hits, h, spans)
	}
}

// TestAgentReceiverTakesRelayedReportsUnderItsLimit: the relay, forwarding
// over TCP to the limited agent's receiver, reads that /info: it keeps of
// the groups' peer tags those the list names, and packs a report of ~50 KiB
// merged from an SDK's datagrams into bodies under the limit, each taken at
// the first attempt (every request 2xx: this handler answers a body over
// the limit with 400, its msgp error wrapping the read limit's), the hits
// of every group exact.
func TestAgentReceiverTakesRelayedReportsUnderItsLimit(t *testing.T) {
	ag := startAgentReceiver(t, "", limitedAgent)
	srv, stopRelay := runRelay(t, relay.ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: ag.url,
		Logger: slog.New(slog.DiscardHandler)})
	for deadline := time.Now().Add(10 * time.Second); srv.Relay().Stats().PeerTagKeys < 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay never read the agent's /info")
		}
	}
	agg, err := stats.New(stats.Config{AgentURL: "udp://" + srv.Addr(relay.UDP), Service: "web",
		TracerVersion: "v0.0.1-relayed", ContainerID: claimedContainer, SendJitter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	t.Cleanup(func() { _ = agg.Stop(context.Background()) })
	publishLimited(t, agg)
	const spans = limitResources * limitPerGroup
	if h := agg.Health(); h.SpansSent != spans {
		t.Fatalf("the SDK sent %d spans; want %d (%+v)", h.SpansSent, spans, h)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.Relay().Stats().SpansReceived != spans; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("relay received %d spans; want %d", srv.Relay().Stats().SpansReceived, spans)
		}
	}
	if err := stopRelay(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var requests []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "statsrelay_forward_requests_total{") {
			requests = append(requests, line)
		}
	}
	got := ag.received()
	if want := fmt.Sprintf(`statsrelay_forward_requests_total{code="2xx"} %d`, len(got)); !slices.Equal(requests, []string{want}) {
		t.Fatalf("the relay's requests: %q; want each of the %d taken at once (%s)", requests, len(got), want)
	}
	checkLimited(t, got, claimedContainer, "v0.0.1-relayed")
}

// statsWriter records what the agent's client stats aggregator flushes.
type statsWriter struct {
	mu  sync.Mutex
	got []*pb.StatsPayload
}

func (w *statsWriter) Write(p *pb.StatsPayload) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, p)
}

// TestAgentAggregatorMergesSDKs: the trace-agent's path past its receiver.
// Its stats processor hands each payload to the agent's own
// ClientStatsAggregator (pkg/trace/stats), as Agent.ProcessStats does after
// normalizing it (left out here: these payloads are already normal), and
// three SDKs of one identity (their runtime ids apart) report the same keys
// in one bucket to that agent. The aggregator merges the three payloads into
// one per key: hits, top-level hits, errors and durations add, and its
// merged latency sketches have exactly the bins of the agent's own sketch
// of every duration published (as its concentrator cuts them), the SDKs'
// sketches merged without re-mapping.
func TestAgentAggregatorMergesSDKs(t *testing.T) {
	const (
		sdks      = 3
		keys      = 4
		perKey    = 60 // per SDK
		errorEach = 7  // one span in errorEach is an error
	)
	w := &statsWriter{}
	ag := startAgentReceiver(t, "", nil)
	csa := agentstats.NewClientStatsAggregator(config.New(), w, &statsd.NoOpClient{})
	csa.Start()
	stopped := false
	defer func() {
		if !stopped {
			csa.Stop()
		}
	}()
	ag.set(func(a *agentReceiver) { a.forward = csa.In })

	// Every SDK publishes the same durations per key, spread over six
	// decades, so that the merged sketches hold many bins.
	durs := spread(perKey, 2e4, 2e10)
	for i, d := range durs {
		durs[i] = math.Trunc(d) // what a Span's Duration holds
	}
	// Every span ends mid-bucket, of a bucket all three SDKs run in: not
	// one they start after its end, as a run across a boundary would be.
	if left := time.Until(time.Now().Truncate(10 * time.Second).Add(10 * time.Second)); left < 3*time.Second {
		time.Sleep(left)
	}
	end := time.Now().Truncate(10 * time.Second).Add(5 * time.Second)
	for i := range sdks {
		agg, err := stats.New(stats.Config{AgentURL: ag.url, Env: "interop", Service: "web", Version: "1.2.3",
			Hostname: "peer-host", RuntimeID: "sdk-" + strconv.Itoa(i), TracerVersion: "v0.0.1-agg"})
		if err != nil {
			t.Fatal(err)
		}
		agg.Start()
		for k := range keys {
			for j, d := range durs {
				agg.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: "GET /k/" + strconv.Itoa(k),
					SpanKind: "server", TopLevel: true, Error: j%errorEach == 0,
					Start: end.UnixNano() - int64(d), Duration: int64(d)})
			}
		}
		if err := agg.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := agg.Health(); h.SpansSent != keys*perKey {
			t.Fatalf("SDK %d sent %d spans; want %d (%+v)", i, h.SpansSent, keys*perKey, h)
		}
	}
	if n := len(ag.received()); n != sdks {
		t.Fatalf("the agent took %d payloads; want %d", n, sdks)
	}
	// Stop may end the aggregator's loop with payloads still queued: a
	// sentinel of another identity, taken from the queue only once the
	// payloads before it are added, is left to that race instead.
	csa.In <- &pb.ClientStatsPayload{Env: "sentinel"}
	for deadline := time.Now().Add(10 * time.Second); len(csa.In) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent's aggregator never took its queue")
		}
	}
	csa.Stop() // flushes every bucket
	stopped = true

	var okVals, errVals []float64
	var errs, dur uint64
	for j, d := range durs {
		dur += uint64(d)
		if v := concentratorValue(int64(d)); j%errorEach == 0 {
			errs++
			errVals = append(errVals, v)
		} else {
			okVals = append(okVals, v)
		}
	}
	var all []float64
	for range sdks {
		all = append(all, okVals...)
	}
	wantOK := referenceSketch(t, all)
	all = all[:0]
	for range sdks {
		all = append(all, errVals...)
	}
	wantErr := referenceSketch(t, all)

	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, sp := range w.got {
		for _, p := range sp.Stats {
			if p.Env == "sentinel" {
				continue
			}
			for _, b := range p.Stats {
				for _, g := range b.Stats {
					if seen[g.Resource] {
						t.Fatalf("%s flushed twice: the agent did not merge the SDKs' payloads", g.Resource)
					}
					seen[g.Resource] = true
					if g.Hits != sdks*perKey || g.TopLevelHits != sdks*perKey || g.Errors != sdks*errs || g.Duration != sdks*dur {
						t.Fatalf("%s: hits %d, top-level %d, errors %d, duration %d; want %d, %d, %d, %d",
							g.Resource, g.Hits, g.TopLevelHits, g.Errors, g.Duration, sdks*perKey, sdks*perKey, sdks*errs, sdks*dur)
					}
					for _, c := range []struct {
						name string
						enc  []byte
						want *ddsketch.DDSketch
					}{{"ok", g.OkSummary, wantOK}, {"error", g.ErrorSummary, wantErr}} {
						got, err := decodeSummary(c.enc)
						if err != nil {
							t.Fatalf("%s: the agent's merged %s sketch: %v", g.Resource, c.name, err)
						}
						if err := sameSketch(got, c.want); err != nil {
							t.Fatalf("%s: the agent's merged %s sketch: %v", g.Resource, c.name, err)
						}
					}
				}
			}
		}
	}
	if len(seen) != keys {
		t.Fatalf("the agent flushed %d keys; want %d", len(seen), keys)
	}
}

// inContainer has the agent's tagger place this process in container id,
// as the trace-agent's resolves the pid its Unix socket's credentials give.
func inContainer(id string) func(*config.AgentConfig) {
	pid := uint32(os.Getpid())
	return func(c *config.AgentConfig) {
		c.ContainerIDFromOriginInfo = func(o origindetection.OriginInfo) (string, error) {
			if o.LocalData.ProcessID == pid {
				return id, nil
			}
			return "", fmt.Errorf("no container known for pid %d", o.LocalData.ProcessID)
		}
	}
}

// TestAgentReceiverFilesSDKOverItsSocket: SDKs posting to the agent's Unix
// socket themselves. One that names no container is filed under its own,
// found from the socket's credentials (this process, in relayContainer to
// the agent's tagger); one given ContainerID under that id; one given only
// EntityID "ci-<id>" under that id too, the agent's origin detection
// reading it.
func TestAgentReceiverFilesSDKOverItsSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the agent finds a Unix socket peer's container from its credentials on Linux only")
	}
	sock := sockdir.Path(t, "apm.socket")
	ag := startAgentReceiver(t, sock, inContainer(relayContainer))
	const other = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
	sdks := []struct {
		service, containerID, entityID, want string
	}{
		{"credentials", "", "", relayContainer},
		{"container-id", claimedContainer, "", claimedContainer},
		{"entity-id", "", "ci-" + other, other},
	}
	for _, c := range sdks {
		agg, err := stats.New(stats.Config{AgentURL: ag.url, Service: c.service, ContainerID: c.containerID, EntityID: c.entityID})
		if err != nil {
			t.Fatal(err)
		}
		agg.Start()
		agg.Publish(&stats.Span{Service: c.service, Name: "op", SpanKind: "server",
			Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond)})
		if err := agg.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := agg.Health(); h.SpansSent != 1 {
			t.Fatalf("%s sent %d spans; want 1 (%+v)", c.service, h.SpansSent, h)
		}
	}
	got := ag.received()
	if len(got) != len(sdks) {
		t.Fatalf("the agent took %d payloads; want %d", len(got), len(sdks))
	}
	for i, c := range sdks {
		if r := got[i]; r.p.Service != c.service || r.containerID != c.want {
			t.Fatalf("payload %d (%s) filed under %q; want %s's %q", i, r.p.Service, r.containerID, c.service, c.want)
		}
	}
}

// Container ids of the tests over the agent's socket: this process's (the
// relay's, and an SDK's posting there itself), as the agent's tagger
// resolves the pid of its socket's peer (inContainer) and as the relay
// reads its cgroup; and one a sender claims.
const (
	relayContainer   = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	claimedContainer = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

// TestAgentReceiverFilesRelayedStats: the trap of DESIGN §8 in the agent's
// own receiver, and the relay keeping out of it. Over the agent's Unix
// socket a request without a container header is filed under the container
// of the socket's peer (here the agent's tagger, given the pid from the
// credentials, answers relayContainer), with one under the header's. A
// relay in relayContainer then forwards three SDKs' reports there: the
// Unix sender's (this process: the relay's container, read from
// -proc-root) and a UDP sender's claiming claimedContainer reach the agent
// filed under those, and a UDP sender's that names no container, which the
// agent would file under the relay's, is dropped and counted, never sent.
// The relay reads the receiver's /info over that socket: it holds as many
// peer-tag keys as the list there.
func TestAgentReceiverFilesRelayedStats(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the agent finds a Unix socket peer's container from its credentials on Linux only")
	}
	sock := sockdir.Path(t, "apm.socket")
	pid := uint32(os.Getpid())
	ag := startAgentReceiver(t, sock, inContainer(relayContainer))
	unixClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer unixClient.CloseIdleConnections()

	// The trap itself, with a payload the agent's encoder wrote.
	body, err := (&pb.ClientStatsPayload{Env: "trap", Service: "host-app", Stats: []*pb.ClientStatsBucket{{
		Start: uint64(time.Now().Truncate(10 * time.Second).UnixNano()), Duration: uint64(10 * time.Second),
		Stats: []*pb.ClientGroupedStats{{Service: "host-app", Name: "op", Resource: "r", Hits: 1, Duration: 5}}}}}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, header := range []string{"", claimedContainer} {
		req, err := http.NewRequest(http.MethodPost, "http://agent/v0.6/stats", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Datadog-Meta-Lang", "go")
		if header != "" {
			req.Header.Set("Datadog-Container-ID", header)
		}
		resp, err := unixClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("agent answered %d", resp.StatusCode)
		}
	}
	resp, err := unixClient.Get("http://agent/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		PeerTags []string `json:"peer_tags"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || len(info.PeerTags) == 0 {
		t.Fatalf("the agent's /info: %v, peer_tags %q", err, info.PeerTags)
	}
	trap := ag.received()
	if len(trap) != 2 || trap[0].containerID != relayContainer || trap[1].containerID != claimedContainer {
		t.Fatalf("the agent filed the two direct posts under %v; want %s (the socket peer's) then %s (the header's)",
			containers(trap), relayContainer, claimedContainer)
	}

	root := t.TempDir() // -proc-root: this process, the relay, runs in relayContainer
	dir := filepath.Join(root, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cgroup := "0::/system.slice/docker-" + relayContainer + ".scope\n"
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, stopRelay := runRelay(t, relay.ServerConfig{UnixPath: sockdir.Path(t, "relay.sock"), UDPAddr: "127.0.0.1:0",
		AgentURL: ag.url, Origin: true, ProcRoot: root, Logger: slog.New(slog.DiscardHandler)})
	senders := []struct {
		url, service, claim, wantContainer string
		spans                              int
	}{
		{"unixgram://" + srv.Addr(relay.Unix), "unix-app", "", relayContainer, 5},
		{"udp://" + srv.Addr(relay.UDP), "udp-claiming", claimedContainer, claimedContainer, 7},
		{"udp://" + srv.Addr(relay.UDP), "udp-anonymous", "", "", 11},
	}
	var sent uint64
	for _, s := range senders {
		agg, err := stats.New(stats.Config{AgentURL: s.url, Service: s.service, TracerVersion: "v0.0.1-" + s.service,
			ContainerID: s.claim, SendJitter: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		agg.Start()
		for range s.spans {
			agg.Publish(&stats.Span{Service: s.service, Name: "op", SpanKind: "server",
				Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond)})
		}
		if err := agg.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := agg.Health(); h.SpansSent != uint64(s.spans) {
			t.Fatalf("%s sent %d spans; want %d (%+v)", s.service, h.SpansSent, s.spans, h)
		}
		sent += uint64(s.spans)
	}
	// The relay reads the agent's /info over its socket too: its peer_tags
	// list, which the relay applies to what it merges as the SDK does.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := srv.Relay().Stats()
		if st.SpansReceived == sent && st.PeerTagKeys == len(info.PeerTags) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay received %d spans and holds %d peer-tag keys; want %d and the %d of the agent's /info",
				st.SpansReceived, st.PeerTagKeys, sent, len(info.PeerTags))
		}
	}
	if err := stopRelay(); err != nil {
		t.Fatal(err)
	}

	byService := map[string]received{}
	hits := map[string]uint64{}
	for _, r := range ag.received()[len(trap):] {
		if len(r.p.Stats) == 0 || len(r.p.Stats[0].Stats) == 0 {
			t.Fatalf("an empty payload reached the agent: %+v", r.p)
		}
		svc := r.p.Service
		if prev, ok := byService[svc]; ok && prev.containerID != r.containerID {
			t.Fatalf("%s filed under %q and %q", svc, prev.containerID, r.containerID)
		}
		byService[svc] = r
		for _, b := range r.p.Stats {
			for _, g := range b.Stats {
				hits[svc] += g.Hits
			}
		}
	}
	for _, s := range senders {
		r, ok := byService[s.service]
		switch {
		case s.wantContainer == "" && ok:
			t.Fatalf("%s reached the agent, filed under %q: the relay's container, not the sender's", s.service, r.containerID)
		case s.wantContainer == "":
		case !ok:
			t.Fatalf("%s never reached the agent (it took %v; relay %+v)", s.service, slices.Sorted(maps.Keys(byService)), srv.Relay().Stats())
		case r.containerID != s.wantContainer || r.lang != "go" || r.tracerVersion != "v0.0.1-"+s.service || hits[s.service] != uint64(s.spans):
			t.Fatalf("%s: %d hits filed under container %q, lang %q, tracer version %q; want %d under %q, go, v0.0.1-%s",
				s.service, hits[s.service], r.containerID, r.lang, r.tracerVersion, s.spans, s.wantContainer, s.service)
		}
	}
	st := srv.Relay().Stats()
	if st.SpansDropped[relay.DropUnattributable] != uint64(senders[2].spans) || st.SpansForwarded != sent-uint64(senders[2].spans) {
		t.Fatalf("relay forwarded %d spans, dropped %v; want %d forwarded and the anonymous UDP sender's %d unattributable",
			st.SpansForwarded, st.SpansDropped, sent-uint64(senders[2].spans), senders[2].spans)
	}
}

// containers lists the containers the receiver filed payloads under.
func containers(rs []received) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = strconv.Quote(r.containerID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}
