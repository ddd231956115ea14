// This file holds statsrelay's wiring: its flags and STATSRELAY_*
// variables and their checks, the signals, and serve, which runs the
// relay's Server and its HTTP endpoint.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/stats"
)

// defaultStopTimeout bounds the final forward after a signal: the agent's
// retries must not keep a stopping relay alive for long.
const defaultStopTimeout = 10 * time.Second

type options struct {
	cfg         relay.ServerConfig
	mode        string
	httpAddr    string
	stopTimeout time.Duration
	procs       int  // GOMAXPROCS to run on; 0: the Go runtime's
	spinGiven   bool // -spin-wait or its variable was given
	graceGiven  bool // -grace or its variable was given
	demo        bool
	version     bool
	logFormat   string            // -log-format: text or json
	levelName   string            // -log-level as given
	logLevel    slog.Level        // parsed from levelName by check
	fromEnv     map[string]string // flag name → the variable that set it
	versionEnv  bool              // STATSRELAY_VERSION is set (and ignored)
	badProcsEnv string            // a GOMAXPROCS the runtime ignores (not a positive number)
}

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:], os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "statsrelay:", err)
		os.Exit(2)
	}
	if o.version {
		printVersion(os.Stdout)
		return
	}
	// A closed log pipe (statsrelay 2>&1 | logger, the logger gone) must
	// not kill the relay on its next line, losing what it holds and
	// leaving its socket file: log writes fail with EPIPE instead.
	signal.Ignore(syscall.SIGPIPE)
	setupLog(o, os.Stderr)
	if o.versionEnv {
		slog.Warn("statsrelay: ignoring STATSRELAY_VERSION: -version is read from the command line only")
	}
	if o.badProcsEnv != "" && !o.demo { // -demo leaves GOMAXPROCS to the runtime
		slog.Warn("statsrelay: ignoring GOMAXPROCS: not a positive number; running on -procs' default", "GOMAXPROCS", o.badProcsEnv, "procs", o.procs)
	}
	if unknown := unknownVars(flag.CommandLine, os.Environ()); len(unknown) > 0 {
		slog.Warn("statsrelay: ignoring environment variables that name no flag (see statsrelay -h)", "variables", strings.Join(unknown, ","))
	}
	if o.procs > 0 && !o.demo {
		runtime.GOMAXPROCS(o.procs) // before the Server sizes its decode workers by it
	}
	ctx, stop := signalContext()
	if o.demo {
		err = runDemo(ctx, os.Stdout, time.Second, 5)
	} else {
		err = serve(ctx, o, slog.Default())
	}
	// At once: from here a signal changes nothing, rather than turn a
	// stop that is over into a forced exit (143, "exiting without the
	// final forward").
	stop()
	if err != nil {
		slog.Error("statsrelay: " + err.Error())
		os.Exit(1)
	}
}

// signalContext returns a context that the first SIGINT, SIGTERM or SIGHUP
// ends: a graceful stop, whose final forward may take up to -stop-timeout.
// SIGHUP is one (a relay run from a terminal that closes), not Go's default
// exit, which would lose what it holds and leave its socket file. A second
// signal exits at once with 128 + its number, as a shell reports a process
// killed by it; what the relay holds is lost. The channel keeps both, so a
// second signal sent before the first is handled is not missed. The same
// signal again within signalRepeat of the first is that one delivered
// twice (timeout(1) and other wrappers signal the process and its group),
// not an operator's second Ctrl-C: it changes nothing.
// SIGINT or SIGHUP ignored at start (nohup, a shell's background job) stays
// ignored: Notify would install a handler for it.
func signalContext() (context.Context, func()) {
	sigs := make(chan os.Signal, 2)
	stopOn := []os.Signal{syscall.SIGTERM}
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			stopOn = append(stopOn, s)
		}
	}
	signal.Notify(sigs, stopOn...)
	ctx, cancel := context.WithCancel(context.Background())
	// over: the stop is done. Under mu, so that once done returns no
	// forced exit can begin; the handlers stay installed until the
	// process exits, so that a signal then changes nothing (without
	// them, the default action would kill it with 143).
	var mu sync.Mutex
	over := false
	go func() {
		first := <-sigs
		at := time.Now()
		cancel()
		for s := range sigs {
			if s == first && time.Since(at) < signalRepeat {
				slog.Info(fmt.Sprintf("statsrelay: %v again at once (sent twice by a wrapper?): still stopping gracefully", s))
				continue
			}
			mu.Lock()
			if over {
				mu.Unlock()
				continue
			}
			// A log line, in -log-format: the relay's stderr is its log;
			// with what it abandons, which /metrics cannot tell once the
			// process is gone.
			var held []any
			if srv := serving.Load(); srv != nil {
				st := srv.Relay().Stats()
				held = []any{"spans_pending", st.SpansPending, "spans_received", st.SpansReceived, "spans_forwarded", st.SpansForwarded}
			}
			slog.Error(fmt.Sprintf("statsrelay: second signal (%v): exiting without the final forward", s), held...)
			runForcedExit()
			os.Exit(128 + int(s.(syscall.Signal)))
		}
	}()
	return ctx, func() {
		mu.Lock()
		over = true
		mu.Unlock()
		cancel()
	}
}

// signalRepeat is how soon after the first a signal repeated is taken for
// the same one: wrappers deliver theirs microseconds apart, a person's
// second Ctrl-C comes later than this.
const signalRepeat = 100 * time.Millisecond

// forcedExit is what a second signal's immediate exit still does: os.Exit
// runs no deferred call (the demo's temporary directory would stay).
var forcedExit struct {
	sync.Mutex
	f func()
}

// serving is the relay serve runs, for the second signal's log line.
var serving atomic.Pointer[relay.Server]

// atForcedExit makes f run at a second signal's exit, until the returned
// function is called.
func atForcedExit(f func()) (cancel func()) {
	forcedExit.Lock()
	forcedExit.f = f
	forcedExit.Unlock()
	return func() {
		forcedExit.Lock()
		forcedExit.f = nil
		forcedExit.Unlock()
	}
}

// runForcedExit runs atForcedExit's function, if any.
func runForcedExit() {
	forcedExit.Lock()
	f := forcedExit.f
	forcedExit.Unlock()
	if f != nil {
		f()
	}
}

// setupLog points slog's default logger, which main and the relay log
// through, at -log-format and -log-level, writing to w. Text keeps the
// default handler's lines ("2006/01/02 15:04:05 INFO msg key=value").
func setupLog(o options, w io.Writer) {
	if o.logFormat == "json" {
		opts := &slog.HandlerOptions{Level: o.logLevel, ReplaceAttr: durationText}
		slog.SetDefault(slog.New(slog.NewJSONHandler(w, opts)))
		return
	}
	slog.SetLogLoggerLevel(o.logLevel)
}

// durationText writes a duration as the text lines and the flags say it
// ("10s"), not as a JSON number of nanoseconds.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// printVersion writes the build -version reports, as the start log line and
// statsrelay_build_info give it.
func printVersion(w io.Writer) {
	version, revision := relay.Build()
	fmt.Fprintf(w, "statsrelay %s (revision %q, %s %s/%s)\n", version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// agentFromEnv is -agent's default, from the variables the tracers read:
// DD_TRACE_AGENT_URL, else DD_AGENT_HOST and DD_TRACE_AGENT_PORT (a relay
// deployed with its pods' environment reaches the node's agent), else
// relay.DefaultAgentURL. Unlike the tracers it never probes the agent's
// default Unix socket: the README's -agent default says TCP, and a socket
// is the operator's choice to make with -agent. A bad host or port is an
// error ("" and the error), reported at start unless -agent says where
// the agent is.
func agentFromEnv(lookupEnv func(string) (string, bool)) (string, error) {
	if v, _ := lookupEnv("DD_TRACE_AGENT_URL"); strings.TrimSpace(v) != "" {
		v = strings.TrimSpace(v)
		if _, err := agentclient.ParseURL(v); err != nil {
			// A pod's environment may point its tracers at this relay
			// (unixgram://, udp://): the relay forwards to the agent.
			return "", fmt.Errorf("DD_TRACE_AGENT_URL: %w (the relay forwards to the agent: give -agent)", err)
		}
		return v, nil
	}
	host, _ := lookupEnv("DD_AGENT_HOST")
	port, _ := lookupEnv("DD_TRACE_AGENT_PORT")
	switch u, err := agentclient.HostPortURL(host, port); {
	case err != nil:
		return "", fmt.Errorf("DD_AGENT_HOST=%q DD_TRACE_AGENT_PORT=%q: %w (or give -agent)", host, port, err)
	case u != "":
		return u, nil
	}
	return relay.DefaultAgentURL, nil
}

// parseFlags reads the flags, then STATSRELAY_<NAME> for each flag not on
// the command line (set to the empty string, it is empty: -unix and -udp
// are then disabled).
func parseFlags(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) (options, error) {
	var o options
	c := &o.cfg
	agent, agentErr := agentFromEnv(lookupEnv)
	fs.StringVar(&c.UnixPath, "unix", relay.DefaultUnixPath, "Unix datagram socket to listen on; empty disables")
	fs.StringVar(&o.mode, "socket-mode", "0660", "file mode of the Unix socket (octal)")
	fs.StringVar(&c.UDPAddr, "udp", relay.DefaultUDPAddr, "UDP address to listen on; empty disables")
	fs.IntVar(&c.UDPRcvBuf, "udp-rcvbuf", relay.DefaultUDPRcvBuf, "UDP socket receive buffer in bytes (SO_RCVBUFFORCE when permitted); 0 keeps the system's default")
	fs.BoolVar(&c.UDPReusePort, "udp-reuseport", false, "bind the UDP port with SO_REUSEPORT (Linux), so that a new relay started on the same -udp (with this flag, as the same user) shares it while this one stops: a restart without a gap (see the README)")
	fs.IntVar(&c.MaxDatagram, "max-datagram", relay.DefaultMaxDatagram, "largest datagram accepted, envelope included; larger ones are counted as truncated")
	fs.StringVar(&c.AgentURL, "agent", agent, "agent URL: http://host:port or unix:///path/apm.socket; the default is $DD_TRACE_AGENT_URL, else http://$DD_AGENT_HOST:$DD_TRACE_AGENT_PORT when either is set, else "+relay.DefaultAgentURL+": the one shown here, read from this environment")
	// Help shows the default without the password a DD_TRACE_AGENT_URL may
	// carry, as the start line and /debug/pprof/cmdline do.
	fs.Lookup("agent").DefValue = agentclient.Redact(agent)
	fs.DurationVar(&c.Interval, "interval", relay.DefaultInterval, "forwarding period, aligned to the stats buckets")
	fs.DurationVar(&c.Grace, "grace", relay.DefaultGrace, "wait after each boundary for late senders before forwarding; not given, it follows -interval: the SDKs' default send delay plus a tenth of it, at most 1s (600ms at 2s, 3s from 10s)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8128", "address of /metrics, /healthz and /debug/pprof/; empty disables")
	fs.BoolVar(&c.Origin, "origin", true, "read each Unix sender's container id from <proc-root>/<pid>/cgroup")
	fs.StringVar(&c.ProcRoot, "proc-root", "/proc", "where <pid>/cgroup is read")
	fs.IntVar(&c.MaxGroups, "max-groups", relay.DefaultMaxGroups, "groups held across all senders; beyond, spans fold into an overflow group")
	fs.IntVar(&c.MaxHeldBytes, "max-held-bytes", relay.DefaultMaxHeldBytes, "bytes the held groups may take, labels and sketches included; beyond, spans fold into an overflow group")
	fs.IntVar(&c.ForwardParallel, "forward-parallel", relay.DefaultForwardParallel, "forward requests to the agent in flight at once (one per identity and interval)")
	fs.IntVar(&o.procs, "procs", defaultProcs, "processors the relay runs on (GOMAXPROCS); 0: every CPU the process may use, as Go sets it (or $GOMAXPROCS, which is also kept when -procs is not given)")
	fs.DurationVar(&c.SpinWait, "spin-wait", relay.DefaultSpinWait, "how long a decode worker polls for the next read batch before it parks, while batches come that often; 0 never polls; not given, it polls only on more than one processor (-procs)")
	fs.DurationVar(&c.ReadCoalesce, "read-coalesce", relay.DefaultReadCoalesce, "while datagrams come sparsely, the longest a socket's reader pauses between reads so that one wake-up takes what the kernel queued meanwhile; sized by the rate, aiming at three eighths of a Unix socket's queue, and never for 100ms after the queue was found full; 0 never pauses")
	fs.DurationVar(&c.SocketCheck, "socket-check", relay.DefaultSocketCheck, "how often the Unix socket file is checked: removed (a /tmp cleaner), or a socket nobody receives on, it is bound again; another process's, it is left alone and logged; 0 never checks")
	fs.DurationVar(&c.StopDrain, "stop-drain", relay.DefaultStopDrain, "on SIGINT/SIGTERM/SIGHUP, how long the readers go on taking what the kernel queued")
	fs.DurationVar(&c.AgentTimeout, "agent-timeout", agentclient.DefaultTimeout, "how long one request to the agent may take before it is retried (an agent that took it late may then count it twice)")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", defaultStopTimeout, "on SIGINT/SIGTERM/SIGHUP, how long the final forward to the agent may take; what it does not send is dropped and counted")
	fs.BoolVar(&o.demo, "demo", false, "run an embedded fake agent, the relay and four SDKs for a few intervals, then exit")
	fs.StringVar(&o.logFormat, "log-format", "text", "log lines as text (key=value) or json (one object per line, for a log pipeline)")
	fs.StringVar(&o.levelName, "log-level", "info", "least severe log lines written: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the build (module version, VCS revision, Go version) and exit")
	fs.Usage = func() {
		// -h is where an operator looks: the variables must be said there
		// too, not only in the package documentation.
		fmt.Fprintf(fs.Output(), "Usage: statsrelay [flags]\n"+
			"Every flag but -version can also be given as the environment variable\n"+
			"STATSRELAY_<NAME> (upper case, \"-\" → \"_\", e.g. STATSRELAY_MAX_GROUPS);\n"+
			"the flag wins.\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fromEnv := map[string]string{}
	o.fromEnv = fromEnv
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if f.Name == "version" {
			// Command line only: a STATSRELAY_VERSION left in a relay's
			// environment would keep it from ever starting, with exit 0
			// (which Restart=on-failure takes for a clean stop).
			_, o.versionEnv = lookupEnv(env)
			return
		}
		if v, ok := lookupEnv(env); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want %s (as -%s): %w", env, v, valueKind(f), f.Name, err))
			}
			fromEnv[f.Name] = env
		}
	})
	if o.version {
		// Whatever else the environment sets, or sets wrong (a bad
		// value on the command line is the flag package's exit 2): an
		// operator asking which build runs gets the answer.
		return o, nil
	}
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	if _, ok := fromEnv["procs"]; !set["procs"] && !ok {
		if v, ok := lookupEnv("GOMAXPROCS"); ok && v != "" {
			if n, err := strconv.ParseInt(v, 10, 32); err == nil && n > 0 { // as the runtime reads it
				o.procs = 0 // the operator's GOMAXPROCS, which the runtime read
			} else {
				// The runtime ignores it and takes every CPU: the default
				// stands instead, with a warning.
				o.badProcsEnv = v
			}
		}
	}
	_, spinEnv := fromEnv["spin-wait"]
	o.spinGiven = set["spin-wait"] || spinEnv
	_, graceEnv := fromEnv["grace"]
	o.graceGiven = set["grace"] || graceEnv
	if o.demo {
		// Checked with the variables applied: a STATSRELAY_DEMO left in a
		// relay's environment must not turn it into the demo unnoticed.
		var others []string
		for name := range set {
			if name != "demo" {
				others = append(others, "-"+name)
			}
		}
		for name, env := range fromEnv {
			if name != "demo" {
				others = append(others, env)
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			by := ""
			if env, ok := fromEnv["demo"]; ok {
				by = " (set by " + env + ")"
			}
			return o, fmt.Errorf("-demo%s takes no other setting (%s): it runs its own agent, relay and senders",
				by, strings.Join(others, ", "))
		}
		return o, nil
	}
	if agentErr != nil && o.cfg.AgentURL == "" { // neither -agent nor STATSRELAY_AGENT
		return o, agentErr
	}
	if err := check(&o); err != nil {
		return o, o.setBy(err)
	}
	return o, nil
}

// unknownVars lists, sorted, the STATSRELAY_* names in environ ("NAME=value"
// entries) that stand for no flag of fs: a typo (STATSRELAY_INTERVL) would
// otherwise leave the default in force without a word.
func unknownVars(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "STATSRELAY_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown)
}

// envName is the variable that sets flag name: STATSRELAY_ and the name
// in upper case, "-" → "_".
func envName(name string) string {
	return "STATSRELAY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// valueKind says what f takes, for a variable the flag package cannot
// parse: its own "parse error" names neither the type nor an example, and
// no usage follows it as after a bad flag.
func valueKind(f *flag.Flag) string {
	switch kind, _ := flag.UnquoteUsage(f); kind {
	case "": // a bool flag
		return "true or false"
	case "duration":
		return "a duration such as 3s or 250ms"
	case "int":
		return "an integer"
	default:
		return "a " + kind
	}
}

// setBy adds to err, which names its flags ("-grace 3s: want ... <
// -interval 2s"), the variables that set any of them: an operator who set
// only STATSRELAY_INTERVAL would otherwise look for a -grace flag.
func (o *options) setBy(err error) error {
	var by []string
	for _, w := range strings.Fields(err.Error()) {
		name, ok := strings.CutPrefix(strings.TrimSuffix(w, ":"), "-")
		if env, set := o.fromEnv[name]; ok && set && !slices.Contains(by, env) {
			by = append(by, env)
		}
	}
	if len(by) > 0 {
		err = fmt.Errorf("%w (set by %s)", err, strings.Join(by, ", "))
	}
	return err
}

// settingFlags names the flag behind each relay.SettingError field.
var settingFlags = map[string]string{"UnixPath": "unix", "UDPAddr": "udp", "UDPReusePort": "udp-reuseport", "ProcRoot": "proc-root"}

// check validates the parsed options; each error names its flag first.
func check(o *options) error {
	c := &o.cfg
	mode, err := strconv.ParseUint(o.mode, 8, 32)
	if err != nil || mode > 0o777 || mode == 0 {
		return fmt.Errorf("-socket-mode %q: want an octal file mode such as 0660", o.mode)
	}
	if mode&0o222 == 0 {
		// Sending to a Unix socket takes write permission on its file.
		return fmt.Errorf("-socket-mode %q: grants no write permission, which senders need to send (e.g. 0660)", o.mode)
	}
	c.SocketMode = os.FileMode(mode)
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("-log-format %q: want text or json", o.logFormat)
	}
	if err := o.logLevel.UnmarshalText([]byte(o.levelName)); err != nil {
		return fmt.Errorf("-log-level %q: want debug, info, warn or error", o.levelName)
	}
	if _, err := agentclient.ParseURL(c.AgentURL); err != nil {
		return fmt.Errorf("-agent: %w", err)
	}
	// "-" is how ServerConfig says "disabled": taken from a flag as is, it
	// would turn the socket off while the operator thinks it is on.
	if c.Origin && c.UnixPath != "" && c.ProcRoot == "" {
		// ServerConfig would read /proc instead: maybe another pid
		// namespace than the one meant, without a word.
		return errors.New("-proc-root is empty: want the directory holding <pid>/cgroup, or -origin=false")
	}
	if c.UnixPath == "-" {
		return errors.New(`-unix "-": want a socket path, or "" to disable it`)
	}
	if c.UDPAddr == "-" {
		return errors.New(`-udp "-": want a host:port, or "" to disable it`)
	}
	if c.UnixPath == "" && c.UDPAddr == "" {
		return errors.New("-unix and -udp are both empty: nothing to listen on (give a Unix socket path, a UDP address, or both)")
	}
	if c.UnixPath == "" {
		c.UnixPath = "-"
	}
	if c.UDPAddr == "" {
		c.UDPAddr = "-"
	}
	if !o.graceGiven && c.Interval >= time.Second && c.Interval <= time.Hour {
		c.Grace = defaultGrace(c.Interval)
	}
	switch {
	case c.MaxDatagram < stats.MinDatagramBytes || c.MaxDatagram > stats.MaxMaxDatagramBytes:
		// Below the SDK's smallest datagram, its large reports would all
		// be rejected as truncated.
		return fmt.Errorf("-max-datagram %d: want %d..%d (at least the senders' MaxDatagramBytes)",
			c.MaxDatagram, stats.MinDatagramBytes, stats.MaxMaxDatagramBytes)
	case c.Interval < time.Second || c.Interval > time.Hour:
		return fmt.Errorf("-interval %s: want 1s..1h", c.Interval)
	case c.Grace < 0:
		return fmt.Errorf("-grace %s: want >= 0", c.Grace)
	case c.Grace >= c.Interval:
		// Named with the interval: a -grace given for one interval trips
		// a shorter one set elsewhere (a variable, say).
		return fmt.Errorf("-grace %s: want 0 <= grace < -interval %s (give a shorter -grace with it)", c.Grace, c.Interval)
	case c.MaxGroups < 1:
		return fmt.Errorf("-max-groups %d: want > 0", c.MaxGroups)
	case c.MaxHeldBytes < 1<<20:
		return fmt.Errorf("-max-held-bytes %d: want >= 1048576", c.MaxHeldBytes)
	case c.ForwardParallel < 1 || c.ForwardParallel > 256:
		return fmt.Errorf("-forward-parallel %d: want 1..256", c.ForwardParallel)
	case c.UDPRcvBuf < 0 || c.UDPRcvBuf > relay.MaxUDPRcvBuf:
		return fmt.Errorf("-udp-rcvbuf %d: want 0..%d", c.UDPRcvBuf, relay.MaxUDPRcvBuf)
	case c.StopDrain <= 0 || c.StopDrain > time.Minute:
		return fmt.Errorf("-stop-drain %s: want 0 < stop-drain <= 1m", c.StopDrain)
	case c.AgentTimeout < 100*time.Millisecond || c.AgentTimeout > time.Minute:
		return fmt.Errorf("-agent-timeout %s: want 100ms..1m", c.AgentTimeout)
	case o.stopTimeout <= 0 || o.stopTimeout > 10*time.Minute:
		return fmt.Errorf("-stop-timeout %s: want 0 < stop-timeout <= 10m", o.stopTimeout)
	case o.procs < 0 || o.procs > maxProcs:
		return fmt.Errorf("-procs %d: want 0..%d (0: as Go sets it)", o.procs, maxProcs)
	case c.SpinWait < 0 || c.SpinWait > time.Millisecond:
		return fmt.Errorf("-spin-wait %s: want 0..1ms", c.SpinWait)
	case c.ReadCoalesce != 0 && (c.ReadCoalesce < relay.MinReadCoalesce || c.ReadCoalesce > relay.MaxReadCoalesce):
		return fmt.Errorf("-read-coalesce %s: want 0 (never) or %s..%s", c.ReadCoalesce, relay.MinReadCoalesce, relay.MaxReadCoalesce)
	case c.SocketCheck != 0 && (c.SocketCheck < 10*time.Millisecond || c.SocketCheck > time.Hour):
		return fmt.Errorf("-socket-check %s: want 0 (never) or 10ms..1h", c.SocketCheck)
	}
	if c.SocketCheck == 0 {
		c.SocketCheck = -1 // ServerConfig's "never"; its zero is the default
	}
	if c.ReadCoalesce == 0 {
		c.ReadCoalesce = -1 // ServerConfig's "never"; its zero is the default
	}
	switch {
	case !o.spinGiven:
		c.SpinWait = 0 // ServerConfig's default: it polls on more than one processor only
	case c.SpinWait == 0:
		c.SpinWait = -1 // ServerConfig's "never"; its zero is the default
	}
	if c.UDPRcvBuf == 0 {
		c.UDPRcvBuf = -1 // ServerConfig's "the system's"; its zero is the default
	}
	return nil
}

// defaultGrace is -grace's default for a forwarding period of interval:
// the latest an SDK on that BucketInterval sends by default
// (stats.DefaultSendJitter), plus a tenth of the interval, at most 1 s,
// for the datagrams' way and the relay's reading: relay.DefaultGrace (3 s)
// from the default interval up, where SDKs send within 2 s; less below, as
// a fixed 3 s would refuse a short -interval.
func defaultGrace(interval time.Duration) time.Duration {
	return stats.DefaultSendJitter(interval) + min(interval/10, time.Second)
}

// defaultProcs is -procs' default. The relay's work at the loads a host's
// SDKs offer is a fraction of one processor, and on one its reader hands
// each batch to a decode worker without waking a thread: about a fifth to a
// third less CPU per datagram than on two at fixed loads (BenchmarkRelayPaced),
// and about as many 1 KiB datagrams a second at saturation or more
// (BenchmarkRelay). More may decode large Unix datagrams faster under
// overload.
const defaultProcs = 1

// maxProcs bounds -procs.
const maxProcs = 1024

// serve runs the relay and its HTTP endpoint until ctx ends.
func serve(ctx context.Context, o options, log *slog.Logger) error {
	o.cfg.Logger = log
	// The HTTP port first: a busy one must fail the start before the
	// sockets exist, or their file would stay behind.
	var ln net.Listener
	if o.httpAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", o.httpAddr); err != nil {
			return o.setBy(fmt.Errorf("-http %s: %w", o.httpAddr, err))
		}
	}
	srv, err := relay.NewServer(o.cfg)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		var se *relay.SettingError
		if errors.As(err, &se) && settingFlags[se.Field] != "" {
			err = fmt.Errorf("-%s %s: %w", settingFlags[se.Field], se.Value, err)
			if se.Field == "ProcRoot" {
				// The relay's "turn origin detection off", as the flag.
				err = fmt.Errorf("%w: -origin=false", err)
			}
			err = o.setBy(err)
		}
		return err
	}
	httpAddr := o.httpAddr
	if ln != nil {
		// The bound address, as for the sockets: with port 0 the flag's
		// value would not tell the operator where /metrics is.
		httpAddr = ln.Addr().String()
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}
	buildVersion, buildRevision := relay.Build()
	log.Info("statsrelay started", "unix", srv.Addr(relay.Unix), "udp", srv.Addr(relay.UDP),
		"agent", agentclient.Redact(o.cfg.AgentURL), "interval", o.cfg.Interval, "grace", o.cfg.Grace, "http", httpAddr,
		"procs", runtime.GOMAXPROCS(0), "version", buildVersion, "revision", buildRevision, "go", runtime.Version())
	serving.Store(srv)
	defer serving.Store(nil)
	err = srv.Run(ctx, o.stopTimeout)
	st := srv.Relay().Stats()
	// Said here as well as in /metrics, which nobody can scrape once the
	// process has exited: spans the stop timeout cut after their request
	// was sent are dropped, but the agent may have counted them.
	// By reason, as a group: spans_dropped.retry_budget=… in text (a Go
	// map would print as map[…]), an object in JSON.
	var dropped []any
	for _, reason := range slices.Sorted(maps.Keys(st.SpansDropped)) {
		dropped = append(dropped, slog.Uint64(reason, st.SpansDropped[reason]))
	}
	log.Info("statsrelay stopped", "spans_received", st.SpansReceived, "spans_forwarded", st.SpansForwarded,
		slog.Group("spans_dropped", dropped...), "spans_pending", st.SpansPending,
		"spans_dropped_after_timeout", srv.SpansDroppedAfterTimeout())
	return err
}
