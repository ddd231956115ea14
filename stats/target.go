// This file holds target: where a Config sends its reports, the agent
// over HTTP or a relay's datagram socket, and the sizes that follow.

package stats

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/writer"
)

// target is where reports go: the agent over HTTP, or a relay's datagram
// socket (network "unixgram" or "udp").
type target struct {
	http             agentclient.Endpoint
	network, address string
}

func parseAgentURL(raw string) (target, error) {
	if strings.TrimSpace(raw) != raw {
		// url.Parse would say "first path segment in URL cannot contain
		// colon", which does not point at a pasted space or newline.
		return target{}, fmt.Errorf("%w: AgentURL %q has spaces around it", ErrBadConfig, agentclient.Redact(raw))
	}
	u, err := url.Parse(raw)
	known := err == nil && slices.Contains([]string{"http", "https", "unix", "unixgram", "udp"}, u.Scheme)
	if !known && !strings.Contains(raw, "://") {
		// A bare host:port or socket path (as DD_AGENT_HOST is written):
		// url.Parse would name "localhost" a scheme, or a colon in a path.
		return target{}, fmt.Errorf("%w: AgentURL %q has no scheme: write http://host:port, unix:///path/to/apm.socket, "+
			"unixgram:///path/to/relay.sock or udp://host:port", ErrBadConfig, agentclient.Redact(raw))
	}
	if err == nil {
		// url.Parse drops an empty fragment: "sock#" parses as "sock".
		hash := strings.Contains(raw, "#")
		raw := agentclient.Redact(raw) // quoted in errors
		switch u.Scheme {
		case "unixgram":
			// "unixgram://@name" parses as an empty user at host "name";
			// both spellings mean the abstract name, not a host.
			if u.User != nil && u.User.String() == "" && u.Path == "" && dgram.IsAbstractName("@"+u.Host) {
				return target{}, abstractRelayName(raw, "@"+u.Host)
			}
			if err := agentclient.CheckSocketHost(u); err != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: %v", ErrBadConfig, raw, err)
			}
			// url.Parse cuts the path at "?" or "#": a socket file named
			// with one would be addressed by the part before it.
			if u.RawQuery != "" || u.ForceQuery || hash {
				return target{}, fmt.Errorf("%w: AgentURL %q: a socket path holding \"?\" or \"#\" is written with %%3F or %%23",
					ErrBadConfig, raw)
			}
			p, err := agentclient.SocketPath(u)
			if err != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: %v", ErrBadConfig, raw, err)
			}
			if p == "" {
				return target{}, fmt.Errorf("%w: AgentURL %q has no socket path", ErrBadConfig, raw)
			}
			if dgram.IsAbstractName(p) {
				return target{}, abstractRelayName(raw, p)
			}
			if p, err = agentclient.AbsSocketPath(p); err != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: %v", ErrBadConfig, raw, err)
			}
			if err := dgram.CheckUnixPath(p); err != nil {
				return target{}, fmt.Errorf("%w: AgentURL: %v", ErrBadConfig, err)
			}
			// A datagram carries no credentials: a user part would be lost.
			if u.User != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: unixgram:///path/to/relay.sock takes no user", ErrBadConfig, raw)
			}
			return target{network: "unixgram", address: p}, nil
		case "udp":
			// No host would leave the sender no address to dial.
			if u.Hostname() == "" || u.Port() == "" {
				return target{}, fmt.Errorf("%w: AgentURL %q: want udp://host:port", ErrBadConfig, raw)
			}
			if err := agentclient.CheckPort(u); err != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: %v", ErrBadConfig, raw, err)
			}
			// url.Parse takes "::1:8127" as a host; the sender splits it
			// as host:port and would be left with no address at all.
			if _, _, err := net.SplitHostPort(u.Host); err != nil {
				return target{}, fmt.Errorf("%w: AgentURL %q: want udp://host:port, an IPv6 address in brackets (udp://[::1]:8127)", ErrBadConfig, raw)
			}
			// The address is all a datagram goes to: a part beyond it is a
			// mistake (a path copied from a socket URL) that would be lost.
			if extra := udpExtra(u, hash); extra != "" {
				return target{}, fmt.Errorf("%w: AgentURL %q: udp://host:port takes no %s", ErrBadConfig, raw, extra)
			}
			return target{network: "udp", address: u.Host}, nil
		}
	}
	if err == nil && u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" {
		return target{}, fmt.Errorf("%w: AgentURL %q: scheme %q is not supported (use http, https, unix, unixgram or udp)",
			ErrBadConfig, agentclient.Redact(raw), u.Scheme)
	}
	ep, err := agentclient.ParseURL(raw)
	if err != nil {
		return target{}, fmt.Errorf("%w: AgentURL: %v", ErrBadConfig, err)
	}
	return target{http: ep}, nil
}

// udpExtra names the part of a udp:// URL beyond host and port, if any; a
// lone "/" is taken as none. hash: the URL holds a "#", which url.Parse
// drops when nothing follows it.
func udpExtra(u *url.URL, hash bool) string {
	switch {
	case u.User != nil:
		return "user"
	case u.Path != "" && u.Path != "/":
		return "path"
	case u.RawQuery != "" || u.ForceQuery:
		return "query"
	case u.Fragment != "" || hash:
		return "fragment"
	}
	return ""
}

// abstractRelayName refuses a Linux abstract socket name, in the relay's
// words for refusing to listen on one (dgram.ListenUnixgram).
func abstractRelayName(raw, name string) error {
	return fmt.Errorf("%w: AgentURL %q: %s is a Linux abstract socket name, on which statsrelay does not listen: "+
		"it has no file for the socket's mode to guard, so the relay listens on a file path (give that path: unixgram:///path/to/relay.sock)",
		ErrBadConfig, raw, name)
}

// reserve is the room left before each payload for the datagram envelope.
func (t target) reserve() int {
	if t.network == "" {
		return 0
	}
	return writer.EnvelopeSize
}

// maxPayload is the largest payload body a report may be split into.
func (t target) maxPayload(cfg *Config) int {
	if t.network == "" {
		return cfg.MaxPayloadBytes
	}
	return cfg.MaxDatagramBytes - writer.EnvelopeSize
}
