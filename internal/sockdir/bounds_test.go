// This file tests Fits at its bound, MkdirTemp where $TMPDIR is short, and
// Path's limit on the socket name.

package sockdir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFitsBound: a directory leaving exactly Room bytes after its
// separator fits; one byte longer does not.
func TestFitsBound(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want bool
	}{{MaxPath - 1 - Room, true}, {MaxPath - Room, false}} {
		if got := Fits("/" + strings.Repeat("d", tc.n-1)); got != tc.want {
			t.Errorf("Fits(%d-byte dir) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// TestMkdirTempUnderShortTMPDIR: where $TMPDIR leaves room, MkdirTemp is
// os.MkdirTemp("", pattern): the directory is made there.
func TestMkdirTempUnderShortTMPDIR(t *testing.T) {
	short := t.TempDir()
	if !Fits(filepath.Join(short, "s4294967295")) { // the longest name MkdirTemp("s") makes
		t.Skipf("t.TempDir() %s leaves no room", short)
	}
	t.Setenv("TMPDIR", short)
	dir, err := MkdirTemp("s")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if filepath.Dir(dir) != short {
		t.Fatalf("MkdirTemp = %s, want a directory in $TMPDIR %s", dir, short)
	}
	bind(t, dir)
}

// TestPathNameOfRoom: Path takes a name of Room bytes and panics, saying
// why, on a longer one.
func TestPathNameOfRoom(t *testing.T) {
	name := strings.Repeat("n", Room)
	if p := Path(t, name); filepath.Base(p) != name {
		t.Fatalf("Path = %s, want it to end in %s", p, name)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "longer than Room") {
			t.Fatalf("recovered %v, want Path's panic for a name past Room", r)
		}
	}()
	Path(t, name+"n")
}
