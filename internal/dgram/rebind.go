// This file holds what a relay needs once its socket file may have gone
// while it runs (a /tmp cleaner, an rm): a look at what the path names
// now, and a bind that never replaces what another process put there.

package dgram

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrPathTaken: RebindUnixgram found a file at the path and left it there.
var ErrPathTaken = errors.New("dgram: socket path taken")

// FileState is what a Unix socket's path names now (Conn.CheckFile).
type FileState uint8

const (
	// FileBound: the path names the socket file this Conn bound.
	FileBound FileState = iota
	// FileGone: nothing is at the path; senders get ErrNoRelay.
	FileGone
	// FileReplaced: another file is at the path, another process's socket
	// or anything else; senders reach that, not this Conn.
	FileReplaced
)

// String names the state for logs.
func (s FileState) String() string {
	switch s {
	case FileBound:
		return "bound"
	case FileGone:
		return "gone"
	case FileReplaced:
		return "replaced"
	}
	return fmt.Sprintf("FileState(%d)", uint8(s))
}

// CheckFile says what the path ListenUnixgram bound names now; FileBound
// for UDP, which has no file to lose. The error is Lstat's when it cannot
// tell (a directory it may not search). It changes nothing.
func (c *Conn) CheckFile() (FileState, error) {
	if c.path == "" {
		return FileBound, nil
	}
	// While the socket is open its inode cannot be freed, so SameFile
	// cannot mistake a successor's file for it (see Close).
	fi, err := os.Lstat(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return FileGone, nil
	case err != nil:
		return FileBound, fmt.Errorf("dgram: %w", err)
	case os.SameFile(fi, c.bound):
		return FileBound, nil
	}
	return FileReplaced, nil
}

// RemoveStale removes the file at path if it is a socket nobody receives
// on (a relay that took the path over and stopped without removing it) and
// says whether the path is free now. A socket a process receives on or
// listens on, any other file, and one it cannot probe stay (false, with
// the reason as the error for the last two).
func RemoveStale(path string) (bool, error) {
	live, err := removeSocket(path, false)
	return err == nil && !live, err
}

// RebindUnixgram is ListenUnixgram for a path that CheckFile found gone: it
// binds only if nothing is at path, and otherwise returns an error matching
// ErrPathTaken and leaves the file alone, a live socket included. The
// kernel decides (link(2) at path, which refuses an existing file), so a
// file put there since the check is never replaced.
func RebindUnixgram(path string, mode os.FileMode) (*Conn, error) {
	if err := CheckUnixPath(path); err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	c, err := bindUnixgram(path, mode)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %s: %w", ErrPathTaken, path, err)
	}
	return c, err
}
