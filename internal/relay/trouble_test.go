// This file tests the relay's rate-limited log of trouble: its rate limit,
// and that the cause of a loss is not replaced by the stop's cancel.

package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestTroubleLogRateLimit: a kind's first growth is logged at once; growth
// within troubleEvery of its line waits and is summed into the next line,
// which says how long it covers; kinds wait independently; nothing new logs
// nothing; final logs what waits.
func TestTroubleLogRateLimit(t *testing.T) {
	var buf bytes.Buffer
	l := newTroubleLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})))
	t0 := time.Unix(1_700_000_000, 0)
	step := func(at time.Duration, final bool, c map[string]uint64) []string {
		buf.Reset()
		l.check(c, t0.Add(at), final)
		var out []string
		for line := range strings.Lines(buf.String()) {
			out = append(out, strings.TrimSpace(line))
		}
		return out
	}
	expect := func(got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("logged %q, want %d lines %q", got, len(want), want)
		}
		for i := range want {
			if !strings.HasSuffix(got[i], want[i]) {
				t.Fatalf("line %d %q, want it to end in %q", i, got[i], want[i])
			}
		}
	}
	expect(step(0, false, map[string]uint64{"dropped.retry_budget": 10, "rejected.malformed": 0}),
		"level=ERROR msg=\"statsrelay: spans dropped (statsrelay_spans_dropped_total)\" retry_budget=10")
	expect(step(10*time.Second, false, map[string]uint64{"dropped.retry_budget": 25, "rejected.malformed": 2}),
		" malformed=2") // dropped waits: its line was 10 s ago
	expect(step(20*time.Second, false, map[string]uint64{"dropped.retry_budget": 25, "rejected.malformed": 2}))
	expect(step(61*time.Second, false, map[string]uint64{"dropped.retry_budget": 30, "dropped.max_groups": 4, "rejected.malformed": 2}),
		" max_groups=4 retry_budget=20 since=1m1s")
	expect(step(70*time.Second, true, map[string]uint64{"dropped.retry_budget": 30, "dropped.max_groups": 4, "rejected.malformed": 3}),
		" malformed=1 since=1m0s") // final: the wait does not hold it
}

// TestTroubleLogKeepsTheCause: an attempt cut short by the stop's deadline
// (context canceled, wrapped as net/http wraps it) does not replace the
// error that made the earlier attempts fail: last_error says why requests
// failed, not that the relay stopped waiting. Alone, it is kept.
func TestTroubleLogKeepsTheCause(t *testing.T) {
	l := newTroubleLog(slog.New(slog.DiscardHandler))
	cause := errors.New(`Post "https://127.0.0.1:1/v0.6/stats": http: server gave HTTP response to HTTPS client`)
	canceled := &url.Error{Op: "Post", URL: "https://127.0.0.1:1/v0.6/stats", Err: context.Canceled}
	l.noteError("failed", cause)
	l.noteError("failed", canceled)
	if got := l.lastErr["failed"]; got != cause.Error() {
		t.Fatalf("last error %q after a canceled attempt; want the cause %q", got, cause)
	}
	delete(l.lastErr, "failed")
	l.noteError("failed", canceled)
	if got := l.lastErr["failed"]; got != canceled.Error() {
		t.Fatalf("last error %q; want the canceled attempt's %q when nothing else failed", got, canceled)
	}
}
