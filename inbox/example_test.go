// This file holds the example of a Ring: a producer that pushes and
// closes it, and the one consumer, which drains and parks.

package inbox_test

import (
	"fmt"
	"runtime"

	"github.com/spanstats/spanstats/inbox"
)

type event struct {
	ID   int
	Name string
}

func ExampleRing() {
	r := inbox.New[event](8)
	done := make(chan []int)

	// The single consumer: drain, and park on Wake when there is nothing to do.
	go func() {
		var got []int
		buf := make([]event, 4)
		for {
			if n := r.Drain(buf); n > 0 {
				for _, e := range buf[:n] {
					got = append(got, e.ID)
				}
				continue
			}
			if r.Closed() {
				// Collect items whose producers were mid-write at Close.
				for n := r.DrainClosed(buf); n > 0; n = r.DrainClosed(buf) {
					for _, e := range buf[:n] {
						got = append(got, e.ID)
					}
				}
				done <- got
				return
			}
			if r.Park() {
				<-r.Wake() // a real consumer would also select on its flush timer
				r.Unpark()
			}
		}
	}()

	// A producer: Push never blocks; on false (full) this one retries.
	for i := 1; i <= 10; i++ {
		e := event{ID: i, Name: "span"}
		for !r.Push(&e) {
			runtime.Gosched()
		}
	}
	r.Close()
	fmt.Println(<-done)
	fmt.Println("pushed:", r.Pushed(), "push after close:", r.Push(&event{}))
	// Output:
	// [1 2 3 4 5 6 7 8 9 10]
	// pushed: 10 push after close: false
}
