// This file tests MaxPath against Linux's sockaddr_un: 107 bytes, and a
// socket bound at a path of exactly that length.

package sockdir

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestMaxPathLinux: MaxPath is the 108-byte sun_path less its NUL, and a
// socket binds at a path of MaxPath bytes.
func TestMaxPathLinux(t *testing.T) {
	if MaxPath != 107 {
		t.Fatalf("MaxPath = %d, want 107", MaxPath)
	}
	dir := Dir(t)
	path := filepath.Join(dir, strings.Repeat("s", MaxPath-len(dir)-1))
	if len(path) != MaxPath {
		t.Fatalf("path of %d bytes, want %d", len(path), MaxPath)
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("binding at a %d-byte path: %v", len(path), err)
	}
	c.Close()
}
