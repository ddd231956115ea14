// This file holds the package's examples: an SDK's Sender and a relay's
// Conn on one Unix socket, and a relay's reader.

package dgram_test

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/sockdir"
)

func Example() {
	dir, _ := sockdir.MkdirTemp("dgram") // $TMPDIR, or /tmp where it is too long for a socket path
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "statsrelay.sock")

	// Relay side.
	conn, err := dgram.ListenUnixgram(path, 0o660)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// SDK side: 64 KiB datagrams need the larger send buffer.
	s, err := dgram.DialUnixgram(path, 128<<10)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dgram.ErrNoRelay): no relay (yet)
	}
	defer s.Close()
	if err := s.Write([]byte("SSR1 payload")); errors.Is(err, dgram.ErrWouldBlock) {
		fmt.Println("relay queue full: retry briefly, then count the drop")
	} else if err != nil {
		log.Fatal(err)
	}

	b := dgram.NewBatch(0, 1024)
	if _, err := conn.ReadBatch(b); err != nil {
		log.Fatal(err)
	}
	for _, d := range b.Datagrams() {
		// Linux reads the sender's credentials; the portable fallback has none (PID 0).
		fromUs := d.PID == int32(os.Getpid()) || runtime.GOOS != "linux" && d.PID == 0
		fmt.Printf("%q truncated=%v from this process=%v\n", d.Data, d.Truncated, fromUs)
	}
	// Output: "SSR1 payload" truncated=false from this process=true
}

// The relay's reader: one goroutine per socket, batches recycled through a
// free list, handed to decoders through a bounded queue.
func ExampleConn_ReadBatch() {
	conn, err := dgram.ListenUDP("127.0.0.1:0", 8<<20)
	if err != nil {
		log.Fatal(err)
	}
	free, work := make(chan *dgram.Batch, 8), make(chan *dgram.Batch, 8)
	for range cap(free) {
		free <- dgram.NewBatch(0, 64<<10)
	}
	go func() { // reader; conn.Close elsewhere ends it
		defer close(work)
		for b := range free {
			if _, err := conn.ReadBatch(b); errors.Is(err, net.ErrClosed) {
				return
			} else if err != nil {
				log.Print(err)
				free <- b
				continue
			}
			work <- b // waits when the decoders are behind: pressure goes back to the kernel
		}
	}()

	sender, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer sender.Close()
	if _, err := sender.Write([]byte("SSR1 payload")); err != nil {
		log.Fatal(err)
	}

	// A decoder: handle b.Datagrams(), then send b back to free;
	// conn.KernelDrops() is the UDP loss the kernel reported.
	b := <-work
	for _, d := range b.Datagrams() {
		fmt.Printf("%q truncated=%v\n", d.Data, d.Truncated)
	}
	free <- b
	conn.Close()
	for b := range work { // what the reader still handed on
		free <- b
	}
	fmt.Println("kernel drops:", conn.KernelDrops())
	// Output:
	// "SSR1 payload" truncated=false
	// kernel drops: 0
}
