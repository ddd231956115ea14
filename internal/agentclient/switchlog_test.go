package agentclient

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSwitchLogRateLimit: the first switch of each kind logs at once;
// more within a minute log nothing; the next line, a minute on, counts
// every switch since the previous one. Off and on wait independently.
func TestSwitchLogRateLimit(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l SwitchLog
	lines := func() []string {
		out := strings.Split(strings.TrimSpace(buf.String()), "\n")
		buf.Reset()
		if out[0] == "" {
			return nil
		}
		return out
	}
	for range 5 {
		l.Log(log, false, slog.LevelWarn, "off")
		l.Log(log, true, slog.LevelInfo, "on")
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "level=WARN msg=off") || strings.Contains(got[0], "switches") ||
		!strings.Contains(got[1], "level=INFO msg=on") {
		t.Fatalf("five flaps logged %q, want one off and one on line", got)
	}
	l.last[1] = l.last[1].Add(-SwitchLogEvery) // the on line's minute is over; the off line's is not
	l.Log(log, false, slog.LevelWarn, "off")
	l.Log(log, true, slog.LevelInfo, "on")
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "msg=on switches=5 since=1m0s") {
		t.Fatalf("a minute on, logged %q; want one on line counting the 4 held and this one", got)
	}
	if l.count[0] != 5 || l.count[1] != 0 || time.Since(l.last[1]) > time.Second {
		t.Fatalf("counts %v, last on %v", l.count, l.last[1])
	}
}
