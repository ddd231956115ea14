// This file tests the Ring: capacity, order and fullness, Drain and
// Release, Close and discard, Claim and Commit, and parking and waking
// under stress.

package inbox

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaks a producer or consumer goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wakeTimeout bounds every wait on Wake so a lost wake-up fails, not hangs.
const wakeTimeout = 5 * time.Second

// item is a multi-word value whose fields are all derived from one number,
// so a torn (partially written or partially read) item is detectable.
type item struct {
	a, b uint64
	s    [4]uint64
}

func makeItem(producer, seq uint64) item {
	v := producer<<40 | seq
	return item{a: v, b: ^v, s: [4]uint64{v * 3, v ^ 0x5555, v + 7, v << 1}}
}

// check returns the producer and sequence encoded in it, or ok=false if torn.
func (it item) check() (producer, seq uint64, ok bool) {
	v := it.a
	ok = it.b == ^v && it.s == [4]uint64{v * 3, v ^ 0x5555, v + 7, v << 1}
	return v >> 40, v & (1<<40 - 1), ok
}

func TestNewCapacityRounding(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {1000, 1024}, {1024, 1024}, {1025, 2048},
	} {
		if got := New[int](tc.in).Cap(); got != tc.want {
			t.Errorf("New(%d).Cap() = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestSingleSlotLaps runs a one-slot ring through several laps: the slot's
// last-lap sequence number must never read as ready for the next.
func TestSingleSlotLaps(t *testing.T) {
	r := New[int](1)
	dst := make([]int, 2)
	for lap := range 5 {
		if n := r.Drain(dst); n != 0 {
			t.Fatalf("lap %d: drained %d from an empty ring", lap, n)
		}
		v := lap + 10
		if !r.Push(&v) {
			t.Fatalf("lap %d: push into an empty ring failed", lap)
		}
		if r.Push(&v) {
			t.Fatalf("lap %d: second push into a one-slot ring succeeded", lap)
		}
		if n := r.Drain(dst); n != 1 || dst[0] != v {
			t.Fatalf("lap %d: drained %d items %v, want 1 item %d", lap, n, dst[:n], v)
		}
	}
}

func TestNewPanicsOnNonPositive(t *testing.T) {
	for _, c := range []int{0, -1} {
		func() {
			defer func() {
				if got := recover(); got != "inbox: capacity must be > 0" {
					t.Errorf("New(%d) panic = %v, want %q", c, got, "inbox: capacity must be > 0")
				}
			}()
			New[int](c)
		}()
	}
}

// TestNewPanicsOnTooLarge: a capacity whose power of two does not fit in
// an int (above 1<<30 on 32-bit platforms) panics with New's message, not
// from make with a length that wrapped negative.
func TestNewPanicsOnTooLarge(t *testing.T) {
	for _, c := range []int{math.MaxInt, math.MaxInt/2 + 2} {
		func() {
			defer func() {
				if got := recover(); got != "inbox: capacity too large" {
					t.Errorf("New(%d) panic = %v, want %q", c, got, "inbox: capacity too large")
				}
			}()
			New[int](c)
		}()
	}
}

func TestFIFOSingleProducer(t *testing.T) {
	r := New[int](8)
	dst := make([]int, 3)
	next, want := 0, 0
	// Interleave pushes and short drains across many laps of the ring.
	for round := 0; round < 1000; round++ {
		for i := 0; i < 3; i++ {
			v := next
			if !r.Push(&v) {
				t.Fatalf("push %d failed", v)
			}
			next++
		}
		n := r.Drain(dst)
		for _, v := range dst[:n] {
			if v != want {
				t.Fatalf("got %d, want %d", v, want)
			}
			want++
		}
	}
	for n := r.Drain(dst); n > 0; n = r.Drain(dst) {
		for _, v := range dst[:n] {
			if v != want {
				t.Fatalf("got %d, want %d", v, want)
			}
			want++
		}
	}
	if want != next {
		t.Fatalf("drained %d items, pushed %d", want, next)
	}
}

func TestFullAtExactlyCapacity(t *testing.T) {
	r := New[int](5) // rounds to 8
	for i := 0; i < r.Cap(); i++ {
		if !r.Push(&i) {
			t.Fatalf("push %d of %d failed", i, r.Cap())
		}
	}
	x := 99
	if r.Push(&x) {
		t.Fatal("push beyond capacity succeeded")
	}
	if got := r.Len(); got != r.Cap() {
		t.Fatalf("Len = %d, want %d", got, r.Cap())
	}
	if r.Closed() {
		t.Fatal("full ring reports Closed")
	}
}

func TestDrainAfterFullFreesSlots(t *testing.T) {
	r := New[int](4)
	for i := 0; i < 4; i++ {
		r.Push(&i)
	}
	dst := make([]int, 2)
	if n := r.Drain(dst); n != 2 || dst[0] != 0 || dst[1] != 1 {
		t.Fatalf("Drain = %d %v, want 2 [0 1]", n, dst)
	}
	for i := 4; i < 6; i++ {
		if !r.Push(&i) {
			t.Fatalf("push %d after drain failed", i)
		}
	}
	x := 6
	if r.Push(&x) {
		t.Fatal("push beyond capacity succeeded after refill")
	}
	all := make([]int, 8)
	n := r.Drain(all)
	if n != 4 || all[0] != 2 || all[1] != 3 || all[2] != 4 || all[3] != 5 {
		t.Fatalf("Drain = %d %v, want 4 [2 3 4 5]", n, all[:n])
	}
	if got := r.Drain(all); got != 0 {
		t.Fatalf("Drain on empty ring = %d", got)
	}
}

func TestDrainEmptyDst(t *testing.T) {
	r := New[int](2)
	x := 1
	r.Push(&x)
	if n := r.Drain(nil); n != 0 {
		t.Fatalf("Drain(nil) = %d", n)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
}

func TestDrainZeroesSlots(t *testing.T) {
	r := New[*int](4)
	for i := 0; i < 4; i++ {
		p := new(int)
		r.Push(&p)
	}
	dst := make([]*int, 4)
	if n := r.Drain(dst); n != 4 {
		t.Fatalf("Drain = %d, want 4", n)
	}
	for i := range r.buf {
		if r.buf[i].val != nil {
			t.Fatalf("slot %d still holds a pointer after Drain", i)
		}
	}
}

// TestSetClear: Release empties each slot it hands back with the ring's
// clear function, once per slot, and Claim then gives producers what it
// left.
func TestSetClear(t *testing.T) {
	type rec struct {
		p    *int
		keep int // clear leaves it: shows that clear, not zeroing, ran
	}
	r := New[rec](4)
	var cleared []int
	r.SetClear(func(v *rec) {
		cleared = append(cleared, *v.p)
		v.p = nil
	})
	for i := range 3 {
		v := i
		r.Push(&rec{p: &v, keep: 10 + i})
	}
	if n := r.Ready(4); n != 3 {
		t.Fatalf("Ready = %d, want 3", n)
	}
	r.Release(2)
	if want := []int{0, 1}; !slices.Equal(cleared, want) {
		t.Fatalf("clear saw %v, want %v", cleared, want)
	}
	for i := range 2 {
		if got := r.buf[i].val; got.p != nil || got.keep != 10+i {
			t.Fatalf("slot %d after Release = %+v, want p nil and keep %d", i, got, 10+i)
		}
	}
	if got := r.buf[2].val; got.p == nil {
		t.Fatal("Release(2) cleared the third slot")
	}
	dst := make([]rec, 4)
	if n := r.Drain(dst); n != 1 || *dst[0].p != 2 {
		t.Fatalf("Drain = %d items %+v, want the third", n, dst[:n])
	}
	if want := []int{0, 1, 2}; !slices.Equal(cleared, want) {
		t.Fatalf("clear saw %v, want %v", cleared, want)
	}
	r.SetClear(nil) // back to zeroing the whole value
	r.Push(&rec{p: new(int), keep: 5})
	r.Drain(dst)
	if got := r.buf[3].val; got != (rec{}) {
		t.Fatalf("slot after Drain without clear = %+v, want zero", got)
	}
}

func TestPushedAndLen(t *testing.T) {
	r := New[int](8)
	for i := 0; i < 5; i++ {
		r.Push(&i)
	}
	if r.Pushed() != 5 || r.Len() != 5 {
		t.Fatalf("Pushed=%d Len=%d, want 5 5", r.Pushed(), r.Len())
	}
	r.Drain(make([]int, 3))
	if r.Pushed() != 5 || r.Len() != 2 {
		t.Fatalf("Pushed=%d Len=%d, want 5 2", r.Pushed(), r.Len())
	}
	r.Close()
	x := 0
	r.Push(&x)
	if r.Pushed() != 5 {
		t.Fatalf("Pushed after Close = %d, want 5", r.Pushed())
	}
}

// consume drains r with the Park/Wake/Unpark protocol until done returns true
// for a batch; it fails the test if a wait on Wake exceeds wakeTimeout.
func consume(t *testing.T, r *Ring[item], handle func([]item) bool) {
	t.Helper()
	dst := make([]item, 64)
	timer := time.NewTimer(wakeTimeout)
	defer timer.Stop()
	for {
		if n := r.Drain(dst); n > 0 {
			if handle(dst[:n]) {
				return
			}
			continue
		}
		if r.Closed() {
			for n := r.DrainClosed(dst); n > 0; n = r.DrainClosed(dst) {
				handle(dst[:n])
			}
			return
		}
		if !r.Park() {
			continue
		}
		timer.Reset(wakeTimeout)
		select {
		case <-r.Wake():
		case <-timer.C:
			r.Unpark()
			t.Errorf("no wake-up within %v (Len=%d Pushed=%d)", wakeTimeout, r.Len(), r.Pushed())
			return
		}
		r.Unpark()
	}
}

// produce starts producers goroutines, each pushing makeItem(p, 0…n-1) in
// order (yielding while the ring is full), and returns a function that makes
// them give up and waits for them.
func produce(r *Ring[item], producers, n int) (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for p := range uint64(producers) {
		wg.Go(func() {
			for seq := range uint64(n) {
				it := makeItem(p, seq)
				for !r.Push(&it) {
					if quit.Load() {
						return
					}
					runtime.Gosched() // full: let the consumer catch up
				}
			}
		})
	}
	return func() { quit.Store(true); wg.Wait() }
}

// scaled is n, or a tenth of it under the race detector or -short.
func scaled(n int) int {
	if raceEnabled || testing.Short() {
		return n / 10
	}
	return n
}

func TestConcurrentProducersConsumer(t *testing.T) {
	const producers = 8
	perProducer := scaled(200_000)
	r := New[item](256)
	stop := produce(r, producers, perProducer)

	var next [producers]uint64
	received := 0
	total := producers * perProducer
	consume(t, r, func(batch []item) bool {
		for _, it := range batch {
			p, seq, ok := it.check()
			if !ok {
				t.Errorf("torn item %+v", it)
				return true
			}
			if p >= producers || seq != next[p] {
				t.Errorf("producer %d: got seq %d, want %d", p, seq, next[min(p, producers-1)])
				return true
			}
			next[p]++
			received++
		}
		return received == total
	})
	stop()
	if t.Failed() {
		return
	}
	if received != total {
		t.Fatalf("received %d items, want %d", received, total)
	}
	if got := r.Pushed(); got != uint64(total) {
		t.Fatalf("Pushed = %d, want %d", got, total)
	}
	if n := r.Drain(make([]item, 1)); n != 0 {
		t.Fatalf("extra item after all were received")
	}
}

func TestCloseRacingProducers(t *testing.T) {
	const producers = 8
	rounds := 50
	if raceEnabled {
		rounds = 10
	}
	for round := 0; round < rounds; round++ {
		r := New[item](16) // small, so producers hit full and in-flight slots often
		var accepted atomic.Uint64
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p uint64) {
				defer wg.Done()
				var seq uint64
				for {
					it := makeItem(p, seq)
					if r.Push(&it) {
						seq++
						continue
					}
					if r.Closed() {
						break
					}
					runtime.Gosched()
				}
				accepted.Add(seq)
				// After Close every Push must keep failing.
				it := makeItem(p, seq)
				if r.Push(&it) {
					t.Errorf("producer %d: Push after Close succeeded", p)
				}
			}(uint64(p))
		}

		closeAt := 500 + round*37
		closeNow := make(chan struct{})
		closerDone := make(chan struct{})
		go func() {
			defer close(closerDone)
			<-closeNow
			r.Close()
		}()

		var next [producers]uint64
		received := 0
		signalled := false
		consume(t, r, func(batch []item) bool {
			for _, it := range batch {
				p, seq, ok := it.check()
				if !ok || p >= producers || seq != next[p] {
					t.Errorf("bad item %+v (producer %d seq %d ok %v)", it, p, seq, ok)
					return true
				}
				next[p]++
				received++
			}
			if !signalled && received >= closeAt {
				signalled = true
				close(closeNow)
			}
			return false // run until Closed and DrainClosed is empty
		})
		if !signalled {
			close(closeNow)
		}
		<-closerDone
		if t.Failed() {
			r.Close()
			wg.Wait()
			return
		}
		// The consumer only returns after DrainClosed reported empty.
		wg.Wait()
		if got := accepted.Load(); got != uint64(received) {
			t.Fatalf("round %d: %d pushes accepted, %d received", round, got, received)
		}
		if got := r.Pushed(); got != uint64(received) {
			t.Fatalf("round %d: Pushed = %d, received %d", round, got, received)
		}
		var sum uint64
		for _, n := range next {
			sum += n
		}
		if sum != uint64(received) {
			t.Fatalf("round %d: per-producer counts %d != received %d", round, sum, received)
		}
		if n := r.Drain(make([]item, 4)); n != 0 {
			t.Fatalf("round %d: Drain after DrainClosed returned %d", round, n)
		}
	}
}

func TestPushAfterCloseFails(t *testing.T) {
	r := New[int](4)
	x := 1
	r.Push(&x)
	r.Close()
	r.Close() // idempotent
	if !r.Closed() {
		t.Fatal("Closed = false after Close")
	}
	if r.Push(&x) {
		t.Fatal("Push after Close succeeded")
	}
	dst := make([]int, 4)
	if n := r.Drain(dst); n != 1 || dst[0] != 1 {
		t.Fatalf("Drain after Close = %d %v, want 1 [1]", n, dst[:n])
	}
	if n := r.DrainClosed(dst); n != 0 {
		t.Fatalf("DrainClosed on drained ring = %d", n)
	}
}

func TestDrainClosedWaitsForInflightWrite(t *testing.T) {
	r := New[int](4)
	x := 10
	r.Push(&x)
	// Simulate a producer that won its claim before Close but has not yet
	// written the slot.
	pos := r.tail.Add(1) - 1
	r.Close()

	got := make(chan []int)
	go func() {
		var all []int
		dst := make([]int, 4)
		for n := r.DrainClosed(dst); n > 0; n = r.DrainClosed(dst) {
			all = append(all, dst[:n]...)
		}
		got <- all
	}()
	// Finish the in-flight write; DrainClosed must not have returned 0 yet.
	s := &r.buf[pos&r.mask]
	s.val = 20
	s.seq.Store(pos + 1)

	select {
	case all := <-got:
		if len(all) != 2 || all[0] != 10 || all[1] != 20 {
			t.Fatalf("DrainClosed got %v, want [10 20]", all)
		}
	case <-time.After(wakeTimeout):
		t.Fatal("DrainClosed did not return")
	}
}

// TestDiscardClosed: on a closed ring that has wrapped, DiscardClosed drops
// every item (returning their count), leaves no slot pointing at one, and
// leaves the ring empty for good; on an open ring it drops nothing.
func TestDiscardClosed(t *testing.T) {
	r := New[*int](8)
	vals := make([]int, 13)
	dst := make([]*int, 8)
	for i := range 5 {
		p := &vals[i]
		r.Push(&p)
	}
	if n := r.Drain(dst); n != 5 { // the head moves on: the next pushes wrap
		t.Fatalf("Drain = %d, want 5", n)
	}
	for i := 5; i < 13; i++ {
		if p := &vals[i]; !r.Push(&p) {
			t.Fatalf("push %d refused", i)
		}
	}
	if n := r.DiscardClosed(); n != 0 || r.Len() != 8 {
		t.Fatalf("DiscardClosed on an open ring = %d, Len %d; want 0, 8", n, r.Len())
	}
	r.Close()
	if n := r.DiscardClosed(); n != 8 {
		t.Fatalf("DiscardClosed = %d, want 8", n)
	}
	for i := range r.buf {
		if r.buf[i].val != nil {
			t.Fatalf("slot %d still points at an item", i)
		}
	}
	if n, l := r.DrainClosed(dst), r.Len(); n != 0 || l != 0 {
		t.Fatalf("after DiscardClosed: DrainClosed = %d, Len = %d; want 0, 0", n, l)
	}
	if n := r.DiscardClosed(); n != 0 {
		t.Fatalf("second DiscardClosed = %d, want 0", n)
	}
}

func TestDiscardClosedWaitsForInflightWrite(t *testing.T) {
	r := New[*int](4)
	x, y := 10, 20
	px := &x
	r.Push(&px)
	pos := r.tail.Add(1) - 1 // a producer that claimed before Close, not yet written
	r.Close()
	got := make(chan int)
	go func() { got <- r.DiscardClosed() }()
	select {
	case n := <-got:
		t.Fatalf("DiscardClosed returned %d before the claimed slot was written", n)
	case <-time.After(20 * time.Millisecond):
	}
	s := &r.buf[pos&r.mask]
	s.val = &y
	s.seq.Store(pos + 1)
	select {
	case n := <-got:
		if n != 2 || s.val != nil {
			t.Fatalf("DiscardClosed = %d, slot %v; want 2 and the slot zeroed", n, s.val)
		}
	case <-time.After(wakeTimeout):
		t.Fatal("DiscardClosed did not return")
	}
}

func TestDrainClosedOnOpenRingActsLikeDrain(t *testing.T) {
	r := New[int](4)
	x := 3
	r.Push(&x)
	dst := make([]int, 4)
	if n := r.DrainClosed(dst); n != 1 || dst[0] != 3 {
		t.Fatalf("DrainClosed = %d %v, want 1 [3]", n, dst[:n])
	}
	if n := r.DrainClosed(dst); n != 0 {
		t.Fatalf("DrainClosed on empty open ring = %d, want 0", n)
	}
}

func TestParkReturnsFalseWhenPending(t *testing.T) {
	r := New[int](4)
	x := 1
	r.Push(&x)
	if r.Park() {
		t.Fatal("Park = true with an item pending")
	}
	if r.parked.Load() != 0 {
		t.Fatal("Park returning false left the parked flag set")
	}
}

func TestParkReturnsFalseWhenClosed(t *testing.T) {
	r := New[int](4)
	r.Close()
	if r.Park() {
		t.Fatal("Park = true on a closed ring")
	}
}

func TestPushAfterParkDeliversToken(t *testing.T) {
	r := New[int](4)
	if !r.Park() {
		t.Fatal("Park = false on an empty ring")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		x := 7
		r.Push(&x)
	}()
	select {
	case <-r.Wake():
	case <-time.After(wakeTimeout):
		t.Fatal("no token on Wake after a push to a parked consumer")
	}
	r.Unpark()
	<-done
	dst := make([]int, 1)
	if n := r.Drain(dst); n != 1 || dst[0] != 7 {
		t.Fatalf("Drain = %d %v, want 1 [7]", n, dst)
	}
}

func TestCloseWakesParkedConsumer(t *testing.T) {
	r := New[int](4)
	if !r.Park() {
		t.Fatal("Park = false on an empty ring")
	}
	go r.Close()
	select {
	case <-r.Wake():
	case <-time.After(wakeTimeout):
		t.Fatal("Close did not wake the parked consumer")
	}
	r.Unpark()
	if r.Park() {
		t.Fatal("Park = true after Close")
	}
}

func TestNoTokenWhenNotParked(t *testing.T) {
	r := New[int](4)
	if !r.Park() {
		t.Fatal("Park = false on an empty ring")
	}
	r.Unpark()
	x := 1
	r.Push(&x)
	select {
	case <-r.Wake():
		t.Fatal("token sent although the consumer had unparked")
	default:
	}
}

// TestParkUntilWakesAtTheMark: parked until 3 items, the consumer gets no
// token for the first two pushes and one for the third; with 3 already
// queued it does not park.
func TestParkUntilWakesAtTheMark(t *testing.T) {
	r := New[int](8)
	x := 1
	r.Push(&x) // drained below: the mark counts from the head
	if n := r.Drain(make([]int, 8)); n != 1 {
		t.Fatalf("Drain = %d, want 1", n)
	}
	if !r.ParkUntil(3) {
		t.Fatal("ParkUntil(3) = false on an empty ring")
	}
	for i := range 3 {
		select {
		case <-r.Wake():
			t.Fatalf("token after %d pushes, want none before 3", i)
		default:
		}
		r.Push(&x)
	}
	select {
	case <-r.Wake():
	default:
		t.Fatal("no token after the third push")
	}
	r.Unpark()
	if r.ParkUntil(3) {
		t.Fatal("ParkUntil(3) = true with 3 items queued")
	}
	if r.parked.Load() != 0 {
		t.Fatal("ParkUntil returning false left the parked flag set")
	}
	if !r.ParkUntil(100) { // beyond the capacity: a full ring
		t.Fatal("ParkUntil(100) = true with 3 of 8 queued")
	}
	for range 5 {
		r.Push(&x)
	}
	select {
	case <-r.Wake():
	default:
		t.Fatal("no token when the ring filled up")
	}
}

// TestParkHeadWakesOnlyOnTheHead: parked behind a claimed, unwritten head
// slot, the consumer gets no token for the pushes queued behind it, one
// when that slot is written, and does not park once it is (or after Close).
func TestParkHeadWakesOnlyOnTheHead(t *testing.T) {
	r := New[int](8)
	x := 1
	r.Push(&x)
	if n := r.Drain(make([]int, 8)); n != 1 {
		t.Fatalf("Drain = %d, want 1", n) // the head is not at 0
	}
	head, ok := r.Claim()
	if !ok {
		t.Fatal("Claim refused")
	}
	if !r.ParkHead() {
		t.Fatal("ParkHead = false behind an unwritten head")
	}
	for i := range 6 {
		r.Push(&x)
		select {
		case <-r.Wake():
			t.Fatalf("token after push %d behind the head", i)
		default:
		}
	}
	*head.Value() = 2
	head.Commit()
	select {
	case <-r.Wake():
	default:
		t.Fatal("no token when the head slot was written")
	}
	r.Unpark()
	if r.ParkHead() {
		t.Fatal("ParkHead = true with the head written")
	}
	if r.parked.Load() != 0 {
		t.Fatal("ParkHead returning false left the parked flag set")
	}
	dst := make([]int, 8)
	if n := r.Drain(dst); n != 7 || dst[0] != 2 {
		t.Fatalf("Drain = %d %v, want 7 from 2", n, dst)
	}
	if _, ok := r.Claim(); !ok {
		t.Fatal("Claim refused")
	}
	if !r.ParkHead() {
		t.Fatal("ParkHead = false behind an unwritten head")
	}
	r.Close()
	select {
	case <-r.Wake():
	default:
		t.Fatal("Close did not wake a consumer parked on the head")
	}
	r.Unpark()
	if r.ParkHead() {
		t.Fatal("ParkHead = true on a closed ring")
	}
}

// TestParkUntilStress: producers trickle items while the consumer parks
// until a mark and, like the SDK's consumer, also wakes on a short timer;
// every item arrives, and whenever the timer ends a wait with the mark
// reached, the token still comes (a lost wake-up would never send it).
func TestParkUntilStress(t *testing.T) {
	const producers, perProducer, mark = 4, 2000, 16
	r := New[int](64)
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; {
				x := i
				if r.Push(&x) {
					i++
				}
				if i%7 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	got, lost := 0, 0
	dst := make([]int, 64)
	tick := time.NewTimer(time.Hour)
	for got < producers*perProducer {
		if n := r.Drain(dst); n > 0 {
			got += n
			continue
		}
		if !r.ParkUntil(mark) {
			continue
		}
		tick.Reset(20 * time.Millisecond)
		select {
		case <-r.Wake():
		case <-tick.C:
			// The mark-th item published while parked: its producer (or
			// another that took the flag) owes a token, maybe in flight.
			if r.Ready(mark) == mark {
				select {
				case <-r.Wake():
				case <-time.After(wakeTimeout):
					lost++
				}
			}
		}
		r.Unpark()
	}
	wg.Wait()
	if lost > 0 {
		t.Fatalf("%d waits ended by the timer with the mark reached: lost wake-ups", lost)
	}
}

func TestZeroAllocs(t *testing.T) {
	type span struct {
		name, svc  string
		start, end int64
	}
	r := New[span](64)
	dst := make([]span, 64)
	v := span{name: "n", svc: "s", start: 1, end: 2}
	if a := testing.AllocsPerRun(1000, func() {
		if !r.Push(&v) {
			r.Drain(dst)
		}
	}); a != 0 {
		t.Errorf("Push allocs = %v, want 0", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		r.Push(&v)
		r.Push(&v)
		r.Drain(dst)
	}); a != 0 {
		t.Errorf("Drain allocs = %v, want 0", a)
	}
	// Push that hands a wake token to a parked consumer must not allocate either.
	if a := testing.AllocsPerRun(1000, func() {
		r.Drain(dst)
		r.Park()
		r.Push(&v)
		<-r.Wake()
		r.Unpark()
	}); a != 0 {
		t.Errorf("Push with wake-up allocs = %v, want 0", a)
	}
}

// TestWakeupStress makes producers trickle items so the consumer parks
// constantly; a lost wake-up would surface as a wakeTimeout failure.
func TestWakeupStress(t *testing.T) {
	const producers = 4
	perProducer := 20_000
	if raceEnabled {
		perProducer = 3_000
	}
	r := New[item](8)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p uint64) {
			defer wg.Done()
			for seq := 0; seq < perProducer; seq++ {
				it := makeItem(p, uint64(seq))
				for !r.Push(&it) {
					if r.Closed() {
						return
					}
					runtime.Gosched()
				}
				runtime.Gosched() // trickle, so the consumer finds the ring empty
			}
		}(uint64(p))
	}
	total := producers * perProducer
	received := 0
	consume(t, r, func(batch []item) bool {
		for _, it := range batch {
			if _, _, ok := it.check(); !ok {
				t.Errorf("torn item %+v", it)
				return true
			}
		}
		received += len(batch)
		return received == total
	})
	r.Close() // releases producers if the consumer gave up early
	wg.Wait()
	if !t.Failed() && received != total {
		t.Fatalf("received %d, want %d", received, total)
	}
}

// TestClaimCommit: an item built in place through Claim is delivered once
// committed, and the consumer does not pass a claimed slot before that.
func TestClaimCommit(t *testing.T) {
	r := New[[4]uint64](4)
	c, ok := r.Claim()
	if !ok {
		t.Fatal("Claim on an empty ring failed")
	}
	if *c.Value() != ([4]uint64{}) {
		t.Fatalf("claimed slot not zeroed: %v", *c.Value())
	}
	c.Value()[0], c.Value()[3] = 7, 9
	if !r.Push(&[4]uint64{1}) { // claimed after the first: must come second
		t.Fatal("Push failed")
	}
	dst := make([][4]uint64, 4)
	if n := r.Drain(dst); n != 0 {
		t.Fatalf("Drain passed an uncommitted slot: got %d items", n)
	}
	c.Commit()
	if n := r.Drain(dst); n != 2 || dst[0] != [4]uint64{7, 0, 0, 9} || dst[1][0] != 1 {
		t.Fatalf("Drain = %d %v", n, dst[:n])
	}
	for range 4 {
		if _, ok := r.Claim(); !ok {
			t.Fatal("Claim failed with room")
		}
	}
	if _, ok := r.Claim(); ok {
		t.Fatal("Claim on a full ring succeeded")
	}
}

func TestReadyAtRelease(t *testing.T) {
	r := New[*int](4)
	vals := make([]*int, 4)
	for i := range vals {
		vals[i] = new(int)
		*vals[i] = i
		if !r.Push(&vals[i]) {
			t.Fatalf("push %d failed", i)
		}
	}
	if n := r.Ready(3); n != 3 {
		t.Fatalf("Ready(3) = %d, want 3", n)
	}
	if n := r.Ready(10); n != 4 {
		t.Fatalf("Ready(10) = %d, want 4", n)
	}
	for pass := range 2 { // in place, as often as the consumer likes
		for i := range 4 {
			if got := *r.At(i); got != vals[i] {
				t.Fatalf("pass %d: At(%d) = %p, want %p", pass, i, got, vals[i])
			}
		}
	}
	x := new(int)
	if r.Push(&x) {
		t.Fatal("push into a full ring succeeded before Release")
	}
	r.Release(2)
	for i := range 2 {
		if r.buf[i].val != nil {
			t.Fatalf("released slot %d still holds a pointer", i)
		}
	}
	if n := r.Ready(10); n != 2 || *r.At(0) != vals[2] || *r.At(1) != vals[3] {
		t.Fatalf("after Release(2): Ready = %d, At(0) = %p, want 2 and %p", n, *r.At(0), vals[2])
	}
	for i := range 2 {
		if !r.Push(&x) {
			t.Fatalf("push %d into a released slot failed", i)
		}
	}
	if r.Push(&x) {
		t.Fatal("push beyond capacity succeeded after Release(2)")
	}
	r.Release(0) // a no-op
	if n := r.Ready(10); n != 4 || *r.At(2) != x {
		t.Fatalf("Ready = %d, want 4 with the new items last", n)
	}
}

// TestReadyAtReleaseConcurrent is TestConcurrentProducersConsumer for a
// consumer that reads each batch in two passes before releasing it.
func TestReadyAtReleaseConcurrent(t *testing.T) {
	const producers = 8
	perProducer := scaled(100_000)
	r := New[item](256)
	defer produce(r, producers, perProducer)()
	var next [producers]uint64
	deadline := time.Now().Add(time.Minute)
	for received := 0; received < producers*perProducer; {
		n := r.Ready(64)
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d items within a minute", received, producers*perProducer)
			}
			runtime.Gosched()
			continue
		}
		first := make([]item, n)
		for i := range n {
			first[i] = *r.At(i)
		}
		for i := range n {
			it := *r.At(i)
			if it != first[i] {
				t.Fatalf("item %d changed between passes: %+v then %+v", i, first[i], it)
			}
			p, seq, ok := it.check()
			if !ok || p >= producers || seq != next[p] {
				t.Fatalf("item %+v: torn %v, or out of order (want seq %d)", it, !ok, next[min(p, producers-1)])
			}
			next[p]++
		}
		r.Release(n)
		received += n
	}
	if n := r.Ready(1); n != 0 {
		t.Fatal("extra item after all were received")
	}
}

// TestLateCommitDoesNotWakeTheNextPark: a producer preempted between
// Commit's publishing store and its look at the parked word finds the
// consumer already past its item (and the next) and parked again until two
// more; its item is not among those, so it must not send the token.
func TestLateCommitDoesNotWakeTheNextPark(t *testing.T) {
	r := New[int](8)
	c, ok := r.Claim()
	if !ok {
		t.Fatal("Claim on an empty ring failed")
	}
	*c.Value() = 1
	c.s.seq.Store(c.pos + 1) // Commit's first step; the rest runs below
	x := 2
	r.Push(&x)
	if n := r.Drain(make([]int, 8)); n != 2 {
		t.Fatalf("Drain = %d, want 2", n)
	}
	if !r.ParkUntil(2) {
		t.Fatal("ParkUntil(2) = false on an empty ring")
	}
	c.Commit() // the preempted producer resumes: same store, then the wake check
	select {
	case <-r.Wake():
		t.Fatal("token for an item drained before the consumer parked")
	default:
	}
	if r.parked.Load() != 2 {
		t.Fatal("the late Commit took the parked flag")
	}
}

// TestGiveUpStopsWaitingForAClaim: a slot claimed before Close and never
// written (its producer panicked) holds DrainClosed and DiscardClosed until
// GiveUp; then DrainClosed returns the items before it, DiscardClosed drops
// it and the items after it (all counted) without touching it, and the ring
// is empty.
func TestGiveUpStopsWaitingForAClaim(t *testing.T) {
	r := New[int](8)
	for _, v := range []int{1, 2} {
		r.Push(&v)
	}
	stuck := r.tail.Add(1) - 1 // claimed, never committed
	// Its producer's copy is under way: a zeroing DiscardClosed would
	// leave 0, as an untouched empty slot does, so the check below needs a
	// value of the producer's to tell the two apart.
	r.buf[stuck&r.mask].val = 77
	for _, v := range []int{4, 5} {
		r.Push(&v)
	}
	r.Close()
	type result struct{ drained, discarded int }
	got := make(chan result)
	go func() {
		dst := make([]int, 8)
		n := r.DrainClosed(dst) // the 2 before the claim, at once
		if n != 2 || dst[0] != 1 || dst[1] != 2 {
			t.Errorf("DrainClosed = %d %v, want [1 2]", n, dst[:n])
		}
		n = r.DrainClosed(dst) // waits at the claim
		got <- result{n, r.DiscardClosed()}
	}()
	select {
	case res := <-got:
		t.Fatalf("returned %+v before GiveUp, with the claim unwritten", res)
	case <-time.After(50 * time.Millisecond):
	}
	r.GiveUp()
	select {
	case res := <-got:
		if res.drained != 0 || res.discarded != 3 || r.Len() != 0 {
			t.Fatalf("after GiveUp: drained %d, discarded %d, Len %d; want 0, 3 (the claim and the 2 after it), 0", res.drained, res.discarded, r.Len())
		}
	case <-time.After(wakeTimeout):
		t.Fatal("DrainClosed or DiscardClosed still waiting after GiveUp")
	}
	if s := &r.buf[stuck&r.mask]; s.seq.Load() == stuck+1 || s.val != 77 {
		t.Fatalf("the unwritten slot was touched: seq %d val %d, want its producer's 77 left", s.seq.Load(), s.val)
	}
}
