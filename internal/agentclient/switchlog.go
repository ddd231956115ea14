// This file keeps the log of the agent going off and coming back to a line
// of each kind a minute, however often it flaps.

package agentclient

import (
	"context"
	"log/slog"
	"time"
)

// SwitchLogEvery is the least time between two SwitchLog lines of one kind.
const SwitchLogEvery = time.Minute

// SwitchLog logs an Observer's Off and On switches: the first of each kind
// at once, then at most one line of that kind per SwitchLogEvery, saying
// how many switches it covers. An agent answering 404 while its /info
// lists the stats endpoint flaps off and on at every /info poll, which
// would otherwise log two lines per poll for as long as it lasts. Its zero
// value is ready; it is for the goroutine driving the Client.
type SwitchLog struct {
	last  [2]time.Time
	count [2]int
}

// Log notes a switch (on: the agent is back) and logs msg at level when
// the kind's previous line is SwitchLogEvery old or more.
func (l *SwitchLog) Log(log *slog.Logger, on bool, level slog.Level, msg string) {
	k := 0
	if on {
		k = 1
	}
	l.count[k]++
	now := time.Now()
	if !l.last[k].IsZero() && now.Sub(l.last[k]) < SwitchLogEvery {
		return
	}
	if l.count[k] > 1 {
		log.Log(context.Background(), level, msg, "switches", l.count[k], "since", now.Sub(l.last[k]).Round(time.Second))
	} else {
		log.Log(context.Background(), level, msg)
	}
	l.last[k], l.count[k] = now, 0
}
