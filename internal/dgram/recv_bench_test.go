//go:build linux

// This file holds the receive benchmarks: ReadBatch against one read per
// datagram, and ReadBatch by batch size.

package dgram

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/internal/sockdir"
)

var sinkN int

// feed starts a goroutine writing size-byte datagrams to r's socket as fast
// as it can, with a blocking socket: a Unix sender waits for room in the
// relay's queue, a UDP sender outruns the reader and the kernel drops the
// excess. The returned func stops it and returns how many it sent.
func feed(b *testing.B, network, addr string, size int) (stop func() int) {
	b.Helper()
	conn, err := net.Dial(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	var stopped atomic.Bool
	var sent int
	var wg sync.WaitGroup
	wg.Go(func() {
		p := payload(0, size)
		for !stopped.Load() {
			if _, err := conn.Write(p); err != nil {
				if !stopped.Load() {
					b.Error(err)
				}
				return
			}
			sent++
		}
	})
	return func() int {
		stopped.Store(true)
		conn.Close() // wakes a Write waiting for room
		wg.Wait()
		return sent
	}
}

// benchRelay opens the receiving socket of the kind named and starts a
// sender. The returned func stops both and reports the figures; cpu-ns is the
// whole process's (sender, reader, runtime) per datagram read, so that the
// reader's share differs between variants, not the sender's.
func benchRelay(b *testing.B, kind string, size int) (*Conn, func()) {
	b.Helper()
	var c *Conn
	var err error
	switch kind {
	case "udp":
		c, err = ListenUDP("127.0.0.1:0", 4<<20)
	case "unixgram":
		c, err = ListenUnixgram(sockdir.Path(b, "relay.sock"), 0o600)
	}
	if err != nil {
		b.Fatal(err)
	}
	stop := feed(b, kind, c.LocalAddr().String(), size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	return c, func() {
		cpu := cputime.Process() - cpu0
		b.StopTimer()
		sent := stop()
		c.Close()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "datagrams/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		if kind == "udp" {
			// Sent but not read: dropped by the kernel, or still queued (a
			// few thousand at most in 4 MiB).
			b.ReportMetric(float64(sent-b.N)/float64(b.N), "lost/op")
		}
	}
}

func readBatches(b *testing.B, c *Conn, batch *Batch) {
	for got := 0; got < b.N; {
		n, err := c.ReadBatch(batch)
		if err != nil {
			b.Fatal(err)
		}
		got += n
		sinkN += len(batch.Datagrams()[n-1].Data)
	}
}

// BenchmarkRecv compares ReadBatch (recvmmsg) with one read per datagram on
// the same socket: ReadFromUDP, and ReadMsgUnix with room for credentials,
// which a relay needs per datagram. "single" reads into one buffer, which
// stays in cache; "single-slots" reads into a Batch's slots in turn, the
// memory a relay that hands each buffer to a decoder goes through.
func BenchmarkRecv(b *testing.B) {
	for _, kind := range []string{"udp", "unixgram"} {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%dKiB/batch", kind, size>>10), func(b *testing.B) {
				batch := NewBatch(DefaultBatchSize, 64<<10)
				c, stop := benchRelay(b, kind, size)
				defer stop()
				readBatches(b, c, batch)
			})
			for _, variant := range []string{"single", "single-slots"} {
				b.Run(fmt.Sprintf("%s/%dKiB/%s", kind, size>>10, variant), func(b *testing.B) {
					bufs := NewBatch(DefaultBatchSize, 64<<10)
					if variant == "single" {
						bufs = NewBatch(1, 64<<10)
					}
					oob := make([]byte, ctrlUnixgram)
					c, stop := benchRelay(b, kind, size)
					defer stop()
					for i := range b.N {
						buf := bufs.slot(i % bufs.Cap())
						var n int
						var err error
						switch pc := c.pc.(type) {
						case *net.UDPConn:
							n, _, err = pc.ReadFromUDP(buf)
						case *net.UnixConn:
							n, _, _, _, err = pc.ReadMsgUnix(buf, oob)
						}
						if err != nil {
							b.Fatal(err)
						}
						sinkN += n
					}
				})
			}
		}
	}
}

// BenchmarkBatchSize chooses DefaultBatchSize: ReadBatch's rate by the
// number of slots, 1 KiB datagrams.
func BenchmarkBatchSize(b *testing.B) {
	for _, kind := range []string{"udp", "unixgram"} {
		for _, n := range []int{1, 4, 8, 16, 32, 64} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				batch := NewBatch(n, 64<<10)
				c, stop := benchRelay(b, kind, 1<<10)
				defer stop()
				readBatches(b, c, batch)
			})
		}
	}
}
