// This file holds TestMain, which can make the test binary a relay or a
// sender process of its own, and the helpers that run a relay process.

package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/testenv"
)

// childEnv, when set, makes the test binary a relay process: senders in the
// test process then compete with it for CPU as separate processes do,
// instead of for one Go scheduler.
const childEnv = "STATSRELAY_TEST_CHILD"

// senderEnv, when set, makes the test binary a sender process: its pid is
// not the relay's, so the relay reads another process's credentials.
const senderEnv = "STATSRELAY_TEST_SENDER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	if path := os.Getenv(senderEnv); path != "" {
		os.Exit(runSender(path))
	}
	testenv.Clear() // the developer's DD_*, SPANSTATS_* and STATSRELAY_* settings are not the tests'
	goleak.VerifyTestMain(m)
}

// runChild serves a relay configured by the JSON cfg until SIGTERM, then
// prints its final Stats as JSON.
func runChild(cfg string) int {
	var c relay.ServerConfig
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Println("bad config:", err)
		return 2
	}
	srv, err := relay.NewServer(c)
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	go http.Serve(ln, srv.Handler())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("ready", ln.Addr())
	_ = srv.Run(ctx, 5*time.Second)
	out, _ := json.Marshal(srv.Relay().Stats())
	fmt.Println(string(out))
	return 0
}

// runSender waits for a line on stdin (the parent has then written this
// pid's files under its fake proc root), sends hostSenderDatagram to the
// Unix socket at path, and says "sent".
func runSender(path string) int {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("stdin:", err)
		return 1
	}
	c, err := net.Dial("unixgram", path)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	if _, err := c.Write(hostSenderDatagram()); err != nil {
		fmt.Println("write:", err)
		return 1
	}
	fmt.Println("sent")
	return 0
}

// relayProcess is a relay running in a child process.
type relayProcess struct {
	cmd     *exec.Cmd
	lines   *bufio.Scanner
	metrics string // http address of its Handler
}

func startRelayProcess(t *testing.T, c relay.ServerConfig) *relayProcess {
	t.Helper()
	cfg, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProcess{cmd: cmd, lines: bufio.NewScanner(out)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !p.lines.Scan() || !strings.HasPrefix(p.lines.Text(), "ready ") {
		t.Fatalf("relay process did not start: %q", p.lines.Text())
	}
	p.metrics = strings.TrimPrefix(p.lines.Text(), "ready ")
	return p
}

// stop sends SIGTERM and returns the relay's final Stats.
func (p *relayProcess) stop(t *testing.T) relay.Stats {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var st relay.Stats
	if !p.lines.Scan() {
		t.Fatal("relay process ended without its stats")
	}
	if err := json.Unmarshal(p.lines.Bytes(), &st); err != nil {
		t.Fatalf("relay stats %q: %v", p.lines.Text(), err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("relay process: %v", err)
	}
	return st
}
