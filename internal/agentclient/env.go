// This file builds the agent's URL from a host and a port given apart, as
// the tracers read DD_AGENT_HOST and DD_TRACE_AGENT_PORT.

package agentclient

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Errors of HostPortURL.
var (
	// ErrAgentPort: the port is not a number in [1, 65535] written in
	// digits only (strconv.Atoi takes "+8126", which no URL does).
	ErrAgentPort = errors.New("want a port number in [1, 65535]")
	// ErrAgentHost: host and port make no valid agent URL.
	ErrAgentHost = errors.New("not a host name or address")
)

// HostPortURL returns the agent URL http://host:port of a host and a port
// given apart (DD_AGENT_HOST, DD_TRACE_AGENT_PORT), as dd-trace-go builds
// it (a missing host is localhost, a missing port 8126), and more
// forgiving than it: surrounding spaces trimmed, an IPv6 host taken
// bracketed or not (dd-trace-go brackets it again); "" when both are
// empty. A bad
// port gives ErrAgentPort (and the URL of the host alone on port 8126, for
// a caller that ignores the port with a warning); a bad host, ErrAgentHost
// and no URL. The error names each that is bad (errors.Is).
func HostPortURL(host, port string) (string, error) {
	host, port = strings.TrimSpace(host), strings.TrimSpace(port)
	var portErr error
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
			portErr, port = ErrAgentPort, ""
		}
	}
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1] // an IPv6 address as written in URLs
	}
	if host == "" && port == "" {
		return "", portErr
	}
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "8126"
	}
	u := (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}).String()
	if _, err := ParseURL(u); err != nil {
		return "", errors.Join(portErr, ErrAgentHost)
	}
	return u, portErr
}
