// This file holds Ring, the bounded lock-free multi-producer
// single-consumer queue, and its consumer's batch drain and parking.

package inbox

import (
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// closedBit is the top bit of the tail word; setting it makes every later
// producer CAS on the tail fail, which freezes the final tail position.
const closedBit = uint64(1) << 63

// maxCapacity bounds New so that positions plus capacity can never reach the
// closed bit within any realistic lifetime of a ring.
const maxCapacity uint64 = 1 << 40

// cacheLine is the padding unit; 64 bytes covers amd64 and arm64 L1 lines.
const cacheLine = 64

// slot is one cell of the ring. Its producer sets seq to pos+1 once val
// holds the item at pos, which is what makes the plain val field safe for
// the consumer to read; any other value (0, or last lap's) means not yet.
type slot[T any] struct {
	seq atomic.Uint64
	val T
}

// Ring is a bounded lock-free multi-producer single-consumer queue of T.
// Any goroutine may Push or Claim; the consumer side (Ready, At, Release,
// Drain, DrainClosed, DiscardClosed, Park, ParkUntil, ParkHead, Unpark) belongs to one
// goroutine at a time (see the package doc). The zero value is not usable;
// call New.
type Ring[T any] struct {
	// Read-only after New, so they share a line that is never written.
	buf   []slot[T]
	mask  uint64
	wake  chan struct{}
	clear func(*T) // SetClear's, or nil: zero the whole value

	_ [cacheLine]byte
	// tail is the next position producers will claim, with closedBit on top.
	tail atomic.Uint64
	_    [cacheLine - 8]byte
	// parked is, while the consumer is (about to be) waiting on wake, the
	// number of queued items that wakes it (see ParkUntil), or parkHead;
	// 0 otherwise.
	parked atomic.Uint64
	_      [cacheLine - 8]byte
	// head is owned by the consumer; it is atomic only so Len can read it.
	head atomic.Uint64
	// gaveUp: the closed ring's drains no longer wait for claimed slots
	// (GiveUp). Beside head: read only while draining a closed ring.
	gaveUp atomic.Bool
	_      [cacheLine - 12]byte
}

// New returns an empty ring holding at least capacity items. The capacity is
// rounded up to a power of two so positions map to slots with a
// mask. It panics if capacity <= 0 or is unreasonably large.
func New[T any](capacity int) *Ring[T] {
	if capacity <= 0 {
		panic("inbox: capacity must be > 0")
	}
	// The second bound is for 32-bit ints: above 1<<30 the rounded-up
	// power of two does not fit and the shift below would wrap negative.
	if uint64(capacity) > maxCapacity || capacity > math.MaxInt/2+1 {
		panic("inbox: capacity too large")
	}
	n := 1 << bits.Len(uint(capacity-1))
	r := &Ring[T]{
		buf:  make([]slot[T], n),
		mask: uint64(n - 1),
		wake: make(chan struct{}, 1),
	}
	return r
}

// Push copies *v into the ring. It returns false, without blocking or
// allocating, when the ring is full or closed. v is a pointer so large
// structs are copied once, straight into the slot.
func (r *Ring[T]) Push(v *T) bool {
	c, ok := r.Claim()
	if !ok {
		return false
	}
	*c.Value() = *v
	c.Commit()
	return true
}

// Claimed is a slot reserved by Claim: fill it through Value, then Commit.
type Claimed[T any] struct {
	s   *slot[T]
	pos uint64
	r   *Ring[T]
}

// Value is the reserved slot's value, zeroed, for the producer to fill in
// place.
func (c Claimed[T]) Value() *T { return &c.s.val }

// Commit publishes the value to the consumer. It must follow Claim without
// any wait in between: the consumer cannot pass this slot until it does.
func (c Claimed[T]) Commit() {
	c.s.seq.Store(c.pos + 1) // publish: the consumer may read val now
	r := c.r
	// Loads only on the common path, of lines the consumer rarely writes;
	// the CAS picks one waker.
	if w := r.parked.Load(); w != 0 && r.wakes(c.pos, w) && r.parked.CompareAndSwap(w, 0) {
		select {
		case r.wake <- struct{}{}:
		default: // a token is already pending; one is enough
		}
	}
}

// Claim reserves the next slot so the producer can build its item in
// place, saving a copy of large items. It returns false, without blocking
// or allocating, when the ring is full or closed.
func (r *Ring[T]) Claim() (Claimed[T], bool) {
	pos := r.tail.Load()
	for {
		if pos&closedBit != 0 {
			return Claimed[T]{}, false
		}
		if int64(pos-r.head.Load()) >= int64(len(r.buf)) {
			// Full as of the consumer's last batch. A stale pos only
			// makes the difference smaller, never a false full.
			return Claimed[T]{}, false
		}
		// Free for this lap: the consumer released pos-cap before it
		// published the head just read. The CAS makes the slot ours alone.
		if r.tail.CompareAndSwap(pos, pos+1) {
			return Claimed[T]{s: &r.buf[pos&r.mask], pos: pos, r: r}, true
		}
		pos = r.tail.Load()
	}
}

// SetClear makes Release (and Drain) empty each slot with clear instead of
// assigning the zero value to all of it. clear must leave the value equal to
// T's zero value — producers get it zeroed from Claim — but may write only
// the fields it knows were set: a large T whose producers fill a few of its
// cache lines then costs the consumer writes to those lines alone, not to
// lines nobody touched since the last lap (which a write must first fetch).
// Call it before the ring is shared; nil restores whole-value zeroing.
func (r *Ring[T]) SetClear(clear func(*T)) { r.clear = clear }

// Cap returns the number of slots (the rounded-up capacity).
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Len returns the number of queued items: claimed slots included, written
// or not. From another goroutine than the consumer it is approximate (for
// metrics), stale by the time it returns. From the consumer, which alone
// moves head, it counts at least every item whose push returned before
// the call: the consumer's Flush drains that many (stats' drainQueued).
func (r *Ring[T]) Len() int {
	h := r.head.Load() // head first: then tail >= head always holds
	t := r.tail.Load() &^ closedBit
	// The consumer may release and producers refill between the two loads,
	// so t-h can exceed Cap.
	return int(min(t-h, uint64(len(r.buf))))
}

// Pushed returns the exact number of successful pushes so far (a push is
// counted from the moment it claims its slot). It is the tail position, so
// Push needs no extra counter.
func (r *Ring[T]) Pushed() uint64 { return r.tail.Load() &^ closedBit }

// Ready returns how many items, up to max, are ready at the head. The
// consumer may then read them in place with At, in any order and as often
// as it likes (several passes over a batch let their cache misses overlap),
// and must hand their slots back with Release. Consumer only.
func (r *Ring[T]) Ready(max int) int {
	head := r.head.Load()
	n := 0
	for n < max && r.buf[(head+uint64(n))&r.mask].seq.Load() == head+uint64(n)+1 {
		n++
	}
	return n
}

// At returns the i-th ready item from the head, in place; i must be below
// what Ready returned. Consumer only.
func (r *Ring[T]) At(i int) *T {
	return &r.buf[(r.head.Load()+uint64(i))&r.mask].val
}

// Release hands the first n ready items' slots back to the producers,
// zeroing them so the ring retains no pointers; n must not exceed what
// Ready returned. Consumer only.
func (r *Ring[T]) Release(n int) {
	var zero T
	head := r.head.Load()
	for range n {
		s := &r.buf[head&r.mask]
		if r.clear != nil {
			r.clear(&s.val)
		} else {
			s.val = zero
		}
		head++
	}
	if n > 0 {
		// Hands the slots to the next lap: Claim admits pos only below
		// head+cap, so no per-slot store is needed (BenchmarkConsumer).
		r.head.Store(head)
	}
}

// Drain moves up to len(dst) ready items into dst in FIFO order, zeroes the
// vacated slots so the ring retains no pointers, and returns how many it
// moved. It never blocks; it stops at the first slot a producer has claimed
// but not finished writing. Consumer goroutine only.
func (r *Ring[T]) Drain(dst []T) int {
	n := r.Ready(len(dst))
	head := r.head.Load()
	for i := range n {
		dst[i] = r.buf[(head+uint64(i))&r.mask].val
	}
	r.Release(n)
	return n
}

// DrainClosed is Drain for after Close: it moves up to len(dst) items, and
// when the next item's slot was claimed before Close but is not yet written
// it waits (yielding, then sleeping: awaitWrite) for the producer to finish. Once
// it returns 0 for a non-empty dst the ring is empty and no item will ever
// appear again, unless GiveUp was called: then it returns 0 at the first
// slot still unwritten, and the items behind it are DiscardClosed's to
// count. If the ring is not closed it behaves exactly like Drain.
// Consumer goroutine only.
func (r *Ring[T]) DrainClosed(dst []T) int {
	t := r.tail.Load()
	if t&closedBit == 0 {
		return r.Drain(dst)
	}
	final := t &^ closedBit // frozen: no CAS on tail can succeed any more
	head := r.head.Load()
	n := 0
	for n < len(dst) && head+uint64(n) != final {
		s := &r.buf[(head+uint64(n))&r.mask]
		if !r.awaitWrite(s, head+uint64(n)) {
			r.Release(n)
			return n
		}
		dst[n] = s.val
		n++
	}
	r.Release(n)
	return n
}

// awaitWrite waits for s, claimed at pos before Close, to be written and
// reports whether it was (false: GiveUp). The claim succeeded, so the
// write is only moments away: it yields awaitYields times, then sleeps,
// backing off to awaitMaxSleep, so that a producer that never finishes
// (its copy panicked) does not cost a core until GiveUp
// (TestStopBehindAbandonedSlotDoesNotSpin in stats).
func (r *Ring[T]) awaitWrite(s *slot[T], pos uint64) bool {
	sleep := awaitMinSleep
	for i := 0; s.seq.Load() != pos+1; i++ {
		switch {
		case r.gaveUp.Load():
			return false
		case i < awaitYields:
			runtime.Gosched()
		default:
			time.Sleep(sleep)
			sleep = min(2*sleep, awaitMaxSleep)
		}
	}
	return true
}

// The wait of awaitWrite: about a millisecond of yields on a busy host (a
// producer preempted in its copy runs again within a time slice), then
// sleeps of 50 µs doubling to 2 ms: a second behind a slot never written
// costs about 500 wake-ups, not a core.
const (
	awaitYields   = 1000
	awaitMinSleep = 50 * time.Microsecond
	awaitMaxSleep = 2 * time.Millisecond
)

// GiveUp makes DrainClosed and DiscardClosed stop waiting for slots claimed
// before Close and not yet written: DrainClosed returns what was written
// before the first such slot (0 if none: the ring then counts as empty),
// DiscardClosed drops such a slot without touching it (its producer's
// write, if it ever comes, lands in a slot nothing reads again). For a
// consumer past its deadline whose producer may never finish: one whose
// copy into the slot panicked (a value another goroutine tore). Any
// goroutine; it cannot be undone.
func (r *Ring[T]) GiveUp() { r.gaveUp.Store(true) }

// DiscardClosed empties a closed ring without handing its items out and
// returns how many it dropped; like DrainClosed it waits for a push claimed
// before Close to finish writing (unless GiveUp). It copies nothing out and zeroes each item
// whole (not with the SetClear function), then moves the head once: Stop,
// past its deadline, drops a full ring at the cost of one write per item
// (TestStopDeadlineWithCostlyInbox). No producer can claim the slots it
// frees, since the tail is frozen. On a ring that is not closed it does
// nothing and returns 0. Consumer goroutine only.
func (r *Ring[T]) DiscardClosed() int {
	t := r.tail.Load()
	if t&closedBit == 0 {
		return 0
	}
	final := t &^ closedBit
	head := r.head.Load()
	var zero T
	for pos := head; pos != final; pos++ {
		// A slot given up on is left alone: its producer may write it yet.
		if s := &r.buf[pos&r.mask]; r.awaitWrite(s, pos) {
			s.val = zero
		}
	}
	r.head.Store(final)
	return int(final - head)
}

// Park announces that the consumer is about to wait on Wake for the next
// item: it is ParkUntil(1).
func (r *Ring[T]) Park() bool { return r.ParkUntil(1) }

// ParkUntil announces that the consumer is about to wait on Wake until n
// items are queued (n < 1 counts as 1; n above Cap as Cap, since no more
// can ever be queued): a producer sends the token only when its push makes
// n or more. It returns false, and withdraws the announcement, when n items
// are already queued or the ring is closed, so the caller must not wait; it
// returns true when the caller should now wait on Wake (together with its
// own timers, which must fire for the items below n) and call Unpark
// afterwards. Consumer goroutine only.
func (r *Ring[T]) ParkUntil(n int) bool {
	w := uint64(min(max(n, 1), len(r.buf)))
	// Drop a stale token left by an earlier cycle; the re-check below covers
	// everything it could have announced, so this only saves a wake-up.
	select {
	case <-r.wake:
	default:
	}
	r.parked.Store(w)
	// Sequentially consistent atomics: the producer of the w-th item from
	// the head either published it before this re-check, which then sees
	// it, or observes parked == w after, and wakes the consumer.
	if r.published(r.head.Load()+w-1) || r.Closed() {
		// If the CAS fails a producer already took the flag and sends a
		// token; that token is harmless and costs one spurious wake-up.
		r.parked.CompareAndSwap(w, 0)
		return false
	}
	return true
}

// parkHead is parked's value while the consumer waits for the head slot
// alone (ParkHead): beyond any count ParkUntil stores.
const parkHead = math.MaxUint64

// ParkHead announces that the consumer is about to wait on Wake for the
// item at the head, claimed but not yet written, whatever is published
// behind it: only the commit of that slot (or Close) sends the token, so a
// consumer stuck behind a slow producer is woken the moment it writes, not
// by each push behind it. It returns false, and withdraws the
// announcement, when the head item is ready or the ring is closed; after
// true, wait on Wake (with a timer: a slot may never be written) and call
// Unpark. Consumer goroutine only.
func (r *Ring[T]) ParkHead() bool {
	select {
	case <-r.wake: // stale, as in ParkUntil
	default:
	}
	r.parked.Store(parkHead)
	// As in ParkUntil: the head's producer either published before this
	// re-check or sees parkHead after; only the consumer moves the head.
	if r.published(r.head.Load()) || r.Closed() {
		r.parked.CompareAndSwap(parkHead, 0)
		return false
	}
	return true
}

// wakes reports whether the commit of position pos wakes a consumer parked
// with w: the head's for ParkHead, the w-th from the head or later for
// ParkUntil (signed: if the consumer already took this item and parked
// again, the count is <= 0, not huge).
func (r *Ring[T]) wakes(pos, w uint64) bool {
	head := r.head.Load()
	if w == parkHead {
		return pos == head
	}
	return int64(pos+1-head) >= int64(w)
}

// published reports whether the item at position pos is ready.
func (r *Ring[T]) published(pos uint64) bool { return r.buf[pos&r.mask].seq.Load() == pos+1 }

// Wake returns the channel that receives a token when, while the consumer is
// parked, a push reaches ParkUntil's mark (any push, after Park), the head
// slot is written (after ParkHead) or the ring is closed. A token can be spurious (at most one per Park/Unpark race), so
// after receiving the consumer should Unpark, Drain, and Park again if
// nothing was there.
func (r *Ring[T]) Wake() <-chan struct{} { return r.wake }

// Unpark clears the parked flag; the consumer calls it after waking for any
// reason (token, timer, signal) so producers stop trying to wake it.
// Consumer goroutine only.
func (r *Ring[T]) Unpark() { r.parked.Store(0) }

// Close stops the ring from accepting items: every later Push returns false.
// Items pushed before Close stay drainable (use DrainClosed to wait for
// in-flight writes). It wakes a parked consumer and is idempotent.
func (r *Ring[T]) Close() {
	if r.tail.Or(closedBit)&closedBit != 0 {
		return // already closed; the first Close did the wake-up
	}
	// Same ordering argument as Push: Park re-checks Closed after setting
	// the flag, so either it sees the bit or this sees the flag.
	if r.parked.Swap(0) != 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Closed reports whether Close has been called.
func (r *Ring[T]) Closed() bool { return r.tail.Load()&closedBit != 0 }
