// This file tests the rate limit of the log of the agent going off and
// coming back.

package agentclient

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestSwitchLogRateLimit: the first switch logs at once; more within a
// minute log nothing; Check logs the current state, counting the switches
// held, once the minute is over, or at once when final; the last line is
// always the agent's state.
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
	l.Log(log, slog.LevelWarn, "off")
	for range 4 {
		l.Log(log, slog.LevelInfo, "on")
		l.Log(log, slog.LevelWarn, "off")
	}
	l.Check(log, false)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=WARN msg=off") || strings.Contains(got[0], "switches") {
		t.Fatalf("nine switches within a minute logged %q, want the first alone", got)
	}
	l.last = l.last.Add(-SwitchLogEvery) // the minute is over
	l.Check(log, false)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=WARN msg=off switches=8 since=1m0s") {
		t.Fatalf("a minute on, Check logged %q; want the state (off) and the 8 switches held", got)
	}
	l.Check(log, false)
	if got := lines(); got != nil {
		t.Fatalf("nothing held, Check logged %q", got)
	}
	l.Log(log, slog.LevelInfo, "on") // within the minute: held
	if got := lines(); got != nil {
		t.Fatalf("a switch within the minute logged %q", got)
	}
	l.Check(log, true)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=INFO msg=on switches=1") {
		t.Fatalf("final Check logged %q; want the held switch back on", got)
	}
}
