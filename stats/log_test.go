// This file tests the rate-limited log of trouble and the lines logged when
// no agent listens or the environment is bad.

package stats

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination the sender writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for s := range strings.Lines(l.b.String()) {
		out = append(out, s)
	}
	return out
}

func textLogger() (*slog.Logger, *lockedBuffer) {
	var buf lockedBuffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

// TestTroubleLogRateLimit: the first growth of a kind is logged at once;
// more within the minute is held and counted; the next line, a minute
// later, carries the count since the previous one; a final check logs
// what is pending without waiting; a kind that did not grow says nothing.
func TestTroubleLogRateLimit(t *testing.T) {
	log, buf := textLogger()
	l := newTroubleLog(log)
	t0 := time.Unix(1000, 0)
	l.check(Health{PayloadsFailed: 2, LastSendError: errors.New("connection refused")}, t0, false)
	if got := buf.lines(); len(got) != 1 || !strings.Contains(got[0], "attempts=2") || !strings.Contains(got[0], `last_error="connection refused"`) {
		t.Fatalf("first failure: logged %q", got)
	}
	l.check(Health{PayloadsFailed: 5}, t0.Add(10*time.Second), false)
	l.check(Health{PayloadsFailed: 9}, t0.Add(50*time.Second), false)
	if got := buf.lines(); len(got) != 1 {
		t.Fatalf("within the minute: %d lines, want still 1: %q", len(got), got)
	}
	if due, ok := l.due(); !ok || !due.Equal(t0.Add(time.Minute)) {
		t.Fatalf("due = %v %v, want a minute after the first line", due, ok)
	}
	l.check(Health{PayloadsFailed: 9}, t0.Add(61*time.Second), false)
	got := buf.lines()
	if len(got) != 2 || !strings.Contains(got[1], "attempts=7") || !strings.Contains(got[1], "since=") {
		t.Fatalf("after the minute: logged %q, want a second line with the 7 since the first", got)
	}
	if _, ok := l.due(); ok {
		t.Fatal("due with nothing pending")
	}
	l.check(Health{PayloadsFailed: 10, PayloadsDropped: 1, SpansUnsent: 40, InboxFull: 3}, t0.Add(62*time.Second), true)
	got = buf.lines()[2:]
	if len(got) != 3 || !strings.Contains(got[0], "attempts=1") || !strings.Contains(got[1], "payloads=1 spans=40") ||
		!strings.Contains(got[2], "spans=3") {
		t.Fatalf("final check logged %q, want failed 1, dropped 1 (40 spans), shed 3", got)
	}
}

// TestNoAgentIsLogged: with nothing listening where the agent should be,
// Stop still returns, and the log says that sending failed and payloads
// were dropped, with the dial error; Health carries it and its time.
func TestNoAgentIsLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	log, buf := textLogger()
	start := time.Now()
	a := newStarted(t, fastRetries(Config{AgentURL: "http://" + addr, MaxRetries: 1, Logger: log}))
	publishN(a, 4, "r")
	stop(t, a)
	h := a.Health()
	var op *net.OpError
	if !errors.As(h.LastSendError, &op) || h.LastSendErrorAt.Before(start) || h.LastSendErrorAt.After(time.Now()) {
		t.Fatalf("LastSendError %v at %v: want the dial error, timed during the test", h.LastSendError, h.LastSendErrorAt)
	}
	text := strings.Join(buf.lines(), "")
	for _, want := range []string{"sending stats failed", "attempts=1", "stats payloads dropped", "payloads=1 spans=4", "connection refused"} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %q:\n%s", want, text)
		}
	}
}

// TestBadEnvironmentIsLogged: New logs a configuration fallback through
// Config.Logger. (Checked before Stop, which starts the sender: with no
// agent at the default address, that logs /info and sending failures.)
func TestBadEnvironmentIsLogged(t *testing.T) {
	t.Setenv(EnvAgentPort, "nope")
	log, buf := textLogger()
	a, err := New(Config{Logger: log, AgentURL: ""})
	if err != nil {
		t.Fatal(err)
	}
	got := buf.lines()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.Stop(ctx)
	if len(got) != 1 || !strings.Contains(got[0], EnvAgentPort) {
		t.Fatalf("logged %q, want one warning about %s", got, EnvAgentPort)
	}
}

// TestShedLineNamesCauses: spans dropped at a full inbox and spans that
// could not be aggregated (Health.AggregateDropped) are named apart, and
// the second alone is not blamed on a full inbox.
func TestShedLineNamesCauses(t *testing.T) {
	log, buf := textLogger()
	l := newTroubleLog(log)
	t0 := time.Unix(1000, 0)
	l.check(Health{InboxFull: 4, AggregateDropped: 2}, t0, false)
	l.check(Health{InboxFull: 4, AggregateDropped: 5}, t0.Add(2*time.Minute), false)
	got := buf.lines()
	if len(got) != 2 || !strings.Contains(got[0], "inbox full") || !strings.Contains(got[0], "spans=4 not_aggregatable=2") ||
		strings.Contains(got[1], "inbox full") || !strings.Contains(got[1], "could not be aggregated") || !strings.Contains(got[1], "not_aggregatable=3") {
		t.Fatalf("logged %q", got)
	}
}
