// This file tests statsrelay's wiring: its flags and STATSRELAY_
// variables and their checks, the start's errors, the flag tables of the
// README and the issue, and -demo; TestMain can make the test binary
// statsrelay itself.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats"
)

// mainArgsEnv, when set, makes the test binary statsrelay itself: it runs
// main with the command-line arguments the variable holds (a JSON list),
// so that process_test.go starts the binary as an operator does.
const mainArgsEnv = "STATSRELAY_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, "bad", mainArgsEnv, err)
			os.Exit(3)
		}
		os.Args = append([]string{"statsrelay"}, a...)
		os.Unsetenv(mainArgsEnv) // not the operator's: main would warn of it
		main()
		os.Exit(0) // main returned: the binary's exit status
	}
	// The developer's STATSRELAY_* settings would reach every statsrelay
	// the tests start (and DD_* every agent URL): the tests set their own.
	testenv.Clear()
	// Run under nohup or as a shell's background job, this process inherits
	// SIGHUP or SIGINT ignored, and so would every statsrelay it starts,
	// which keeps them ignored by design (TestBinaryKeepsIgnoredSignalsIgnored):
	// handled here, the runtime resets them to the default in each child.
	for _, s := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(s) {
			signal.Notify(make(chan os.Signal, 1), s)
		}
	}
	goleak.VerifyTestMain(m)
}

func parse(args []string, env map[string]string) (options, error) {
	return parseFlags(flag.NewFlagSet("statsrelay", flag.ContinueOnError), args, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
}

// TestProcsAndSpinWait: -procs is 1 unless given, or unless the operator
// set GOMAXPROCS (kept: -procs 0); -spin-wait not given leaves the polling
// to the Server's default (off on one processor), given 0 turns it off.
func TestProcsAndSpinWait(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		env   map[string]string
		procs int
		spin  time.Duration
	}{
		{nil, nil, 1, 0},
		{[]string{"-procs", "4"}, nil, 4, 0},
		{nil, map[string]string{"GOMAXPROCS": "3"}, 0, 0},
		{[]string{"-procs", "2"}, map[string]string{"GOMAXPROCS": "3"}, 2, 0},
		{nil, map[string]string{"GOMAXPROCS": "3", "STATSRELAY_PROCS": "1"}, 1, 0},
		{nil, map[string]string{"GOMAXPROCS": ""}, 1, 0},
		{nil, map[string]string{"GOMAXPROCS": "abc"}, 1, 0}, // the runtime ignores these: not kept
		{nil, map[string]string{"GOMAXPROCS": "0"}, 1, 0},
		{nil, map[string]string{"GOMAXPROCS": "-3"}, 1, 0},
		{nil, map[string]string{"GOMAXPROCS": "3000000000"}, 1, 0}, // past int32: the runtime ignores it too
		{[]string{"-spin-wait", "0"}, nil, 1, -1},
		{nil, map[string]string{"STATSRELAY_SPIN_WAIT": "0s"}, 1, -1},
		{[]string{"-spin-wait", "30us"}, nil, 1, 30 * time.Microsecond},
	} {
		o, err := parse(tc.args, tc.env)
		if err != nil || o.procs != tc.procs || o.cfg.SpinWait != tc.spin {
			t.Errorf("%q %v: procs %d spin-wait %v, %v; want %d, %v", tc.args, tc.env, o.procs, o.cfg.SpinWait, err, tc.procs, tc.spin)
		}
	}
}

// TestGraceFollowsInterval: -grace not given covers the SDKs' default
// send delay at -interval (stats.DefaultSendJitter) plus a tenth of it, at
// most 1 s: 3 s from the default 10 s up, where SDKs send within 2 s, and
// less below, so a short -interval alone is valid; given, by flag or
// variable, it is taken as is, and checked against the interval.
func TestGraceFollowsInterval(t *testing.T) {
	if g := defaultGrace(relay.DefaultInterval); g != relay.DefaultGrace {
		t.Fatalf("defaultGrace(%s) = %s, want relay.DefaultGrace %s", relay.DefaultInterval, g, relay.DefaultGrace)
	}
	for _, tc := range []struct {
		args  []string
		env   map[string]string
		grace time.Duration
	}{
		{nil, nil, 3 * time.Second},
		{[]string{"-interval", "1s"}, nil, 300 * time.Millisecond}, // sent within 200 ms
		{[]string{"-interval", "2s"}, nil, 600 * time.Millisecond},
		{[]string{"-interval", "5s"}, nil, 1500 * time.Millisecond},
		{nil, map[string]string{"STATSRELAY_INTERVAL": "30s"}, 3 * time.Second}, // sent within 2 s
		{[]string{"-interval", "1h"}, nil, 3 * time.Second},
		{[]string{"-interval", "2s", "-grace", "0s"}, nil, 0},
		{[]string{"-interval", "30s"}, map[string]string{"STATSRELAY_GRACE": "1s"}, time.Second},
		{[]string{"-grace", "4s"}, nil, 4 * time.Second},
	} {
		o, err := parse(tc.args, tc.env) // checked, defaults applied
		if err != nil || o.cfg.Grace != tc.grace {
			t.Errorf("%q %v: grace %s, %v; want %s", tc.args, tc.env, o.cfg.Grace, err, tc.grace)
		}
		if err == nil && !o.graceGiven && tc.grace < stats.DefaultSendJitter(o.cfg.Interval) {
			t.Errorf("%q %v: grace %s shorter than the SDKs' send delay %s", tc.args, tc.env, tc.grace, stats.DefaultSendJitter(o.cfg.Interval))
		}
	}
}

// TestHelpHidesAgentPassword: -h shows -agent's default as read from
// DD_TRACE_AGENT_URL, its password masked as in the start line (a CI log
// or "docker run image -h" shows it to whoever reads them).
func TestHelpHidesAgentPassword(t *testing.T) {
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	env := map[string]string{"DD_TRACE_AGENT_URL": "http://dd:s3cret-pw@agent:8126"}
	o, err := parseFlags(fs, []string{"-h"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != flag.ErrHelp {
		t.Fatalf("-h: %v", err)
	}
	if strings.Contains(out.String(), "s3cret-pw") || !strings.Contains(out.String(), "http://dd:xxxxx@agent:8126") {
		t.Errorf("-h output:\n%s\nwant the default with its password masked", out.String())
	}
	if o, err = parse(nil, env); err != nil || o.cfg.AgentURL != env["DD_TRACE_AGENT_URL"] {
		t.Errorf("the relay's agent %q, %v: want the URL as given", o.cfg.AgentURL, err)
	}
}

// TestFlagsAndEnvironment: defaults, STATSRELAY_<NAME> for a flag not
// given (empty disables a socket), the flag winning over the variable,
// DD_TRACE_AGENT_URL (else DD_AGENT_HOST, DD_TRACE_AGENT_PORT) as the
// agent's default, and clear errors naming the bad input.
func TestFlagsAndEnvironment(t *testing.T) {
	o, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.UnixPath != "/tmp/spanstats-relay.sock" || c.UDPAddr != "127.0.0.1:8127" || c.SocketMode != 0o660 ||
		c.AgentURL != "http://127.0.0.1:8126" || c.Interval != 10*time.Second || c.Grace != 3*time.Second ||
		c.MaxGroups != 200000 || c.MaxDatagram != 65536 || !c.Origin || c.ProcRoot != "/proc" || o.httpAddr != "127.0.0.1:8128" ||
		c.StopDrain != time.Second || o.stopTimeout != 10*time.Second || c.MaxHeldBytes != 1<<30 ||
		c.ForwardParallel != 8 || c.SpinWait != 0 || c.UDPRcvBuf != 4<<20 || c.SocketCheck != time.Second || o.procs != 1 ||
		c.ReadCoalesce != 4*time.Millisecond {
		t.Fatalf("defaults: %+v http %q", c, o.httpAddr)
	}
	o, err = parse([]string{"-max-groups", "7"}, map[string]string{
		"STATSRELAY_MAX_GROUPS": "9", "STATSRELAY_UDP": "", "STATSRELAY_SOCKET_MODE": "0600",
		"STATSRELAY_PROC_ROOT": "/host/proc", "DD_TRACE_AGENT_URL": "unix:///var/run/datadog/apm.socket",
		"STATSRELAY_ORIGIN": "false", "STATSRELAY_STOP_DRAIN": "250ms", "STATSRELAY_STOP_TIMEOUT": "30s",
		"STATSRELAY_MAX_HELD_BYTES": "67108864", "STATSRELAY_FORWARD_PARALLEL": "3",
		"STATSRELAY_SPIN_WAIT": "0", "STATSRELAY_UDP_RCVBUF": "0", "STATSRELAY_SOCKET_CHECK": "0",
		"STATSRELAY_READ_COALESCE": "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	c = o.cfg
	if c.MaxGroups != 7 || c.SocketMode != 0o600 || c.ProcRoot != "/host/proc" || c.Origin ||
		c.AgentURL != "unix:///var/run/datadog/apm.socket" || c.UDPAddr != "-" ||
		c.StopDrain != 250*time.Millisecond || o.stopTimeout != 30*time.Second || c.MaxHeldBytes != 64<<20 ||
		c.ForwardParallel != 3 || c.SpinWait >= 0 || c.UDPRcvBuf >= 0 || c.SocketCheck >= 0 || c.ReadCoalesce >= 0 {
		t.Fatalf("flag over env, env over default: %+v", c)
	}
	// DD_AGENT_HOST and DD_TRACE_AGENT_PORT when DD_TRACE_AGENT_URL is
	// not set, as the tracers read them; bad, they fail the start unless
	// -agent is given.
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DD_AGENT_HOST": "10.0.0.7"}, "http://10.0.0.7:8126"},
		{map[string]string{"DD_AGENT_HOST": "[fd00::7]", "DD_TRACE_AGENT_PORT": "18126"}, "http://[fd00::7]:18126"},
		{map[string]string{"DD_TRACE_AGENT_PORT": "18126"}, "http://localhost:18126"},
		{map[string]string{"DD_AGENT_HOST": "10.0.0.7", "DD_TRACE_AGENT_URL": "http://agent:8126"}, "http://agent:8126"},
	} {
		if o, err := parse(nil, tc.env); err != nil || o.cfg.AgentURL != tc.want {
			t.Errorf("%v: agent %q, %v; want %q", tc.env, o.cfg.AgentURL, err, tc.want)
		}
	}
	if _, err := parse(nil, map[string]string{"DD_TRACE_AGENT_PORT": "+8126"}); err == nil || !strings.Contains(err.Error(), "DD_TRACE_AGENT_PORT") {
		t.Errorf("a bad DD_TRACE_AGENT_PORT: error %v", err)
	}
	if o, err := parse([]string{"-agent", "http://a:1"}, map[string]string{"DD_AGENT_HOST": "a b"}); err != nil || o.cfg.AgentURL != "http://a:1" {
		t.Errorf("-agent over a bad DD_AGENT_HOST: %q, %v", o.cfg.AgentURL, err)
	}
	o, err = parse([]string{"-udp", ""}, nil)
	if err != nil || o.cfg.UDPAddr != "-" || o.cfg.UnixPath != "/tmp/spanstats-relay.sock" {
		t.Fatalf("empty -udp disables: %+v, %v", o.cfg, err)
	}
	o, err = parse([]string{"-unix", ""}, nil)
	if err != nil || o.cfg.UnixPath != "-" || o.cfg.UDPAddr != "127.0.0.1:8127" {
		t.Fatalf("empty -unix disables: %+v, %v", o.cfg, err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"STATSRELAY_MAX_GROUPS": "many"}, "STATSRELAY_MAX_GROUPS"},
		// A variable the flag package cannot parse says what -<name> takes,
		// as -h would: the bare "parse error" does not.
		{nil, map[string]string{"STATSRELAY_MAX_GROUPS": "many"}, `STATSRELAY_MAX_GROUPS="many": want an integer (as -max-groups)`},
		{nil, map[string]string{"STATSRELAY_GRACE": "3"}, `STATSRELAY_GRACE="3": want a duration such as 3s or 250ms (as -grace)`},
		{nil, map[string]string{"STATSRELAY_ORIGIN": "yes"}, `STATSRELAY_ORIGIN="yes": want true or false (as -origin)`},
		{[]string{"-socket-mode", "rw"}, nil, "-socket-mode"},
		{[]string{"-grace", "20s"}, nil, "-grace"},
		{[]string{"-grace", "-1s"}, nil, "-grace -1s: want >= 0"},
		{[]string{"-interval", "2s", "-grace", "3s"}, nil, "-grace 3s: want 0 <= grace < -interval 2s (give a shorter -grace with it)"},
		{[]string{"-interval", "10ms"}, nil, "-interval"},
		{[]string{"-max-datagram", "10"}, nil, "-max-datagram"},
		// Below the SDK's smallest datagram: its large reports would all
		// be rejected as truncated.
		{[]string{"-max-datagram", "16384"}, nil, "-max-datagram 16384: want 40960..1048576 (at least the senders' MaxDatagramBytes)"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		// Both disabled: a setting error (exit 2) naming both flags, not
		// a start failure (exit 1) naming the Unix path and UDP address.
		{[]string{"-udp", "", "-unix", ""}, nil, "-unix and -udp are both empty: nothing to listen on"},
		{[]string{"-udp", ""}, map[string]string{"STATSRELAY_UNIX": ""}, "(set by STATSRELAY_UNIX)"},
		{[]string{"-stop-drain", "0s"}, nil, "-stop-drain"},
		{[]string{"-max-held-bytes", "4096"}, nil, "-max-held-bytes"},
		{[]string{"-forward-parallel", "0"}, nil, "-forward-parallel"},
		{[]string{"-spin-wait", "2ms"}, nil, "-spin-wait"},
		{[]string{"-spin-wait", "-1us"}, nil, "-spin-wait"},
		{[]string{"-procs", "-1"}, nil, "-procs -1: want 0..1024 (0: as Go sets it)"},
		{nil, map[string]string{"STATSRELAY_PROCS": "5000"}, "-procs 5000: want 0..1024 (0: as Go sets it) (set by STATSRELAY_PROCS)"},
		{[]string{"-socket-check", "1ms"}, nil, "-socket-check 1ms: want 0 (never) or 10ms..1h"},
		{[]string{"-socket-check", "-1s"}, nil, "-socket-check"},
		// Past what SO_RCVBUF takes: it would wrap to a buffer of a few KiB.
		{[]string{"-udp-rcvbuf", "1073741824"}, nil, "-udp-rcvbuf 1073741824: want 0..1073741823"},
		{nil, map[string]string{"STATSRELAY_STOP_TIMEOUT": "-1s"}, "-stop-timeout -1s: want 0 < stop-timeout <= 10m (set by STATSRELAY_STOP_TIMEOUT)"},
		{nil, map[string]string{"STATSRELAY_MAX_DATAGRAM": "10"}, "(set by STATSRELAY_MAX_DATAGRAM)"},
		// The error names the variable that set the interval -grace trips.
		{[]string{"-grace", "3s"}, map[string]string{"STATSRELAY_INTERVAL": "2s"}, "-grace 3s: want 0 <= grace < -interval 2s (give a shorter -grace with it) (set by STATSRELAY_INTERVAL)"},
		{nil, map[string]string{"STATSRELAY_INTERVAL": "2s", "STATSRELAY_GRACE": "5s"}, "(set by STATSRELAY_GRACE, STATSRELAY_INTERVAL)"},
		{nil, map[string]string{"STATSRELAY_SOCKET_MODE": "7777"}, "(set by STATSRELAY_SOCKET_MODE)"},
		// A pod's tracer setting, pointing at the relay itself.
		{nil, map[string]string{"DD_TRACE_AGENT_URL": "unixgram:///run/relay.sock"}, "DD_TRACE_AGENT_URL: agent URL"},
		{[]string{"-agent", "udp://127.0.0.1:8127"}, nil, "-agent: agent URL"},
		{nil, map[string]string{"STATSRELAY_AGENT": "ftp://x"}, "(set by STATSRELAY_AGENT)"},
		{[]string{"-demo", "-interval", "30s"}, nil, "-demo takes no other setting (-interval)"},
		// A STATSRELAY_DEMO left in a configured relay's environment.
		{[]string{"-unix", "/run/r.sock"}, map[string]string{"STATSRELAY_DEMO": "true"}, "-demo (set by STATSRELAY_DEMO) takes no other setting (-unix)"},
		{nil, map[string]string{"STATSRELAY_DEMO": "1", "STATSRELAY_INTERVAL": "5s"}, "-demo (set by STATSRELAY_DEMO) takes no other setting (STATSRELAY_INTERVAL)"},
		{[]string{"-demo"}, map[string]string{"STATSRELAY_UDP": ""}, "-demo takes no other setting (STATSRELAY_UDP)"},
	} {
		if _, err := parse(tc.args, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v, want one naming %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestUsageNamesTheVariables: -h says that every flag is also read from
// STATSRELAY_<NAME>, as doc.go does.
func TestUsageNamesTheVariables(t *testing.T) {
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	if _, err := parseFlags(fs, []string{"-h"}, func(string) (string, bool) { return "", false }); err != flag.ErrHelp {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	// SIGHUP stops the relay as SIGINT and SIGTERM do (signalContext).
	for _, want := range []string{"STATSRELAY_<NAME>", "STATSRELAY_MAX_GROUPS", "the flag wins", "-max-groups int", "on SIGINT/SIGTERM/SIGHUP, how long the readers", "on SIGINT/SIGTERM/SIGHUP, how long the final forward"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoWithoutTempDirSaysWhy: -demo where $TMPDIR does not exist
// fails naming the demo and $TMPDIR, not with a bare stat error.
func TestDemoWithoutTempDirSaysWhy(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "gone"))
	err := runDemo(context.Background(), io.Discard, time.Second, 1)
	if err == nil || !strings.Contains(err.Error(), "-demo") || !strings.Contains(err.Error(), "$TMPDIR") {
		t.Fatalf("demo without a temp dir: %v; want an error naming -demo and $TMPDIR", err)
	}
}

// TestDemo: the demo ends by itself and its summary shows every span
// counted by the aggregators reaching the agent through the relay, also
// where $TMPDIR is too long to hold its Unix socket (a path holds at most
// 107 bytes): this one is, whatever the caller's.
func TestDemo(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("x", sockdir.MaxPath))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	// Started early in an interval, publishing ends before the relay
	// forwards the last window it closed (a grace after its boundary):
	// the demo must still show that forward with a counter line of its
	// own, before Stop's. Two intervals so started are three forward
	// rounds (the first window, the second, Stop's), each with its counter
	// line; the demo used to stop before the second and show it under
	// Stop's. A loaded host may send reports late, into the next round
	// (a request then holds two buckets, under one counter line): then the
	// count says nothing, and only the summary is checked.
	iv := stats.MinBucketInterval
	time.Sleep(time.Until(time.Now().Truncate(iv).Add(iv + iv/10)))
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, iv, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	late := regexp.MustCompile(`\(late (\d+)\)`).FindAllStringSubmatch(out.String(), -1)
	if len(late) == 0 {
		t.Fatalf("no counter line:\n%s", out.String())
	}
	if n := strings.Count(out.String(), "\nrelay: "); late[len(late)-1][1] == "0" && n < 3 {
		t.Fatalf("%d counter lines for 2 intervals started early in one, want one per forward round, 3:\n%s", n, out.String())
	} else if late[len(late)-1][1] != "0" {
		t.Logf("spans came late (%s): the rounds' counter lines not checked", late[len(late)-1][0])
	}
	m := regexp.MustCompile(`Publish called (\d+) times .* counted (\d+), inbox full (\d+); sent to the relay (\d+), unsent 0\n` +
		`sent \d+ spans; relay received (\d+) = forwarded (\d+) \+ dropped 0 \+ pending 0; agent decoded (\d+) hits`).
		FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary lines:\n%s", out.String())
	}
	calls, _ := strconv.Atoi(m[1])
	counted, _ := strconv.Atoi(m[2])
	full, _ := strconv.Atoi(m[3])
	if counted == 0 || counted+full != calls || m[4] != m[2] || m[5] != m[2] || m[6] != m[2] || m[7] != m[2] {
		t.Fatalf("summary %q: want calls = counted + inbox full, counted = sent = received = forwarded = decoded > 0", m[0])
	}
}

// TestStartErrorsNameTheirSetting: a socket, port or directory the start
// cannot use fails naming the flag, and the variable when one set it, as
// the checks' errors do: an operator who set STATSRELAY_UDP looks for no
// -udp on the command line.
func TestStartErrorsNameTheirSetting(t *testing.T) {
	busyUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	busyTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()
	notSocket := sockdir.Path(t, "stats.sock")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"STATSRELAY_UNIX": "", "STATSRELAY_UDP": "127.0.0.1:0", "STATSRELAY_HTTP": ""}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"STATSRELAY_UDP": busyUDP.LocalAddr().String()}, nil, "-udp " + busyUDP.LocalAddr().String() + ": "},
		{map[string]string{"STATSRELAY_UDP": busyUDP.LocalAddr().String()}, nil, "address already in use (set by STATSRELAY_UDP)"},
		{map[string]string{"STATSRELAY_HTTP": busyTCP.Addr().String()}, nil, "address already in use (set by STATSRELAY_HTTP)"},
		{map[string]string{"STATSRELAY_UNIX": notSocket}, nil, "-unix " + notSocket + ": "},
		{map[string]string{"STATSRELAY_UNIX": notSocket}, nil, "not replacing it (set by STATSRELAY_UNIX)"},
		{map[string]string{"STATSRELAY_UNIX": notSocket}, []string{"-udp", ""}, "(set by STATSRELAY_UNIX)"},
		{map[string]string{"STATSRELAY_PROC_ROOT": notSocket, "STATSRELAY_UNIX": sockdir.Path(t, "r.sock")}, nil,
			"-proc-root " + notSocket + ": "},
		{nil, []string{"-proc-root", notSocket, "-unix", sockdir.Path(t, "r.sock")}, "-proc-root " + notSocket + ": "},
		// What to do, in the command's terms: relay's "turn it off" names no flag.
		{nil, []string{"-proc-root", notSocket, "-unix", sockdir.Path(t, "r.sock")}, "turn origin detection off): -origin=false"},
	} {
		env := maps.Clone(base)
		maps.Copy(env, tc.env)
		o, err := parse(tc.args, env)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		err = serve(canceled(), o, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: start error %v, want one with %q", tc.env, tc.args, err, tc.want)
		}
	}
}

// canceled is a context already done: a start the test expects to fail,
// if it succeeds, returns nil at once instead of serving until go test's
// timeout.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestStartRefusesAbstractSocketName: on Linux "-unix @name" would be an
// abstract socket, open to every process in the network namespace whatever
// -socket-mode says: the start is refused naming -unix and why.
func TestStartRefusesAbstractSocketName(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract socket names are Linux's; elsewhere @name is a file")
	}
	name := "@spanstats-test-" + strconv.Itoa(os.Getpid())
	o, err := parse([]string{"-unix", name, "-udp", "127.0.0.1:0", "-http", ""}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = serve(canceled(), o, slog.New(slog.DiscardHandler))
	if err == nil || !strings.HasPrefix(err.Error(), "-unix "+name+": ") || !strings.Contains(err.Error(), "abstract socket name") {
		t.Errorf("start error %v; want one starting \"-unix %s: \" that says it is an abstract socket name", err, name)
	}
}

// TestReadmeFlagTable: the README's statsrelay flag table has a row for
// every flag but -demo (shown under its first lines), names no flag the
// command lacks, and gives each the default the command has: an operator
// copies from that table.
func TestReadmeFlagTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "| flag (env `STATSRELAY_<NAME>`) | default | meaning |\n|---|---|---|\n")
	if !ok {
		t.Fatal("the README has no statsrelay flag table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	if _, err := parseFlags(fs, nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	// "4 MiB" for 4194304, "1073741824 (1 GiB)" for 1073741824.
	normal := func(s string) string {
		s, _, _ = strings.Cut(strings.ReplaceAll(s, "`", ""), " (")
		if n, ok := strings.CutSuffix(s, " MiB"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return strconv.Itoa(v << 20)
			}
		}
		return s
	}
	seen := map[string]bool{}
	for row := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(row, " | ")
		if len(cells) < 3 {
			t.Fatalf("README flag table row %q: want | flag | default | meaning |", row)
		}
		names := regexp.MustCompile("`-([a-z-]+)`").FindAllStringSubmatch(cells[0], -1)
		defaults := []string{cells[1]}
		if len(names) > 1 {
			defaults = strings.Split(cells[1], ", ")
		}
		if len(names) == 0 || len(defaults) != len(names) {
			t.Errorf("README flag table row %q: %d flags, %d defaults", row, len(names), len(defaults))
			continue
		}
		for i, m := range names {
			name := m[1]
			seen[name] = true
			f := fs.Lookup(name)
			if f == nil {
				t.Errorf("the README lists -%s, which statsrelay does not have", name)
				continue
			}
			if name == "agent" { // from the environment, else this
				if !strings.HasSuffix(defaults[i], "`"+f.DefValue+"`") {
					t.Errorf("README: -agent's default ends %q, want `%s`", defaults[i], f.DefValue)
				}
				continue
			}
			if got := normal(defaults[i]); got != f.DefValue {
				t.Errorf("README: -%s's default is %q, statsrelay's %q", name, got, f.DefValue)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !seen[f.Name] && f.Name != "demo" {
			t.Errorf("the README's flag table has no row for -%s", f.Name)
		}
	})
}

// TestDashIsNotADisabledSocket: "-" is the relay's internal "disabled", not
// the flags': given as -unix or -udp it must not turn a socket off unsaid
// (the empty value does that, as -h says).
func TestDashIsNotADisabledSocket(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-unix", "-"}, nil, `-unix "-": want a socket path, or "" to disable it`},
		{[]string{"-udp", "-"}, nil, `-udp "-": want a host:port, or "" to disable it`},
		{nil, map[string]string{"STATSRELAY_UDP": "-"}, `-udp "-": want a host:port, or "" to disable it (set by STATSRELAY_UDP)`},
	} {
		if o, err := parse(tc.args, tc.env); err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: unix %q udp %q, error %v; want %s", tc.args, tc.env, o.cfg.UnixPath, o.cfg.UDPAddr, err, tc.want)
		}
	}
}

// TestSocketModeWithoutWriteRefused: a sender needs write permission on the
// socket file; a mode granting it to nobody (0444, read for "receive"?)
// would leave every non-root sender refused with EACCES.
func TestSocketModeWithoutWriteRefused(t *testing.T) {
	for _, mode := range []string{"0444", "0550", "0100"} {
		want := `-socket-mode "` + mode + `": grants no write permission, which senders need to send (e.g. 0660)`
		if _, err := parse([]string{"-socket-mode", mode}, nil); err == nil || err.Error() != want {
			t.Errorf("-socket-mode %s: error %v, want %s", mode, err, want)
		}
	}
	for _, mode := range []string{"0600", "0620", "0222"} {
		if _, err := parse([]string{"-socket-mode", mode}, nil); err != nil {
			t.Errorf("-socket-mode %s: %v", mode, err)
		}
	}
}

// TestEmptyProcRootRefused: an empty -proc-root (a templated variable left
// unset) must not read /proc in its place, maybe another pid namespace's.
func TestEmptyProcRootRefused(t *testing.T) {
	want := `-proc-root is empty: want the directory holding <pid>/cgroup, or -origin=false`
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"-proc-root", ""}, nil},
		{nil, map[string]string{"STATSRELAY_PROC_ROOT": ""}},
	} {
		if o, err := parse(tc.args, tc.env); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%v %v: proc root %q, error %v; want %s", tc.args, tc.env, o.cfg.ProcRoot, err, want)
		}
	}
	// Origins are read for Unix senders only.
	for _, args := range [][]string{{"-proc-root", "", "-origin=false"}, {"-proc-root", "", "-unix", ""}} {
		if _, err := parse(args, nil); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// A STATSRELAY_ variable that sets no flag is named, so that the start
// can warn of it: a typo would otherwise leave the default in force.
func TestUnknownVariablesNamed(t *testing.T) {
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	if _, err := parseFlags(fs, nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	got := unknownVars(fs, []string{
		"STATSRELAY_MAX_GROUPS=9", "STATSRELAY_INTERVL=5s", "PATH=/bin", "STATSRELAY_max_groups=3",
		"STATSRELAY_MAX-GROUPS=4", "STATSRELAY_INTERVL=6s", "STATSRELAY_=x", "DD_AGENT_HOST=h", "STATSRELAY_SPIN_WAIT=0",
	})
	want := []string{"STATSRELAY_", "STATSRELAY_INTERVL", "STATSRELAY_MAX-GROUPS", "STATSRELAY_max_groups"}
	if !slices.Equal(got, want) {
		t.Fatalf("unknown variables %q, want %q", got, want)
	}
	if got := unknownVars(fs, []string{"STATSRELAY_UNIX=", "STATSRELAY_DEMO=false"}); got != nil {
		t.Fatalf("known variables reported: %q", got)
	}
}

// TestIssueFlagTable: the flags of the issue's table under their exact
// names and defaults (TestReadmeFlagTable checks the README against the
// code, so a renamed flag would pass it with the README edited too).
func TestIssueFlagTable(t *testing.T) {
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	if _, err := parseFlags(fs, nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	for name, def := range map[string]string{
		"unix": "/tmp/spanstats-relay.sock", "socket-mode": "0660", "udp": "127.0.0.1:8127",
		"udp-rcvbuf": "4194304", "max-datagram": "65536", "agent": "http://127.0.0.1:8126",
		"interval": "10s", "grace": "3s", "http": "127.0.0.1:8128", "origin": "true",
		"proc-root": "/proc", "max-groups": "200000", "demo": "false",
	} {
		if f := fs.Lookup(name); f == nil || f.DefValue != def {
			t.Errorf("-%s: %+v, want default %q", name, f, def)
		}
	}
}

// TestEveryFlagFromItsVariable: each flag, not only those other tests
// happen to set, is read from STATSRELAY_<NAME>, and the flag wins over it.
func TestEveryFlagFromItsVariable(t *testing.T) {
	rows := map[string]struct {
		env, flag string
		get       func(options) any
	}{
		"unix":             {"/run/e.sock", "/run/f.sock", func(o options) any { return o.cfg.UnixPath }},
		"socket-mode":      {"0600", "0620", func(o options) any { return o.cfg.SocketMode }},
		"udp":              {"127.0.0.1:1", "127.0.0.1:2", func(o options) any { return o.cfg.UDPAddr }},
		"udp-rcvbuf":       {"1048576", "2097152", func(o options) any { return o.cfg.UDPRcvBuf }},
		"udp-reuseport":    {"true", "false", func(o options) any { return o.cfg.UDPReusePort }},
		"max-datagram":     {"50000", "60000", func(o options) any { return o.cfg.MaxDatagram }},
		"agent":            {"http://e:1", "unix:///run/f.socket", func(o options) any { return o.cfg.AgentURL }},
		"interval":         {"20s", "30s", func(o options) any { return o.cfg.Interval }},
		"grace":            {"1s", "2s", func(o options) any { return o.cfg.Grace }},
		"http":             {"127.0.0.1:1", "", func(o options) any { return o.httpAddr }},
		"origin":           {"false", "true", func(o options) any { return o.cfg.Origin }},
		"proc-root":        {"/e/proc", "/f/proc", func(o options) any { return o.cfg.ProcRoot }},
		"max-groups":       {"5", "6", func(o options) any { return o.cfg.MaxGroups }},
		"max-held-bytes":   {"2097152", "3145728", func(o options) any { return o.cfg.MaxHeldBytes }},
		"forward-parallel": {"2", "3", func(o options) any { return o.cfg.ForwardParallel }},
		"spin-wait":        {"10us", "20us", func(o options) any { return o.cfg.SpinWait }},
		"procs":            {"2", "3", func(o options) any { return o.procs }},
		"socket-check":     {"2s", "3s", func(o options) any { return o.cfg.SocketCheck }},
		"read-coalesce":    {"2ms", "3ms", func(o options) any { return o.cfg.ReadCoalesce }},
		"stop-drain":       {"2s", "3s", func(o options) any { return o.cfg.StopDrain }},
		"agent-timeout":    {"2s", "3s", func(o options) any { return o.cfg.AgentTimeout }},
		"stop-timeout":     {"20s", "30s", func(o options) any { return o.stopTimeout }},
		"demo":             {"true", "false", func(o options) any { return o.demo }},
		"log-format":       {"json", "text", func(o options) any { return o.logFormat }},
		"log-level":        {"warn", "error", func(o options) any { return o.logLevel }},
	}
	fs := flag.NewFlagSet("statsrelay", flag.ContinueOnError)
	if _, err := parseFlags(fs, nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := rows[f.Name]; !ok && f.Name != "version" { // TestVersionNotFromItsVariable
			t.Errorf("-%s has no row here", f.Name)
		}
	})
	for name, row := range rows {
		env := map[string]string{envName(name): row.env}
		// The value each gives, read as a flag: the variable must give the same.
		want := func(v string) any {
			o, err := parse([]string{"-" + name + "=" + v}, nil)
			if err != nil {
				t.Fatalf("-%s=%s: %v", name, v, err)
			}
			return row.get(o)
		}
		def, _ := parse(nil, nil)
		if want(row.env) == row.get(def) || want(row.env) == want(row.flag) {
			t.Fatalf("-%s: the row's values do not tell default, variable and flag apart", name)
		}
		if o, err := parse(nil, env); err != nil || row.get(o) != want(row.env) {
			t.Errorf("%s=%s alone: %v, %v; want %v", envName(name), row.env, row.get(o), err, want(row.env))
		}
		if o, err := parse([]string{"-" + name + "=" + row.flag}, env); err != nil || row.get(o) != want(row.flag) {
			t.Errorf("-%s=%s with %s=%s: %v, %v; want the flag's %v", name, row.flag, envName(name), row.env, row.get(o), err, want(row.flag))
		}
	}
}

// TestVersionNotFromItsVariable: -version is read from the command line
// only: a STATSRELAY_VERSION left in a relay's environment would make every
// start print the build and exit 0, the relay never running. It is noted,
// for main to say it is ignored.
func TestVersionNotFromItsVariable(t *testing.T) {
	o, err := parse([]string{"-unix", ""}, map[string]string{"STATSRELAY_VERSION": "true"})
	if err != nil || o.version || !o.versionEnv {
		t.Fatalf("STATSRELAY_VERSION=true: err %v, version %v, noted %v; want nil, false, true", err, o.version, o.versionEnv)
	}
	if o, err := parse([]string{"-version"}, nil); err != nil || !o.version || o.versionEnv {
		t.Fatalf("-version: err %v, version %v, noted %v; want nil, true, false", err, o.version, o.versionEnv)
	}
}
