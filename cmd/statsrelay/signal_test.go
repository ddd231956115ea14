// This file tests a signal delivered twice at once while the final
// forward is under way: still one graceful stop.

package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestBinaryRepeatedSignalDuringForward: SIGTERM twice within a
// millisecond (timeout(1) signalling the process and its group), the
// final forward held by the agent when (or before) the repeat is handled:
// the repeat changes nothing, the relay forwards once the agent answers and
// exits 0. TestBinaryRepeatedSignalStopsGracefully's relay can finish its
// stop before the repeat is read, which then never reaches the check.
func TestBinaryRepeatedSignalDuringForward(t *testing.T) {
	ag, entered, free := heldAgent(t)
	b := startBinary(t, "-unix", "", "-udp", "127.0.0.1:0", "-agent", ag.URL(), "-http", "",
		"-interval", "1h", "-stop-timeout", "5m")
	sendOverUDP(t, b.startedAddr(t, "udp"), stats.Span{Service: "web", Name: "op", Resource: "r", SpanKind: "server", Duration: 1000})
	for range 2 {
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-entered: // the final forward waits on the agent
	case <-b.done: // exited before forwarding
	case <-time.After(20 * time.Second):
		t.Fatalf("no forward after SIGTERM:\n%s", b.output())
	}
	free()
	if code := b.wait(t); code != 0 {
		t.Fatalf("SIGTERM twice at once, during the final forward: exit status %d, want 0; said:\n%s", code, b.output())
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != 1 {
		t.Fatalf("the agent holds %d hits, want the 1 sent; said:\n%s", hits, b.output())
	}
}
