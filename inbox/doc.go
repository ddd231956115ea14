// Package inbox provides Ring, a generic bounded lock-free
// multi-producer single-consumer queue for the tracing SDK's hot path.
//
// # Ownership
//
// A Ring owns a fixed array of slots allocated once by New. Push copies the
// caller's value into a slot, and Drain copies it out and zeroes the slot
// (Release zeroes the slots of a batch read in place; SetClear lets a
// consumer that knows which fields its producers write clear only those),
// so the ring never retains pointers to drained data and neither operation
// allocates. Push never blocks: when the ring is full or closed it returns
// false and the caller decides whether to drop or retry.
//
// # Concurrency rule
//
// Any number of goroutines may call Push, Claim (then Commit), Cap, Len,
// Pushed, Close, Closed, Wake and GiveUp concurrently. Drain, DrainClosed,
// DiscardClosed, Ready, At, Release, Park, ParkUntil, ParkHead and Unpark form the
// consumer side and must only ever be called from exactly one consumer
// goroutine at a time. SetClear is called before the ring is shared.
//
// # Design
//
// The ring is a bounded queue after Vyukov's: every slot carries an atomic
// sequence number next to its value; producers claim a position with a CAS on
// the tail word, write the value and publish it by storing position+1 into the
// slot's sequence, while the single consumer owns the head and reads a slot
// once its sequence says it is ready. The consumer hands slots back by
// publishing its head, once per batch; a producer claims a position only
// below head+capacity, so the slot it gets was emptied before that head was
// stored: the consumer needs no locked per-slot store (Vyukov's
// position+capacity), and a producer never reads a slot it cannot take, so
// under overload pushes leave the slots' cache lines to the consumer.
// Ready, At and Release let the consumer work on a batch in place, in as
// many passes as it likes, instead of copying it out; Drain is the copying
// form. Close sets the top bit of the tail word, which makes every
// later tail CAS fail, so the final tail is fixed and DrainClosed can wait for
// the slots claimed before Close to be written and then prove the ring empty.
// Wake-ups use a parked word and a one-token channel: the consumer stores in
// it how many queued items should wake it (ParkUntil; Park is one) and
// re-checks the item at that distance from the head, and only a producer
// whose push reaches the mark and that wins a CAS of the word to 0 sends a
// token (as do Close and, after ParkHead, the head item's commit);
// because Go atomics are sequentially consistent, either the producer of
// that item sees the word or the consumer sees the item, so no
// wake-up is ever lost, at the cost of at most one spurious one. A consumer
// parked until a mark above one needs its own timer for the items below it.
// Head, tail and the parked flag live on separate cache lines.
package inbox
