// This file holds the tests of the parked word and its tokens (ParkUntil,
// ParkHead, Commit, Close), DrainClosed on an open ring and New's bound.

package inbox

import (
	"math/bits"
	"testing"
	"time"
)

// noToken fails the test if a token is pending on Wake.
func noToken(t *testing.T, r *Ring[int], what string) {
	t.Helper()
	select {
	case <-r.Wake():
		t.Fatalf("token pending on Wake %s", what)
	default:
	}
}

// oneToken fails the test unless a token is pending on Wake, and takes it.
func oneToken(t *testing.T, r *Ring[int], what string) {
	t.Helper()
	select {
	case <-r.Wake():
	default:
		t.Fatalf("no token on Wake %s", what)
	}
}

// TestParkUntilBelowOneIsPark: n < 1 counts as 1, on a fresh ring and on
// one whose head has moved: the consumer parks and the next push wakes it.
func TestParkUntilBelowOneIsPark(t *testing.T) {
	r := New[int](4)
	x := 1
	for round, n := range []int{0, -3, 0} {
		if !r.ParkUntil(n) {
			t.Fatalf("round %d: ParkUntil(%d) = false on an empty ring", round, n)
		}
		if got := r.parked.Load(); got != 1 {
			t.Fatalf("round %d: ParkUntil(%d) stored %d, want 1", round, n, got)
		}
		r.Push(&x)
		oneToken(t, r, "after the first push")
		r.Unpark()
		if got := r.Drain(make([]int, 4)); got != 1 {
			t.Fatalf("round %d: Drain = %d, want 1", round, got)
		}
	}
}

// TestParkHeadFalseWhenHeadWritten: with the head item written (and
// nothing behind it) ParkHead must not park: its commit already happened,
// so no token would ever come.
func TestParkHeadFalseWhenHeadWritten(t *testing.T) {
	r := New[int](4)
	x := 1
	for round := range 3 { // the head moves on between rounds
		r.Push(&x)
		if r.ParkHead() {
			t.Fatalf("round %d: ParkHead = true with the head item written", round)
		}
		if r.parked.Load() != 0 {
			t.Fatalf("round %d: ParkHead returning false left the parked flag set", round)
		}
		if n := r.Drain(make([]int, 4)); n != 1 {
			t.Fatalf("round %d: Drain = %d, want 1", round, n)
		}
	}
}

// TestParkDropsStaleToken: a token the consumer never took (it unparked on
// a timer) is dropped by the next ParkUntil or ParkHead that parks, so it
// does not end that wait before anything happened.
func TestParkDropsStaleToken(t *testing.T) {
	r := New[int](4)
	x := 1
	leaveToken := func() {
		if !r.Park() {
			t.Fatal("Park = false on an empty ring")
		}
		r.Push(&x) // sends the token; the consumer "wakes on its timer"
		r.Unpark()
		if n := r.Drain(make([]int, 4)); n != 1 {
			t.Fatalf("Drain = %d, want 1", n)
		}
	}

	leaveToken()
	if !r.ParkUntil(2) {
		t.Fatal("ParkUntil(2) = false on an empty ring")
	}
	noToken(t, r, "right after ParkUntil: the stale token was not dropped")
	r.Unpark()

	leaveToken()
	c, ok := r.Claim()
	if !ok {
		t.Fatal("Claim refused")
	}
	if !r.ParkHead() {
		t.Fatal("ParkHead = false behind an unwritten head")
	}
	noToken(t, r, "right after ParkHead: the stale token was not dropped")
	*c.Value() = 2
	c.Commit()
	oneToken(t, r, "after the head's commit")
	r.Unpark()
}

// TestWakeTakesTheParkedWord: the push that wakes the consumer takes the
// parked word, so pushes after it, before the consumer unparks, send no
// second token.
func TestWakeTakesTheParkedWord(t *testing.T) {
	r := New[int](8)
	x := 1
	if !r.Park() {
		t.Fatal("Park = false on an empty ring")
	}
	r.Push(&x)
	oneToken(t, r, "after the first push")
	r.Push(&x)
	noToken(t, r, "after a second push: the waker did not take the parked word")
	if got := r.parked.Load(); got != 0 {
		t.Fatalf("parked = %d after the waking push, want 0", got)
	}
	r.Unpark()
}

// TestCloseTakesTheParkedWord: Close wakes a parked consumer and takes the
// parked word, so a commit of a slot claimed before Close that lands
// before the consumer unparks sends no second token.
func TestCloseTakesTheParkedWord(t *testing.T) {
	r := New[int](4)
	c, ok := r.Claim()
	if !ok {
		t.Fatal("Claim refused")
	}
	if !r.Park() {
		t.Fatal("Park = false with only an unwritten claim")
	}
	r.Close()
	oneToken(t, r, "after Close")
	*c.Value() = 5
	c.Commit()
	noToken(t, r, "after a late commit: Close did not take the parked word")
	if got := r.parked.Load(); got != 0 {
		t.Fatalf("parked = %d after Close, want 0", got)
	}
	r.Unpark()
	dst := make([]int, 4)
	if n := r.DrainClosed(dst); n != 1 || dst[0] != 5 {
		t.Fatalf("DrainClosed = %d %v, want 1 [5]", n, dst[:n])
	}
}

// TestDrainClosedOnOpenRingDoesNotWait: on an open ring DrainClosed is
// Drain: it stops at a claimed, unwritten slot at once instead of waiting
// for its producer.
func TestDrainClosedOnOpenRingDoesNotWait(t *testing.T) {
	r := New[int](4)
	a, b := 1, 3
	r.Push(&a)
	c, ok := r.Claim()
	if !ok {
		t.Fatal("Claim refused")
	}
	r.Push(&b)
	type result struct {
		n   int
		dst []int
	}
	got := make(chan result, 1)
	go func() {
		dst := make([]int, 4)
		n := r.DrainClosed(dst)
		got <- result{n, dst[:n]}
	}()
	var res result
	waited := false
	select {
	case res = <-got:
	case <-time.After(wakeTimeout): // generous: the original returns at once
		waited = true
		*c.Value() = 2
		c.Commit() // release the waiting drain so nothing leaks
		res = <-got
	}
	if waited || res.n != 1 || res.dst[0] != 1 {
		t.Fatalf("DrainClosed on an open ring = %d %v (waited for the claim: %v), want 1 [1] at once", res.n, res.dst, waited)
	}
	*c.Value() = 2
	c.Commit()
	dst := make([]int, 4)
	if n := r.Drain(dst); n != 2 || dst[0] != 2 || dst[1] != 3 {
		t.Fatalf("Drain = %d %v, want 2 [2 3]", n, dst[:n])
	}
}

// TestNewPanicsAboveMaxCapacity: a capacity above maxCapacity that still
// fits an int (64-bit only) panics with New's message before allocating.
func TestNewPanicsAboveMaxCapacity(t *testing.T) {
	if bits.UintSize < 64 {
		t.Skip("maxCapacity+1 does not fit an int")
	}
	shift := 40
	c := 1<<shift + 1 // maxCapacity + 1
	defer func() {
		if got := recover(); got != "inbox: capacity too large" {
			t.Errorf("New(%d) panic = %v, want %q", c, got, "inbox: capacity too large")
		}
	}()
	New[struct{}](c)
}
