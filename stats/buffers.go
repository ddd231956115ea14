// This file holds the payload buffers the consumer encodes into and the
// sender gives back once a payload is sent or dropped.

package stats

// freeBuffers is how many payload buffers are kept for reuse: one being
// encoded and one being sent is the steady state.
const freeBuffers = 2

// maxSpareBuf is the largest payload buffer kept for reuse. A larger one
// (a report of many groups) is left to the GC once sent, so a burst never
// leaves the process holding megabytes for good.
const maxSpareBuf = 256 << 10

// bufPool is a bounded free list shared by the consumer and the sender.
type bufPool chan []byte

func newBufPool() bufPool { return make(bufPool, freeBuffers) }

// get returns an empty buffer with room for n bytes, reusing one given back
// if it is large enough. One too small is left to the GC, so that the one
// made now takes its place when given back: put back, a small spare would
// stay first in the queue while the buffers of the size in use were
// dropped at every put (TestPayloadBufferReuseIsBounded).
func (p bufPool) get(n int) []byte {
	select {
	case b := <-p:
		if cap(b) >= n {
			return b[:0]
		}
		if n > maxSpareBuf {
			p.put(b) // what is made for n is not kept: nothing to give way to
		}
	default:
	}
	return make([]byte, 0, max(n, 4<<10))
}

// put offers a buffer for reuse.
func (p bufPool) put(b []byte) {
	if cap(b) > maxSpareBuf {
		return
	}
	select {
	case p <- b:
	default:
	}
}
