//go:build linux

// This file holds BenchmarkRelayIdle: what statsrelay costs while nothing
// is sent to it, the state most sidecars spend most of their time in.

package bench

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats/statstest"
)

// BenchmarkRelayIdle is the cost of a relay that receives nothing: a
// relay.Server as statsrelay runs it by default (one processor, a Unix
// socket checked every second, UDP, the 10 s interval, a loopback agent),
// left alone for relayIdleStretch per op. It reports the process's CPU
// (user+sys) as a share of one core (%core) and its context switches a
// second (switches/s: every thread's, voluntary and not, from getrusage;
// each is a thread that slept and woke, what an idle daemon should do
// rarely), the same for the process over as many stretches just before
// the relay started (-without: the benchmark's sleeping goroutine, the
// loopback agent, the Go runtime), and the differences (-relay): what the
// relay adds. Run it for seconds (bench/run: its BENCHTIME), as
// BenchmarkIdle in ./stats: a sleeping process's cost is that noisy.
func BenchmarkRelayIdle(b *testing.B) {
	const relayIdleStretch = 500 * time.Millisecond
	const settle = time.Second // start-ups pass: the agent's, the first /info read
	b.StopTimer()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // statsrelay's default -procs 1
	debug.FreeOSMemory()                            // the framework's earlier calls freed a relay: return it now, not during the stretches
	agent := statstest.New()
	defer agent.Close()
	time.Sleep(settle)
	without := idleUsage(b.N, relayIdleStretch)

	srv, err := relay.NewServer(relay.ServerConfig{UnixPath: filepath.Join(b.TempDir(), "relay.sock"),
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
	with := idleUsage(b.N, relayIdleStretch)
	b.StopTimer()
	if st := srv.Relay().Stats(); st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP] != 0 {
		b.Fatalf("an idle relay received %d datagrams", st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP])
	}
	b.ReportMetric(with.core, "%core")
	b.ReportMetric(without.core, "%core-without")
	b.ReportMetric(with.core-without.core, "%core-relay")
	b.ReportMetric(with.switches, "switches/s")
	b.ReportMetric(without.switches, "switches/s-without")
	b.ReportMetric(with.switches-without.switches, "switches/s-relay")
}

// usage is a process's CPU over a stretch, in percent of one core, and its
// context switches a second.
type usage struct{ core, switches float64 }

// idleUsage sleeps n stretches and returns the process's usage over them.
func idleUsage(n int, stretch time.Duration) usage {
	r0, t0 := rusage(), time.Now()
	for range n {
		time.Sleep(stretch)
	}
	r1, s := rusage(), time.Since(t0).Seconds()
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	return usage{core: 100 * cpu.Seconds() / s,
		switches: float64(r1.Nvcsw+r1.Nivcsw-r0.Nvcsw-r0.Nivcsw) / s}
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic("getrusage: " + err.Error())
	}
	return ru
}
