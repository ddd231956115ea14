// This file tests statsrelay as an operator runs it: the binary itself (the
// test binary re-executed as main, see TestMain), its socket file, its
// signals and its exit status.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// binary is a statsrelay process started by startBinary.
type binary struct {
	cmd     *exec.Cmd
	started chan string   // its "statsrelay started" log line
	done    chan struct{} // closed once its stderr ended (it exited)
	mu      sync.Mutex
	log     bytes.Buffer // its stderr so far
}

// startBinary starts statsrelay with args and returns once it is running
// (or has already exited: then started stays empty and done is closed).
func startBinary(t *testing.T, args ...string) *binary {
	t.Helper()
	return startBinaryCmd(t, exec.Command(os.Args[0], "-test.run=^$"), args...)
}

// startBinaryIgnoring is startBinary with sig ignored, as nohup (SIGHUP)
// or a shell starting a background job (SIGINT) leaves it: a shell sets
// it, then execs the binary, which inherits it.
func startBinaryIgnoring(t *testing.T, sig syscall.Signal, args ...string) *binary {
	t.Helper()
	trap := fmt.Sprint(int(sig)) // sh's trap takes the number
	return startBinaryCmd(t, exec.Command("/bin/sh", "-c", `trap "" `+trap+`; exec "$0" "$@"`, os.Args[0], "-test.run=^$"), args...)
}

func startBinaryCmd(t *testing.T, cmd *exec.Cmd, args ...string) *binary {
	t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	b := &binary{started: make(chan string, 1), done: make(chan struct{})}
	b.cmd = cmd
	b.cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(a))
	stderr, err := b.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			b.mu.Lock()
			b.log.WriteString(sc.Text() + "\n")
			b.mu.Unlock()
			if strings.Contains(sc.Text(), "statsrelay started") {
				b.started <- sc.Text()
			}
		}
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill() // an error only says it has exited
		<-b.done
		_ = b.cmd.Wait() // a second Wait only says it was waited for
	})
	return b
}

// startedLine waits for the binary's "statsrelay started" line.
func (b *binary) startedLine(t *testing.T) string {
	t.Helper()
	select {
	case line := <-b.started:
		return line
	case <-b.done:
		t.Fatalf("statsrelay exited at start:\n%s", b.output())
	case <-time.After(20 * time.Second):
		t.Fatalf("statsrelay did not start in 20 s:\n%s", b.output())
	}
	return ""
}

// startedAddr waits for the start line and returns the address it gives
// for key ("udp", "http").
func (b *binary) startedAddr(t *testing.T, key string) string {
	t.Helper()
	line := b.startedLine(t)
	m := regexp.MustCompile(key + `=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("start line %q: no %s address", line, key)
	}
	return m[1]
}

// stop sends sig and wants the binary to exit 0.
func (b *binary) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t); code != 0 {
		t.Fatalf("exit status %d after %v, want 0:\n%s", code, sig, b.output())
	}
}

// sendOverUDP publishes spans through an SDK aggregator sending to the
// relay at udp addr, and stops it: one report, sent.
func sendOverUDP(t *testing.T, addr string, spans ...stats.Span) {
	t.Helper()
	a, err := stats.New(stats.Config{AgentURL: "udp://" + addr, Service: "web", SendJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	for i := range spans {
		a.Publish(&spans[i])
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the binary to exit and returns its exit status.
func (b *binary) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("statsrelay still running 30 s after it was told to stop:\n%s", b.output())
	}
	err := b.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return 0
}

func (b *binary) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// TestBinaryForwardsWhatItHoldsOnSignal: SIGTERM, SIGINT or SIGHUP makes statsrelay
// forward every span it holds — with -interval 1h, none was forwarded
// before — then remove its socket file and exit 0. It starts over the
// stale socket file of a relay that died, and takes SDK reports over both
// the Unix socket and UDP.
func TestBinaryForwardsWhatItHoldsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { testForwardsOnSignal(t, sig) })
	}
}

func testForwardsOnSignal(t *testing.T, sig syscall.Signal) {
	ag := statstest.New()
	defer ag.Close()
	sock := sockdir.Path(t, "relay.sock")
	stale, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	stale.Close() // a UnixConn leaves its socket file behind, as a relay that died does
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket file: %v, %v", fi, err)
	}

	b := startBinary(t, "-unix", sock, "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "",
		"-interval", "1h", "-origin=false")
	udp := b.startedAddr(t, "udp")
	published := map[string]struct{ hits, errors int }{"GET /over-unix": {300, 7}, "GET /over-udp": {200, 11}}
	for url, resource := range map[string]string{"unixgram://" + sock: "GET /over-unix", "udp://" + udp: "GET /over-udp"} {
		a, err := stats.New(stats.Config{AgentURL: url, Service: "web", SendJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		want := published[resource]
		for i := range want.hits {
			a.Publish(&stats.Span{Service: "web", Name: "http.request", Resource: resource, SpanKind: "server",
				Duration: int64(1+i) * int64(time.Millisecond), Error: i < want.errors, TopLevel: true})
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatalf("%s: Flush: %v", url, err)
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatalf("%s: Stop: %v", url, err)
		}
		if h := a.Health(); h.SpansSent != uint64(want.hits) || h.PayloadsDropped != 0 {
			t.Fatalf("%s: sent %d spans, dropped %d payloads; want %d sent, none dropped", url, h.SpansSent, h.PayloadsDropped, want.hits)
		}
	}
	if n := len(ag.Requests()); n != 0 {
		t.Fatalf("the agent had %d requests before the signal; with -interval 1h, want none", n)
	}

	b.stop(t, sig)
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after exit: %v, want it removed", err)
	}
	totals, hits := statstest.Sum(ag.Requests())
	if hits != 500 {
		t.Errorf("agent received %d hits, want 500", hits)
	}
	for resource, want := range published {
		got := totals[statstest.GroupKey{Service: "web", Name: "http.request", Resource: resource, SpanKind: "server"}]
		if got == nil || got.Hits != uint64(want.hits) || got.Errors != uint64(want.errors) ||
			got.TopLevelHits != uint64(want.hits) || got.OkCount+got.ErrCount != uint64(want.hits) {
			t.Errorf("%s at the agent: %+v, want %d hits, %d errors, all top-level, all in sketches", resource, got, want.hits, want.errors)
		}
	}
	if !regexp.MustCompile(`statsrelay stopped spans_received=500 spans_forwarded=500 spans_pending=0`).MatchString(b.output()) {
		t.Errorf("no stop line accounting for the 500 spans:\n%s", b.output())
	}
}

// TestBinaryHandsOver: a restart without a gap, as the README describes it.
// A second statsrelay starts on the first's socket path and, both with
// -udp-reuseport, its UDP port (each on its own -http address: that port
// is not shared); SIGTERM then stops the first, which forwards what it
// received and leaves the second's socket file in place.
// A Unix and a UDP SDK report before, during and after: the agent gets
// every span, and each relay's stop line drops none.
func TestBinaryHandsOver(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a shared UDP port (SO_REUSEPORT) is Linux only")
	}
	ag := statstest.New()
	defer ag.Close()
	sock := sockdir.Path(t, "relay.sock")
	args := []string{"-unix", sock, "-udp-reuseport", "-agent", ag.URL(), "-http", "127.0.0.1:0", "-interval", "1h", "-origin=false"}
	first := startBinary(t, append(args, "-udp", "127.0.0.1:0")...)
	udp := first.startedAddr(t, "udp")
	var aggs []*stats.Aggregator
	for _, url := range []string{"unixgram://" + sock, "udp://" + udp} {
		a, err := stats.New(stats.Config{AgentURL: url, Service: "web", SendJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
		aggs = append(aggs, a)
	}
	report := func(n int) {
		t.Helper()
		for _, a := range aggs {
			for range n {
				a.Publish(&stats.Span{Service: "web", Name: "op", SpanKind: "server", Duration: int64(time.Millisecond)})
			}
			if err := a.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	report(3)
	second := startBinary(t, append(args, "-udp", udp)...)
	second.startedLine(t)
	report(5)
	first.stop(t, syscall.SIGTERM)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("the second relay's socket file after the first stopped: %v, %v", fi, err)
	}
	report(7)
	for _, a := range aggs {
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := a.Health(); h.SpansSent != 15 || h.PayloadsDropped != 0 {
			t.Fatalf("an SDK sent %d spans and dropped %d payloads; want 15 sent, none dropped", h.SpansSent, h.PayloadsDropped)
		}
	}
	second.stop(t, syscall.SIGTERM)
	if _, hits := statstest.Sum(ag.Requests()); hits != 30 {
		t.Fatalf("the agent received %d hits; want 30", hits)
	}
	stopLine := regexp.MustCompile(`statsrelay stopped spans_received=(\d+) spans_forwarded=(\d+) spans_pending=0`)
	total := 0
	for _, b := range []*binary{first, second} {
		m := stopLine.FindStringSubmatch(b.output())
		if m == nil || m[1] != m[2] {
			t.Fatalf("a relay's stop line does not forward all it received, dropping none:\n%s", b.output())
		}
		var n int
		fmt.Sscan(m[1], &n)
		total += n
	}
	if total != 30 {
		t.Fatalf("the relays received %d spans between them; want 30", total)
	}
}

// TestBinaryStartErrors: a bad flag exits 2 naming it; a file at the socket
// path that is not a socket exits 1 naming the path, and is left as it was.
func TestBinaryStartErrors(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	notSocket := sockdir.Path(t, "stats.sock")
	if err := os.WriteFile(notSocket, []byte("an operator's file\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	sock := sockdir.Path(t, "relay.sock")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-interval", "10ms"}, 2, "-interval 10ms"},
		{[]string{"-unix", notSocket, "-udp", "", "-http", "", "-agent", ag.URL()}, 1, notSocket},
		{[]string{"-unix", sock, "-udp", "", "-http", busy.Addr().String(), "-agent", ag.URL()}, 1, "-http " + busy.Addr().String()},
	} {
		b := startBinary(t, tc.args...)
		if code := b.wait(t); code != tc.code || !strings.Contains(b.output(), tc.want) {
			t.Errorf("%q: exit status %d, stderr:\n%s\nwant status %d and a message naming %q", tc.args, code, b.output(), tc.code, tc.want)
		}
	}
	if got, err := os.ReadFile(notSocket); err != nil || string(got) != "an operator's file\n" {
		t.Errorf("the file at the socket path after the refused start: %q, %v; want it untouched", got, err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a start failed on a busy -http left its socket file behind: %v", err)
	}
}

// heldAgent is a fake agent holding every request until release is called
// (at most once; the test's cleanup calls it before closing the agent,
// which waits for its handlers), and telling entered of each.
func heldAgent(t *testing.T) (ag *statstest.Agent, entered <-chan struct{}, release func()) {
	ag = statstest.New()
	t.Cleanup(ag.Close)
	held, in := make(chan struct{}), make(chan struct{}, 16)
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release) // runs first: cleanups run last-registered first
	ag.SetHandler(func(http.ResponseWriter, *http.Request, int) bool {
		in <- struct{}{}
		<-held
		return false
	})
	return ag, in, release
}

// TestBinarySecondSignalExits: while the final forward after a SIGTERM
// waits on an agent that does not answer (-stop-timeout 5m), a second
// SIGTERM, sent at once, ends the process at once with status 143 (128 +
// SIGTERM), not 0, and says so.
func TestBinarySecondSignalExits(t *testing.T) {
	ag, entered, _ := heldAgent(t)
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "",
		"-interval", "1h", "-stop-timeout", "5m")
	sendOverUDP(t, b.startedAddr(t, "udp"), stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1000})
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // the final forward is held by the agent
	case <-time.After(20 * time.Second):
		t.Fatalf("no forward after SIGTERM:\n%s", b.output())
	}
	// Past signalRepeat since the first, or it is taken for the first
	// delivered twice (TestBinaryRepeatedSignalStopsGracefully).
	time.Sleep(2 * signalRepeat)
	start := time.Now()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := b.wait(t)
	if took := time.Since(start); took > 5*time.Second || code != 128+int(syscall.SIGTERM) ||
		!strings.Contains(b.output(), "second signal (terminated): exiting without the final forward") {
		t.Fatalf("after a second SIGTERM: exit status %d in %s; want 143 at once, said:\n%s", code, took, b.output())
	}
	// What it abandons is said: the one span whose forward the agent holds.
	if !strings.Contains(b.output(), "spans_pending=1 spans_received=1 spans_forwarded=0") {
		t.Fatalf("the second signal's line does not say what is abandoned:\n%s", b.output())
	}
}

// TestBinaryRepeatedSignalStopsGracefully: SIGTERM delivered twice at once,
// as timeout(1) and other wrappers that signal the process and its group
// deliver it, is one stop: what the relay holds is forwarded and it exits
// 0. It used to take the repeat for an operator's second signal and exit
// 143 without the final forward.
func TestBinaryRepeatedSignalStopsGracefully(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "", "-interval", "1h")
	sendOverUDP(t, b.startedAddr(t, "udp"), stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1000})
	for range 2 {
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // two deliveries, not one the kernel merged
	}
	if code := b.wait(t); code != 0 {
		t.Fatalf("SIGTERM twice at once: exit status %d, want 0; said:\n%s", code, b.output())
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != 1 {
		t.Fatalf("the agent holds %d hits, want the 1 sent; said:\n%s", hits, b.output())
	}
}

// TestBinaryKeepsIgnoredSignalsIgnored: run under nohup (SIGHUP ignored)
// or as a shell script's background job (SIGINT ignored), statsrelay must
// not stop on that signal: the operator asked it to outlive the terminal,
// or the script's Ctrl-C. SIGTERM still stops it gracefully.
func TestBinaryKeepsIgnoredSignalsIgnored(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ag := statstest.New()
			defer ag.Close()
			b := startBinaryIgnoring(t, sig, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "127.0.0.1:0")
			addr := b.startedAddr(t, "http")
			if err := b.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-b.done:
				t.Fatalf("statsrelay exited on the ignored %v:\n%s", sig, b.output())
			case <-time.After(300 * time.Millisecond):
			}
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz %d after the ignored %v: it began a stop", resp.StatusCode, sig)
			}
			b.stop(t, syscall.SIGTERM)
		})
	}
}

// TestBinaryLogsItsHTTPAddress: started with -http 127.0.0.1:0, as an
// operator picking a free port does, the start line gives the port it
// bound (not ":0"), and /healthz and /metrics answer there.
func TestBinaryLogsItsHTTPAddress(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "127.0.0.1:0")
	addr := b.startedAddr(t, "http")
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("start line gives http=%s: want the bound address", addr)
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/metrics": "\nstatsrelay_spans_received_total 0\n"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s at the logged address: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q, want 200 with %q", path, resp.StatusCode, body, want)
		}
	}
	b.stop(t, syscall.SIGTERM)
}

// TestBinaryRunsOnProcs: the binary runs on one processor by default and
// on what -procs says, as its start line reports.
func TestBinaryRunsOnProcs(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "1"},
		{[]string{"-procs", "3"}, "3"},
	} {
		if _, set := os.LookupEnv("GOMAXPROCS"); set && tc.args == nil {
			continue // kept as the operator's: not this test's default
		}
		b := startBinary(t, append([]string{"-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", ""}, tc.args...)...)
		if got := b.startedAddr(t, "procs"); got != tc.want {
			t.Errorf("%q: start line says procs=%s, want %s", tc.args, got, tc.want)
		}
		b.stop(t, syscall.SIGTERM)
	}
}

// TestBinaryWarnsOfVariables: a STATSRELAY_ variable that names no flag,
// and STATSRELAY_VERSION (-version is read from the command line only),
// are logged as ignored; the relay starts and serves either way.
func TestBinaryWarnsOfVariables(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		want       []string
	}{
		{"STATSRELAY_INTERVL", "5s", []string{"name no flag", "variables=STATSRELAY_INTERVL"}},
		{"STATSRELAY_VERSION", "true", []string{"ignoring STATSRELAY_VERSION"}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			ag := statstest.New()
			defer ag.Close()
			t.Setenv(tc.env, tc.value)
			b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "")
			b.startedLine(t)
			b.stop(t, syscall.SIGTERM)
			out := b.output()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("no warning holding %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, mainArgsEnv) {
				t.Fatalf("the test's own variable reached main:\n%s", out)
			}
		})
	}
}

// TestBinaryPprofCmdlineHidesPassword: /debug/pprof/cmdline shows the
// command line, but an -agent password in it hidden, as the start line
// hides it: the endpoint answers whoever reaches -http.
func TestBinaryPprofCmdlineHidesPassword(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	withPassword := strings.Replace(ag.URL(), "http://", "http://dd:s3cret-pw@", 1)
	for _, agentArgs := range [][]string{{"-agent", withPassword}, {"-agent=" + withPassword}} {
		args := append([]string{"-unix", "", "-udp", "127.0.0.1:0", "-http", "127.0.0.1:0"}, agentArgs...)
		b := startBinary(t, args...)
		resp, err := http.Get("http://" + b.startedAddr(t, "http") + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "s3cret-pw") || !strings.Contains(string(body), "-udp\x00127.0.0.1:0") {
			t.Errorf("%q: /debug/pprof/cmdline: %d %q; want 200, the arguments, no password", agentArgs, resp.StatusCode, body)
		}
		if strings.Contains(b.output(), "s3cret-pw") {
			t.Errorf("%q: the log shows the password:\n%s", agentArgs, b.output())
		}
		b.stop(t, syscall.SIGTERM)
	}
}

// TestBinaryStopLineCountsMaybeDelivered: an agent that takes a request and
// never answers, cut by -stop-timeout, may have counted its spans; the
// relay counts them in statsrelay_spans_dropped_after_timeout_total, which
// nobody can scrape once the process has exited. The stop line must say
// it, or the operator reads every such span as lost.
func TestBinaryStopLineCountsMaybeDelivered(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetHandler(func(_ http.ResponseWriter, r *http.Request, _ int) bool {
		_, _ = io.Copy(io.Discard, r.Body) // taken, never answered
		<-r.Context().Done()
		return true
	})
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "",
		"-interval", "1h", "-stop-drain", "100ms", "-stop-timeout", "1s")
	spans := make([]stats.Span, 40)
	for i := range spans {
		spans[i] = stats.Span{Service: "web", Name: "http.request", Resource: "GET /", SpanKind: "server",
			Duration: int64(1+i) * int64(time.Millisecond), TopLevel: true}
	}
	sendOverUDP(t, b.startedAddr(t, "udp"), spans...)
	time.Sleep(200 * time.Millisecond) // merged before the signal
	b.stop(t, syscall.SIGTERM)
	if len(ag.Requests()) == 0 {
		t.Fatalf("the agent saw no request:\n%s", b.output())
	}
	if !regexp.MustCompile(`statsrelay stopped spans_received=40 .*spans_dropped\.stopped=40 .*spans_dropped_after_timeout=40\b`).MatchString(b.output()) {
		t.Errorf("the stop line does not say the 40 dropped spans may have reached the agent:\n%s", b.output())
	}
}

// TestBinaryFailedRequestsSayWhy: the log line for failed requests to the
// agent carries the last error, as the SDK's does: "status_error=3" alone
// leaves an operator who gave -agent https:// for an http agent, or the
// wrong port, with every span dropped and no clue why.
func TestBinaryFailedRequestsSayWhy(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	wrong := strings.Replace(ag.URL(), "http://", "https://", 1)
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", wrong, "-http", "",
		"-interval", "1h", "-stop-drain", "100ms", "-stop-timeout", "1s")
	sendOverUDP(t, b.startedAddr(t, "udp"), stats.Span{Service: "web", Name: "http.request", Resource: "GET /", Duration: 1e6, TopLevel: true})
	time.Sleep(200 * time.Millisecond) // merged before the signal
	b.stop(t, syscall.SIGTERM)
	if !regexp.MustCompile(`requests to the agent failed .*status_error=\d+ .*last_error=".*HTTP response to HTTPS client`).MatchString(b.output()) {
		t.Errorf("the failed-requests line does not say why they failed:\n%s", b.output())
	}
}

// TestBinaryRebindsRemovedSocket: the socket file removed while statsrelay
// runs (a /tmp cleaner), the next -socket-check binds it again: a sender
// reaches the relay, the metrics and one log line say so, and the stop
// removes the new file.
func TestBinaryRebindsRemovedSocket(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	path := sockdir.Path(t, "relay.sock")
	b := startBinary(t, "-unix", path, "-udp", "", "-agent", ag.URL(), "-http", "127.0.0.1:0", "-socket-check", "20ms")
	addr := b.startedAddr(t, "http")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	send := func() bool {
		c, err := net.Dial("unixgram", path)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Write([]byte{0xc1})
		return err == nil
	}
	metrics := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !send() {
		if time.Now().After(deadline) {
			t.Fatalf("no sender reached the relay after its socket file was removed:\n%s", b.output())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, want := range []string{"\nstatsrelay_unix_socket_rebinds_total 1\n", "\nstatsrelay_unix_socket_bound 1\n",
		"\nstatsrelay_datagrams_received_total{transport=\"unix\"} 1\n"} {
		for m := metrics(); !strings.Contains(m, want); m = metrics() {
			if time.Now().After(deadline) {
				t.Fatalf("metrics lack %q:\n%s", want, m)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	b.stop(t, syscall.SIGTERM)
	if n := strings.Count(b.output(), "was removed while the relay ran"); n != 1 {
		t.Fatalf("%d rebind lines, want 1:\n%s", n, b.output())
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the stop the socket file is still there: %v", err)
	}
}

// TestBinarySocketMode: the socket file has -socket-mode's permissions,
// 0660 by default, whatever the umask: dgram tests the call, this its
// wiring from the flag (and its default) to the file.
func TestBinarySocketMode(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	for _, tc := range []struct {
		args []string
		want fs.FileMode
	}{{nil, 0o660}, {[]string{"-socket-mode", "0602"}, 0o602}} {
		sock := sockdir.Path(t, "relay.sock")
		b := startBinary(t, append([]string{"-unix", sock, "-udp", "", "-agent", ag.URL(), "-http", ""}, tc.args...)...)
		b.startedLine(t)
		fi, err := os.Lstat(sock)
		b.stop(t, syscall.SIGTERM)
		if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != tc.want {
			t.Errorf("%q: socket file %v, %v; want a socket of mode %v", tc.args, fi, err, tc.want)
		}
	}
}

// TestBinaryReportsItsBuild: the start line names the build (the module
// version, the revision when recorded, the Go version) and /metrics gives
// the same as statsrelay_build_info, so an operator reads which relay runs
// on a host from either.
func TestBinaryReportsItsBuild(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "127.0.0.1:0")
	line := b.startedLine(t)
	field := func(key string) string {
		m := regexp.MustCompile(` ` + key + `=("[^"]*"|\S*)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("start line %q has no %s", line, key)
		}
		return strings.Trim(m[1], `"`)
	}
	version, revision, goVersion, addr := field("version"), field("revision"), field("go"), field("http")
	if version == "" || goVersion != runtime.Version() {
		t.Errorf("start line gives version=%q go=%q, want a version and %s", version, goVersion, runtime.Version())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("\nstatsrelay_build_info{version=%q,revision=%q,goversion=%q} 1\n", version, revision, goVersion)
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want[1:len(want)-1])
	}
	b.stop(t, syscall.SIGTERM)
}

// TestBinaryVersion: -version prints the build on stdout, as the start line
// and statsrelay_build_info give it, and exits 0 without starting: no
// socket file, and a variable set wrong (which would stop a start) does
// not stand in the way.
func TestBinaryVersion(t *testing.T) {
	sock := sockdir.Path(t, "relay.sock")
	args, err := json.Marshal([]string{"-version", "-unix", sock, "-udp", "", "-http", ""})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(args), "STATSRELAY_MAX_GROUPS=many")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("statsrelay -version: %v\n%s", err, stderr.String())
	}
	version, revision := relay.Build() // the same binary; its revision as the start line gives it (quoted: "" without VCS)
	want := fmt.Sprintf("statsrelay %s (revision %q, %s %s/%s)\n", version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if string(out) != want || stderr.Len() != 0 {
		t.Errorf("statsrelay -version wrote %q and on stderr %q; want %q and nothing", out, stderr.String(), want)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-version left a socket file: %v", err)
	}
}

// TestBinaryLogsJSON: with -log-format json every line statsrelay writes,
// from the start line (with the -grace the interval gave) through a
// warning to the stop line, is one JSON object with time, level and msg,
// its durations as the flags write them.
func TestBinaryLogsJSON(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	t.Setenv("STATSRELAY_INTERVL", "5s") // a typo: warned of
	b := startBinary(t, "-log-format", "json", "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(),
		"-http", "", "-interval", "5s")
	var start map[string]any
	if err := json.Unmarshal([]byte(b.startedLine(t)), &start); err != nil {
		t.Fatalf("start line: %v:\n%s", err, b.output())
	}
	udp, _ := start["udp"].(string)
	// -grace not given follows -interval: 5 s sends within 1 s.
	if start["level"] != "INFO" || start["interval"] != "5s" || start["grace"] != "1.5s" || udp == "" {
		t.Fatalf("start line %v: want level INFO, interval \"5s\", grace \"1.5s\", the UDP address", start)
	}
	sendOverUDP(t, udp, stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1000})
	b.stop(t, syscall.SIGTERM)
	levels := map[string]int{}
	var stopped map[string]any
	for line := range strings.Lines(b.output()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line that is not JSON (%v): %q", err, line)
		}
		level, _ := m["level"].(string)
		msg, _ := m["msg"].(string)
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"])); err != nil || level == "" || msg == "" {
			t.Errorf("line %q lacks time, level or msg", line)
		}
		levels[level]++
		if msg == "statsrelay stopped" {
			stopped = m
		}
		if level == "WARN" && strings.Contains(msg, "name no flag") && m["variables"] != "STATSRELAY_INTERVL" {
			t.Errorf("warning %q names %v, want STATSRELAY_INTERVL", msg, m["variables"])
		}
	}
	if levels["WARN"] < 1 || stopped == nil || stopped["spans_received"] != 1.0 || stopped["spans_forwarded"] != 1.0 {
		t.Fatalf("levels %v, stop line %v: want the warning and a stop line with 1 span received and forwarded:\n%s",
			levels, stopped, b.output())
	}
}

// TestBinaryLogLevel: -log-level warn leaves out the info lines (start,
// stop) and keeps the warnings, in the default text lines.
func TestBinaryLogLevel(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	t.Setenv("STATSRELAY_INTERVL", "5s")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	ln.Close() // for the binary to take: with no start line, /healthz says it runs
	b := startBinary(t, "-log-level", "warn", "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", httpAddr)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if resp, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not ok in 20 s:\n%s", b.output())
		}
	}
	b.stop(t, syscall.SIGTERM)
	out := b.output()
	if !regexp.MustCompile(`(?m)^\S+ \S+ WARN statsrelay: ignoring environment variables`).MatchString(out) ||
		strings.Contains(out, " INFO ") {
		t.Fatalf("-log-level warn wrote:\n%s\nwant the warning and no INFO line", out)
	}
}

// TestBinarySurvivesClosedLogPipe: the reader of statsrelay's stderr gone
// (statsrelay 2>&1 | logger, the logger dead), the relay's next log lines
// fail instead of killing it with SIGPIPE: on SIGTERM it still stops as
// it should, exit 0 and its socket file removed.
func TestBinarySurvivesClosedLogPipe(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	sock := sockdir.Path(t, "relay.sock")
	args, err := json.Marshal([]string{"-unix", sock, "-udp", "", "-agent", ag.URL(), "-http", ""})
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(args))
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(r)
	for sc.Scan() && !strings.Contains(sc.Text(), "statsrelay started") {
	}
	r.Close() // the log's reader is gone
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("statsrelay with its log pipe closed, on SIGTERM: %v; want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("statsrelay still running 30 s after SIGTERM")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left behind: %v", err)
	}
}

// TestBinaryDemoSecondSignalCleansUp: a second signal while -demo stops
// exits at once (143 for a SIGTERM after the Ctrl-C) through os.Exit, which runs no deferred call: the
// demo's temporary directory and its socket are removed all the same.
func TestBinaryDemoSecondSignalCleansUp(t *testing.T) {
	sockRE := regexp.MustCompile(`unixgram://(\S+)`)
	forced := 0 // tries whose second signal came while the demo stopped
	for try := 0; try < 4 && forced < 2; try++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), mainArgsEnv+`=["-demo"]`)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		sc.Scan() // "fake agent ...; relay on unixgram://<dir>/relay.sock ..."
		m := sockRE.FindStringSubmatch(sc.Text())
		go func() {
			for sc.Scan() {
			}
		}()
		time.Sleep(1500 * time.Millisecond)
		// Ctrl-C, then SIGTERM at once: another signal, so not taken for
		// the first sent twice (signalRepeat), and not merged by the
		// kernel with it.
		_ = cmd.Process.Signal(syscall.SIGINT)
		time.Sleep(time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err = cmd.Wait()
		if m == nil {
			t.Fatalf("no socket path in %q", sc.Text())
		}
		dir := filepath.Dir(m[1])
		if _, statErr := os.Stat(dir); statErr == nil {
			_ = os.RemoveAll(dir)
			t.Fatalf("after two SIGINTs (%v) the demo left %s behind", err, dir)
		}
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 143) {
			t.Fatalf("exit %v; want 143 (the second signal, SIGTERM) or 0 (the stop won)", err)
		}
		if err != nil {
			forced++
		}
	}
	if forced == 0 {
		t.Skip("the demo's stop beat the second signal in every try: the forced exit was not exercised")
	}
}
