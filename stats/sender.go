package stats

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// StatsPath is the agent endpoint for client-side stats.
const StatsPath = "/v0.6/stats"

// AgentError is returned (by Flush) when the agent answers a payload with a
// non-2xx status.
type AgentError struct {
	StatusCode int
	Body       string // the start of the answer, for the log
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("stats: agent answered %d: %s", e.StatusCode, e.Body)
}

func newHTTPClient(ep endpoint, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil, // the agent is local; never route stats through a proxy
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if ep.unixSocket != "" {
		sock := ep.unixSocket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		tr.DialContext = d.DialContext
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// send is the sender goroutine: it posts each report's payloads in order and
// answers the waiting Flush or Stop, if any.
func (a *Aggregator) send() {
	defer close(a.senderDone)
	defer a.client.CloseIdleConnections()
	for r := range a.sendCh {
		var first error
		for _, p := range r.parts {
			if err := a.post(p); err != nil && first == nil {
				first = err
			}
			a.putBuf(p.body)
		}
		if r.done != nil {
			r.done <- first
		}
	}
}

// post sends one payload and accounts for it.
func (a *Aggregator) post(p part) error {
	err := a.postOnce(p.body)
	if err != nil {
		a.c.payloadsFailed.Add(1)
		a.c.spansUnsent.Add(p.hits)
		return err
	}
	a.c.payloadsSent.Add(1)
	a.c.bytesSent.Add(uint64(len(p.body)))
	a.c.spansSent.Add(p.hits)
	return nil
}

func (a *Aggregator) postOnce(body []byte) error {
	req, err := http.NewRequestWithContext(a.sendCtx, http.MethodPost, a.ep.base+StatsPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	h := req.Header
	h.Set("Content-Type", "application/msgpack")
	h.Set("Datadog-Meta-Lang", a.cfg.Lang)
	h.Set("Datadog-Meta-Lang-Version", a.cfg.LangVersion)
	h.Set("Datadog-Meta-Tracer-Version", a.cfg.TracerVersion)
	if a.cfg.ContainerID != "" {
		h.Set("Datadog-Container-ID", a.cfg.ContainerID)
	}
	if a.cfg.EntityID != "" {
		h.Set("Datadog-Entity-ID", a.cfg.EntityID)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode/100 != 2 {
		return &AgentError{StatusCode: resp.StatusCode, Body: string(bytes.TrimSpace(msg))}
	}
	return nil
}
