// This file tests the HTTP side of the client: agent URLs (ParseURL, Redact,
// a Unix URL naming a datagram socket), the request's headers, redirects
// not followed, and which answers are retried and how their errors read.

package agentclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/sockdir"
)

// TestRedirectIsNotFollowed: a 307 to another host is a refused payload,
// not retried, and the other host receives nothing (neither the stats nor
// the container id).
func TestRedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer agent.Close()
	obs := &counting{}
	c := New(context.Background(), testConfig(agent.URL), obs)
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: []byte{0x80}, Hits: 3, Headers: &Headers{ContainerID: "abc"}, Waiter: NewWaiter(done, 1, nil)})
	var ae *AgentError
	if err := <-done; !errors.As(err, &ae) || ae.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("outcome %v, want the 307 as an AgentError", err)
	}
	if obs.sent != 0 || obs.failed != 1 || obs.dropped != 1 || obs.retried != 0 || elsewhere.Load() != 0 {
		t.Fatalf("sent %d failed %d dropped %d retried %d, other host hit %d times; want 0 1 1 0 0",
			obs.sent, obs.failed, obs.dropped, obs.retried, elsewhere.Load())
	}
	c.ReadInfo() // /info is redirected too: an error, the state unchanged
	if obs.info != 0 || c.Off() || elsewhere.Load() != 0 {
		t.Fatalf("/info redirect: info reads %d, off %v, other host hit %d", obs.info, c.Off(), elsewhere.Load())
	}
}

// TestRedirectReleasesBody: whatever the redirect, the payload's body goes
// back to PutBuf once its outcome is known (a 307 or 308 has net/http open
// the next hop's body before it asks whether to follow).
func TestRedirectReleasesBody(t *testing.T) {
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(code)
		}))
		cfg := testConfig(agent.URL)
		returned := make(chan []byte, 1)
		cfg.PutBuf = func(b []byte) { returned <- b }
		obs := &counting{}
		c := New(context.Background(), cfg, obs)
		done := make(chan error, 1)
		c.Send(&Payload{Body: []byte("0123456789"), Hits: 1, Waiter: NewWaiter(done, 1, nil)})
		<-done
		select {
		case b := <-returned:
			if string(b) != "0123456789" {
				t.Errorf("%d: PutBuf got %q", code, b)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%d: the body never went back to PutBuf (dropped %d)", code, obs.dropped)
		}
		c.Close()
		agent.Close()
	}
}

func TestParseURL(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		raw, base, sock string
		ok              bool
	}{
		{"http://127.0.0.1:8126", "http://127.0.0.1:8126", "", true},
		{"http://agent:8126/", "http://agent:8126", "", true},
		{"http://user:pw@agent:8126", "http://user:pw@agent:8126", "", true}, // sent as Basic authorization
		{"unix:///var/run/datadog/apm.socket", "http://localhost", "/var/run/datadog/apm.socket", true},
		{"unix://", "", "", false},
		{"unix://var/run/datadog/apm.socket", "", "", false}, // two slashes: "var" is a host
		{"unix://localhost/var/run/datadog/apm.socket", "http://localhost", "/var/run/datadog/apm.socket", true},
		{"http://", "", "", false},
		{"ftp://x", "", "", false},
		{"unix:///" + strings.Repeat("s", dgram.MaxUnixPath), "", "", false}, // too long for a socket
		{"unix:///" + strings.Repeat("s", dgram.MaxUnixPath-1), "http://localhost", "/" + strings.Repeat("s", dgram.MaxUnixPath-1), true},
		{"http://[fe80::1%25lo]:8126", "http://[fe80::1%25lo]:8126", "", true}, // the zone stays escaped
		{"http://localhost:99999", "", "", false},
		{"http://localhost:0", "", "", false},
		{"http://localhost:80a", "", "", false},
		// url.Parse cuts a path at "?" and "#": refused, not addressed by
		// the part before; escaped, they belong to the path.
		{"unix:///var/run/apm#1.socket", "", "", false},
		{"unix:///var/run/apm?.socket", "", "", false},
		{"unix:///var/run/apm?", "", "", false},
		{"unix:///var/run/apm%231.socket", "http://localhost", "/var/run/apm#1.socket", true},
		{"unix:///var/run/apm.socket#", "", "", false}, // url.Parse drops the empty fragment
		// Relative: url.Parse leaves it escaped; made absolute now, so a
		// chdir before a later dial does not change the socket.
		{"unix:apm%231.socket", "http://localhost", filepath.Join(cwd, "apm#1.socket"), true},
		{"unix:apm%zz.socket", "", "", false},
	} {
		ep, err := ParseURL(tc.raw)
		if (err == nil) != tc.ok || ep.Base != tc.base || ep.UnixSocket != tc.sock {
			t.Errorf("ParseURL(%q) = %+v, %v", tc.raw, ep, err)
		}
		if _, perr := url.Parse(ep.Base + StatsPath); tc.ok && perr != nil {
			t.Errorf("ParseURL(%q): a request URL on its Base does not parse: %v", tc.raw, perr)
		}
	}
}

// TestParseURLWithoutScheme: a bare host:port or socket path (as
// DD_AGENT_HOST is written) is refused saying the scheme is missing, with
// the password hidden.
func TestParseURLWithoutScheme(t *testing.T) {
	for _, raw := range []string{"localhost:8126", "127.0.0.1:8126", "/var/run/datadog/apm.socket", "user:pw9@agent:8126"} {
		_, err := ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), "has no scheme: write http://host:port or unix:///") ||
			strings.Contains(err.Error(), "pw9") {
			t.Errorf("ParseURL(%q) = %v; want an error saying the scheme is missing, without the password", raw, err)
		}
	}
}

// TestRedact: a password is hidden whether the URL parses or not, and
// nothing else changes: a URL without one is returned as is.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"http://user:pw@agent:8126", "http://user:xxxxx@agent:8126"},
		// A user name with no password is the credential (a token sent
		// as Basic authorization's user): hidden.
		{"http://s3cretToken@agent:8126", "http://xxxxx@agent:8126"},
		{"https://s3cretToken:@agent:8126", "https://xxxxx@agent:8126"},
		{"http://agent:8126", "http://agent:8126"},
		{"unix:///tmp/a@b.sock", "unix:///tmp/a@b.sock"},
		{"http://user:pw@bad host:8126", "http://xxxxx@bad host:8126"},
		{"http://user:p@w@[::1:8126", "http://xxxxx@[::1:8126"},
		{"user:pw@bad host", "user:xxxxx@bad host"},
		{"http://bad host", "http://bad host"},
		// An "@" with nothing before it hides nothing: the URL is quoted
		// as given (a relay's abstract name, refused by stats.New).
		{"unixgram:@relay", "unixgram:@relay"},
		{"http://@bad host", "http://@bad host"},
		// A password with an unescaped "/" or "#" leaves its rest in the
		// path or fragment: hidden too.
		{"http://user:2024/pw@agent:8126", "http://xxxxx@agent:8126"},
		{"http://user:1234#pw@agent:8126", "http://xxxxx@agent:8126"},
	} {
		if got := Redact(tc.raw); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
	for _, raw := range []string{"http://user:pw9@bad host:8126", "http://user:pw9@agent:99999", "ftp://user:pw9@agent",
		"http://user:2024/pw9@agent:8126", "http://user:1234#pw9@agent:8126", "http://user:1234?pw9@agent:8126"} {
		if _, err := ParseURL(raw); err == nil || strings.Contains(err.Error(), "pw9") {
			t.Errorf("ParseURL(%q) = %v; want an error without the password", raw, err)
		}
	}
}

// TestErrorsHideUserOnlyCredential: the errors of a request and of an
// /info read, which reach Health and the logs, hide a user name that is
// the credential, as Redact does: net/http's own mask a password only.
func TestErrorsHideUserOnlyCredential(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: every request fails
	for _, url := range []string{"http://s3cretToken@" + addr, "http://user:s3cretToken@" + addr} {
		obs := &counting{}
		cfg := testConfig(url)
		cfg.MaxRetries = 0
		c := New(context.Background(), cfg, obs)
		c.ReadInfo()
		c.Send(&Payload{Body: []byte{0x80}, Hits: 1})
		c.Close()
		if obs.lastInfoErr == nil || obs.lastErr == nil {
			t.Fatalf("%s: /info error %v, request error %v; want both", url, obs.lastInfoErr, obs.lastErr)
		}
		for _, e := range []error{obs.lastInfoErr, obs.lastErr} {
			if strings.Contains(e.Error(), "s3cretToken") || !strings.Contains(e.Error(), "xxxxx@"+addr) {
				t.Errorf("%s: error %q; want the credential hidden, the address kept", url, e)
			}
		}
	}
}

// TestHTTPURLWithQueryRefused: a query or fragment in an http(s) agent URL
// would be dropped without a word; refused, with what to write.
func TestHTTPURLWithQueryRefused(t *testing.T) {
	for _, raw := range []string{"http://agent:8126?x=1", "http://agent:8126/?", "https://agent:8126#top", "http://agent:8126/a@b"} {
		if e, err := ParseURL(raw); err == nil || !strings.Contains(err.Error(), "no query or fragment") {
			t.Errorf("ParseURL(%q) = %+v, %v; want the no-query error", raw, e, err)
		}
	}
	if e, err := ParseURL("http://user:p%2Fw%23@agent:8126/"); err != nil || e.Base != "http://user:p%2Fw%23@agent:8126" {
		t.Errorf("an escaped password: %+v, %v", e, err)
	}
}

// TestAgentErrorText: an answer without a body reads "agent answered 404",
// not "agent answered 404: " with nothing after the colon.
func TestAgentErrorText(t *testing.T) {
	for e, want := range map[*AgentError]string{
		{StatusCode: 404}:                   "agent answered 404",
		{StatusCode: 400, Body: "bad msgp"}: "agent answered 400: bad msgp",
	} {
		if got := e.Error(); got != want {
			t.Errorf("%+v: %q, want %q", *e, got, want)
		}
	}
}

// TestUnixURLToDatagramSocket: an agent URL unix:// naming a datagram
// socket (statsrelay's, or DogStatsD's dsd.socket) fails every request:
// the error the payload is dropped with says which scheme is for which
// socket, as the relay side does for the opposite mistake, and keeps the
// errno for errors.Is.
func TestUnixURLToDatagramSocket(t *testing.T) {
	sock := sockdir.Path(t, "relay.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig("unix://" + sock)
	cfg.MaxRetries = 0
	obs := &counting{}
	c := New(context.Background(), cfg, obs)
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: []byte{0x80}, Hits: 2, Waiter: NewWaiter(done, 1, nil)})
	err = <-done
	if obs.failed != 1 || obs.dropped != 1 || !errors.Is(err, syscall.EPROTOTYPE) ||
		!strings.Contains(err.Error(), "unixgram://") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("failed %d, dropped %d, outcome %v; want 1, 1 and an EPROTOTYPE error naming %s and unixgram://",
			obs.failed, obs.dropped, err, sock)
	}
}

// TestStatsHeaders: the DESIGN §7 headers carry the payload's identity,
// and an unknown value is left out rather than sent empty, so the agent
// never tags a payload with an empty container or entity.
func TestStatsHeaders(t *testing.T) {
	for _, tc := range []struct {
		h    Headers
		want map[string]string // header → value; "" means absent
	}{
		{Headers{Lang: "go", LangVersion: "go1.26", TracerVersion: "v9", ContainerID: "cid", EntityID: "ci-cid"},
			map[string]string{"Datadog-Meta-Lang": "go", "Datadog-Meta-Lang-Version": "go1.26",
				"Datadog-Meta-Tracer-Version": "v9", "Datadog-Container-ID": "cid", "Datadog-Entity-ID": "ci-cid"}},
		{Headers{Lang: "go", TracerVersion: "v9"},
			map[string]string{"Datadog-Meta-Lang": "go", "Datadog-Meta-Lang-Version": "",
				"Datadog-Meta-Tracer-Version": "v9", "Datadog-Container-ID": "", "Datadog-Entity-ID": ""}},
	} {
		got := make(chan http.Header, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == StatsPath {
				got <- r.Header.Clone()
			}
		}))
		c := New(context.Background(), testConfig(srv.URL), &counting{})
		done := make(chan error, 1)
		h := tc.h
		c.Send(&Payload{Body: []byte{0x80}, Hits: 1, Headers: &h, Waiter: NewWaiter(done, 1, nil)})
		if err := <-done; err != nil {
			t.Fatalf("%+v: send: %v", tc.h, err)
		}
		c.Close()
		srv.Close()
		hd := <-got
		if ct := hd.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/msgpack" {
			t.Errorf("%+v: Content-Type %q, want application/msgpack", tc.h, ct)
		}
		for k, v := range tc.want {
			vs := hd.Values(k)
			if v == "" && len(vs) != 0 || v != "" && (len(vs) != 1 || vs[0] != v) {
				t.Errorf("%+v: header %s = %q, want %q", tc.h, k, vs, v)
			}
		}
	}
}

// TestRetryableAnswers: DESIGN §7 makes 408 and 5xx retryable (429 too, as
// the tracers do): one such answer, then 200, delivers the payload once
// after one retry, nothing dropped.
func TestRetryableAnswers(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		var posts atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == StatsPath && posts.Add(1) == 1 {
				w.WriteHeader(code)
			}
		}))
		obs := &counting{}
		c := New(context.Background(), testConfig(srv.URL), obs)
		done := make(chan error, 1)
		c.Send(&Payload{Body: []byte{0x80}, Hits: 5, Waiter: NewWaiter(done, 1, nil)})
		for obs.sent == 0 && obs.dropped == 0 { // the owner's loop: run the retry when due
			d, ok := c.NextDue()
			if !ok {
				break
			}
			time.Sleep(time.Until(d))
			c.RunDue(time.Now())
		}
		var err error
		select {
		case err = <-done:
		default:
			err = errors.New("no outcome")
		}
		c.Close()
		srv.Close()
		if err != nil || posts.Load() != 2 || obs.failed != 1 || obs.retried != 1 || obs.sent != 1 || obs.dropped != 0 {
			t.Errorf("%d then 200: outcome %v, %d posts, failed %d retried %d sent %d dropped %d; want nil, 2, 1 1 1 0",
				code, err, posts.Load(), obs.failed, obs.retried, obs.sent, obs.dropped)
		}
	}
}

// TestParseURLErrorsHideThePassword: a password holding "/", "?" or "#"
// ends the host early and url.Parse's message quotes what follows (the
// password as a port); ParseURL's error shows neither, and says how to
// write it.
func TestParseURLErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{"http://user:s3cret/x@host:8126", "http://user:s3cret?x@host:8126",
		"http://user:s3cret#x@host:8126", "http://user:s3cret@host:99999", "http://user:s3cret@[::1:8126",
		"http://user:s3cr%zzet@host:8126", "unix://user:s3cret@host/x.sock"} {
		_, err := ParseURL(raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) = %v: want an error without the password", raw, err)
		}
	}
	if _, err := ParseURL("http://user:s3cret/x@host:8126"); err == nil || !strings.Contains(err.Error(), "%2F") {
		t.Errorf("error %v: want it to say how to escape the password", err)
	}
}

// TestAgentErrorBodyPrintable: the start of an agent's (or a proxy's)
// answer kept for Health and the log has its invalid UTF-8 and control
// characters replaced, so that neither carries NULs or terminal escapes.
func TestAgentErrorBodyPrintable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == StatsPath {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte("bad\x00msgp \xff\x1b[31mred é"))
		}
	}))
	defer srv.Close()
	c := New(context.Background(), testConfig(srv.URL), &counting{})
	defer c.Close()
	done := make(chan error, 1)
	c.Send(&Payload{Body: []byte{0x80}, Hits: 5, Waiter: NewWaiter(done, 1, nil)})
	var ae *AgentError
	if err := <-done; !errors.As(err, &ae) || ae.Body != "bad?msgp ??[31mred é" {
		t.Fatalf("outcome %v; want an AgentError with body %q", err, "bad?msgp ??[31mred é")
	}
}
