// This file tests how a decode worker waits for the next read batch:
// polling for SpinWait when batches come often, parking otherwise.

package relay

import (
	"runtime"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
)

// spinServer is the part of a Server that next uses.
func spinServer(spin time.Duration) *Server {
	return &Server{cfg: ServerConfig{SpinWait: spin}, queue: make(chan job, 4)}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestSpinWaitDefault: unset, SpinWait polls on more than one processor
// and never on one, where the polling worker would take the processor
// from the reader; set, it is kept whatever GOMAXPROCS is.
func TestSpinWaitDefault(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		procs     int
		set, want time.Duration
	}{
		{1, 0, -1},
		{2, 0, DefaultSpinWait},
		{4, 0, DefaultSpinWait},
		{1, 50 * time.Microsecond, 50 * time.Microsecond},
		{2, -1, -1},
	} {
		runtime.GOMAXPROCS(tc.procs)
		c := ServerConfig{SpinWait: tc.set}
		c.withDefaults()
		if c.SpinWait != tc.want || c.Workers != tc.procs {
			t.Errorf("GOMAXPROCS %d, SpinWait %v: got SpinWait %v, %d workers; want %v, %d", tc.procs, tc.set, c.SpinWait, c.Workers, tc.want, tc.procs)
		}
	}
}

func TestNextPollsUntilABatchComes(t *testing.T) {
	s := spinServer(time.Minute)
	b := dgram.NewBatch(1, 16)
	type got struct {
		j      job
		ok     bool
		waited time.Duration
	}
	done := make(chan got)
	go func() {
		j, ok, w := s.next(true)
		done <- got{j, ok, w}
	}()
	waitFor(t, "the worker to poll", s.spinner.Load)
	time.Sleep(5 * time.Millisecond)
	s.queue <- job{b: b, t: UDP}
	g := <-done
	if !g.ok || g.j.b != b || g.j.t != UDP {
		t.Fatalf("next = %+v, want the batch sent", g)
	}
	if g.waited < 5*time.Millisecond || g.waited >= time.Minute {
		t.Fatalf("waited %v, want between the 5 ms before the send and SpinWait (1 min)", g.waited)
	}
	if s.spinner.Load() {
		t.Fatal("the worker kept the polling flag after taking a batch")
	}
}

func TestNextPollsOneWorkerAtATime(t *testing.T) {
	s := spinServer(time.Minute)
	s.spinner.Store(true) // another worker polls
	done := make(chan bool)
	go func() {
		_, ok, _ := s.next(true)
		done <- ok
	}()
	time.Sleep(5 * time.Millisecond)
	s.queue <- job{b: dgram.NewBatch(1, 16)}
	if !<-done {
		t.Fatal("next said the queue was closed")
	}
	if !s.spinner.Load() {
		t.Fatal("a worker that found another polling cleared that one's flag")
	}
}

func TestNextParksAfterSpinWait(t *testing.T) {
	// Long enough for the test to see the flag raised on a loaded machine.
	s := spinServer(50 * time.Millisecond)
	done := make(chan time.Duration)
	go func() {
		_, ok, w := s.next(true)
		if !ok {
			w = -1
		}
		done <- w
	}()
	waitFor(t, "the worker to poll", s.spinner.Load)
	waitFor(t, "the worker to stop polling after SpinWait (50 ms)", func() bool { return !s.spinner.Load() })
	time.Sleep(20 * time.Millisecond)
	s.queue <- job{b: dgram.NewBatch(1, 16)}
	if w := <-done; w < 70*time.Millisecond {
		t.Fatalf("waited %v, want at least the 50 ms polling and the 20 ms parked", w)
	}
}

func TestNextWithoutSpinNeverPolls(t *testing.T) {
	for _, spin := range []bool{false, true} {
		s := spinServer(time.Minute)
		if !spin {
			s.cfg.SpinWait = -1
		}
		done := make(chan bool)
		go func() {
			_, ok, _ := s.next(spin && s.cfg.SpinWait > 0)
			done <- ok
		}()
		time.Sleep(5 * time.Millisecond)
		if polled := s.spinner.Load(); polled != spin {
			t.Errorf("spin %v: polling = %v", spin, polled)
		}
		close(s.queue)
		if ok := <-done; ok {
			t.Errorf("spin %v: next on a closed queue said ok", spin)
		}
	}
}
