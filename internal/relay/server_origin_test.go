// This file tests container origins end to end: the sender's credentials
// and -proc-root reaching the agent's headers, and what a relay on the
// agent's Unix socket must not forward as its own container.

package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

const testContainer = "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"

// procRoot is a fake /proc in which this process runs in testContainer.
func procRoot(t *testing.T) string {
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	line := "0::/system.slice/docker-" + testContainer + ".scope\n"
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestOriginReachesAgent: the container id read from <proc-root>/<pid>/cgroup
// of the sending process reaches the agent's headers and the payload, though
// the SDK itself set none.
func TestOriginReachesAgent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: procRoot(t), UDPAddr: "-"})
	a, err := stats.New(stats.Config{AgentURL: "unixgram://" + srv.Addr(relay.Unix), Service: "web", TracerVersion: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	a.Publish(&stats.Span{Service: "web", Name: "op", SpanKind: "server", Duration: 5})
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop()
	reqs := ag.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	h := reqs[0].Header
	if h.Get("Datadog-Container-ID") != testContainer || h.Get("Datadog-Entity-ID") != "ci-"+testContainer ||
		reqs[0].Payload.ContainerID != testContainer {
		t.Fatalf("container header %q, entity %q, payload %q; want %s", h.Get("Datadog-Container-ID"),
			h.Get("Datadog-Entity-ID"), reqs[0].Payload.ContainerID, testContainer)
	}
	// The payload carries no language version: the relay sends no empty
	// header for it.
	if _, ok := h["Datadog-Meta-Lang-Version"]; ok || h.Get("Datadog-Meta-Lang") != "go" || h.Get("Datadog-Meta-Tracer-Version") != "v1.2.3" {
		t.Fatalf("language headers %q", h)
	}
}

// TestUnixAgentNeverMisfiles: a relay in a container forwarding to the
// agent's Unix socket never sends a request without a container id, which
// the agent would file under the relay's own container. With origin
// detection on, a Unix sender's stats go with its container id and a UDP
// sender's are dropped (counted); with it off, both are dropped.
func TestUnixAgentNeverMisfiles(t *testing.T) {
	for _, origin := range []bool{true, false} {
		t.Run(fmt.Sprintf("origin=%v", origin), func(t *testing.T) {
			sock := sockdir.Path(t, "apm.socket")
			ag, err := statstest.NewUnix(sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ag.Close()
			srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: origin, ProcRoot: procRoot(t)})
			publishThreeEach(t, srv)
			stop()
			wantReqs, wantForwarded, wantDropped := 1, uint64(3), uint64(3)
			if !origin {
				wantReqs, wantForwarded, wantDropped = 0, 0, 6
			}
			reqs := ag.Requests()
			if len(reqs) != wantReqs || wantReqs == 1 && reqs[0].Header.Get("Datadog-Container-ID") != testContainer {
				t.Fatalf("%d requests, want %d (each with the Unix sender's container id)", len(reqs), wantReqs)
			}
			st := srv.Relay().Stats()
			if st.SpansForwarded != wantForwarded || st.SpansDropped[relay.DropUnattributable] != wantDropped {
				t.Fatalf("forwarded %d, unattributable %d; want %d and %d",
					st.SpansForwarded, st.SpansDropped[relay.DropUnattributable], wantForwarded, wantDropped)
			}
			checkIdentity(t, st)
		})
	}
}

// publishThreeEach runs an SDK over srv's Unix socket, then one over its
// UDP socket, each publishing 3 server spans named after its transport
// ("unix", "udp:") and stopping.
func publishThreeEach(t *testing.T, srv *relay.Server) {
	t.Helper()
	for _, u := range []string{"unixgram://" + srv.Addr(relay.Unix), "udp://" + srv.Addr(relay.UDP)} {
		a, err := stats.New(stats.Config{AgentURL: u, Service: "web"})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		for range 3 {
			a.Publish(&stats.Span{Service: "web", Name: u[:4], SpanKind: "server", Duration: 5})
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// ownCgroupRoot is a proc root where this process (relay and sender alike)
// is alive in a cgroup that names no container (cgroup v2 in a private
// namespace: "0::/").
func ownCgroupRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(os.Getpid()) + " (relay) S 1 1 1 0 -1 4194560" // alive
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestUnixAgentDropsHostSender: a relay in a container forwarding to the
// agent's Unix socket, and a Unix sender in another process whose cgroup
// names no container (a host process), claiming one: the credentials
// correct the claim (a mismatch, counted) to no container, and without
// one the agent would file the stats under the relay's container, so they
// are dropped as unattributable, never sent.
func TestUnixAgentDropsHostSender(t *testing.T) {
	root := procRoot(t) // the relay runs in testContainer
	sock := sockdir.Path(t, "apm.socket")
	ag, err := statstest.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: true, ProcRoot: root, UDPAddr: "-"})
	defer stop()
	sendFromChild(t, root, srv.Addr(relay.Unix), "0::/user.slice/user-1000.slice/session-2.scope\n")
	waitFor(t, "the sender's datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if n := len(ag.Requests()); n != 0 || st.SpansDropped[relay.DropUnattributable] != 4 || st.ContainerMismatches != 1 {
		t.Fatalf("%d requests, unattributable %d, mismatches %d; want 0, 4, 1", n, st.SpansDropped[relay.DropUnattributable], st.ContainerMismatches)
	}
}

// sendFromChild runs a sender in a child process, whose
// <root>/<pid>/cgroup holds cgroup, and waits for it to have written
// hostSenderDatagram (4 hits, claiming a container) to the relay's Unix
// socket at addr.
func sendFromChild(t *testing.T, root, addr, cgroup string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STATSRELAY_TEST_SENDER="+addr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := filepath.Join(root, strconv.Itoa(cmd.Process.Pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(cmd.Process.Pid) + " (sender) S 1 1 1 0 -1 4194560" // alive, read as the relay decodes
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || out.String() != "sent\n" {
		t.Fatalf("sender: %v, said %q", err, out.String())
	}
}

// TestOriginOfChildSender: a sender in another process and another
// container than the relay's: the container id of the sending pid, read
// from -proc-root, reaches the agent's headers and the payload, not the
// relay's own nor the one the datagram claims (a mismatch, counted).
func TestOriginOfChildSender(t *testing.T) {
	const other = "9f2c5e8a7b6d4c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e"
	root := procRoot(t) // the relay runs in testContainer
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: root, UDPAddr: "-"})
	defer stop()
	sendFromChild(t, root, srv.Addr(relay.Unix), "0::/kubepods.slice/cri-containerd-"+other+".scope\n")
	waitFor(t, "the sender's datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	reqs := ag.Requests()
	if len(reqs) != 1 || st.SpansForwarded != 4 || st.ContainerMismatches != 1 {
		t.Fatalf("%d requests, forwarded %d, mismatches %d; want 1, 4, 1", len(reqs), st.SpansForwarded, st.ContainerMismatches)
	}
	if h := reqs[0].Header; h.Get("Datadog-Container-ID") != other || h.Get("Datadog-Entity-ID") != "ci-"+other ||
		reqs[0].Payload.ContainerID != other {
		t.Fatalf("container header %q, entity %q, payload %q; want the sender's %s", h.Get("Datadog-Container-ID"),
			h.Get("Datadog-Entity-ID"), reqs[0].Payload.ContainerID, other)
	}
}

// TestUnixAgentSameContainerSender: a relay in a container whose cgroup
// names none (cgroup v2 in a private namespace: "0::/") forwards to the
// agent's Unix socket the stats of a Unix sender that shares its cgroup —
// the agent files them under the relay's container, which is the
// sender's — without a container header, and still drops a UDP sender's
// (counted as unattributable).
func TestUnixAgentSameContainerSender(t *testing.T) {
	root := ownCgroupRoot(t)
	sock := sockdir.Path(t, "apm.socket")
	ag, err := statstest.NewUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: true, ProcRoot: root})
	publishThreeEach(t, srv)
	stop()
	reqs := ag.Requests()
	got, hits := statstest.Sum(statstest.Accepted(reqs))
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != "" || hits != 3 ||
		got[statstest.GroupKey{Service: "web", Name: "unix", SpanKind: "server"}].Hits != 3 {
		t.Fatalf("%d requests, %d spans taken (%v); want one request without a container header, the Unix sender's 3", len(reqs), hits, got)
	}
	st := srv.Relay().Stats()
	if st.SpansForwarded != 3 || st.SpansDropped[relay.DropUnattributable] != 3 {
		t.Fatalf("forwarded %d, unattributable %d; want 3 and 3", st.SpansForwarded, st.SpansDropped[relay.DropUnattributable])
	}
	checkIdentity(t, st)
}

// TestSameContainerSenderKeepsItsClaim: a Unix sender in the relay's own
// cgroup, which names no container, claims one: the credentials cannot
// contradict it, so the claim reaches the agent, and no mismatch is
// counted.
func TestSameContainerSenderKeepsItsClaim(t *testing.T) {
	root := ownCgroupRoot(t)
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: root, UDPAddr: "-"})
	defer stop()
	snd, err := dgram.DialUnixgram(srv.Addr(relay.Unix), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	g := writer.Group{}
	g.Service, g.Name, g.SpanKind, g.Hits, g.Duration = "web", "op", "server", 4, 40
	pl := writer.Payload{Header: writer.Header{Service: "web", RuntimeID: "r", ContainerID: testContainer},
		Buckets: []writer.DecodedBucket{{Start: uint64(time.Now().Truncate(10 * time.Second).UnixNano()), Duration: uint64(time.Second), Groups: []writer.Group{g}}}}
	if err := snd.Write(pl.Append(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 4 })
	stop()
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != testContainer || reqs[0].Payload.ContainerID != testContainer ||
		reqs[0].Header.Get("Datadog-Entity-ID") != "ci-"+testContainer {
		t.Fatalf("%d requests; want one with the sender's claim %s in its headers and payload", len(reqs), testContainer)
	}
	if st := srv.Relay().Stats(); st.ContainerMismatches != 0 || st.SpansForwarded != 4 {
		t.Fatalf("mismatches %d, forwarded %d; want 0 and 4", st.ContainerMismatches, st.SpansForwarded)
	}
}

// TestUnsafeClaimCorrectedByCredentials: a Unix sender whose credentials
// name its container has its claim replaced, whatever the claim holds: a
// control character in it is a mismatch, counted and corrected, not a
// reason to drop its spans (the claim is never sent as a header).
func TestUnsafeClaimCorrectedByCredentials(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	srv, stop := startServer(t, relay.ServerConfig{AgentURL: ag.URL(), Origin: true, ProcRoot: procRoot(t), UDPAddr: "-"})
	conn, err := net.Dial("unixgram", srv.Addr(relay.Unix))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: 4, Duration: 40}
	h := writer.Header{Service: "web", RuntimeID: "claims", Lang: "go", ContainerID: "bad\r\nX-Injected: 1"}
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1})
	b = writer.AppendPayload(b, &h, []writer.Bucket{{Start: uint64(time.Now().Truncate(time.Second).UnixNano()),
		Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
	stop()
	st := srv.Relay().Stats()
	checkIdentity(t, st)
	if st.ContainerMismatches != 1 || st.SpansForwarded != 4 {
		t.Fatalf("mismatches %d, forwarded %d, rejected %v; want 1, 4", st.ContainerMismatches, st.SpansForwarded, st.Rejected)
	}
	reqs := ag.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != testContainer || reqs[0].Payload.ContainerID != testContainer {
		t.Fatalf("%d requests; want 1 under %s", len(reqs), testContainer)
	}
}

// TestBlankClaimIsNoClaim: a payload whose ContainerID is white space only,
// over UDP to a relay in a container that forwards to the agent's Unix
// socket. net/http would send it as an empty Datadog-Container-ID (and
// "ci-" as the entity), which the agent replaces with the connection's
// container, the relay's: the claim is trimmed as net/http trims it, so it
// is no claim, and the spans are dropped as unattributable, never sent.
// Around a real id, the white space goes and the id stands.
func TestBlankClaimIsNoClaim(t *testing.T) {
	for _, cid := range []string{" ", "\t", " \t ", " " + testContainer + "\t"} {
		t.Run(strconv.Quote(cid), func(t *testing.T) {
			sock := sockdir.Path(t, "apm.socket")
			ag, err := statstest.NewUnix(sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ag.Close()
			srv, stop := startServer(t, relay.ServerConfig{AgentURL: "unix://" + sock, Origin: true, ProcRoot: procRoot(t)})
			defer stop()
			conn, err := net.Dial("udp", srv.Addr(relay.UDP))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			e := &aggregate.Entry{Key: aggregate.Key{Service: "web", Name: "op", Resource: "r"}, Hits: 5, Duration: 50}
			h := writer.Header{Service: "web", RuntimeID: "blank-claim", Lang: "go", ContainerID: cid}
			d := writer.AppendPayload(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), &h, []writer.Bucket{{
				Start: uint64(time.Now().Truncate(time.Second).UnixNano()), Duration: uint64(time.Second), Groups: []*aggregate.Entry{e}}})
			if _, err := conn.Write(d); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the datagram", func() bool { return srv.Relay().Stats().SpansReceived == 5 })
			stop()
			st := srv.Relay().Stats()
			checkIdentity(t, st)
			reqs := ag.Requests()
			if cid != " "+testContainer+"\t" {
				if len(reqs) != 0 || st.SpansDropped[relay.DropUnattributable] != 5 {
					t.Fatalf("%d requests, %d unattributable; want 0 and 5", len(reqs), st.SpansDropped[relay.DropUnattributable])
				}
				return
			}
			if len(reqs) != 1 || reqs[0].Header.Get("Datadog-Container-ID") != testContainer || reqs[0].Payload.ContainerID != testContainer || st.SpansForwarded != 5 {
				t.Fatalf("%d requests (want 1 with the trimmed id), forwarded %d", len(reqs), st.SpansForwarded)
			}
		})
	}
}
