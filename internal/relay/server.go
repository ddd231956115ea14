// This file holds the Server: the relay's sockets, goroutines and agent
// client around a Relay, from start to a graceful stop.

package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/dgram"
)

// Defaults of ServerConfig.
const (
	DefaultUnixPath   = "/tmp/spanstats-relay.sock"
	DefaultSocketMode = 0o660
	DefaultUDPAddr    = "127.0.0.1:8127"
	DefaultUDPRcvBuf  = 4 << 20
	// MaxUDPRcvBuf is the largest UDPRcvBuf: what the kernel takes.
	MaxUDPRcvBuf    = dgram.MaxRcvBuf
	DefaultAgentURL = "http://127.0.0.1:8126"
	DefaultGrace    = 3 * time.Second
	// DefaultStopDrain bounds how long the readers go on taking what the
	// kernel queued once Run's context ends.
	DefaultStopDrain = time.Second
	// DefaultQueue is how many read batches may wait for a decode worker
	// before the readers wait (and the kernel queues): each holds
	// BatchSize buffers of MaxDatagram bytes, so it is memory, and more of
	// it is colder cache (a one-off sweep; no benchmark varies it).
	DefaultQueue = 8
	// DefaultSpinWait is how long a decode worker whose last batch came
	// soon polls for the next before it parks: parking and waking a worker
	// per recvmmsg batch put the Go scheduler first in the receive path's
	// profile. Chosen in a one-off sweep of BenchmarkRelayReceive (shorter
	// and longer did worse; the sweep is not kept, the benchmark runs it
	// and -1); BenchmarkRelayPaced shows what it costs at fixed loads.
	DefaultSpinWait = 30 * time.Microsecond
	// DefaultForwardParallel is how many forward requests are in flight at
	// once: an agent slow to answer one identity's request (up to the 10 s
	// request timeout) does not hold back the others'.
	DefaultForwardParallel = 8
	// DefaultMaxPayloadBytes keeps each forwarded body under the agent's
	// 25 MiB request limit.
	DefaultMaxPayloadBytes = 25<<20 - 64<<10
)

// Reasons the forwarder drops spans (the reason label of
// statsrelay_spans_dropped_total), beside DropMaxGroups and DropMaxBytes.
const (
	DropRetryBudget    = "retry_budget"   // the agent failed past the retry budget
	DropAgentOff       = "agent_off"      // the agent does not accept stats (404)
	DropRefused        = "refused"        // the agent answered 400 or another 4xx/3xx
	DropTooLarge       = "too_large"      // 413 (or over /info's max_request_bytes) down to one group: no split fits it; a proxy's limit too
	DropStopped        = "stopped"        // the stop's deadline ended the retries
	DropUnattributable = "unattributable" // no container id, agent on a Unix socket, relay in a container
)

// ServerConfig configures a Server; zero fields take the defaults above,
// but for the sockets: UnixPath and UDPAddr name them, and an empty one
// (or "-", as statsrelay's empty flag becomes) disables that socket, so
// at least one must be given (statsrelay gives DefaultUnixPath and
// DefaultUDPAddr).
type ServerConfig struct {
	UnixPath   string
	SocketMode os.FileMode
	UDPAddr    string
	// UDPRcvBuf is the UDP socket's SO_RCVBUF (0: DefaultUDPRcvBuf;
	// negative: the system's default; at most MaxUDPRcvBuf).
	UDPRcvBuf int
	// UDPReusePort binds the UDP port with SO_REUSEPORT (Linux only), so
	// that a relay taking over from this one can bind it while this one
	// still runs; the kernel then spreads the senders between them until
	// this one stops (see dgram.ListenUDPShared).
	UDPReusePort bool
	MaxDatagram  int
	AgentURL     string
	Interval     time.Duration
	// Grace is the wait after each boundary for late senders (zero: none,
	// unlike the other fields; statsrelay's -grace defaults to
	// DefaultGrace from an Interval of 10 s up, less below).
	Grace time.Duration
	// Origin reads each Unix sender's container id from
	// <ProcRoot>/<pid>/cgroup.
	Origin    bool
	ProcRoot  string
	MaxGroups int
	// MaxHeldBytes bounds what held groups take (Config.MaxHeldBytes).
	MaxHeldBytes int
	// Workers decode datagrams (zero: GOMAXPROCS); Queue bounds the read
	// batches waiting for them; BatchSize is the datagrams per recvmmsg.
	Workers, Queue, BatchSize int
	// SpinWait is how long one decode worker at a time polls for the next
	// batch before parking, when its previous wait was no longer than that
	// (zero: DefaultSpinWait with GOMAXPROCS above 1, never with 1;
	// negative: never): under a steady stream the readers hand on batches
	// without waking anyone, and a relay that receives a datagram now and
	// then never spins. On one processor a batch handed on wakes no thread
	// (the worker runs when the reader waits), and polling only takes the
	// processor from the reader.
	SpinWait time.Duration
	// ReadCoalesce is the longest a socket's reader pauses between reads
	// while datagrams arrive sparsely, so that one wake-up takes what the
	// kernel queued meanwhile (zero: DefaultReadCoalesce; negative:
	// never; within MinReadCoalesce..MaxReadCoalesce). See coalescer for
	// when and how long it pauses: sized by the rate of the reads before,
	// so that at the pause's end a Unix socket's queue
	// (net.unix.max_dgram_qlen) holds about three eighths of what it can;
	// not at all for
	// coalesceHold after the queue was found full, nor while the reader
	// drains at a stop. A burst within a pause can still fill the queue:
	// its senders then wait, as for a busy relay. Linux only; elsewhere a
	// read takes one datagram and never pauses.
	ReadCoalesce time.Duration
	// MaxPayloadBytes bounds each forwarded body (zero: the default).
	MaxPayloadBytes int
	// ForwardParallel bounds the forward requests in flight at once
	// (zero: DefaultForwardParallel).
	ForwardParallel int
	// InfoRefresh is the longest wait between polls of the agent's /info
	// while it does not accept stats, or cannot be read (zero:
	// agentclient.DefaultInfoRefresh); the polls start sooner and back off
	// to it (see agentclient.Config.InfoRefresh). While the agent takes
	// stats, /info is read again every ten InfoRefresh, for a changed
	// peer_tags list.
	InfoRefresh time.Duration
	// AgentTimeout bounds one request to the agent (zero:
	// agentclient.DefaultTimeout, 10 s).
	AgentTimeout time.Duration
	// StopDrain is how long, once Run's context ends, the readers go on
	// taking what the kernel queued before the sockets close (zero:
	// DefaultStopDrain). Senders that never let a socket empty would
	// otherwise keep the relay from stopping; what they still queue past
	// it is not read.
	StopDrain time.Duration
	// SocketCheck is how often the Unix socket's path is checked for a
	// file removed or replaced while the relay runs (zero:
	// DefaultSocketCheck; negative: never); see socketwatch.go.
	SocketCheck time.Duration
	Logger      *slog.Logger `json:"-"`
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time `json:"-"`
}

func (c *ServerConfig) withDefaults() {
	or := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.SocketMode == 0 {
		c.SocketMode = DefaultSocketMode
	}
	if c.UDPRcvBuf == 0 { // negative: the system's default
		c.UDPRcvBuf = DefaultUDPRcvBuf
	}
	or(&c.MaxDatagram, DefaultMaxDatagram)
	or(&c.MaxGroups, DefaultMaxGroups)
	or(&c.MaxHeldBytes, DefaultMaxHeldBytes)
	or(&c.Workers, runtime.GOMAXPROCS(0))
	or(&c.Queue, DefaultQueue)
	or(&c.BatchSize, dgram.DefaultBatchSize)
	or(&c.MaxPayloadBytes, DefaultMaxPayloadBytes)
	or(&c.ForwardParallel, DefaultForwardParallel)
	if c.AgentURL == "" {
		c.AgentURL = DefaultAgentURL
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.StopDrain <= 0 {
		c.StopDrain = DefaultStopDrain
	}
	if c.SocketCheck == 0 {
		c.SocketCheck = DefaultSocketCheck
	}
	if c.SpinWait == 0 {
		c.SpinWait = DefaultSpinWait
		if runtime.GOMAXPROCS(0) == 1 {
			c.SpinWait = -1
		}
	}
	if c.ReadCoalesce == 0 {
		c.ReadCoalesce = DefaultReadCoalesce
	}
	if c.ReadCoalesce > 0 {
		c.ReadCoalesce = min(max(c.ReadCoalesce, MinReadCoalesce), MaxReadCoalesce)
	}
	if c.InfoRefresh <= 0 {
		c.InfoRefresh = agentclient.DefaultInfoRefresh
	}
	if c.AgentTimeout <= 0 {
		c.AgentTimeout = agentclient.DefaultTimeout
	}
	if c.Grace < 0 {
		c.Grace = 0
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Server receives stats datagrams on its sockets, merges them in a Relay
// and forwards the merged payloads to the agent every interval.
type Server struct {
	cfg     ServerConfig
	relay   *Relay
	origins *Origins
	ep      agentclient.Endpoint
	conns   [NumTransports]*dgram.Conn
	closing sync.Once // of conns
	sock    socketWatch
	log     *slog.Logger

	queue   chan job    // read batches for the decode workers
	spinner atomic.Bool // a decode worker is polling the queue
	free    batchStack
	wait    [NumTransports]readerWait // how long readers waited for a free batch
	reads   [NumTransports]atomic.Uint64
	pauses  [NumTransports]atomic.Uint64 // reads preceded by a coalescing pause

	// selfContained: the relay runs in a container, so a request without
	// a container header over the agent's Unix socket would be filed
	// under the relay's container.
	selfContained bool

	fw       *forwarder
	requests sync.Map // "2xx", the status code or "error" → *atomic.Uint64, forward requests
	// agentOff is raised by the agent client while the agent does not
	// accept stats (a 404, or /info without the endpoint).
	agentOff atomic.Bool
	// stopping: Run's context ended; /healthz answers 503 from then on.
	stopping atomic.Bool
	// lastRound is how long the last forward round took (ns), rounds how
	// many there were.
	lastRound, rounds atomic.Int64
	// slowRounds counts the forward rounds that took more than half the
	// interval.
	slowRounds atomic.Uint64
	// droppedAfterTimeout counts the dropped spans of which an attempt
	// timed out, lost its connection or was cut by the stop timeout once sent
	// (Payload.MaybeDelivered): the agent may have taken them.
	droppedAfterTimeout atomic.Uint64
	// clockStepsBack counts the forward rounds that found the wall clock
	// gone back by more than an interval.
	clockStepsBack atomic.Uint64
	// infoFailures counts the agent /info reads that failed.
	infoFailures atomic.Uint64
}

// batchStack is the free read batches, last in first out: the batch just
// decoded is the one whose buffers are still in cache (BenchmarkRelayReceive).
// avail holds a token per free batch; a reader takes one before pop.
type batchStack struct {
	mu    sync.Mutex
	stack []*dgram.Batch
	avail chan struct{}
}

func (p *batchStack) put(b *dgram.Batch) {
	p.mu.Lock()
	p.stack = append(p.stack, b)
	p.mu.Unlock()
	p.avail <- struct{}{}
}

// pop takes the most recently freed batch; the caller holds a token.
func (p *batchStack) pop() *dgram.Batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.stack[len(p.stack)-1]
	p.stack = p.stack[:len(p.stack)-1]
	return b
}

// job is one read batch and the socket it came from.
type job struct {
	b *dgram.Batch
	t Transport
}

// SettingError is NewServer's error for a ServerConfig value it cannot
// use: Field ("UnixPath", "UDPAddr", "UDPReusePort" or "ProcRoot") lets a command name the
// flag that gave it.
type SettingError struct {
	Field, Value string
	Err          error
}

// Error is the underlying error's text, which names the value.
func (e *SettingError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *SettingError) Unwrap() error { return e.Err }

// NewServer opens the sockets (so that a bad path or address fails at
// start) and returns a Server that Run starts.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg.withDefaults()
	ep, err := agentclient.ParseURL(cfg.AgentURL)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	s := &Server{cfg: cfg, ep: ep, log: cfg.Logger}
	// Served from the start, as the other counters: an alert on its
	// absence must not fire until the first forward.
	s.requests.Store("2xx", new(atomic.Uint64))
	if cfg.UnixPath == "" || cfg.UnixPath == "-" {
		cfg.Origin = false // UDP carries no credentials
	}
	if cfg.Origin {
		if fi, err := os.Stat(cfg.ProcRoot); err != nil || !fi.IsDir() {
			// A mistyped path would find no sender's container, quietly.
			if runtime.GOOS == "linux" || cfg.ProcRoot != "/proc" {
				return nil, &SettingError{"ProcRoot", cfg.ProcRoot, fmt.Errorf("relay: proc root %s is not a directory (origin detection reads <proc-root>/<pid>/cgroup; give that directory, or turn origin detection off)", cfg.ProcRoot)}
			}
			s.log.Info("statsrelay: no /proc here: origin detection is off")
			cfg.Origin = false
		}
	}
	if cfg.Origin {
		if SamePIDNamespace(cfg.ProcRoot) {
			s.origins = NewOrigins(cfg.ProcRoot, cfg.Now)
			if _, err := os.Lstat(filepath.Join(cfg.ProcRoot, "self")); err != nil {
				// A proc filesystem has self; a mistyped directory would
				// find no sender's container, quietly.
				s.log.Warn("statsrelay: the proc root has no self entry, so it may not be a proc filesystem: "+
					"a sender whose <pid>/cgroup is not under it is found in no container",
					"proc_root", cfg.ProcRoot)
			}
		} else {
			s.log.Error("statsrelay: the processes under the proc root are numbered in another pid namespace than the relay's, "+
				"so the senders' pids would name other processes: origin detection is off (run the relay in the host's pid namespace)",
				"proc_root", cfg.ProcRoot)
		}
	}
	// Whether or not origins are read: a container-less request over the
	// agent's Unix socket is filed under the relay's own container.
	s.selfContained = ep.UnixSocket != "" && InContainer(cfg.ProcRoot)
	s.relay = New(Config{Interval: cfg.Interval, MaxGroups: cfg.MaxGroups, MaxHeldBytes: cfg.MaxHeldBytes, MaxDatagram: cfg.MaxDatagram,
		Origins: s.origins, LocalApart: s.selfContained, Now: cfg.Now,
		InFlight: (cfg.Queue + cfg.Workers + int(NumTransports)) * cfg.BatchSize})
	// UDP first: a start that fails must not have replaced a socket file
	// that another relay still receives on.
	if cfg.UDPAddr != "" && cfg.UDPAddr != "-" {
		listen := dgram.ListenUDP
		joined := false // another socket holds the port already
		if cfg.UDPReusePort {
			if !dgram.SharedUDP {
				return nil, &SettingError{"UDPReusePort", "true",
					fmt.Errorf("relay: a shared UDP port (SO_REUSEPORT) is supported on Linux only, not %s", runtime.GOOS)}
			}
			listen = dgram.ListenUDPShared
			// A plain bind fails on a port held; shared, the kernel would
			// say nothing of it.
			if probe, err := net.ListenPacket("udp", cfg.UDPAddr); err == nil {
				probe.Close()
			} else {
				joined = errors.Is(err, syscall.EADDRINUSE)
			}
		}
		if s.conns[UDP], err = listen(cfg.UDPAddr, cfg.UDPRcvBuf); err != nil {
			return nil, &SettingError{"UDPAddr", cfg.UDPAddr, fmt.Errorf("relay: udp %s: %w", cfg.UDPAddr, err)}
		}
		if joined {
			s.log.Warn("statsrelay: shares its UDP port with a socket already bound there (-udp-reuseport), "+
				"which takes its share of the UDP senders while it runs: a relay this one replaces, to stop now, "+
				"or a second relay started by mistake", "addr", cfg.UDPAddr)
		}
		if got := s.conns[UDP].GrantedBuffer(); cfg.UDPRcvBuf > 0 && got < cfg.UDPRcvBuf {
			// Silently capped by the kernel: bursts the operator sized for
			// would be dropped (counted in statsrelay_kernel_drops_total).
			s.log.Warn("statsrelay: the kernel granted a smaller UDP receive buffer than -udp-rcvbuf asks: "+
				"without CAP_NET_ADMIN it caps it at net.core.rmem_max (raise that, or grant the capability)",
				"asked", cfg.UDPRcvBuf, "granted", got)
		}
	}
	if cfg.UnixPath != "" && cfg.UnixPath != "-" {
		if s.conns[Unix], err = dgram.ListenUnixgram(cfg.UnixPath, cfg.SocketMode); err != nil {
			s.closeConns()
			return nil, &SettingError{"UnixPath", cfg.UnixPath, fmt.Errorf("relay: unix socket %s: %w", cfg.UnixPath, err)}
		}
		if s.conns[Unix].TookOver() {
			s.log.Warn("statsrelay: took over the Unix socket path from a process still receiving on it; "+
				"its senders now reach this relay and it no longer receives (stop it, or check -unix)", "path", cfg.UnixPath)
		}
	}
	if s.conns[Unix] == nil && s.conns[UDP] == nil {
		return nil, errors.New("relay: no socket to listen on (both the Unix path and the UDP address are empty)")
	}
	n := cfg.Queue + cfg.Workers + int(NumTransports)
	// Room for every batch: the free batches bound the queue, and a reader
	// never waits to send.
	s.queue = make(chan job, n)
	s.free.avail = make(chan struct{}, n)
	for range n {
		s.free.put(dgram.NewBatch(cfg.BatchSize, cfg.MaxDatagram))
	}
	if s.selfContained {
		s.log.Warn("statsrelay runs in a container and forwards to the agent's Unix socket: " +
			"payloads without a container id (UDP senders, host processes) would be filed under the relay's container, " +
			"so they are dropped (reason unattributable), but for Unix senders that share the relay's cgroup (with -origin); " +
			"forward over http:// to keep them")
	}
	return s, nil
}

// Relay is the merge state (for tests and the demo).
func (s *Server) Relay() *Relay { return s.relay }

// SpansDroppedAfterTimeout is how many of the dropped spans had an attempt
// time out, lose its connection or be cut after its request was sent: the
// agent may have them
// (statsrelay_spans_dropped_after_timeout_total).
func (s *Server) SpansDroppedAfterTimeout() uint64 { return s.droppedAfterTimeout.Load() }

// Addr returns the address of the socket of transport t, or "" if it has none.
func (s *Server) Addr(t Transport) string {
	if c := s.conn(t); c != nil {
		return c.LocalAddr().String()
	}
	return ""
}

// Close closes the sockets NewServer opened and removes the Unix socket
// file, if still this Server's: for a Server that Run will not start (a
// start that fails after NewServer). Run closes them itself, so after Run
// returned, as on a second call, Close does nothing and returns nil. It
// does not stop a running Server: end Run's context.
func (s *Server) Close() error {
	var err error
	s.closing.Do(func() { err = s.closeEach() })
	return err
}

func (s *Server) closeConns() { s.closing.Do(func() { _ = s.closeEach() }) }

func (s *Server) closeEach() error {
	var errs []error
	for _, c := range s.conns {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	for _, c := range s.retiredConns() {
		c.Close() // most closed by their readers already
	}
	return errors.Join(errs...)
}

// Run serves until ctx ends, then stops the readers, decodes what they
// read, forwards everything held (within stopTimeout) and returns.
func (s *Server) Run(ctx context.Context, stopTimeout time.Duration) error {
	fwCtx, cancelFw := context.WithCancel(context.Background())
	defer cancelFw()
	s.fw = newForwarder(fwCtx, s)
	var readers, workers sync.WaitGroup
	for t, c := range s.conns {
		if c != nil {
			readers.Go(func() { s.read(c, Transport(t)) })
		}
	}
	// After the loop: from here on the check may replace conns[Unix].
	stopWatch := s.watchSocket(func(c *dgram.Conn) { readers.Go(func() { s.read(c, Unix) }) })
	for range s.cfg.Workers {
		workers.Go(s.decode)
	}
	fwDone := make(chan struct{})
	go func() {
		defer close(fwDone)
		s.fw.run(ctx)
	}()
	<-ctx.Done()
	s.stopping.Store(true)
	stopWatch() // conns[Unix] stays as it is from here on
	for _, c := range s.conns {
		if c != nil {
			// New datagrams are refused where the sender can see it (a
			// Unix path gone); the readers take what the kernel queued,
			// then each closes its socket.
			c.Unlink()
			c.Drain()
		}
	}
	cut := time.AfterFunc(s.cfg.StopDrain, s.closeConns) // or are cut off
	readers.Wait()
	cut.Stop()
	s.closeConns()
	close(s.queue)
	workers.Wait()
	// The forwarder saw ctx end: it forwards everything held, then gives
	// its retries until stopTimeout.
	timer := time.AfterFunc(stopTimeout, cancelFw)
	defer timer.Stop()
	close(s.fw.final)
	<-fwDone
	return nil
}

// readerWait is the time a socket's readers waited for a free batch, the
// waits under way included, so that a scrape during a stall shows it
// growing (TestReaderWaitMeasured). Two readers of one transport may wait
// at once (a rebound Unix socket's old reader drains beside the new one):
// each adds its own wait. The lock is taken only by a reader that waits
// anyway, and by a scrape.
type readerWait struct {
	mu      sync.Mutex
	total   time.Duration // up to last
	last    time.Time
	waiting int
}

// add brings total up to now.
func (w *readerWait) add(now time.Time) {
	if w.waiting > 0 {
		w.total += time.Duration(w.waiting) * now.Sub(w.last)
	}
	w.last = now
}

func (w *readerWait) begin() {
	w.mu.Lock()
	w.add(time.Now())
	w.waiting++
	w.mu.Unlock()
}

func (w *readerWait) end() {
	w.mu.Lock()
	w.add(time.Now())
	w.waiting--
	w.mu.Unlock()
}

// waited is the total so far, the waits under way included.
func (w *readerWait) waited() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(time.Now())
	return w.total
}

// read is one socket's reader: each recvmmsg batch is handed on at once
// to the decode workers. When every batch is in use it waits (the kernel's
// queue takes the pressure), and the wait is counted.
//
// Holding batches back to hand several on with one wake-up would make one
// job of most of the pool, decoded by one worker while the others idle and
// the socket fills (BenchmarkRelayReceive).
func (s *Server) read(c *dgram.Conn, t Transport) {
	failures := 0 // reads failed in a row
	unixQueue := 0
	if t == Unix {
		unixQueue = dgram.UnixQueueLen()
	}
	co := newCoalescer(t, s.cfg.ReadCoalesce, s.cfg.BatchSize, unixQueue, c.GrantedBuffer(), dgram.BatchedReads)
	for {
		select {
		case <-s.free.avail:
		default:
			s.wait[t].begin()
			<-s.free.avail
			s.wait[t].end()
		}
		b := s.free.pop()
		n, err := c.ReadBatch(b)
		if err != nil {
			s.free.put(b)
			switch {
			case errors.Is(err, dgram.ErrDrained):
				// At once, not once every reader is done: a datagram
				// the kernel took meanwhile would be neither read nor
				// refused (a UDP sender is told by the port's refusal).
				c.Close()
				s.sock.release(c)
				return
			case errors.Is(err, net.ErrClosed):
				return
			}
			// Anything else (none is known on Linux; elsewhere, e.g. an
			// oversized datagram on Windows) must not end the socket's
			// reading for good: retry, slower while it lasts.
			failures++
			if failures&(failures-1) == 0 { // logged at the 1st, 2nd, 4th… in a row
				s.log.Error("statsrelay: reading failed; retrying", "transport", t.String(), "err", err, "in_a_row", failures)
			}
			time.Sleep(min(time.Duration(failures)*readRetryPause, time.Second))
			continue
		}
		failures = 0
		s.reads[t].Add(1)
		size := 0
		if co.pause > 0 { // the bytes matter only to a coalescer that pauses
			for _, d := range b.Datagrams() {
				size += d.Size
			}
		}
		s.queue <- job{b: b, t: t}
		// A stopping reader takes what is queued and no more: no pause.
		if d := co.after(n, size, b.Cap(), time.Now); d > 0 && !c.Draining() {
			s.pauses[t].Add(1)
			time.Sleep(d)
		}
	}
}

// readRetryPause is the first pause after a failed read; it grows with
// each failure in a row, up to a second.
const readRetryPause = 10 * time.Millisecond

// decode is a decode worker: every datagram of a batch goes to the Relay,
// which counts it accepted or rejected by reason.
func (s *Server) decode() {
	spin := s.cfg.SpinWait > 0
	for {
		j, ok, waited := s.next(spin)
		if !ok {
			return
		}
		spin = s.cfg.SpinWait > 0 && waited <= s.cfg.SpinWait
		s.relay.acceptBatch(j.b.Datagrams(), j.t)
		s.free.put(j.b)
	}
}

// next takes the next batch (ok false: the queue is closed) and says how
// long the worker waited for it. With spin, and no other worker polling,
// it polls the queue for up to SpinWait before parking; one poller at most
// leaves the other processors to the readers and the network poller.
func (s *Server) next(spin bool) (j job, ok bool, waited time.Duration) {
	select {
	case j, ok = <-s.queue:
		return j, ok, 0
	default:
	}
	start := time.Now()
	if spin && s.spinner.CompareAndSwap(false, true) {
		for {
			runtime.Gosched()
			select {
			case j, ok = <-s.queue:
				s.spinner.Store(false)
				return j, ok, time.Since(start)
			default:
			}
			if time.Since(start) > s.cfg.SpinWait {
				break
			}
		}
		s.spinner.Store(false)
	}
	j, ok = <-s.queue
	return j, ok, time.Since(start)
}
