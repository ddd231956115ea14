// This file tests what -demo prints and when it ends.

package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
)

// TestDemoOutputShape: the demo publishes for its intervals and no longer
// (its summary's "in <took>"), shows a counter line only under the tables
// of new requests (never two in a row: one per forward round, not one per
// tick), shows up to six keys per bucket (its six routes), and its senders
// reach the relay over both the Unix socket and UDP.
func TestDemoOutputShape(t *testing.T) {
	const iv, n = time.Second, 2
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, iv, n); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	m := regexp.MustCompile(`Publish called \d+ times in (\S+) `).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no summary:\n%s", s)
	}
	took, err := time.ParseDuration(m[1])
	// Publishing stops at n intervals; generous for a loaded host, yet
	// under n+1 intervals.
	if err != nil || took < n*iv || took >= n*iv+900*time.Millisecond {
		t.Fatalf("published for %s (%v), want %s and not an interval more:\n%s", m[1], err, n*iv, s)
	}
	prev := ""
	rows, maxRows, tables := 0, 0, 0
	routeRow := regexp.MustCompile(`^\s*web-store\s+(GET|POST) /`)
	for _, l := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(l, "relay: "):
			if prev == "relay" {
				t.Fatalf("two counter lines with no table between:\n%s", s)
			}
			prev = "relay"
		case strings.HasPrefix(l, "bucket "):
			prev, rows = "bucket", 0
			tables++
		case routeRow.MatchString(l):
			rows++
			maxRows = max(maxRows, rows)
			if rows > 6 {
				t.Fatalf("a table of more than 6 rows:\n%s", s)
			}
		}
	}
	if tables == 0 || maxRows != 6 {
		t.Fatalf("%d tables, at most %d rows in one; want the six routes shown in a bucket:\n%s", tables, maxRows, s)
	}
	last := regexp.MustCompile(`relay: datagrams unix (\d+) udp (\d+),`).FindAllStringSubmatch(s, -1)
	if len(last) == 0 {
		t.Fatalf("no counter line:\n%s", s)
	}
	if u, _ := strconv.Atoi(last[len(last)-1][1]); u == 0 || last[len(last)-1][2] == "0" {
		t.Fatalf("last counter line %q: want datagrams over both the Unix socket and UDP", last[len(last)-1][0])
	}
}

// TestPrintCountersByTransport: the counter line gives each transport's
// datagrams under its own name, and the drops and rejects by reason,
// sorted, zeros left out ("none" when all are).
func TestPrintCountersByTransport(t *testing.T) {
	var st relay.Stats
	st.Datagrams[relay.Unix], st.Datagrams[relay.UDP] = 7, 3
	st.SpansReceived, st.SpansForwarded, st.SpansPending = 10, 6, 1
	st.SpansDropped = map[string]uint64{"stopped": 2, "agent_off": 1, "max_groups": 0}
	var out bytes.Buffer
	printCounters(&out, st)
	want := "relay: datagrams unix 7 udp 3, rejected none, spans received 10 forwarded 6 (late 0) pending 1 dropped agent_off 1, stopped 2, groups 0, senders 0\n"
	if out.String() != want {
		t.Fatalf("counter line\n%q\nwant\n%q", out.String(), want)
	}
	for _, tc := range []struct {
		counts map[string]uint64
		want   string
	}{
		{nil, "none"},
		{map[string]uint64{"a": 0, "b": 0}, "none"},
		{map[string]uint64{"e": 5, "d": 4, "c": 0, "b": 2, "a": 1, "f": 6}, "a 1, b 2, d 4, e 5, f 6"},
	} {
		if got := byReason(tc.counts); got != tc.want {
			t.Errorf("byReason(%v) = %q, want %q", tc.counts, got, tc.want)
		}
	}
}

// TestBinaryDemoRunsFiveOneSecondIntervals: "go run ./cmd/statsrelay -demo
// ... stops by itself in ~5 s" (README): its first line says 5 intervals of
// 1s, and it exits 0 by itself.
func TestBinaryDemoRunsFiveOneSecondIntervals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+`=["-demo"]`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	sc.Scan()
	first := sc.Text()
	for sc.Scan() {
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("-demo: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("-demo still running after 60 s")
	}
	if !strings.Contains(first, " for 5 intervals of 1s") {
		t.Fatalf("first line %q: want 5 intervals of 1s", first)
	}
}
