// This file holds the Ring's benchmarks: Push from one producer and from
// eight, and Drain, for a small element and a span-sized one.

package inbox

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Sinks keep the compiler from discarding benchmark results.
var (
	sinkBool bool
	sinkInt  int
)

// smallEvent is a minimal element: two words.
type smallEvent struct {
	id, ts int64
}

// spanSnapshot approximates a finished span's snapshot (~300 bytes on 64-bit).
type spanSnapshot struct {
	TraceHi, TraceLo, SpanID, ParentID int64
	Start, End                         int64
	Kind, Status, Flags                int64
	DroppedAttrs, DroppedEvents        int64
	DroppedLinks                       int64
	Name, Service, Resource, Type      string
	Env, Version, Host, Component      string
	HTTPMethod, HTTPRoute, StatusText  string
	Error                              string
}

func newSpanSnapshot() spanSnapshot {
	return spanSnapshot{
		TraceHi: 1, TraceLo: 2, SpanID: 3, ParentID: 4, Start: 5, End: 6,
		Name: "http.request", Service: "checkout", Resource: "GET /cart",
		Type: "web", Env: "prod", Version: "1.2.3", Host: "host-1",
		Component: "net/http", HTTPMethod: "GET", HTTPRoute: "/cart",
		StatusText: "OK",
	}
}

func BenchmarkPushUncontended(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchPushUncontended(b, smallEvent{id: 1, ts: 2}) })
	b.Run("span", func(b *testing.B) { benchPushUncontended(b, newSpanSnapshot()) })
}

func benchPushUncontended[T any](b *testing.B, v T) {
	r := New[T](1024)
	dst := make([]T, 256)
	b.ReportAllocs()
	ok := true
	i := 0
	for b.Loop() {
		ok = r.Push(&v) && ok
		// Drain every 256 pushes from the same goroutine so the ring never fills.
		if i++; i&255 == 0 {
			sinkInt = r.Drain(dst)
		}
	}
	if !ok {
		b.Fatal("ring filled up")
	}
	sinkBool = ok
}

func BenchmarkPush8Producers(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchPush8Producers(b, smallEvent{id: 1, ts: 2}) })
	b.Run("span", func(b *testing.B) { benchPush8Producers(b, newSpanSnapshot()) })
}

func benchPush8Producers[T any](b *testing.B, v T) {
	r := New[T](4096)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the real consumer, using the production Park/Wake protocol
		defer wg.Done()
		dst := make([]T, 256)
		drained := 0
		for {
			if n := r.Drain(dst); n > 0 {
				drained += n
				continue
			}
			if r.Closed() {
				for n := r.DrainClosed(dst); n > 0; n = r.DrainClosed(dst) {
					drained += n
				}
				sinkInt = drained
				return
			}
			if r.Park() {
				<-r.Wake()
				r.Unpark()
			}
		}
	}()

	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((8 + procs - 1) / procs) // at least 8 producer goroutines
	var full atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		local := v
		var fails uint64
		for pb.Next() {
			if !r.Push(&local) {
				fails++
			}
		}
		full.Add(fails)
	})
	b.StopTimer()
	r.Close()
	wg.Wait()
	b.ReportMetric(float64(full.Load())/float64(b.N), "full/op")
}

func BenchmarkDrain(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchDrain(b, smallEvent{id: 1, ts: 2}) })
	b.Run("span", func(b *testing.B) { benchDrain(b, newSpanSnapshot()) })
}

// benchDrain reports the per-item cost of Drain with batches of 256. Several
// rings are filled with the timer stopped so the Stop/StartTimer overhead is
// amortised over many batches.
func benchDrain[T any](b *testing.B, v T) {
	const batch, rings = 256, 32
	rs := make([]*Ring[T], rings)
	for i := range rs {
		rs[i] = New[T](batch)
	}
	dst := make([]T, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		left := b.N - done
		for _, r := range rs {
			for k := 0; k < batch && left > 0; k++ {
				r.Push(&v)
				left--
			}
		}
		b.StartTimer()
		for _, r := range rs {
			done += r.Drain(dst)
		}
	}
	sinkInt = len(dst)
}
