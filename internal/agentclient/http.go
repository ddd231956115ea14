// This file holds the HTTP side: the agent's address, one stats POST and
// one /info GET.

package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spanstats/spanstats/internal/dgram"
)

// StatsPath is the agent endpoint for client-side stats.
const StatsPath = "/v0.6/stats"

// InfoPath is the agent endpoint that lists its endpoints and peer tags.
const InfoPath = "/info"

// maxInfoBytes bounds the /info answer read; the agent's is a few KiB.
const maxInfoBytes = 1 << 20

// Endpoint is a parsed agent URL.
type Endpoint struct {
	// Base prefixes every request path: "http://host:port" (with the
	// URL's user and password, if any: never log it), or
	// "http://localhost" over a Unix socket.
	Base string
	// UnixSocket is the socket path of a unix:// URL, else empty.
	UnixSocket string
}

// redacted hides the credentials net/http leaves in err's URL: it masks a
// password, not a user name that is the credential ("http://TOKEN@host"),
// and the error reaches Health and the logs.
func redacted(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = Redact(ue.URL)
	}
	return err
}

// Redact returns raw for logs and errors with any password in it hidden:
// url.URL.Redacted's form when raw parses, the user name hidden too when
// no password follows it (a token sent as the user name:
// "http://TOKEN@proxy:8126"), and when raw does not parse, whatever stands
// between "://" and the last "@" after it replaced, as a URL that fails to
// parse may still hold a password.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			if pw, _ := u.User.Password(); pw == "" && u.User.Username() != "" {
				u.User = url.User("xxxxx")
				return u.String()
			}
			return u.Redacted()
		}
		// "user:pw@host" parses as scheme "user"; an "@" with nothing
		// before it ("unixgram:@name", an abstract socket name) hides
		// nothing, and "xxxxx" there would misquote the URL.
		if j := strings.LastIndexByte(u.Opaque, '@'); j > 0 {
			return u.Scheme + ":xxxxx" + u.Opaque[j:]
		}
		// A password holding an unescaped "/", "?" or "#" ends the host
		// early and leaves its rest, up to the "@", in the path, query or
		// fragment ("http://user:2024/pw@agent:8126"). A socket path may
		// hold an "@": the unix schemes are left alone.
		if (u.Scheme != "http" && u.Scheme != "https") || !strings.Contains(raw, "@") {
			return raw
		}
	}
	i := strings.Index(raw, "://") + len("://")
	if i < len("://") {
		i = 0
	}
	if j := strings.LastIndexByte(raw[i:], '@'); j > 0 {
		return raw[:i] + "xxxxx" + raw[i+j:]
	}
	return raw
}

// ParseURL parses "http://host:port", "https://host:port" or
// "unix:///path/to/apm.socket". Its errors quote raw redacted (Redact).
func ParseURL(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if (err != nil || u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix") && !strings.Contains(raw, "://") {
		// A bare host:port or socket path: url.Parse would name "localhost"
		// a scheme, or a colon in a path.
		return Endpoint{}, fmt.Errorf("agent URL %q has no scheme: write http://host:port or unix:///path/to/apm.socket", Redact(raw))
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message quotes the URL whole
		}
		if _, rest, ok := strings.Cut(raw, "://"); ok && strings.Contains(rest, "@") {
			// A password holding "/", "?" or "#" ends the host early, and
			// url.Parse's message quotes what follows it: the password.
			err = errors.New(`does not parse: escape "/", "?", "#" or "@" in a user or password as %2F, %3F, %23 or %40`)
		}
		return Endpoint{}, fmt.Errorf("agent URL %q: %v", Redact(raw), err)
	}
	raw = Redact(raw)
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return Endpoint{}, fmt.Errorf("agent URL %q has no host", raw)
		}
		if err := CheckPort(u); err != nil {
			return Endpoint{}, fmt.Errorf("agent URL %q: %w", raw, err)
		}
		// Dropped, these would go unnoticed; and an "@" past the host is
		// a password holding "/", "?" or "#" that was not escaped, which
		// would make its start the host.
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(u.Path, "@") {
			return Endpoint{}, fmt.Errorf("agent URL %q: want http(s)://[user:password@]host:port with no query or fragment (escape \"/\", \"?\", \"#\" or \"@\" in a password as %%2F, %%3F, %%23, %%40)", raw)
		}
		// Re-encoded, not concatenated: an IPv6 zone (fe80::1%eth0) must
		// stay escaped in the URLs built on Base. The user and password
		// stay too: net/http sends them as Basic authorization (an agent
		// behind an authenticating proxy), as with the tracers, and leaves
		// the password out of its errors.
		base := url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}
		return Endpoint{Base: base.String()}, nil
	case "unix":
		if err := CheckSocketHost(u); err != nil {
			return Endpoint{}, fmt.Errorf("agent URL %q: %w", raw, err)
		}
		// url.Parse cuts the path at "?" or "#": a socket named with one
		// would be addressed by the part before it.
		// An empty fragment too: url.Parse drops it, "apm.sock#" would
		// address "apm.sock".
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
			return Endpoint{}, fmt.Errorf("agent URL %q: a socket path holding \"?\" or \"#\" is written with %%3F or %%23", raw)
		}
		p, err := SocketPath(u)
		if err != nil {
			return Endpoint{}, fmt.Errorf("agent URL %q: %w", raw, err)
		}
		if p == "" {
			return Endpoint{}, fmt.Errorf("agent URL %q has no socket path", raw)
		}
		if p, err = AbsSocketPath(p); err != nil {
			return Endpoint{}, fmt.Errorf("agent URL %q: %w", raw, err)
		}
		if err := dgram.CheckUnixPath(p); err != nil {
			return Endpoint{}, fmt.Errorf("agent URL: %w", err)
		}
		return Endpoint{Base: "http://localhost", UnixSocket: p}, nil
	default:
		return Endpoint{}, fmt.Errorf("agent URL %q: scheme %q is not supported (use http, https or unix)", raw, u.Scheme)
	}
}

// AbsSocketPath makes a relative socket path (unix:apm.sock) absolute
// against the working directory now: the socket is dialled again and
// again, and a chdir meanwhile must not point it at another file. An
// abstract name (@name) is not a path.
func AbsSocketPath(p string) (string, error) {
	if filepath.IsAbs(p) || dgram.IsAbstractName(p) {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("relative socket path %q: %w", p, err)
	}
	return abs, nil
}

// CheckSocketHost refuses a socket URL with a host: unix://var/run/x.sock
// (two slashes) parses with host "var" and path /run/x.sock, a socket that
// is not there. "localhost" is taken, as the tracers take it, and ignored.
func CheckSocketHost(u *url.URL) error {
	if u.Host != "" && u.Host != "localhost" {
		return fmt.Errorf("%q would be read as a host, not the start of the socket path: write %s:///%s%s (three slashes)",
			u.Host, u.Scheme, u.Host, u.Path)
	}
	return nil
}

// SocketPath is the socket path of a unix or unixgram URL, unescaped in
// both spellings: url.Parse unescapes the path of "unix:///run/x%3F.sock"
// but leaves the opaque part of the relative "unix:x%3F.sock" as written.
func SocketPath(u *url.URL) (string, error) {
	if u.Opaque == "" {
		return u.Path, nil
	}
	p, err := url.PathUnescape(u.Opaque)
	if err != nil {
		return "", fmt.Errorf("socket path %q: %w", u.Opaque, err)
	}
	return p, nil
}

// CheckPort refuses a URL whose port, when it has one, is not a number in
// [1, 65535]: such a URL parses, and would fail only at each send.
func CheckPort(u *url.URL) error {
	p := u.Port()
	if p == "" {
		return nil
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not in [1, 65535]", p)
	}
	return nil
}

// Headers are the request headers the agent reads a payload's origin from.
type Headers struct {
	Lang, LangVersion, TracerVersion string
	// ContainerID and EntityID are sent only when set.
	ContainerID, EntityID string
}

// AgentError is the outcome of a request the agent answered with a non-2xx
// status (3xx included: redirects are never followed).
type AgentError struct {
	StatusCode int
	Body       string // the start of the answer, for the log
}

// Error gives the status and the start of the agent's answer, if any.
func (e *AgentError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("agent answered %d", e.StatusCode)
	}
	return fmt.Sprintf("agent answered %d: %s", e.StatusCode, e.Body)
}

func newHTTPClient(ep Endpoint, timeout time.Duration, parallel int) *http.Client {
	tr := &http.Transport{
		Proxy: nil, // the agent is local; never route stats through a proxy
		// A connection per request in flight stays open for the next ones.
		MaxIdleConns:          max(parallel, 2),
		MaxIdleConnsPerHost:   max(parallel, 2),
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if ep.UnixSocket != "" {
		sock := ep.UnixSocket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "unix", sock)
			if errors.Is(err, syscall.EPROTOTYPE) {
				// The likely mistake: statsrelay's socket (or DogStatsD's)
				// given for the agent's; the errno alone does not say so.
				err = fmt.Errorf("not a stream socket (statsrelay's or DogStatsD's datagram socket?); "+
					"unix:// is for the agent's apm.socket, unixgram:// for statsrelay's: %w", err)
			}
			return c, err
		}
	} else {
		tr.DialContext = d.DialContext
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect would carry the stats and the container id to another
		// host: the first answer is the outcome. For a 307 or 308 net/http
		// has already opened the next hop's body (a hold on the payload),
		// and closes it only if it sends it: closed here, it releases the
		// hold, and the body goes back to PutBuf.
		CheckRedirect: func(next *http.Request, _ []*http.Request) error {
			if next.Body != nil {
				next.Body.Close()
			}
			return http.ErrUseLastResponse
		},
	}
}

// requestBody is one request's reader over a payload's body; net/http
// closes it once it is done reading, which releases the payload's hold.
type requestBody struct {
	*bytes.Reader
	once  sync.Once
	close func()
}

func (b *requestBody) Close() error {
	b.once.Do(b.close)
	return nil
}

// post sends p's body to the stats endpoint once.
func (c *Client) post(p *Payload) error {
	h := p.Headers
	// A cancel (the owner gave up) after the request was written whole may
	// come after the agent took it: maybeTaken must know.
	var wrote atomic.Bool
	ctx := httptrace.WithClientTrace(c.ctx, &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil { // sticky: net/http may write it again and fail
				wrote.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.ep.Base+StatsPath, nil)
	if err != nil {
		return err
	}
	open := func() (io.ReadCloser, error) {
		p.holds.Add(1)
		return &requestBody{Reader: bytes.NewReader(p.Body), close: func() { c.release(p) }}, nil
	}
	req.Body, _ = open()
	req.GetBody = open // a retry on another connection (a stale keep-alive one)
	req.ContentLength = int64(len(p.Body))
	rh := req.Header
	rh.Set("Content-Type", "application/msgpack")
	if h != nil {
		// An unknown value is left out, not sent empty (a relay knows no
		// sender's language version: the payload does not carry it).
		for _, kv := range [...][2]string{
			{"Datadog-Meta-Lang", h.Lang}, {"Datadog-Meta-Lang-Version", h.LangVersion},
			{"Datadog-Meta-Tracer-Version", h.TracerVersion},
			{"Datadog-Container-ID", h.ContainerID}, {"Datadog-Entity-ID", h.EntityID},
		} {
			if kv[1] != "" {
				rh.Set(kv[0], kv[1])
			}
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = redacted(err)
		if !wrote.Load() {
			// The body never went out whole (a timeout while writing to an
			// agent that does not read): the agent cannot have taken it.
			return unsentError{err}
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w: %w", errCancelledOnceSent, err)
		}
		// Written whole, then no answer: the agent may have read and taken
		// it before the connection broke (killed, a proxy's reset), as
		// before a timeout. Whole means handed to the kernel: a reset
		// before the agent read it all looks the same, so this errs
		// toward "maybe taken" (counted after timeout), never toward loss.
		return fmt.Errorf("%w: %w", errLostOnceSent, err)
	}
	defer drainClose(resp.Body)
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return &AgentError{StatusCode: resp.StatusCode, Body: printable(bytes.TrimSpace(msg))}
	}
	return nil
}

// printable is an answer's text as Health and the log show it: invalid
// UTF-8 and control characters (a proxy's binary page, NULs) become '?'.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, string(b))
}

// maxDrain bounds what is read and discarded of an answer to let its
// connection be reused; a longer answer's connection is closed instead.
const maxDrain = 64 << 10

// drainClose reads what is left of an answer's body, up to maxDrain, and
// closes it: net/http reuses the connection only of a body read to EOF.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// DefaultPeerTags is the peer_tags list of an agent (v0.85.4) left at its
// defaults (config ConfiguredPeerTags, sorted): the keys it aggregates
// peer tags of, which it also reads from OTLP spans. Checked against the
// agent's own in bench/peer.
var DefaultPeerTags = []string{
	"_dd.base_service", "active_record.db.vendor", "amqp.destination", "amqp.exchange", "amqp.queue",
	"aws.queue.name", "aws.s3.bucket", "bucketname", "cassandra.keyspace", "db.cassandra.contact.points",
	"db.couchbase.seed.nodes", "db.hostname", "db.instance", "db.name", "db.namespace", "db.system",
	"db.system.name", "db.type", "dns.hostname", "grpc.host", "hostname", "http.host", "http.server_name",
	"messaging.destination", "messaging.destination.name", "messaging.kafka.bootstrap.servers",
	"messaging.rabbitmq.exchange", "messaging.system", "mongodb.db", "msmq.queue.path", "net.peer.name",
	"network.destination.ip", "network.destination.name", "out.host", "peer.hostname", "peer.service",
	"queuename", "rpc.service", "rpc.system", "sequel.db.vendor", "server.address", "streamname",
	"tablename", "topicname",
}

// Info is what the agent's /info says about stats.
type Info struct {
	Endpoints []string `json:"endpoints"`
	PeerTags  []string `json:"peer_tags"`
	Config    struct {
		// MaxRequestBytes is the agent's body limit (max_request_bytes,
		// 25 MiB by default); 0 when /info does not say.
		MaxRequestBytes int64 `json:"max_request_bytes"`
	} `json:"config"`
}

// fetchInfo reads /info. An agent too old to have /info answers 404 and
// has no client stats either: that is an empty Info, not an error.
func (c *Client) fetchInfo(ctx context.Context) (*Info, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.ep.Base+InfoPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, redacted(err)
	}
	// Read to its end whatever is not decoded (a 404's or 5xx's text, the
	// whitespace after the JSON): /info is polled for as long as the agent
	// is off or /info fails, and each poll would open a connection anew.
	defer drainClose(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return &Info{}, nil
	}
	if resp.StatusCode/100 != 2 {
		return nil, &AgentError{StatusCode: resp.StatusCode}
	}
	var info Info
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxInfoBytes)).Decode(&info); err != nil {
		return nil, err
	}
	return &info, nil
}

// outcome is what happened to one attempt.
type outcome int

const (
	sent      outcome = iota
	retry             // 408, 429, 5xx, network errors and timeouts
	tooLarge          // 413: split and resend
	notFound          // 404: the agent does not do stats
	refused           // 3xx and other 4xx: the agent will never take this payload
	cancelled         // the owner gave up waiting (Close)
)

// errCancelledOnceSent marks a request cancelled after it was written
// whole: like a timeout then, the cancel may have come after the agent
// took the payload.
var errCancelledOnceSent = errors.New("cancelled once sent")

// errLostOnceSent marks a request that failed after it was written whole
// (the connection closed or reset before the answer, or a timeout).
var errLostOnceSent = errors.New("no answer once sent")

// unsentError is a request's error before its body was written whole;
// its message is err's.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// maybeTaken reports whether err may have come after the agent read the
// request, so the agent may have taken the payload: any failure once the
// request was written whole (a timeout, a connection closed or reset
// before the answer, a cancel: Stop's deadline), and any other timeout but
// the dial's or one before the request was written whole.
func maybeTaken(err error) bool {
	if errors.As(err, new(unsentError)) {
		return false
	}
	if errors.Is(err, errCancelledOnceSent) || errors.Is(err, errLostOnceSent) {
		return true
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

func classify(err error) outcome {
	var ae *AgentError
	switch {
	case err == nil:
		return sent
	case errors.As(err, &ae):
		switch c := ae.StatusCode; {
		case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
			return retry
		case c == http.StatusRequestEntityTooLarge, c == http.StatusBadRequest && readLimitReached(ae.Body):
			return tooLarge
		case c == http.StatusNotFound:
			return notFound
		default:
			return refused
		}
	case errors.Is(err, context.Canceled):
		return cancelled
	default:
		return retry
	}
}

// readLimitReached tells a 400 the agent answers to a body over its
// max_request_bytes: its stats handler (v0.85.4) wraps the limited
// reader's "read limit reached" in the decoder's error, so the status it
// means for it, 413, never goes out (TestAgentReadLimit400Splits).
func readLimitReached(body string) bool {
	return strings.HasPrefix(body, "read limit reached")
}
