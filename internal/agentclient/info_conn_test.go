// This file tests that polling /info reuses one connection to the agent
// rather than opening one per poll.

package agentclient

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// countingListener counts the connections a server accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestInfoKeepsItsConnection: /info is polled at up to InfoRefresh for as
// long as the agent is off, /info fails, or (the relay) every few minutes:
// whatever it answers — an old agent's 404, a 503 with a body, JSON with
// whitespace after it — the answer is read to its end, so the polls reuse
// one connection rather than opening (and leaving in TIME_WAIT) one each.
func TestInfoKeepsItsConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
	}{
		{"404", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "404 page not found", http.StatusNotFound)
		}},
		{"503", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}},
		{"200 with trailing space", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"endpoints":["/v0.6/stats"]}`+strings.Repeat(" \n", 4096))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(tc.answer))
			ln := &countingListener{Listener: srv.Listener}
			srv.Listener = ln
			srv.Start()
			defer srv.Close()
			obs := &counting{}
			c := New(context.Background(), testConfig(srv.URL), obs)
			defer c.Close()
			for range 3 {
				c.ReadInfo()
			}
			if obs.info+obs.infoFailed != 3 {
				t.Fatalf("%d reads and %d failures told, want 3 in all", obs.info, obs.infoFailed)
			}
			if n := ln.accepted.Load(); n != 1 {
				t.Fatalf("3 polls of /info opened %d connections, want 1", n)
			}
		})
	}
}
