// This file tests the start-up checks at their edges: each documented
// range of the flags, the write permission -socket-mode needs from any
// class, the -log-format and -log-level values refused, and
// DD_TRACE_AGENT_URL read trimmed.

package main

import (
	"os"
	"strings"
	"testing"
)

// TestBoundsInclusive: each range the README, -h or the error text gives
// ("40 960 to 1 MiB", "1s..1h", "100ms..1m", "0..1024", ...) accepts its
// edges and refuses one step past them. A bound moved by one, or dropped,
// would refuse a documented value or take an undocumented one (-max-groups
// 0, which the relay would read as its default 200 000).
func TestBoundsInclusive(t *testing.T) {
	ok := [][]string{
		{"-max-datagram", "40960"}, {"-max-datagram", "1048576"},
		{"-interval", "1s"}, {"-interval", "1h"},
		{"-interval", "2s", "-grace", "1999ms"},
		{"-max-groups", "1"},
		{"-max-held-bytes", "1048576"},
		{"-forward-parallel", "1"}, {"-forward-parallel", "256"},
		{"-udp-rcvbuf", "1073741823"},
		{"-stop-drain", "1m"},
		{"-agent-timeout", "100ms"}, {"-agent-timeout", "1m"},
		{"-stop-timeout", "10m"},
		{"-procs", "0"}, {"-procs", "1024"},
		{"-spin-wait", "1ms"},
		{"-read-coalesce", "0"}, {"-read-coalesce", "100us"}, {"-read-coalesce", "50ms"},
		{"-socket-check", "10ms"}, {"-socket-check", "1h"},
	}
	for _, args := range ok {
		if _, err := parse(args, nil); err != nil {
			t.Errorf("%q: %v; want it accepted (an edge of its documented range)", args, err)
		}
	}
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"-max-datagram", "40959"}, "-max-datagram 40959: want 40960..1048576"},
		{[]string{"-max-datagram", "1048577"}, "-max-datagram 1048577: want 40960..1048576"},
		{[]string{"-interval", "3601s"}, "-interval 1h0m1s: want 1s..1h"},
		{[]string{"-interval", "2s", "-grace", "2s"}, "-grace 2s: want 0 <= grace < -interval 2s"},
		{[]string{"-max-groups", "0"}, "-max-groups 0: want > 0"},
		{[]string{"-max-held-bytes", "1048575"}, "-max-held-bytes 1048575: want >= 1048576"},
		{[]string{"-forward-parallel", "257"}, "-forward-parallel 257: want 1..256"},
		{[]string{"-stop-drain", "61s"}, "-stop-drain 1m1s: want 0 < stop-drain <= 1m"},
		{[]string{"-agent-timeout", "99ms"}, "-agent-timeout 99ms: want 100ms..1m"},
		{[]string{"-agent-timeout", "61s"}, "-agent-timeout 1m1s: want 100ms..1m"},
		{[]string{"-stop-timeout", "601s"}, "-stop-timeout 10m1s: want 0 < stop-timeout <= 10m"},
		{[]string{"-procs", "1025"}, "-procs 1025: want 0..1024"},
		{[]string{"-spin-wait", "1001us"}, "-spin-wait 1.001ms: want 0..1ms"},
		{[]string{"-read-coalesce", "51ms"}, "-read-coalesce 51ms: want 0 (never) or 100µs..50ms"},
		{[]string{"-read-coalesce", "99us"}, "-read-coalesce 99µs: want 0 (never) or 100µs..50ms"},
		{[]string{"-read-coalesce", "-1ms"}, "-read-coalesce -1ms: want 0 (never) or 100µs..50ms"},
		{[]string{"-socket-check", "9ms"}, "-socket-check 9ms: want 0 (never) or 10ms..1h"},
		{[]string{"-socket-check", "3601s"}, "-socket-check 1h0m1s: want 0 (never) or 10ms..1h"},
	}
	for _, tc := range refused {
		if _, err := parse(tc.args, nil); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want one starting %q", tc.args, err, tc.want)
		}
	}
}

// TestSocketModeAnyWriteBit: senders need write permission on the socket
// file, from whichever class they are in: a mode granting it to the group
// or to others only (0020, 0002: senders in another account than the
// relay's) is accepted and applied as given.
func TestSocketModeAnyWriteBit(t *testing.T) {
	for mode, want := range map[string]os.FileMode{"0020": 0o020, "0002": 0o002, "0060": 0o060, "0622": 0o622} {
		o, err := parse([]string{"-socket-mode", mode}, nil)
		if err != nil || o.cfg.SocketMode != want {
			t.Errorf("-socket-mode %s: mode %v, %v; want %v accepted", mode, o.cfg.SocketMode, err, want)
		}
	}
}

// TestLogSettingsRefused: -log-format takes text or json, -log-level debug,
// info, warn or error; anything else is refused at start (exit 2), not
// taken silently as text or info.
func TestLogSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-log-format", "xml"}, nil, `-log-format "xml": want text or json`},
		{nil, map[string]string{"STATSRELAY_LOG_FORMAT": "logfmt"}, `-log-format "logfmt": want text or json (set by STATSRELAY_LOG_FORMAT)`},
		{[]string{"-log-level", "verbose"}, nil, `-log-level "verbose": want debug, info, warn or error`},
		{nil, map[string]string{"STATSRELAY_LOG_LEVEL": "trace"}, `-log-level "trace": want debug, info, warn or error (set by STATSRELAY_LOG_LEVEL)`},
	} {
		if _, err := parse(tc.args, tc.env); err == nil || err.Error() != tc.want {
			t.Errorf("%q %v: error %v; want %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestAgentVariableTrimmed: DD_TRACE_AGENT_URL is read trimmed (a value
// templated with a trailing newline or space), and one of white space alone
// is unset: DD_AGENT_HOST is read instead, not a start refused.
func TestAgentVariableTrimmed(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DD_TRACE_AGENT_URL": " http://agent:8126\n"}, "http://agent:8126"},
		{map[string]string{"DD_TRACE_AGENT_URL": "  ", "DD_AGENT_HOST": "10.0.0.7"}, "http://10.0.0.7:8126"},
		{map[string]string{"DD_TRACE_AGENT_URL": " "}, "http://127.0.0.1:8126"},
	} {
		if o, err := parse(nil, tc.env); err != nil || o.cfg.AgentURL != tc.want {
			t.Errorf("%q: agent %q, %v; want %q", tc.env, o.cfg.AgentURL, err, tc.want)
		}
	}
}
