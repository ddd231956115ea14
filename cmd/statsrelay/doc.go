// Command statsrelay is the sidecar that many traced processes send their
// client-side span stats to, as datagrams over a Unix socket or UDP
// (stats.Config.AgentURL "unixgram:///tmp/spanstats-relay.sock" or
// "udp://127.0.0.1:8127"). It merges what they send and forwards one
// request per payload identity per interval to the Datadog agent.
//
//	statsrelay [flags]
//	statsrelay -demo    # an embedded fake agent, the relay and four SDKs; ends by itself
//	statsrelay -version # the build: module version, VCS revision, Go version
//
// Every flag but -version can also be given as an environment variable
// STATSRELAY_<NAME> (upper case, "-" → "_", e.g. STATSRELAY_MAX_GROUPS); the
// flag wins. A STATSRELAY_ variable that names no flag, or
// STATSRELAY_VERSION, is logged as ignored at start.
// SIGINT, SIGTERM and SIGHUP remove the Unix socket file (a sender is then told
// there is no relay, and counts its drop), stop the readers (after they
// take what the kernel queued, for at most -stop-drain, 1s), forward
// everything held (within -stop-timeout, 10s) and exit 0. A second signal
// exits at once with 128 + its number (143 for SIGTERM), dropping what the
// relay holds; the same signal again within 100 ms is the first delivered
// twice (timeout(1) signals the process and its group) and changes nothing. SIGINT or SIGHUP ignored when statsrelay starts (nohup, a
// shell's background job) stays ignored. /metrics (Prometheus text: the
// relay's statsrelay_* counters, then the Go runtime's go_* and the
// process's process_* figures), /healthz (503 "stopping" once a stop begins,
// and 503 while a removed socket file cannot be bound again) and
// /debug/pprof/ are served on -http. The log goes to stderr, as text or, with -log-format
// json, one JSON object per line; -log-level (info) sets the least severe
// line written.
//
// The Unix socket file is checked every -socket-check (1s). Removed while
// the relay runs (a /tmp cleaner such as systemd-tmpfiles, an rm), it is
// bound again at the path, so senders reach the relay again; one warning is
// logged and statsrelay_unix_socket_rebinds_total counts it. Another file at
// the path (a second relay started on it) is left to its owner, by the
// check and by the stop: one error line per incident, and
// statsrelay_unix_socket_taken_total; once nobody receives on that socket
// (its relay killed without removing it), the next check binds the path
// again, as a start would. statsrelay_unix_socket_bound is 1
// while the path names this relay's socket, 0 otherwise.
//
// The relay runs on one processor unless -procs says otherwise (0: every
// CPU, or $GOMAXPROCS when that is set and -procs is not): at the loads a
// host's SDKs offer it needs a fraction of one, and on one a read batch
// reaches a decode worker without waking a thread. While datagrams come
// sparsely, each socket's reader pauses up to -read-coalesce (4ms) between
// reads, so that one wake-up takes what the kernel queued meanwhile: as
// long as the rate seen brings three eighths of a Unix socket's queue,
// and not for 100ms after the queue was found full (its senders wait,
// then, as for any busy relay; statsrelay_read_pauses_total counts the
// pauses). Linux only.
//
// Exit status: 0 after a stop or -version; 2 for a flag or STATSRELAY_*/DD_* value it
// refuses while parsing; 1 when a socket or -http cannot be opened (a -unix
// path holding a file other than a socket, or a stream socket a process
// listens on, included; a socket nothing listens on is replaced), -proc-root is not a
// directory (found only at start), or -demo lost spans.
//
// This command holds flags, signals and wiring only; the relay itself is
// internal/relay.
package main
