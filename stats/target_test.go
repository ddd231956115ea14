// This file tests that a relay URL New cannot send to is refused: parts
// that name no socket, and an IPv6 host without brackets.

package stats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelayURLPartsNotIgnored: a relay URL part that names no socket (a
// query, a fragment, a UDP path or user) is refused, not dropped: "#" or
// "?" in a socket path would otherwise cut it short and send elsewhere.
func TestRelayURLPartsNotIgnored(t *testing.T) {
	for raw, want := range map[string]string{
		"unixgram:///run/relay#1.sock":   "%23",
		"unixgram:///run/relay?.sock":    "%3F",
		"unixgram:///run/relay.sock?x=1": "%3F",
		"udp://127.0.0.1:8127/relay":     "path",
		"udp://127.0.0.1:8127?x=1":       "query",
		"udp://127.0.0.1:8127#f":         "fragment",
		"udp://u:secret@127.0.0.1:8127":  "user",
		// url.Parse drops an empty fragment: the "#" would go unnoticed.
		"unixgram:///run/relay.sock#":         "%23",
		"unixgram:relay.sock#":                "%23",
		"udp://127.0.0.1:8127#":               "fragment",
		"unixgram://u:secret@/run/relay.sock": "user",
		"unixgram:relay%zz.sock":              "escape",
		// NUL: the kernel would read the path up to it, another socket
		// (or at its start a Linux abstract name).
		"unixgram:///run/relay.sock%00junk": "NUL",
		"unixgram:%00relay":                 "NUL",
		"unix:///run/apm.sock%00x":          "NUL",
	} {
		_, err := parseAgentURL(raw)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAgentURL(%q) = %v, want ErrBadConfig saying %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("parseAgentURL(%q): %v shows the password", raw, err)
		}
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{
		"unixgram:///run/relay%231.sock": "/run/relay#1.sock",
		// Relative: url.Parse leaves it escaped; made absolute now, so a
		// chdir before a later dial does not change the socket.
		"unixgram:relay%3F.sock":  filepath.Join(cwd, "relay?.sock"),
		"unixgram:relay%231.sock": filepath.Join(cwd, "relay#1.sock"),
		"udp://127.0.0.1:8127/":   "127.0.0.1:8127",
	} {
		tg, err := parseAgentURL(raw)
		if err != nil || tg.address != want {
			t.Errorf("parseAgentURL(%q) = %+v, %v; want %s", raw, tg, err, want)
		}
	}
}

// TestUDPURLUnbracketedIPv6: "udp://::1:8127" parses (url.Parse takes the
// host as "::1:8127") but is no host:port; it used to pass New and then
// crash the sender goroutine with a nil socket at the first report. New
// refuses it, saying an IPv6 address goes in brackets; the bracketed form
// is accepted.
func TestUDPURLUnbracketedIPv6(t *testing.T) {
	for _, raw := range []string{"udp://::1:8127", "udp://fe80::1:8127"} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "[") {
			t.Errorf("New(AgentURL %q) = %v, want ErrBadConfig saying to bracket the address", raw, err)
		}
	}
	if tg, err := parseAgentURL("udp://[::1]:8127"); err != nil || tg.address != "[::1]:8127" {
		t.Errorf("parseAgentURL(udp://[::1]:8127) = %+v, %v; want [::1]:8127", tg, err)
	}
}
