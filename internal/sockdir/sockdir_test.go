// This file tests that a directory from Dir or MkdirTemp holds a bound
// Unix socket whatever $TMPDIR's length.

package sockdir

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// longTMPDIR sets $TMPDIR to a directory too long for a socket under it.
func longTMPDIR(t *testing.T) string {
	t.Helper()
	long := filepath.Join(t.TempDir(), strings.Repeat("x", MaxPath))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Skipf("cannot make a %d-byte directory here: %v", len(long), err)
	}
	t.Setenv("TMPDIR", long)
	return long
}

// bind binds a Unix datagram socket of a Room-byte name under dir.
func bind(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, strings.Repeat("s", Room))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("binding under %s: %v", dir, err)
	}
	c.Close()
}

func TestDirWithLongTMPDIR(t *testing.T) {
	long := longTMPDIR(t)
	var dir string
	t.Run("sub", func(t *testing.T) {
		dir = Dir(t)
		if strings.HasPrefix(dir, long) {
			t.Fatalf("Dir = %s, under the %d-byte $TMPDIR", dir, len(long))
		}
		bind(t, dir)
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is left after the test: %v", dir, err)
	}
}

func TestDirIsTempDirWhereItFits(t *testing.T) {
	if !Fits(os.TempDir() + strings.Repeat("d", 64)) {
		t.Skipf("$TMPDIR %s is itself long", os.TempDir())
	}
	dir := Dir(t)
	if !strings.HasPrefix(dir, os.TempDir()) {
		t.Errorf("Dir = %s, not under $TMPDIR %s though it fits", dir, os.TempDir())
	}
	bind(t, dir)
}

func TestMkdirTempWithLongTMPDIR(t *testing.T) {
	long := longTMPDIR(t)
	dir, err := MkdirTemp("sockdir-test")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if strings.HasPrefix(dir, long) {
		t.Fatalf("MkdirTemp = %s, under the %d-byte $TMPDIR", dir, len(long))
	}
	bind(t, dir)
	if ents, _ := os.ReadDir(long); len(ents) != 0 {
		t.Errorf("MkdirTemp left %d entries in $TMPDIR", len(ents))
	}
}
