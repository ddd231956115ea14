// This file holds the Unix socket check: the relay's socket file can be
// removed while it runs (systemd-tmpfiles cleaning /tmp, an rm, a second
// relay started on the same path), and senders are then refused while the
// relay looks healthy. Every SocketCheck the path is compared with the file
// bound; a removed file, or a socket nobody receives on (left by a relay
// that took the path over and was killed), is bound again; another
// process's live socket, or any other file, is left alone.

package relay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
)

// DefaultSocketCheck is how often the Unix socket's path is checked. An
// Lstat a second is nothing beside the receive path, and it is well under a
// sender's interval, so a removal costs each sender about one report.
const DefaultSocketCheck = time.Second

// socketWatch is the state of the Unix socket check.
type socketWatch struct {
	// mu orders the check's swap of conns[Unix] with its readers once
	// Run started, and guards the fields below.
	mu sync.Mutex
	// start starts a reader on a socket bound again (set by Run; nil: not
	// running, or stopping).
	start func(*dgram.Conn)
	// retired are the sockets replaced by a rebind: each reader takes
	// what they hold, closes its own and releases it; the stop closes
	// what remains.
	retired []*dgram.Conn
	state   dgram.FileState // at the last check
	// failed is the last rebind or check error logged, so that one
	// incident is logged once, not at every check.
	failed string

	rebinds atomic.Uint64 // sockets bound again
	taken   atomic.Uint64 // times the path was found naming another file
	lost    atomic.Bool   // at the last check, the path did not name the relay's socket
	// unbindable: at the last check the file was gone and could not be
	// bound again (its directory removed, say): /healthz fails.
	unbindable atomic.Bool
}

// conn returns the socket of transport t, or nil; the Unix one may be
// replaced by the check while Run runs.
func (s *Server) conn(t Transport) *dgram.Conn {
	if t != Unix {
		return s.conns[t]
	}
	s.sock.mu.Lock()
	defer s.sock.mu.Unlock()
	return s.conns[Unix]
}

// watchSocket starts the check, which starts each new reader with start;
// the returned stop ends it, after which conns[Unix] no longer changes.
func (s *Server) watchSocket(start func(*dgram.Conn)) (stop func()) {
	unix := s.conns[Unix] != nil // read before the check may replace it
	s.sock.mu.Lock()
	s.sock.start = start
	s.sock.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !unix || s.cfg.SocketCheck < 0 {
			return
		}
		tick := time.NewTicker(s.cfg.SocketCheck)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.checkSocket()
			}
		}
	}()
	return func() {
		s.sock.mu.Lock()
		s.sock.start = nil // a check already waiting for mu does nothing
		s.sock.mu.Unlock()
		cancel()
		<-done
	}
}

// checkSocket compares the Unix socket's path with the file bound: a file
// gone is bound again, another file is left to its owner; each incident is
// logged once. It says whether it ran: not before Run starts the check,
// nor once the stop began.
func (s *Server) checkSocket() (ran bool) {
	w := &s.sock
	w.mu.Lock()
	defer w.mu.Unlock()
	c := s.conns[Unix]
	if c == nil || w.start == nil {
		return false
	}
	path := s.cfg.UnixPath
	state, err := c.CheckFile()
	if err != nil {
		w.fail(s.log, "statsrelay: cannot check the Unix socket file (senders may not reach the relay); retrying every check", path, err)
		return true
	}
	stale := false
	if state == dgram.FileReplaced {
		// Another relay that took the path over and died leaves a socket
		// nobody receives on: every sender is refused until it is gone.
		// A live one, or another file, is left alone.
		if freed, _ := dgram.RemoveStale(path); freed {
			state, stale = dgram.FileGone, true
		}
	}
	if state == dgram.FileGone {
		nc, err := dgram.RebindUnixgram(path, s.cfg.SocketMode)
		switch {
		case errors.Is(err, dgram.ErrPathTaken):
			state = dgram.FileReplaced // put there since the check
		case err != nil:
			w.state = state
			w.lost.Store(true)
			w.unbindable.Store(true)
			w.fail(s.log, "statsrelay: the Unix socket file was removed and cannot be bound again: "+
				"senders are told there is no relay and drop their stats until it is (retried every check)", path, err)
			return true
		default:
			s.conns[Unix] = nc
			w.retired = append(w.retired, c)
			c.Drain() // its reader takes what senders queued there, then closes it
			w.start(nc)
			w.rebinds.Add(1)
			if stale {
				s.log.Warn("statsrelay: the Unix socket path named a socket nobody receives on (the process that took it over "+
					"stopped without removing it); bound it again: senders reach this relay again", "path", path)
				state = dgram.FileBound
				break
			}
			s.log.Warn("statsrelay: the Unix socket file was removed while the relay ran (a /tmp cleaner such as systemd-tmpfiles, or an rm); "+
				"bound it again: senders reach the relay again, and counted as their drops what they sent while it was gone "+
				"(exclude the path from the cleaner, or give -unix a path outside /tmp)", "path", path)
			state = dgram.FileBound
		}
	}
	if state == dgram.FileReplaced && w.state != dgram.FileReplaced {
		w.taken.Add(1)
		s.log.Error("statsrelay: the Unix socket path now names another file (a second relay started on it?); not taking it back: "+
			"senders reach that file's owner, not this relay, until it is removed (stop one relay, or give each its own -unix; "+
			"a relay taking over for a restart without a gap: stop this one now)", "path", path)
	}
	w.state = state
	w.failed = ""
	w.lost.Store(state != dgram.FileBound)
	w.unbindable.Store(false)
	return true
}

// fail logs msg with err unless it is the error logged last.
func (w *socketWatch) fail(log *slog.Logger, msg, path string, err error) {
	if e := err.Error(); e != w.failed {
		w.failed = e
		log.Error(msg, "path", path, "err", e)
	}
}

// unixBound says whether the Unix socket's path names the relay's socket
// now. Looked at per scrape, not kept from the last check: with the check
// off (-socket-check 0) that would say bound for ever. Under mu, so the
// check cannot retire the socket mid-look.
func (s *Server) unixBound() bool {
	w := &s.sock
	w.mu.Lock()
	defer w.mu.Unlock()
	state, err := s.conns[Unix].CheckFile()
	if err != nil {
		return !w.lost.Load() // the check logs the error
	}
	return state == dgram.FileBound
}

// release forgets c once its reader closed it: a relay whose file a
// cleaner removes daily must not hold every socket it ever bound.
func (w *socketWatch) release(c *dgram.Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.retired = slices.DeleteFunc(w.retired, func(r *dgram.Conn) bool { return r == c })
}

// retiredConns returns the sockets the check replaced whose readers have
// not closed them yet.
func (s *Server) retiredConns() []*dgram.Conn {
	s.sock.mu.Lock()
	defer s.sock.mu.Unlock()
	return slices.Clone(s.sock.retired)
}
