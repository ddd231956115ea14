// This file holds the origin of a Unix sender: the container id read from
// <proc-root>/<pid>/cgroup (Origins), cached per pid.

package relay

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds of the origin cache.
const (
	// OriginTTL is how long a pid's container id is trusted (the relay's
	// contract): long enough that a busy sender costs a file read a
	// minute, short enough for pids that are reused. A pid reused within
	// it keeps the container of its previous process, and one whose file
	// could not be read stays unknown for as long, its claim uncorrected.
	OriginTTL = time.Minute
	// MaxOrigins bounds the cache; beyond it expired entries are swept, then
	// an arbitrary one is evicted.
	MaxOrigins = 1 << 14
	// maxCgroupFile bounds what is read of a cgroup file: real ones are a few
	// hundred bytes even on cgroup v1 with every controller.
	maxCgroupFile = 64 << 10
)

// containerIDExp matches a container id at the end of a cgroup path segment,
// after a non-hex character, with an optional ".scope": 64 hex digits (Docker,
// containerd, CRI-O, ECS on EC2), 32 hex digits, '-' and digits (ECS
// Fargate), or the UUID-like 8-4-4-4-4 hex groups (Garden). A pod's UUID
// (8-4-4-4-12) is deliberately not a container id.
var containerIDExp = regexp.MustCompile(
	`(?:^|[^0-9a-f])([0-9a-f]{64}|[0-9a-f]{32}-[0-9]+|[0-9a-f]{8}(?:-[0-9a-f]{4}){4})(?:\.scope)?$`)

// ContainerIDFromCgroup returns the container id in a /proc/<pid>/cgroup
// file ("hierarchy:controllers:path" lines; the first path holding a
// container id wins), or "" for a process outside any container. The id is
// the deepest path segment that is one: a container's processes may sit
// below its own cgroup (systemd in the container moves them to
// docker-<id>.scope/init.scope, rootless podman to libpod-<id>.scope/container).
func ContainerIDFromCgroup(r io.Reader) string {
	id, _ := scanCgroup(r)
	return id
}

// scanCgroup is ContainerIDFromCgroup with an error when it found no
// container id and the file ended on a read error, or ran past
// maxCgroupFile: the line naming the container may come after the cut, or
// be the line cut, naming a parent (a file never that long in practice; the
// agent reads them whole). Lines whole before the cut count.
func scanCgroup(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxCgroupFile+1))
	if len(b) > maxCgroupFile {
		b = b[:bytes.LastIndexByte(b[:maxCgroupFile], '\n')+1]
		err = errCgroupTooLong
	}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			continue
		}
		if _, perr := strconv.ParseUint(string(line[:i]), 10, 32); perr != nil {
			continue
		}
		j := bytes.IndexByte(line[i+1:], ':')
		if j < 0 {
			continue
		}
		// cgroup v2 shows a zombie's cgroup removed before it was reaped
		// with this mark after its path.
		path := strings.TrimSuffix(string(line[i+1+j+1:]), " (deleted)")
		if id := idInPath(path); id != "" {
			// A copy: a slice would keep the whole line (up to
			// maxCgroupFile) alive in the cache (TestOriginsKeepOnlyTheID).
			return strings.Clone(id), nil
		}
	}
	return "", err
}

// idInPath is the container id of the deepest segment of a cgroup path
// that ends in one, or "".
func idInPath(path string) string {
	for path != "" {
		k := strings.LastIndexByte(path, '/')
		seg := path[k+1:]
		if strings.HasPrefix(seg, "crio-conmon-") || strings.HasPrefix(seg, "libpod-conmon-") {
			// CRI-O's and podman's container monitor, named after the
			// container it watches but outside it: none, as the agent's
			// ContainerFilter and Saluki take it.
			return ""
		}
		if m := containerIDExp.FindStringSubmatch(seg); m != nil {
			return m[1]
		}
		if k < 0 {
			break
		}
		path = path[:k]
	}
	return ""
}

// alive tells whether <dir>/stat shows a process that has not exited: a
// zombie's cgroup file lists only root paths, which would pass it for a
// host process ("pid (comm) state ...", comm may hold any byte).
func alive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	if state == 'Z' || state == 'X' || state == 'x' {
		return false
	}
	// A process exiting, not yet a zombie (PF_EXITING in its flags, the
	// seventh field after the comm): on cgroup v1 its cgroup file already
	// shows "/" for every hierarchy, which must not pass it for a host
	// process, whose claimed container would be erased
	// (TestOriginOfExitingV1Sender). The flag never clears, and stat is
	// read after the cgroup file.
	f := bytes.Fields(b[i+1:])
	if len(f) < 7 {
		return true // no flags (never from the kernel): the state alone
	}
	flags, err := strconv.ParseUint(string(f[6]), 10, 64)
	return err != nil || flags&pfExiting == 0
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h).
const pfExiting = 0x4

// Origins maps sender pids to container ids by reading
// <procRoot>/<pid>/cgroup, caching each answer (misses too) for OriginTTL.
type Origins struct {
	root string
	now  func() time.Time
	// self is the relay's own cgroup file: a sender whose file is the same
	// shares the relay's container (or its host cgroup), so the agent's
	// attribution of a request by the relay's credentials is the sender's
	// own (see Batch.Local).
	self []byte
	// contained: the relay runs in a container (InContainer). Only then
	// may a local sender's claim stand: in a host cgroup (a supervisor
	// running the relay and the apps) credentials that name no container
	// are the truth.
	contained bool

	mu        sync.Mutex
	m         map[int32]origin
	lastSweep int64 // unix ns of evict's last walk for expired entries
}

// originGoneFor is how long a process gone since its container was last
// read keeps it: the datagrams of its last report, sent together.
const originGoneFor = time.Second

type origin struct {
	id      string
	known   bool
	local   bool  // known, no container id, and the relay's own cgroup file
	gone    bool  // id kept from before the process exited (see originAt)
	expires int64 // unix ns
}

// fresh says whether e still holds at now: within OriginTTL of its read
// on either side, as a wall clock stepped back would otherwise extend the
// trust in a pid, which may be reused meanwhile, by the step.
func (e *origin) fresh(now int64) bool {
	return now < e.expires && e.expires-now <= int64(OriginTTL)
}

// NewOrigins returns a cache reading under procRoot ("/proc" on a host);
// now is its clock (nil: time.Now). It reads the relay's own cgroup file
// there (else in /proc/self), to tell the senders that share it.
func NewOrigins(procRoot string, now func() time.Time) *Origins {
	return newOrigins(procRoot, now, containerMarks)
}

// newOrigins is NewOrigins telling whether the relay is in a container by
// its cgroup files and the runtime marks given.
func newOrigins(procRoot string, now func() time.Time, marks []string) *Origins {
	if now == nil {
		now = time.Now
	}
	o := &Origins{root: procRoot, now: now, m: make(map[int32]origin)}
	for _, p := range ownCgroups(procRoot) {
		if b, err := readCgroup(p); err == nil && len(b) > 0 {
			o.self = b
			break
		}
	}
	o.contained = containerCgroup(o.self) || hasMark(marks)
	return o
}

// errCgroupTooLong: a cgroup file over maxCgroupFile, read no further.
var errCgroupTooLong = fmt.Errorf("cgroup file longer than %d bytes", maxCgroupFile)

// readCgroup reads a cgroup file, at most maxCgroupFile bytes of it and one
// more, which tells scanCgroup it was cut.
func readCgroup(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxCgroupFile+1))
}

// ContainerID returns the container id of pid; known is false when its
// cgroup file cannot be read (the process is gone, or not in this pid
// namespace), or names no container while <pid>/stat does not show a live
// process (a zombie's cgroup shows only root paths), and then id is "" —
// but for a pid whose container was known until less than OriginTTL ago,
// which keeps it for originGoneFor. A known "" is a live process outside
// any container.
func (o *Origins) ContainerID(pid int32) (id string, known bool) {
	e := o.originAt(pid, o.now().UnixNano())
	return e.id, e.known
}

// originAt is ContainerID at now (unix ns), and whether pid is local: a
// live process outside any container whose cgroup file is the relay's own,
// so it shares the relay's container (one the relay cannot name, such as a
// private cgroup namespace's "0::/") or its host cgroup. The relay passes
// the time it read once for a whole batch of datagrams, sparing a clock
// read per datagram.
func (o *Origins) originAt(pid int32, now int64) origin {
	o.mu.Lock()
	e, ok := o.m[pid]
	o.mu.Unlock()
	if ok && e.fresh(now) {
		return e
	}
	prev := e
	// Read outside the lock: two workers may both read a new pid, which is
	// cheaper than making every lookup wait for a file read.
	e = origin{expires: now + int64(OriginTTL)}
	dir := filepath.Join(o.root, strconv.Itoa(int(pid)))
	if b, err := readCgroup(filepath.Join(dir, "cgroup")); err == nil {
		id, err := scanCgroup(bytes.NewReader(b))
		// A read that failed (the process exited meanwhile) is no answer,
		// and "no container" only of a live process: else the payload's
		// own claim stands (TestOriginOfExitedSender).
		e.id, e.known = id, err == nil && (id != "" || alive(dir))
		if !e.known {
			e.id = ""
		}
		e.local = e.known && id == "" && o.self != nil && bytes.Equal(b, o.self)
	}
	if !e.known && ok && prev.known && (prev.id != "" || prev.local) && !prev.gone && now-prev.expires < int64(OriginTTL) {
		// Expired just as the process exited after its last datagrams (a
		// final report at Stop): no process holds the pid, so none took it
		// into another container since; its container, or its sharing the
		// relay's, is kept for the datagrams of that report, read
		// together, not for a process that takes the pid next
		// (TestOriginOutlivesExit, TestLocalOriginOutlivesExit).
		e.id, e.local, e.known, e.gone = prev.id, prev.local, true, true
		e.expires = now + int64(originGoneFor)
	}
	o.mu.Lock()
	if len(o.m) >= MaxOrigins {
		o.evict(now)
	}
	o.m[pid] = e
	o.mu.Unlock()
	return e
}

// Len is the number of cached pids.
func (o *Origins) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// evict makes room for one entry: the expired ones go, or else an arbitrary
// one (map order). The walk for expired entries runs at most once a second:
// a cache full of live ones would otherwise cost every new pid a walk of
// all MaxOrigins under the lock.
func (o *Origins) evict(now int64) {
	if now-o.lastSweep >= int64(time.Second) {
		o.lastSweep = now
		for pid, e := range o.m {
			if !e.fresh(now) {
				delete(o.m, pid)
			}
		}
	}
	for pid := range o.m {
		if len(o.m) < MaxOrigins {
			return
		}
		delete(o.m, pid)
	}
}

// containerMarks are files container runtimes leave in a container's root
// (Docker, Podman).
var containerMarks = []string{"/.dockerenv", "/run/.containerenv"}

// InContainer tells whether this process runs in a container, as the agent
// would see it through the credentials of its Unix socket: its cgroup,
// under procRoot or the real /proc, names a container; or it is the only
// line of cgroup v2 at its root ("0::/", what a private cgroup namespace
// shows: Docker's and containerd's default on cgroup v2); or a runtime's
// mark is there.
func InContainer(procRoot string) bool {
	return inContainer(ownCgroups(procRoot), containerMarks)
}

// ownCgroups are where this process's cgroup file is read: under procRoot,
// else the real /proc.
func ownCgroups(procRoot string) []string {
	return []string{filepath.Join(procRoot, strconv.Itoa(os.Getpid()), "cgroup"), "/proc/self/cgroup"}
}

// inContainer is InContainer over the cgroup files and marks given.
func inContainer(cgroups, marks []string) bool {
	for _, p := range cgroups {
		b, err := os.ReadFile(p)
		if err != nil || len(b) > maxCgroupFile {
			continue
		}
		if containerCgroup(b) {
			return true
		}
	}
	return hasMark(marks)
}

// containerCgroup tells whether a cgroup file is a container's: it names
// one, or it is a private cgroup namespace's root ("0::/"). A process of
// a host without systemd, left in the root cgroup, shows "0::/" too: a
// relay run there is taken for one in a container, and drops UDP
// senders' stats as unattributable when it forwards to the agent's Unix
// socket (over TCP nothing is dropped).
func containerCgroup(b []byte) bool {
	return len(b) > 0 && (ContainerIDFromCgroup(bytes.NewReader(b)) != "" || string(bytes.TrimSpace(b)) == "0::/")
}

// hasMark tells whether one of the runtime marks is there.
func hasMark(marks []string) bool {
	for _, m := range marks {
		if _, err := os.Stat(m); err == nil {
			return true
		}
	}
	return false
}

// SamePIDNamespace tells whether the processes under procRoot are numbered
// as this process sees them (the pids the kernel puts in the socket
// credentials): false when <procRoot>/self names another pid, as a host's
// /proc does for a relay in a pid namespace of its own. A procRoot without
// self (a test's) is taken as the same.
func SamePIDNamespace(procRoot string) bool {
	self, err := os.Readlink(filepath.Join(procRoot, "self"))
	return err != nil || self == strconv.Itoa(os.Getpid())
}
