// This file tests the origin of a Unix sender: the container id read from
// its cgroup, the cache of pids, and how its credentials and the relay's
// own container weigh the id a sender claims.

package relay

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	dockerID  = "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"
	fargateID = "34dc0b5e626f2c5c4c5170e34b10e765-1234567890"
	gardenID  = "a4b8c3d2-e1f0-4a5b-9c8d-7e6f"
)

var cgroups = map[string]string{
	"docker": "12:memory:/docker/" + dockerID + "\n" +
		"11:cpu,cpuacct:/docker/" + dockerID + "\n",
	"systemd": "0::/system.slice/docker-" + dockerID + ".scope\n",
	"k8s": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2c3a7a68_2f2c_4c1e_9b1e_6a4f2f0f1a2b.slice/cri-containerd-" +
		dockerID + ".scope\n",
	"fargate": "9:perf_event:/ecs/34dc0b5e626f2c5c4c5170e34b10e765/" + fargateID + "\n",
	"garden":  "1:name=systemd:/system.slice/garden.service/garden/" + gardenID + "\n",
	// A container's processes below its own cgroup: systemd as its pid 1,
	// rootless podman with crun.
	"nested systemd": "0::/system.slice/docker-" + dockerID + ".scope/init.scope\n",
	"nested podman":  "0::/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-" + dockerID + ".scope/container\n",
	"host":           "0::/user.slice/user-1000.slice/session-2.scope\n",
	"pod uid":        "0::/kubepods/besteffort/pod2c3a7a68-2f2c-4c1e-9b1e-6a4f2f0f1a2b\n",
	"garbage":        "not a cgroup line\n:::\n12:memory\n",
	// cgroup v2 keeps a zombie's path, marked once its cgroup is removed.
	"removed": "0::/system.slice/docker-" + dockerID + ".scope (deleted)\n",
	// CRI-O's and podman's monitor of a container, named after it but
	// outside it, as the agent's ContainerFilter and Saluki take it.
	"crio conmon":   "0::/machine.slice/crio-conmon-" + dockerID + ".scope\n",
	"podman conmon": "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-" + dockerID + ".scope\n",
}

func TestContainerIDFromCgroup(t *testing.T) {
	for name, want := range map[string]string{
		"docker": dockerID, "systemd": dockerID, "k8s": dockerID, "fargate": fargateID,
		"nested systemd": dockerID, "nested podman": dockerID, "removed": dockerID,
		"garden": gardenID, "host": "", "pod uid": "", "garbage": "",
		"crio conmon": "", "podman conmon": "",
	} {
		if got := ContainerIDFromCgroup(strings.NewReader(cgroups[name])); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// fakeProc writes <root>/<pid>/cgroup for each pid.
func fakeProc(t *testing.T, files map[int32]string) string {
	root := t.TempDir()
	for pid, c := range files {
		writeCgroup(t, root, pid, c)
	}
	return root
}

func writeCgroup(t *testing.T, root string, pid int32, c string) {
	dir := filepath.Join(root, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	writeStat(t, dir, 'S')
}

// writeStat writes dir/stat of a process in state (comm with the ") "
// a real one may hold).
func writeStat(t *testing.T, dir string, state byte) {
	stat := fmt.Sprintf("%s (a) b) %c 1 1 1 0 -1 4194560", filepath.Base(dir), state)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOriginOfExitedSender: a sender whose cgroup file names no container
// is taken for a host process only while it lives; exited (a zombie: its
// cgroup shows root paths only), gone, or its file unreadable, the answer
// is unknown and the payload's own container id stands, uncorrected.
func TestOriginOfExitedSender(t *testing.T) {
	root := fakeProc(t, map[int32]string{201: cgroups["host"], 202: cgroups["host"], 203: cgroups["host"], 204: cgroups["docker"]})
	writeStat(t, filepath.Join(root, "202"), 'Z')
	if err := os.Remove(filepath.Join(root, "203", "stat")); err != nil {
		t.Fatal(err)
	}
	// An id found is the process's, zombie or not.
	writeStat(t, filepath.Join(root, "204"), 'Z')
	// A cgroup that opens but does not read.
	if err := os.MkdirAll(filepath.Join(root, "205", "cgroup"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeStat(t, filepath.Join(root, "205"), 'S')
	o := NewOrigins(root, nil)
	for pid, want := range map[int32]struct {
		id    string
		known bool
	}{201: {"", true}, 202: {"", false}, 203: {"", false}, 204: {dockerID, true}, 205: {"", false}} {
		if id, known := o.ContainerID(pid); id != want.id || known != want.known {
			t.Errorf("pid %d: %q %v, want %q %v", pid, id, known, want.id, want.known)
		}
	}
	r := newTestRelay(Config{Origins: o})
	claims := header("a")
	claims.ContainerID = gardenID
	for i, pid := range []int32{201, 202, 205} {
		mustAccept(t, r, datagram(uint64(i+1), claims, bucket(w0, 10*sec, entry(key("r"), 1<<i, 0))), pid, Unix)
	}
	got := map[string]uint64{}
	for _, b := range harvestAll(t, r) {
		got[b.ContainerID] += b.Hits
	}
	if s := r.Stats(); s.ContainerMismatches != 1 || got[""] != 1 || got[gardenID] != 6 {
		t.Fatalf("mismatches %d, hits by container %v; want 1, only the live host sender's corrected", s.ContainerMismatches, got)
	}
}

// TestOriginOfExitingV1Sender: a sender in a container on cgroup v1 sends
// its last report and exits; read while it exits (PF_EXITING set, not yet
// a zombie), its cgroup file shows "/" for every hierarchy. It is not
// taken for a live host process, whose claimed container would be erased
// and counted a mismatch: the answer is unknown, and its claim stands.
// The files are those of such a process, captured on this host.
func TestOriginOfExitingV1Sender(t *testing.T) {
	const pid = 2994
	root := fakeProc(t, map[int32]string{pid: "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n" +
		"4:memory:/\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"})
	stat := "2994 (exitwin) R 2989 2920 895 0 -1 4194316 2252 0 0 0 2 980 0 0 20 0 4 0 6597017 0\n" // flags 0x40000c: PF_EXITING
	if err := os.WriteFile(filepath.Join(root, "2994", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, known := NewOrigins(root, nil).ContainerID(pid); known || id != "" {
		t.Fatalf("ContainerID = %q, known %v; want unknown", id, known)
	}
	r := newTestRelay(Config{Origins: NewOrigins(root, nil)})
	h := header("rt-1")
	h.ContainerID = dockerID
	mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("a"), 3, 0))), pid, Unix)
	out := harvestAll(t, r)
	if len(out) != 1 || out[0].ContainerID != dockerID || r.Stats().ContainerMismatches != 0 {
		t.Fatalf("forwarded %d batches (%+v), %d mismatches; want its claimed container kept, none",
			len(out), out, r.Stats().ContainerMismatches)
	}
}

// TestAliveOnThisHost: this process's own /proc stat reads as alive, and
// a child that exited but is not yet reaped (a zombie) does not.
func TestAliveOnThisHost(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if !alive(filepath.Join("/proc", strconv.Itoa(os.Getpid()))) {
		t.Fatal("this process is not alive by its stat")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))
	deadline := time.Now().Add(10 * time.Second)
	for alive(dir) && time.Now().Before(deadline) { // it exits; nothing reaps it yet
		time.Sleep(5 * time.Millisecond)
	}
	zombie := !alive(dir)
	_ = cmd.Wait()
	if !zombie {
		t.Fatal("the exited child still reads as alive")
	}
}

func TestOriginsCache(t *testing.T) {
	root := fakeProc(t, map[int32]string{101: cgroups["docker"], 102: cgroups["fargate"], 103: cgroups["garden"], 104: cgroups["host"]})
	now := t0
	o := NewOrigins(root, func() time.Time { return now })
	for pid, want := range map[int32]string{101: dockerID, 102: fargateID, 103: gardenID, 104: ""} {
		if id, known := o.ContainerID(pid); id != want || !known {
			t.Errorf("pid %d: %q %v, want %q known", pid, id, known, want)
		}
	}
	if id, known := o.ContainerID(105); id != "" || known {
		t.Errorf("missing pid: %q %v", id, known)
	}
	// Answers, misses included, hold for OriginTTL.
	writeCgroup(t, root, 101, cgroups["host"])
	writeCgroup(t, root, 105, cgroups["garden"])
	now = t0.Add(OriginTTL - 1)
	if id, _ := o.ContainerID(101); id != dockerID {
		t.Errorf("pid 101 re-read before the TTL: %q", id)
	}
	if _, known := o.ContainerID(105); known {
		t.Error("a cached miss was re-read before the TTL")
	}
	now = t0.Add(OriginTTL)
	if id, known := o.ContainerID(101); id != "" || !known {
		t.Errorf("pid 101 after the TTL: %q %v", id, known)
	}
	if id, _ := o.ContainerID(105); id != gardenID {
		t.Errorf("pid 105 after the TTL: %q", id)
	}
	if o.Len() != 5 {
		t.Errorf("Len %d, want 5", o.Len())
	}
}

// TestOriginsClockStepsBack: a wall clock stepped back (an NTP correction,
// a restored VM) must not stretch the trust in a cached pid by the step:
// the pid is reused meanwhile by a process of another container.
func TestOriginsClockStepsBack(t *testing.T) {
	root := fakeProc(t, map[int32]string{101: cgroups["docker"]})
	now := t0
	o := NewOrigins(root, func() time.Time { return now })
	if id, _ := o.ContainerID(101); id != dockerID {
		t.Fatalf("pid 101: %q", id)
	}
	writeCgroup(t, root, 101, cgroups["garden"]) // pid 101 reused
	now = t0.Add(-time.Hour + OriginTTL/2)
	if id, _ := o.ContainerID(101); id != gardenID {
		t.Errorf("pid 101 after the clock stepped back an hour: %q, want %q re-read", id, gardenID)
	}
	// The new answer holds its OriginTTL on the new time.
	writeCgroup(t, root, 101, cgroups["docker"])
	now = now.Add(OriginTTL - 1)
	if id, _ := o.ContainerID(101); id != gardenID {
		t.Errorf("pid 101 re-read before its TTL: %q", id)
	}
}

func TestOriginsBounded(t *testing.T) {
	o := NewOrigins(t.TempDir(), func() time.Time { return t0 })
	for pid := range int32(MaxOrigins + 10) {
		o.ContainerID(pid + 1)
	}
	if o.Len() > MaxOrigins {
		t.Fatalf("Len %d > MaxOrigins %d", o.Len(), MaxOrigins)
	}
}

func TestContainerFromCredentials(t *testing.T) {
	root := fakeProc(t, map[int32]string{101: cgroups["docker"], 104: cgroups["host"]})
	r := newTestRelay(Config{Origins: NewOrigins(root, nil)})
	claims := header("a")
	claims.ContainerID = "f00d"
	mustAccept(t, r, datagram(1, claims, bucket(w0, 10*sec, entry(key("r"), 1, 0))), 101, Unix) // corrected
	mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(key("r"), 2, 0))), 101, Unix)
	mustAccept(t, r, datagram(1, claims, bucket(w0, 10*sec, entry(key("r"), 4, 0))), 101, UDP)   // no origin: kept
	mustAccept(t, r, datagram(1, claims, bucket(w0, 10*sec, entry(key("r"), 8, 0))), 999, Unix)  // pid unknown: kept
	mustAccept(t, r, datagram(1, claims, bucket(w0, 10*sec, entry(key("r"), 16, 0))), 104, Unix) // host: corrected to none
	if s := r.Stats(); s.ContainerMismatches != 2 {
		t.Fatalf("mismatches %d, want 2", s.ContainerMismatches)
	}
	got := map[string]uint64{}
	for _, b := range harvestAll(t, r) {
		got[b.ContainerID] += b.Hits
		if b.HasContainer() != (b.ContainerID != "") {
			t.Fatalf("HasContainer %v for %q", b.HasContainer(), b.ContainerID)
		}
	}
	if len(got) != 3 || got[dockerID] != 3 || got["f00d"] != 12 || got[""] != 16 {
		t.Fatalf("hits by container %v", got)
	}
}

// TestInContainer: the relay takes itself for containerized when its
// cgroup names a container (v1), when cgroup v2 shows only its root (a
// private cgroup namespace), or when a runtime's mark file exists; a host
// process's cgroup and no mark is not.
func TestInContainer(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := file("v1", "4:memory:/docker/"+strings.Repeat("ab", 32)+"\n")
	v2ns := file("v2ns", "0::/\n")
	hybrid := file("hybrid", "4:memory:/user.slice\n0::/\n")
	host := file("host", "0::/user.slice/user-1000.slice/session-2.scope\n")
	mark := file("dockerenv", "")
	none := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name    string
		cgroups []string
		marks   []string
		want    bool
	}{
		{"cgroup v1 container id", []string{v1}, nil, true},
		{"cgroup v2 namespace root", []string{v2ns}, nil, true},
		{"second file names it", []string{none, v1}, nil, true},
		{"runtime mark", []string{host}, []string{mark}, true},
		{"host process", []string{host}, []string{none}, false},
		{"hybrid host, v2 at root among v1 lines", []string{hybrid}, nil, false},
	} {
		if got := inContainer(tc.cgroups, tc.marks); got != tc.want {
			t.Errorf("%s: inContainer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSamePIDNamespace: a proc root whose self is another pid (a host's
// /proc seen from a relay in its own pid namespace) is told apart.
func TestSamePIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		self string // "": no self link
		want bool
	}{{"", true}, {strconv.Itoa(os.Getpid()), true}, {"1", false}} {
		root := t.TempDir()
		if tc.self != "" {
			if err := os.Symlink(tc.self, filepath.Join(root, "self")); err != nil {
				t.Fatal(err)
			}
		}
		if got := SamePIDNamespace(root); got != tc.want {
			t.Errorf("self -> %q: SamePIDNamespace = %v, want %v", tc.self, got, tc.want)
		}
	}
	if !SamePIDNamespace("/proc") {
		t.Error("this process's own /proc is not its pid namespace")
	}
}

// TestNestedCgroupKeepsTheClaim: a sender in a sub-cgroup of its container
// (rootless podman) is found in it, so the container id it claims is
// forwarded, not erased as a host process's and counted as a mismatch.
func TestNestedCgroupKeepsTheClaim(t *testing.T) {
	const pid = 4242
	root := fakeProc(t, map[int32]string{pid: cgroups["nested podman"]})
	r := newTestRelay(Config{Origins: NewOrigins(root, nil)})
	h := header("rt-1")
	h.ContainerID = dockerID
	mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("a"), 3, 0))), pid, Unix)
	out := harvestAll(t, r)
	if len(out) != 1 || out[0].ContainerID != dockerID || out[0].Hits != 3 {
		t.Fatalf("forwarded %+v, want one batch of 3 hits in container %s", out, dockerID)
	}
	if m := r.Stats().ContainerMismatches; m != 0 {
		t.Fatalf("%d container mismatches counted, want 0", m)
	}
}

// TestLocalSenders: a live sender without a container id whose cgroup file
// is the relay's own ("0::/" here, what a container in a private cgroup
// namespace shows) is Local: it shares the relay's container. Another
// cgroup, a container id, or a dead process is not. Where that decides
// their fate (LocalApart: a relay in a container forwarding over the
// agent's Unix socket) its payloads merge apart from those of a UDP sender
// of the same identity, and harvest as Local; elsewhere one identity is
// one batch.
func TestLocalSenders(t *testing.T) {
	private := "0::/\n"
	root := fakeProc(t, map[int32]string{int32(os.Getpid()): private, 301: private, 302: cgroups["host"], 303: cgroups["systemd"], 304: private})
	writeStat(t, filepath.Join(root, "304"), 'Z')
	o := NewOrigins(root, nil)
	for pid, want := range map[int32]bool{int32(os.Getpid()): true, 301: true, 302: false, 303: false, 304: false, 305: false} {
		if got := o.originAt(pid, time.Now().UnixNano()).local; got != want {
			t.Errorf("pid %d: Local %v, want %v", pid, got, want)
		}
	}
	for _, apart := range []bool{true, false} {
		r := newTestRelay(Config{Origins: o, LocalApart: apart})
		mustAccept(t, r, datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 3, 0))), 301, Unix)
		mustAccept(t, r, datagram(1, header("b"), bucket(w0, 10*sec, entry(key("r"), 5, 0))), 0, UDP)
		mustAccept(t, r, datagram(1, header("c"), bucket(w0, 10*sec, entry(key("r"), 7, 0))), 302, Unix)
		got := map[bool]uint64{}
		batches := harvestAll(t, r)
		for _, b := range batches {
			got[b.Local] += b.Hits
		}
		if apart && (len(batches) != 2 || got[true] != 3 || got[false] != 12) {
			t.Fatalf("LocalApart: %d batches, hits by Local %v; want 2: the local sender's 3 apart from the other 12", len(batches), got)
		}
		if !apart && (len(batches) != 1 || got[false] != 15) {
			t.Fatalf("not LocalApart: %d batches, hits by Local %v; want one of 15", len(batches), got)
		}
	}
}

// TestLocalClaimIsOneIdentity: a sender in the relay's unnamed cgroup that
// claims a container, and a UDP sender claiming the same, are one identity:
// local matters only without a container id.
func TestLocalClaimIsOneIdentity(t *testing.T) {
	root := t.TempDir()
	for _, pid := range []int{os.Getpid(), 4242} {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(strconv.Itoa(pid)+" (x) S 1 1 1 0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := newTestRelay(Config{Origins: NewOrigins(root, nil), LocalApart: true})
	h := header("a")
	h.ContainerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("r"), 2, 0))), 4242, Unix)
	h.RuntimeID = "b"
	mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("r"), 3, 0))), 0, UDP)
	out := harvestAll(t, r)
	if len(out) != 1 || out[0].Hits != 5 || out[0].ContainerID != h.ContainerID || out[0].Local {
		t.Fatalf("%d batches (%+v); want one of 5 hits under the claimed container", len(out), out)
	}
}

// TestOriginsKeepOnlyTheID: a cached container id is a copy, not a slice
// of the cgroup line it was found in, so the cache of up to MaxOrigins
// pids holds 64-byte ids, not lines of up to maxCgroupFile bytes each.
func TestOriginsKeepOnlyTheID(t *testing.T) {
	const pids = 200
	line := "0::/" + strings.Repeat("slice/", 9000) + "docker-" + dockerID + ".scope\n" // ~54 KiB
	files := make(map[int32]string, pids)
	for pid := range int32(pids) {
		files[1000+pid] = line
	}
	o := NewOrigins(fakeProc(t, files), func() time.Time { return t0 })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for pid := range int32(pids) {
		if id, known := o.ContainerID(1000 + pid); id != dockerID || !known {
			t.Fatalf("pid %d: %q %v", 1000+pid, id, known)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Pinned lines would hold pids × 54 KiB ≈ 10.5 MiB; the ids and the
	// map, a few tens of KiB.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("caching %d pids grew the heap by %d KiB: the cgroup lines are kept", pids, grew>>10)
	}
	runtime.KeepAlive(o)
}

// TestOriginOutlivesExit: a sender's pid cached in a container, the entry
// expired just as the process exited (its final report read after the
// exit): the report keeps the container; a datagram of that pid a minute
// later (a process that took the pid and is gone too), or one long after
// the container was last read, is in no known container: its claim stands.
func TestOriginOutlivesExit(t *testing.T) {
	const pid = 4242
	root := fakeProc(t, map[int32]string{pid: cgroups["docker"]})
	now := t0
	clock := func() time.Time { return now }
	r := New(Config{Origins: NewOrigins(root, clock), Now: clock})
	send := func(seq, hits uint64) {
		t.Helper()
		start := uint64(now.UnixNano()) - uint64(now.UnixNano())%(10*sec)
		mustAccept(t, r, datagram(seq, header("rt"), bucket(start, 10*sec, entry(key("a"), hits, 0))), pid, Unix)
	}
	got := map[string]uint64{}
	for _, b := range sendAcrossExit(t, r, root, pid, &now) {
		got[b.ContainerID] += b.Hits
	}
	if len(got) != 2 || got[dockerID] != 8 || got[""] != 7 {
		t.Fatalf("hits by container %v; want 8 in %s (before the exit and just after), 7 in none (a minute after)", got, dockerID[:12])
	}

	// Read in a container an hour ago, gone now: no container kept.
	writeCgroup(t, root, pid, cgroups["docker"])
	r = New(Config{Origins: NewOrigins(root, clock), Now: clock})
	send(4, 2)
	now = now.Add(time.Hour)
	if err := os.RemoveAll(filepath.Join(root, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
	send(5, 3)
	clear(got)
	for _, b := range r.Harvest(now.Add(time.Hour)) {
		got[b.ContainerID] += b.Hits
		r.Forwarded(b.Hits)
	}
	if len(got) != 2 || got[dockerID] != 2 || got[""] != 3 {
		t.Fatalf("hits by container %v; want 2 in %s, 3 in none (its container read an hour before)", got, dockerID[:12])
	}
}

// TestLocalOriginOutlivesExit: a sender sharing the relay's cgroup (a
// private namespace's "0::/", which names no container) whose origin
// expires as it exits after its final report stays local for that report,
// as a contained sender keeps its container: a relay in a container
// forwarding over the agent's Unix socket would else drop it as
// unattributable. A minute later the pid is no longer taken as local.
func TestLocalOriginOutlivesExit(t *testing.T) {
	const pid = 4244
	root := fakeProc(t, map[int32]string{int32(os.Getpid()): "0::/\n", pid: "0::/\n"})
	now := t0
	clock := func() time.Time { return now }
	r := New(Config{Origins: NewOrigins(root, clock), LocalApart: true, Now: clock})
	got := map[bool]uint64{}
	for _, b := range sendAcrossExit(t, r, root, pid, &now) {
		got[b.Local] += b.Hits
	}
	if got[true] != 8 || got[false] != 7 {
		t.Fatalf("hits by local %v; want 8 local (before the exit and just after), 7 not (a minute after)", got)
	}
}

// sendAcrossExit has pid send 3 spans, then, its origin expired and the
// process gone, 5 more, then 7 a minute later, at *now (r's clock), and
// returns the batches harvested, counted forwarded.
func sendAcrossExit(t *testing.T, r *Relay, root string, pid int32, now *time.Time) []Batch {
	t.Helper()
	send := func(seq, hits uint64) {
		t.Helper()
		start := uint64(now.UnixNano()) - uint64(now.UnixNano())%(10*sec)
		mustAccept(t, r, datagram(seq, header("rt"), bucket(start, 10*sec, entry(key("a"), hits, 0))), pid, Unix)
	}
	send(1, 3)
	*now = now.Add(OriginTTL + time.Second)
	if err := os.RemoveAll(filepath.Join(root, strconv.Itoa(int(pid)))); err != nil {
		t.Fatal(err)
	}
	send(2, 5)
	*now = now.Add(OriginTTL + time.Second)
	send(3, 7)
	out := r.Harvest(now.Add(time.Hour))
	for _, b := range out {
		r.Forwarded(b.Hits)
	}
	return out
}

// TestHostLocalSenderClaimOverridden: a relay on a host sharing its cgroup
// with a sender (a supervisor running both): the sender's claim of a
// container loses to its credentials, which name none, and is counted; in
// a relay in a container its cgroup does not name ("0::/"), the same
// claim stands (TestLocalClaimIsOneIdentity).
func TestHostLocalSenderClaimOverridden(t *testing.T) {
	const pid = 4343
	host := "0::/system.slice/supervisor.service\n"
	root := fakeProc(t, map[int32]string{int32(os.Getpid()): host, pid: host})
	o := newOrigins(root, nil, nil) // no runtime's mark
	if o.contained {
		t.Fatal("a relay in a host cgroup taken as in a container")
	}
	r := newTestRelay(Config{Origins: o})
	h := header("rt")
	h.ContainerID = dockerID
	mustAccept(t, r, datagram(1, h, bucket(w0, 10*sec, entry(key("a"), 3, 0))), pid, Unix)
	out := harvestAll(t, r)
	if len(out) != 1 || out[0].ContainerID != "" || out[0].Hits != 3 || r.Stats().ContainerMismatches != 1 {
		t.Fatalf("forwarded %+v (mismatches %d); want 3 hits in no container, one mismatch", out, r.Stats().ContainerMismatches)
	}
}

// TestCgroupFileTooLong: a cgroup file past maxCgroupFile whose container
// line comes after the cut, or is the line cut (naming only the parent of
// a nested container), is no answer (unknown), never a host process or
// the parent; a container line whole before the cut still counts.
func TestCgroupFileTooLong(t *testing.T) {
	const outer = "1111111111111111111111111111111111111111111111111111111111111111"
	const inner = "2222222222222222222222222222222222222222222222222222222222222222"
	filler := func(n int) string { // cgroup v1 named hierarchies, n bytes or a little more
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "%d:name=h%d:/%s\n", 100+i, i, strings.Repeat("x", 4000))
		}
		return b.String()
	}
	after := filler(maxCgroupFile) + "4:memory:/docker/" + inner + "\n"
	prefix := "0::/docker/" + outer + "/docker/"
	head := filler(maxCgroupFile - 8200)
	pad := maxCgroupFile - len(head) - len(prefix) - len("99:name=pad:/\n")
	cut := head + "99:name=pad:/" + strings.Repeat("y", pad) + "\n" + prefix + inner + "\n"
	if len(cut[:maxCgroupFile]) != maxCgroupFile || !strings.HasSuffix(cut[:maxCgroupFile], prefix) {
		t.Fatal("the cut does not fall after the outer id")
	}
	before := "4:memory:/docker/" + inner + "\n" + filler(maxCgroupFile)
	for name, tc := range map[string]struct {
		file      string
		id        string
		wantKnown bool
	}{
		"container line after the cut": {after, "", false},
		"container line cut":           {cut, "", false},
		"container line before":        {before, inner, true},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "4242")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte("4242 (app) S 1 1 1 0 -1 4194560"), 0o644); err != nil {
			t.Fatal(err)
		}
		id, known := NewOrigins(root, nil).ContainerID(4242)
		if id != tc.id || known != tc.wantKnown {
			t.Errorf("%s: ContainerID = %q, known %v; want %q, %v", name, id, known, tc.id, tc.wantKnown)
		}
		if got := ContainerIDFromCgroup(strings.NewReader(tc.file)); got != tc.id {
			t.Errorf("%s: ContainerIDFromCgroup = %q, want %q", name, got, tc.id)
		}
	}
}
