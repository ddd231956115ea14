// This file tests a relay taking over from another, as a restart without a
// gap runs it: the new relay starts on the same Unix path and, both with
// UDPReusePort, the same UDP port, then the old one stops.

package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestHandoffLosesNothing: two SDKs, one on each socket, report before the
// new relay starts, while both run (the Unix path is the new one's, the
// UDP port both relays'), and after the old one stopped, forwarding what
// it held. Every span reaches the agent once, through one relay or the
// other, and neither relay nor SDK drops any. The new relay logs that it
// shares the port; the old one, which bound it alone, does not.
func TestHandoffLosesNothing(t *testing.T) {
	if !dgram.SharedUDP {
		t.Skip("a shared UDP port (SO_REUSEPORT) is Linux only")
	}
	ag := statstest.New()
	defer ag.Close()
	cfg := relay.ServerConfig{UnixPath: sockdir.Path(t, "relay.sock"), UDPAddr: "127.0.0.1:0", UDPReusePort: true,
		AgentURL: ag.URL()}
	var oldLog, nextLog syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&oldLog, nil))
	old, stopOld := startServer(t, cfg)
	cfg.UDPAddr = old.Addr(relay.UDP)

	services := []string{"unix", "udp"}
	aggs := make([]*stats.Aggregator, len(services))
	for i, url := range []string{"unixgram://" + cfg.UnixPath, "udp://" + cfg.UDPAddr} {
		a, err := stats.New(stats.Config{AgentURL: url, Service: services[i], SendJitter: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		a.Start()
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
		aggs[i] = a
	}
	var sent uint64
	report := func(n int) {
		t.Helper()
		for i, a := range aggs {
			for range n {
				a.Publish(&stats.Span{Service: services[i], Name: "op", SpanKind: "server",
					Start: time.Now().Add(-time.Millisecond).UnixNano(), Duration: int64(time.Millisecond)})
			}
			if err := a.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			sent += uint64(n)
		}
	}
	received := func(srvs ...*relay.Server) func() bool {
		return func() bool {
			var n uint64
			for _, s := range srvs {
				n += s.Relay().Stats().SpansReceived
			}
			return n == sent
		}
	}

	report(3)
	waitFor(t, "the old relay to receive the first reports", received(old))
	cfg.Logger = slog.New(slog.NewTextHandler(&nextLog, nil))
	next, stopNext := startServer(t, cfg)
	// Only the relay that joins a port already bound says so.
	const shares = "shares its UDP port with a socket already bound there"
	if strings.Contains(oldLog.String(), shares) || !strings.Contains(nextLog.String(), shares) {
		t.Fatalf("the port's sharing logged by the first relay:\n%s\nby the second:\n%s\nwant by the second only", oldLog.String(), nextLog.String())
	}
	report(5)
	waitFor(t, "the two relays to receive the reports sent while both ran", received(old, next))
	if n := next.Relay().Stats().Datagrams[relay.Unix]; n == 0 {
		t.Fatal("the Unix sender's report did not reach the new relay, which holds the path")
	}
	stopOld()
	before := next.Relay().Stats().SpansReceived
	report(7)
	waitFor(t, "the new relay to receive the reports sent after the old one stopped", received(old, next))
	if got := next.Relay().Stats().SpansReceived - before; got != 2*7 {
		t.Fatalf("the new relay received %d spans after the old one stopped; want all %d", got, 2*7)
	}
	stopNext()

	for i, a := range aggs {
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := a.Health(); h.SpansSent != 15 || h.PayloadsDropped != 0 || h.SpansUnsent != 0 {
			t.Fatalf("%s SDK: %+v; want 15 spans sent, none dropped", services[i], h)
		}
	}
	var forwarded uint64
	for _, s := range []*relay.Server{old, next} {
		st := s.Relay().Stats()
		checkIdentity(t, st)
		if len(st.SpansDropped) != 0 || st.SpansPending != 0 {
			t.Fatalf("a relay dropped or still holds spans: %+v", st)
		}
		forwarded += st.SpansForwarded
	}
	got, total := statstest.Sum(statstest.Accepted(ag.Requests()))
	if forwarded != sent || total != sent {
		t.Fatalf("relays forwarded %d spans, the agent took %d; want the %d sent", forwarded, total, sent)
	}
	for _, svc := range services {
		if n := got[statstest.GroupKey{Service: svc, Name: "op", SpanKind: "server"}].Hits; n != 15 {
			t.Fatalf("%s: %d hits at the agent; want 15 (%v)", svc, n, got)
		}
	}
}
