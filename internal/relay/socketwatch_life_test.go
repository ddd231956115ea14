// This file tests the socket check's rebinds over the Server's life: no
// socket or reader leaked, the old socket drained, a rebind racing the
// stop.

package relay_test

import (
	"bufio"
	"errors"
	"io/fs"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
)

// unixFDs is how many Unix sockets the process has open: the agent
// client's TCP connections come and go on their own.
func unixFDs(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Skip("no /proc/net/unix:", err)
	}
	defer f.Close()
	inodes := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 7 {
			inodes["socket:["+fields[6]+"]"] = true
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && inodes[l] {
			n++
		}
	}
	return n
}

// readers is how many socket readers the process runs.
func readers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "relay.(*Server).read(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestSocketRebindsLeakNothing: fifty removals, each bound again, leave
// the relay with one reader, the Unix sockets it had and none held as
// replaced, and every datagram sent to each socket counted.
func TestSocketRebindsLeakNothing(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, _, stop := startWatched(t, path, -1)
	defer stop()
	if err := sendUnix(path, []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1 })
	fds := unixFDs(t)
	if n := readers(); n != 1 {
		t.Fatalf("%d readers before any rebind, want 1", n)
	}
	const cycles = 50
	for i := range cycles {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		srv.CheckSocket()
		if err := sendUnix(path, []byte{0xc1}); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	waitFor(t, "every datagram", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1+cycles })
	waitFor(t, "one reader", func() bool { return readers() == 1 })
	waitFor(t, "the Unix sockets to go back", func() bool { return unixFDs(t) == fds })
	waitFor(t, "the replaced sockets to be released", func() bool { return srv.RetiredConns() == 0 })
	wantMetrics(t, srv, "statsrelay_unix_socket_bound 1", "statsrelay_unix_socket_rebinds_total 50")
}

// TestSocketRebindDrainsOld: what a sender connected to the old socket
// queued there after its file was removed is read and counted once the
// check binds a new one, and then the old socket is closed.
func TestSocketRebindDrainsOld(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	srv, _, stop := startWatched(t, path, -1)
	defer stop()
	conn, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The reader waits for a batch while the datagrams are sent and the
	// socket is bound again, so all of them are still in the kernel's
	// queue (net.unix.max_dgram_qlen, 10 by default, bounds it: 8 fit)
	// when the old socket is retired.
	release := srv.HoldReaders(func() {
		if _, err := conn.Write([]byte{0xc1}); err != nil {
			t.Fatal(err)
		}
	})
	defer release() // the stop waits for the readers
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	const queued = 8
	for range queued {
		if _, err := conn.Write([]byte{0xc1}); err != nil {
			t.Fatal(err)
		}
	}
	srv.CheckSocket()
	// The datagram that woke the reader is read, or queued if the reader
	// had not yet taken a batch; none sent after it can be.
	if got := srv.Relay().Stats().Datagrams[relay.Unix]; got > 1 {
		t.Fatalf("read %d datagrams while the reader was held, want at most the 1 that woke it", got)
	}
	release()
	waitFor(t, "the queued datagrams", func() bool { return srv.Relay().Stats().Datagrams[relay.Unix] == 1+queued })
	waitFor(t, "the old socket to close", func() bool {
		_, err := conn.Write([]byte{0xc1})
		return err != nil
	})
	if got := srv.Relay().Stats().Datagrams[relay.Unix]; got != 1+queued {
		t.Fatalf("read %d, want %d", got, 1+queued)
	}
}

// TestSocketRebindRacesStop: the stop begins while the check, every
// millisecond, binds the removed file again: no reader is started after
// the stop waits for them (a WaitGroup.Go after Wait began), none is left
// running (goleak), and the stop leaves no socket file behind.
func TestSocketRebindRacesStop(t *testing.T) {
	for i := range 20 {
		path := sockdir.Path(t, "relay.sock")
		srv, _, stop := startWatched(t, path, time.Millisecond)
		t.Cleanup(stop) // a second call returns at once
		os.Remove(path)
		waitFor(t, "a rebind", func() bool {
			return !strings.Contains(scrape(srv), "\nstatsrelay_unix_socket_rebinds_total 0\n")
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 50 + 10*i {
				os.Remove(path)
				runtime.Gosched()
			}
		}()
		stop()
		<-done
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: after the stop the path holds %v", i, err)
		}
		if n := readers(); n != 0 {
			t.Fatalf("round %d: %d readers after the stop", i, n)
		}
	}
}
