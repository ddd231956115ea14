// This file holds the example of an aggregator that reports to a relay
// over datagrams.

package stats_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/writer"
)

// A process on a host that runs statsrelay sends its reports to the relay
// as datagrams instead of HTTP requests: AgentURL names the relay's Unix
// socket (or udp://host:port; SPANSTATS_RELAY_URL sets it from the
// environment). Each datagram is one whole payload behind the envelope
// (its sequence number, what the sender dropped since its last one, the
// final flag of Stop's last report). Here a socket of the example's own
// stands in for the relay and decodes what reaches it.
func ExampleConfig_relay() {
	// Under /tmp, not $TMPDIR: a Unix socket path holds at most 107 bytes
	// (103 on macOS), which a long $TMPDIR leaves no room for.
	dir, err := os.MkdirTemp("/tmp", "spanstats-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "relay.sock")
	relay, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		panic(err)
	}
	defer relay.Close()

	agg, err := stats.New(stats.Config{
		AgentURL: "unixgram://" + path, // statsrelay's default is unixgram:///tmp/spanstats-relay.sock
		Env:      "prod", Service: "web", TracerVersion: "my-tracer/1.0",
	})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for i := range 10 {
		agg.Publish(&stats.Span{
			Service: "web", Name: "http.request", Resource: "GET /users/:id", SpanKind: "server",
			Start:    time.Now().Add(-3 * time.Millisecond).UnixNano(),
			Duration: int64(3 * time.Millisecond), TopLevel: true, Error: i == 0,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil { // sends the last report, flagged final
		panic(err)
	}

	readRelay(relay)
	h := agg.Health()
	fmt.Println("counted", h.Counted)
	// Output:
	// from prod/web (my-tracer/1.0), sequence numbers from 1
	// hits 10 errors 1 payloads the sender dropped 0
	// counted 10
}

// The same toward a relay's UDP port (statsrelay's default is
// udp://127.0.0.1:8127): datagrams of at most 65 507 bytes, what UDP
// carries, unless MaxDatagramBytes says less.
func ExampleConfig_udp() {
	relay, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		panic(err)
	}
	defer relay.Close()

	agg, err := stats.New(stats.Config{
		AgentURL: "udp://" + relay.LocalAddr().String(),
		Env:      "prod", Service: "web", TracerVersion: "my-tracer/1.0",
	})
	if err != nil {
		panic(err)
	}
	agg.Start()
	for i := range 10 {
		agg.Publish(&stats.Span{
			Service: "web", Name: "http.request", Resource: "GET /users/:id", SpanKind: "server",
			Start:    time.Now().Add(-3 * time.Millisecond).UnixNano(),
			Duration: int64(3 * time.Millisecond), TopLevel: true, Error: i == 0,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		panic(err)
	}
	readRelay(relay)
	// Output:
	// from prod/web (my-tracer/1.0), sequence numbers from 1
	// hits 10 errors 1 payloads the sender dropped 0
}

// readRelay reads the datagrams of one sender up to its final flag, as a
// relay would, and prints what they hold. Stop's report is usually one
// datagram; a report due at a bucket boundary crossed meanwhile would come
// before it.
func readRelay(relay net.Conn) {
	buf := make([]byte, 1<<16)
	relay.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hits, errs, dropped uint64
	first := uint64(0)
	for final := false; !final; {
		n, err := relay.Read(buf)
		if err != nil {
			panic(err)
		}
		env, body, _, err := writer.ParseDatagram(buf[:n])
		if err != nil {
			panic(err)
		}
		p, err := writer.DecodePayload(body)
		if err != nil {
			panic(err)
		}
		for _, b := range p.Buckets {
			for _, g := range b.Groups {
				hits, errs = hits+g.Hits, errs+g.Errors
			}
		}
		if first == 0 {
			first = env.Sequence
			fmt.Printf("from %s/%s (%s), sequence numbers from %d\n", p.Env, p.Service, p.TracerVersion, first)
		}
		dropped += uint64(env.DroppedPayloads)
		final = env.Final()
	}
	fmt.Println("hits", hits, "errors", errs, "payloads the sender dropped", dropped)
}
