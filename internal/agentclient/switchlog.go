// This file keeps the log of the agent going off and coming back to a line
// a minute, however often it flaps, the last line telling its state.

package agentclient

import (
	"context"
	"log/slog"
	"time"
)

// SwitchLogEvery is the least time between two SwitchLog lines.
const SwitchLogEvery = time.Minute

// SwitchLog logs an Observer's Off and On switches: the first at once,
// then at most one line per SwitchLogEvery, the current state's, saying
// how many switches it covers. An agent answering 404 while its /info
// lists the stats endpoint flaps off and on at every /info poll, which
// would otherwise log two lines per poll for as long as it lasts. What is
// held back is logged by Check once the minute is over, so the last line
// always tells the agent's state. Its zero value is ready; it is for the
// goroutine driving the Client.
type SwitchLog struct {
	last  time.Time
	count int // switches since the last line
	msg   string
	level slog.Level
}

// Log notes a switch to the state msg tells (logged at level) and logs it
// unless a line was logged less than SwitchLogEvery ago.
func (l *SwitchLog) Log(log *slog.Logger, level slog.Level, msg string) {
	l.count++
	l.msg, l.level = msg, level
	l.Check(log, false)
}

// Check logs the current state if switches were held back and the minute
// is over, or, with final, whatever the time. The owner calls it now and
// then (after each report or forward round) and once as it stops.
func (l *SwitchLog) Check(log *slog.Logger, final bool) {
	now := time.Now()
	if l.count == 0 || !final && !l.last.IsZero() && now.Sub(l.last) < SwitchLogEvery {
		return
	}
	if l.last.IsZero() {
		log.Log(context.Background(), l.level, l.msg)
	} else {
		log.Log(context.Background(), l.level, l.msg, "switches", l.count, "since", now.Sub(l.last).Round(time.Second))
	}
	l.last, l.count = now, 0
}
