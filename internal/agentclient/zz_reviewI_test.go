package agentclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// ZZInfoPollNoJitter: the /info polls while the agent is off back off
// (RetryBackoff doubled up to InfoRefresh) without jitter, and the held
// payloads' retries are pinned to them (later(due, infoDue)): clients that
// meet the 404 together poll and retry together, in lockstep.
func TestZZInfoPollNoJitter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == InfoPath {
			_, _ = w.Write([]byte(`{"endpoints":[]}`))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.RetryBackoff, cfg.InfoRefresh = 100*time.Millisecond, 10*time.Second
	var lo, hi time.Duration = time.Hour, 0
	var rlo, rhi time.Duration = time.Hour, 0
	for range 20 {
		c := New(context.Background(), cfg, &counting{})
		c.Send(&Payload{Body: []byte{0x80}, Hits: 1})
		now := time.Now()
		// Two more polls that find it off: 100, 200, 400 ms.
		for range 2 {
			c.ReadInfo()
		}
		d := c.infoDue.Sub(now)
		lo, hi = min(lo, d), max(hi, d)
		r := c.retries[0].due.Sub(now)
		rlo, rhi = min(rlo, r), max(rhi, r)
		c.Close()
	}
	t.Logf("third /info poll after %s..%s; held retry after %s..%s (20 clients)", lo, hi, rlo, rhi)
	if hi-lo < 20*time.Millisecond {
		t.Fatalf("/info poll waits spread over %s only: no jitter in the backoff (held retry spread %s)", hi-lo, rhi-rlo)
	}
}
