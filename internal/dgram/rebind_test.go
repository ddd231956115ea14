// This file tests CheckFile and RebindUnixgram: what the socket path names
// now, and a rebind that never replaces what another process put there.

package dgram

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/spanstats/spanstats/internal/sockdir"
)

// TestCheckFile: the path names the bound socket, then nothing once
// removed, then another process's socket or another file: each is told
// apart, and the check itself removes nothing.
func TestCheckFile(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	c, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check := func(want FileState) {
		t.Helper()
		if got, err := c.CheckFile(); err != nil || got != want {
			t.Fatalf("CheckFile = %v, %v; want %v", got, err, want)
		}
	}
	check(FileBound)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check(FileGone)
	other, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	check(FileReplaced)
	other.Close()
	os.Remove(path)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	check(FileReplaced)
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the file put in place is gone: %v", err)
	}

	u, err := ListenUDP("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if got, err := u.CheckFile(); err != nil || got != FileBound {
		t.Fatalf("UDP CheckFile = %v, %v; want FileBound (no file to lose)", got, err)
	}
}

// TestRebindUnixgram: at a free path it binds a socket with the mode and a
// sender reaches it; where any file is, it refuses with ErrPathTaken and
// leaves that file as it was, a live socket included.
func TestRebindUnixgram(t *testing.T) {
	dir := sockdir.Dir(t)
	path := filepath.Join(dir, "relay.sock")
	c, err := RebindUnixgram(path, 0o620)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o620 {
		t.Fatalf("socket file %v, %v; want a socket of mode 0620", fi, err)
	}
	s, err := DialUnixgram(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := NewBatch(1, 16)
	if n, err := c.ReadBatch(b); err != nil || n != 1 || string(b.Datagrams()[0].Data) != "x" {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}

	// A live socket: ListenUnixgram would take it over, RebindUnixgram not.
	if _, err := RebindUnixgram(path, 0o620); !errors.Is(err, ErrPathTaken) {
		t.Fatalf("RebindUnixgram over a live socket: %v, want ErrPathTaken", err)
	}
	if now, err := os.Lstat(path); err != nil || !os.SameFile(fi, now) {
		t.Fatalf("the live socket's file changed: %v, %v", now, err)
	}
	if got, err := c.CheckFile(); err != nil || got != FileBound {
		t.Fatalf("CheckFile = %v, %v; want FileBound", got, err)
	}

	other := filepath.Join(dir, "plain")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RebindUnixgram(other, 0o620); !errors.Is(err, ErrPathTaken) {
		t.Fatalf("RebindUnixgram over a file: %v, want ErrPathTaken", err)
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "keep" {
		t.Fatalf("the file is %q, %v", b, err)
	}
}

// TestListenUnixgramWinsOverRebindInItsWindow: a relay taking over the path
// removes the running relay's socket, then binds; should the running
// relay's check find the path free in between and bind it again, the
// starting relay must not fail on EADDRINUSE: it takes over that socket too.
func TestListenUnixgramWinsOverRebindInItsWindow(t *testing.T) {
	path := sockdir.Path(t, "relay.sock")
	running, err := ListenUnixgram(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	var rebound *Conn
	testHook = func(stage string) {
		if stage != "bind" || rebound != nil {
			return
		}
		if st, err := running.CheckFile(); err != nil || st != FileGone {
			t.Errorf("the running relay's check: %v, %v; want FileGone", st, err)
			return
		}
		if rebound, err = RebindUnixgram(path, 0o600); err != nil {
			t.Errorf("the running relay's rebind: %v", err)
		}
	}
	defer func() { testHook = nil }()
	starting, err := ListenUnixgram(path, 0o600)
	testHook = nil
	if rebound == nil {
		t.Fatal("the hook did not rebind")
	}
	defer rebound.Close()
	if err != nil {
		t.Fatalf("ListenUnixgram lost to the rebind: %v", err)
	}
	defer starting.Close()
	if !starting.TookOver() {
		t.Error("TookOver false: the rebound socket was live")
	}
	if st, err := rebound.CheckFile(); err != nil || st != FileReplaced {
		t.Errorf("the rebound socket's CheckFile: %v, %v; want FileReplaced", st, err)
	}
	if st, err := starting.CheckFile(); err != nil || st != FileBound {
		t.Errorf("the starting relay's CheckFile: %v, %v; want FileBound", st, err)
	}
}

// TestRemoveStale: a free path is free; a live socket stays (false, nil);
// a stale one is removed (true); any other file stays, with an error.
func TestRemoveStale(t *testing.T) {
	dir := sockdir.Dir(t)
	if free, err := RemoveStale(filepath.Join(dir, "none.sock")); !free || err != nil {
		t.Errorf("RemoveStale at a free path = %v, %v; want true, nil", free, err)
	}

	livePath := filepath.Join(dir, "live.sock")
	live, err := ListenUnixgram(livePath, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if free, err := RemoveStale(livePath); free || err != nil {
		t.Errorf("RemoveStale at a live socket = %v, %v; want false, nil", free, err)
	}
	if st, err := live.CheckFile(); st != FileBound || err != nil {
		t.Errorf("the live socket's file after RemoveStale: %v, %v; want it bound", st, err)
	}

	stalePath := filepath.Join(dir, "stale.sock")
	old, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: stalePath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close() // its file stays
	if free, err := RemoveStale(stalePath); !free || err != nil {
		t.Errorf("RemoveStale at a stale socket = %v, %v; want true, nil", free, err)
	}
	if _, err := os.Lstat(stalePath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale socket's file: %v, want it removed", err)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if free, err := RemoveStale(plain); free || err == nil {
		t.Errorf("RemoveStale at a regular file = %v, %v; want false and an error", free, err)
	}
	if b, err := os.ReadFile(plain); err != nil || string(b) != "keep" {
		t.Errorf("the regular file: %q, %v", b, err)
	}
}
