//go:build linux

// This file holds BenchmarkRelayIdle: what statsrelay costs while nothing
// is sent to it, the state most sidecars spend most of their time in.

package bench

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
)

// BenchmarkRelayIdle is the cost of a relay that receives nothing: a
// relay.Server as statsrelay runs it by default (one processor, a Unix
// socket checked every second, UDP, the 10 s interval, a loopback agent),
// left alone for relayIdleStretch per op. It reports the process's CPU
// (user+sys) as a share of one core (%core), the same over as many
// stretches just before the relay started (%core-without: the
// benchmark's sleeping goroutine, the loopback agent, the Go runtime), and
// the difference (%core-relay): what the relay adds. Run it for seconds
// (bench/run: its BENCHTIME), as BenchmarkIdle in ./stats: a sleeping
// process's cost is that noisy. It reports no context switches: the
// process's own (getrusage) are too noisy to show the relay's few.
func BenchmarkRelayIdle(b *testing.B) {
	const relayIdleStretch = 500 * time.Millisecond
	const settle = time.Second // start-ups pass: the agent's, the first /info read
	b.StopTimer()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // statsrelay's default -procs 1
	debug.FreeOSMemory()                            // the framework's earlier calls freed a relay: return it now, not during the stretches
	agent := statstest.New()
	defer agent.Close()
	time.Sleep(settle)
	without := cputime.ShareWhileSleeping(b.N, relayIdleStretch)

	srv, err := relay.NewServer(relay.ServerConfig{UnixPath: sockdir.Path(b, "relay.sock"),
		UDPAddr: "127.0.0.1:0", AgentURL: agent.URL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, 5*time.Second) })
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(settle)
	b.StartTimer()
	with := cputime.ShareWhileSleeping(b.N, relayIdleStretch)
	b.StopTimer()
	if st := srv.Relay().Stats(); st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP] != 0 {
		b.Fatalf("an idle relay received %d datagrams", st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP])
	}
	b.ReportMetric(with, "%core")
	b.ReportMetric(without, "%core-without")
	b.ReportMetric(with-without, "%core-relay")
}
