// This file holds Agent, the loopback stand-in for the Datadog agent that
// the benchmarks send to: it counts payloads and never decodes them.

package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// DefaultPeerTagKeys is what Agent advertises in /info unless told
// otherwise: the peer-tag keys the workloads use. The peer module passes the
// real agent's default list instead, to both implementations.
var DefaultPeerTagKeys = []string{"db.system", "out.host", "peer.hostname", "peer.service"}

// Agent is a loopback stand-in for the Datadog agent. GET /info advertises
// /v0.6/stats and the peer-tag keys; POST /v0.6/stats reads the body,
// counts it and answers 200. It does not decode payloads: that would add
// its CPU to the implementation's in the per-span figures.
//
// Safe for concurrent use.
type Agent struct {
	srv      *httptest.Server
	info     []byte
	payloads atomic.Uint64
	bytes    atomic.Uint64
}

// NewAgent starts an agent on a loopback port advertising peerTagKeys
// (DefaultPeerTagKeys when nil).
func NewAgent(peerTagKeys []string) *Agent {
	if peerTagKeys == nil {
		peerTagKeys = DefaultPeerTagKeys
	}
	info, err := json.Marshal(map[string]any{
		"version":   "7.99.0-bench",
		"endpoints": []string{"/v0.4/traces", "/v0.6/stats", "/info"},
		"peer_tags": peerTagKeys,
	})
	if err != nil {
		panic("BUG: bench: encoding /info: " + err.Error())
	}
	a := &Agent{info: info}
	m := http.NewServeMux()
	m.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(a.info)
	})
	m.HandleFunc("POST /v0.6/stats", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		a.payloads.Add(1)
		a.bytes.Add(uint64(n))
		_, _ = io.WriteString(w, "OK\n")
	})
	a.srv = httptest.NewServer(m)
	return a
}

// URL is the agent's base URL.
func (a *Agent) URL() string { return a.srv.URL }

// Payloads is the number of stats payloads received.
func (a *Agent) Payloads() uint64 { return a.payloads.Load() }

// Bytes is the total size of the stats payloads received.
func (a *Agent) Bytes() uint64 { return a.bytes.Load() }

// Close stops the server and closes its connections.
func (a *Agent) Close() { a.srv.Close() }
