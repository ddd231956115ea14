// This file tests what the relay's origin and receive path promise
// exactly: the container id forms by their lengths, the one-minute origin
// cache and its bound after every insertion, the read batches the memory
// bound assumes, and an overflow group keyed as the SDK's.

package relay

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
)

// TestContainerIDPatternsExact: the three accepted forms only, by their exact
// lengths (DESIGN §8: 64 hex, 32 hex + '-' + digits, UUID-like task ids).
func TestContainerIDPatternsExact(t *testing.T) {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for name, tc := range map[string]struct{ cgroup, want string }{
		"64 hex":        {"0::/system.slice/docker-" + hex64 + ".scope\n", hex64},
		"63 hex":        {"0::/system.slice/docker-" + hex64[:63] + ".scope\n", ""},
		"65 hex":        {"0::/docker/" + hex64 + "a\n", ""},
		"fargate":       {"0::/ecs/t/" + hex64[:32] + "-1234567890\n", hex64[:32] + "-1234567890"},
		"fargate hex":   {"0::/ecs/t/" + hex64[:32] + "-12ab\n", ""},
		"garden":        {"0::/garden/a4b8c3d2-e1f0-4a5b-9c8d-7e6f\n", "a4b8c3d2-e1f0-4a5b-9c8d-7e6f"},
		"bare pod UUID": {"0::/kubepods/besteffort/2c3a7a68-2f2c-4c1e-9b1e-6a4f2f0f1a2b\n", ""},
	} {
		if got := ContainerIDFromCgroup(strings.NewReader(tc.cgroup)); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// TestOriginTTLIsOneMinute: answers and misses are re-read after one minute
// by the clock, not after whatever OriginTTL says.
func TestOriginTTLIsOneMinute(t *testing.T) {
	root := fakeProc(t, map[int32]string{101: cgroups["docker"]})
	now := t0
	o := NewOrigins(root, func() time.Time { return now })
	if id, _ := o.ContainerID(101); id != dockerID {
		t.Fatalf("pid 101: %q", id)
	}
	if _, known := o.ContainerID(105); known {
		t.Fatal("pid 105 known")
	}
	writeCgroup(t, root, 101, cgroups["garden"])
	writeCgroup(t, root, 105, cgroups["garden"])
	now = t0.Add(time.Minute - time.Nanosecond)
	if id, _ := o.ContainerID(101); id != dockerID {
		t.Errorf("pid 101 re-read before a minute: %q", id)
	}
	now = t0.Add(time.Minute)
	if id, _ := o.ContainerID(101); id != gardenID {
		t.Errorf("pid 101 not re-read after a minute: %q", id)
	}
	if id, _ := o.ContainerID(105); id != gardenID {
		t.Errorf("cached miss of pid 105 not re-read after a minute: %q", id)
	}
}

// TestOriginsNeverPastBound: the bound holds after every insertion, not
// only at a count where evictions happen to leave it.
func TestOriginsNeverPastBound(t *testing.T) {
	o := NewOrigins(t.TempDir(), func() time.Time { return t0 })
	for pid := range int32(MaxOrigins + 3) {
		o.ContainerID(pid + 1)
		if o.Len() > MaxOrigins {
			t.Fatalf("after pid %d: Len %d > MaxOrigins %d", pid+1, o.Len(), MaxOrigins)
		}
	}
}

// TestReadBatchesBounded: the read batches are exactly Queue waiting for the
// decode workers plus one per worker and per reader, the bound the memory
// accounting (InFlight) assumes: no more, or the reader would not wait when
// the configured queue is full.
func TestReadBatchesBounded(t *testing.T) {
	s, err := NewServer(ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", AgentURL: "http://127.0.0.1:1",
		Queue: 3, Workers: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeConns()
	n := 0
	for {
		select {
		case <-s.free.avail:
			n++
			continue
		default:
		}
		break
	}
	if want := 3 + 2 + int(NumTransports); n != want {
		t.Fatalf("%d free read batches, want Queue+Workers+transports = %d", n, want)
	}
}

// TestOverflowGroupIsTheSDKs: the relay's overflow group has the label key
// of the SDK's own overflow entry (every label tracer_blocked_value), so
// the agent files both alike.
func TestOverflowGroupIsTheSDKs(t *testing.T) {
	tb := aggregate.NewTable(1)
	tb.Add(&aggregate.Record{Service: "a", Name: "op", Resource: "r", Duration: 1})
	tb.Add(&aggregate.Record{Service: "b", Name: "op", Resource: "r", Type: "web", SpanKind: "server",
		HTTPMethod: "GET", HTTPEndpoint: "/r", GRPCStatusCode: "0", ServiceSource: "s", Duration: 1}) // past the cap
	var sdk *aggregate.Entry
	for _, e := range tb.Touched(nil) {
		if e.Service == aggregate.BlockedValue {
			sdk = e
		}
	}
	if sdk == nil {
		t.Fatal("the table made no overflow entry")
	}
	got, want := reflect.ValueOf(overflowGroup.Key), reflect.ValueOf(sdk.Key)
	for i := range got.NumField() {
		if f := got.Field(i); f.Kind() == reflect.String && f.String() != want.Field(i).String() {
			t.Errorf("overflow group %s = %q, the SDK's %q", got.Type().Field(i).Name, f.String(), want.Field(i).String())
		}
	}
}
