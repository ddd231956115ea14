// Package sockdir makes directories short enough to hold Unix sockets.
//
// A Unix socket path holds at most MaxPath bytes (107 on Linux, 103 on
// macOS and the BSDs), and $TMPDIR may leave little of that: macOS gives
// every user a /var/folders/… directory of some 50 bytes, and CI runners
// and sandboxes set longer ones. A socket made under os.MkdirTemp("", …)
// or a test's t.TempDir() then cannot be bound ("invalid argument").
// MkdirTemp and Dir make the directory under $TMPDIR as usual where a
// socket name of Room bytes fits in it, and under /tmp where it does not.
package sockdir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// MaxPath is the longest path a Unix socket can be bound or connected at:
// the kernel's sockaddr_un path less its terminating NUL.
var MaxPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// Room is the length of the socket file names (a relative path under the
// directory, such as "run/relay.sock") that a directory from MkdirTemp or
// Dir has room for.
const Room = 32

// fallback is the short directory used where $TMPDIR is too long.
const fallback = "/tmp"

// Fits says whether a socket name of Room bytes fits under dir.
func Fits(dir string) bool { return len(dir)+1+Room <= MaxPath }

// MkdirTemp is os.MkdirTemp("", pattern), unless the directory made there
// would leave no room for a socket name of Room bytes: then it is made
// under /tmp instead. It fails, saying why, where neither fits.
func MkdirTemp(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil || Fits(dir) {
		return dir, err
	}
	os.Remove(dir)
	return mkdirShort(pattern, dir)
}

func mkdirShort(pattern, long string) (string, error) {
	if fi, err := os.Stat(fallback); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s is too long for a Unix socket path under it (at most %d bytes) and there is no %s to use instead: set TMPDIR shorter", long, MaxPath, fallback)
	}
	dir, err := os.MkdirTemp(fallback, pattern)
	if err != nil {
		return "", fmt.Errorf("%s is too long for a Unix socket path under it (at most %d bytes), and %w", long, MaxPath, err)
	}
	if !Fits(dir) {
		os.Remove(dir)
		return "", fmt.Errorf("%s is too long for a Unix socket path under it (at most %d bytes)", dir, MaxPath)
	}
	return dir, nil
}

// TB is the part of testing.TB that Dir uses (this package does not import
// testing, so that a binary using MkdirTemp does not link it).
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Skipf(format string, args ...any)
}

// Dir is tb.TempDir(), unless that leaves no room for a socket name of
// Room bytes: then it is a new directory under /tmp, removed when the test
// ends. Where neither fits, the test is skipped, saying why: what it tests
// needs a socket, and a long $TMPDIR is no failure of the code under test.
func Dir(tb TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if Fits(dir) {
		return dir
	}
	short, err := mkdirShort("s", dir)
	if err != nil {
		tb.Skipf("no directory for a Unix socket: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(short) })
	return short
}

// Path is filepath.Join(Dir(tb), name), for a test's one socket.
func Path(tb TB, name string) string {
	tb.Helper()
	if len(name) > Room {
		panic("sockdir: socket name " + name + " is longer than Room")
	}
	return filepath.Join(Dir(tb), name)
}
