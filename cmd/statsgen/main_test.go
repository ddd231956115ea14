// This file tests statsgen as a user runs it: its flags and their checks,
// its rate, its output with its embedded agent and with an absent or
// refusing one, and Ctrl-C during Stop; TestMain can make the test binary
// statsgen itself.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/testenv"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// mainArgsEnv, when set, makes the test binary statsgen itself: it runs
// main with the command-line arguments the variable holds (a JSON list).
const mainArgsEnv = "STATSGEN_TEST_MAIN_ARGS"

// ignoreIntEnv, when set with mainArgsEnv, starts statsgen with SIGINT
// ignored, as a shell starts a script's background job.
const ignoreIntEnv = "STATSGEN_TEST_IGNORE_SIGINT"

func TestMain(m *testing.M) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		if os.Getenv(ignoreIntEnv) != "" {
			signal.Ignore(os.Interrupt)
		}
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, "bad", mainArgsEnv, err)
			os.Exit(3)
		}
		os.Args = append([]string{"statsgen"}, a...)
		main()
		os.Exit(0) // main returned: the binary's exit status
	}
	testenv.Clear() // the developer's DD_*, OTEL_* and SPANSTATS_* settings are not the tests'
	goleak.VerifyTestMain(m)
}

// TestBadFlagsExit2: a flag value statsgen refuses exits 2, as one the
// flag package cannot parse does, not 1, which says the run lost spans.
func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"-keys", "x"},   // the flag package's own refusal
		{"-keys", "0"},   // validate's
		{"-errors", "2"}, // validate's
		{"-interval", "1ms"},
		{"-agent", "ftp://localhost:8126"}, // stats.New's refusal, a bad flag too
	} {
		a, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(a))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), args[0]) {
			t.Errorf("%q: %v, said %q; want exit status 2 and a message naming %s", args, err, out, args[0])
		}
	}
}

// TestValidateNamesTheFlag: a count refused is named alone, with the value
// given, not in a list of three the reader must check one by one.
func TestValidateNamesTheFlag(t *testing.T) {
	good := options{rate: 1000, keys: 10, errRatio: 0.1, dist: "loguniform", minDur: time.Millisecond,
		maxDur: time.Second, producers: 2, run: time.Second, interval: time.Second, top: 5}
	if err := good.validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for _, tc := range []struct {
		set  func(o *options)
		want string
	}{
		{func(o *options) { o.keys = 0 }, "-keys must be > 0, got 0"},
		{func(o *options) { o.producers = -3 }, "-producers must be > 0, got -3"},
		{func(o *options) { o.top = 0 }, "-top must be > 0, got 0"},
		{func(o *options) { o.keys = 1_000_000_000 }, "-keys must be at most 1000000, got 1000000000"},
		{func(o *options) { o.producers = 100_000_000 }, "-producers must be at most 10000, got 100000000"},
		{func(o *options) { o.run = 0 }, "-run must be > 0, got 0s"},
		// Below minRate producers/rate is +Inf at 1e-320, the wait NaN.
		{func(o *options) { o.rate = 1e-320 }, "-rate must be 0 (as fast as possible) or in [1e-06, 1e+09]"},
		{func(o *options) { o.rate = -1 }, "-rate must be 0 (as fast as possible) or in [1e-06, 1e+09]"},
	} {
		o := good
		tc.set(&o)
		if err := o.validate(); err == nil || err.Error() != tc.want {
			t.Errorf("validate: %v, want %q", err, tc.want)
		}
	}
}

// TestRunEmbeddedAgent runs the generator end to end against its embedded
// fake agent and checks what it prints: per-interval tables of decoded
// groups with quantiles, and a final line where the agent's decoded hits
// equal the SDK's counted spans.
func TestRunEmbeddedAgent(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 20000, keys: 20, errRatio: 0.5, dist: "loguniform", minDur: 50 * time.Microsecond,
		maxDur: 2 * time.Second, producers: 4, run: 2300 * time.Millisecond, interval: time.Second, top: 5}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	if n := strings.Count(s, "\nbucket "); n < 2 {
		t.Fatalf("%d interval tables printed, want at least 2:\n%s", n, s)
	}
	if !strings.Contains(s, "service") || !strings.Contains(s, "p99") {
		t.Fatalf("no table header:\n%s", s)
	}
	m := regexp.MustCompile(`agent decoded (\d+) hits \(counted (\d+)\)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no final tally:\n%s", s)
	}
	hits, _ := strconv.Atoi(m[1])
	if m[1] != m[2] || hits < 1000 {
		t.Fatalf("agent decoded %s hits, counted %s; want equal and >= 1000", m[1], m[2])
	}
	// A 50 % error ratio shows in the tables' error column.
	if !regexp.MustCompile(`\s\d+\s+[1-9]\d*\s+\d`).MatchString(s) {
		t.Fatalf("no group with errors in the tables:\n%s", s)
	}
}

// TestRateIsTheTotal: -rate is what all producers publish together, also
// when each one's share is under a span per run: 8 spans a second from 8
// producers over 1 s publish 8 or 9 (the schedule's ends both inclusive),
// not 4 nor 0.
func TestRateIsTheTotal(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 8, keys: 4, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 8, run: time.Second, interval: time.Second, top: 1}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`done: published (\d+) =`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no final tally:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 8 || n > 9 {
		t.Fatalf("published %d at -rate 8 for 1s from 8 producers, want 8 or 9", n)
	}
}

// TestRateStringSaysTheRate: the start line shows -rate as given. A
// fraction of a span per second is a rate the schedule keeps
// (TestRateIsTheTotal); rounded to "0/s" it would read as no spans at all,
// or as -rate 0, which means as fast as possible.
func TestRateStringSaysTheRate(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want string
	}{
		{0, "unlimited"},
		{0.5, "0.5/s"},
		{2.5, "2.5/s"},
		{200_000, "200000/s"},
		{maxRate, "1000000000/s"},
	} {
		if got := rateString(tc.rate); got != tc.want {
			t.Errorf("rateString(%g) = %q, want %q", tc.rate, got, tc.want)
		}
	}
}

// TestStartLineSaysTheErrorShare: -errors 0.001 publishes errors, so the
// start line must not announce "0% errors" (nor 12.5% as "12%").
func TestStartLineSaysTheErrorShare(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  string
	}{{0.001, " 0.1% errors"}, {0.125, " 12.5% errors"}, {0.07, " 7% errors"}, {0.2, " 20% errors"}} {
		var out bytes.Buffer
		o := options{rate: 100, keys: 1, errRatio: tc.ratio, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
			producers: 1, run: 10 * time.Millisecond, interval: time.Second, top: 1}
		if err := run(o, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		if line, _, _ := strings.Cut(out.String()[strings.Index(out.String(), "publishing"):], "\n"); !strings.Contains(line, tc.want) {
			t.Errorf("-errors %g: start line %q, want it to say %q", tc.ratio, line, tc.want)
		}
	}
}

func TestValidateRejectsBadFlags(t *testing.T) {
	good := options{rate: 1, keys: 1, errRatio: 0, dist: "fixed", minDur: 1, maxDur: 1, producers: 1, run: 1, interval: time.Second, top: 1}
	if err := good.validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
	for name, mut := range map[string]func(*options){
		"keys":                             func(o *options) { o.keys = 0 },
		"errors":                           func(o *options) { o.errRatio = 1.5 },
		"min>max":                          func(o *options) { o.dist, o.minDur, o.maxDur = "uniform", 2, 1 },
		"min 0":                            func(o *options) { o.minDur = 0 },
		"dist":                             func(o *options) { o.dist = "normal" },
		"rate":                             func(o *options) { o.rate = -1 },
		"rate 1e30":                        func(o *options) { o.rate = 1e30 }, // the pacing would never count it down
		"rate NaN":                         func(o *options) { o.rate = math.NaN() },
		"interval":                         func(o *options) { o.interval = 0 },
		"interval under the SDK's minimum": func(o *options) { o.interval = time.Millisecond },
		"errors NaN":                       func(o *options) { o.errRatio = math.NaN() },
	} {
		o := good
		mut(&o)
		if o.validate() == nil {
			t.Errorf("%s: invalid options accepted", name)
		}
	}
	// -dist fixed uses -min alone: a -max below it is no error.
	o := good
	o.minDur, o.maxDur = 5*time.Second, 2*time.Second
	if err := o.validate(); err != nil {
		t.Errorf("-dist fixed -min 5s: %v", err)
	}
}

// TestRunExplainsFailures: against an agent that is not there, the output
// names the interval, gives spans per second, and says why sends fail.
func TestRunExplainsFailures(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 2000, keys: 5, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 1, run: 1200 * time.Millisecond, interval: time.Second, top: 1, agent: "http://127.0.0.1:1"}
	err := run(o, &out)
	s := out.String()
	// Nothing was delivered: the run fails, saying how much was lost.
	if err == nil || !strings.Contains(err.Error(), "counted spans were not delivered") {
		t.Errorf("run = %v, want an error for the undelivered spans", err)
	}
	for _, want := range []string{"interval 1s", "spans/s", "last send error", "connection refused", "unsent"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// TestRunFailsWhenAgentOff: an agent whose /info lists no stats endpoint
// takes nothing; the run fails saying so, and its final line accounts for
// every span published (agent-off among them).
func TestRunFailsWhenAgentOff(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
	var out bytes.Buffer
	o := options{rate: 2000, keys: 5, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 1, run: 1200 * time.Millisecond, interval: time.Second, top: 1, agent: ag.URL()}
	err := run(o, &out)
	if err == nil || !strings.Contains(err.Error(), "does not accept client stats") {
		t.Fatalf("run = %v, want the agent-off error:\n%s", err, out.String())
	}
	// The few spans counted before /info was read are cleared.
	m := regexp.MustCompile(`done: published (\d+) = counted (\d+) \+ ineligible 0 \+ inbox-full 0 \+ after-stop 0 \+ agent-off (\d+) .*\n.*counted \d+ = sent 0 \+ unsent 0 \+ cleared (\d+);`).
		FindStringSubmatch(out.String())
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	if m == nil || n[1] != n[2]+n[3] || n[3] == 0 || n[4] != n[2] {
		t.Fatalf("final lines do not put every span in agent-off or cleared:\n%s", out.String())
	}
}

// TestProducerBehindSeesTheEnd: a producer far behind its schedule (a
// -rate it cannot keep up with) still returns soon after its context ends,
// or -run and the first Ctrl-C would wait for the whole backlog.
func TestProducerBehindSeesTheEnd(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	agg, err := stats.New(stats.Config{AgentURL: ag.URL(), BucketInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	defer agg.Stop(context.Background())
	o := options{rate: maxRate, keys: 4, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond, producers: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// 10 s behind at 1e9 spans/s: 1e10 spans due at once.
	start := time.Now()
	produce(ctx, agg, o, 0, start.Add(-10*time.Second), resourceNames(o.keys))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("produce returned %s after it began, its context ended at 200ms", took)
	}
}

// TestStatusLineCollapsedAndOverflowed: a span over a cardinality budget
// that also finds the table full is in both CollapsedSpans and Overflowed;
// the status line prints each as it is, not their sum, which counted such
// a span twice and could exceed the spans counted.
func TestStatusLineCollapsedAndOverflowed(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	agg, err := stats.New(stats.Config{AgentURL: ag.URL(), MaxAggregates: 1,
		CardinalityLimits: aggregate.Limits{Resource: 1}})
	if err != nil {
		t.Fatal(err)
	}
	agg.Start()
	for i := range 5 {
		agg.Publish(&stats.Span{Service: "s", Name: "op", Resource: fmt.Sprint("r", i), SpanKind: "server", Duration: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := agg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h := agg.Health()
	if h.Counted != 5 || h.CollapsedSpans != 4 || h.Overflowed != 4 {
		t.Fatalf("counted %d collapsed %d overflowed %d, want 5, 4 (r1..r4 over the budget of 1), 4 (no room beside r0)",
			h.Counted, h.CollapsedSpans, h.Overflowed)
	}
	var out bytes.Buffer
	(&status{out: &out, last: time.Now()}).line(h)
	if s := out.String(); !strings.Contains(s, " counted 5 ") || !strings.Contains(s, " collapsed 4 overflowed 4 ") {
		t.Fatalf("status line %q: want counted 5, collapsed 4 and overflowed 4 apart", s)
	}
}

// TestBadAgentNamesTheFlagNotThePassword: an -agent stats.New refuses is
// named as the flag, with the password hidden as the SDK hides it.
func TestBadAgentNamesTheFlagNotThePassword(t *testing.T) {
	o := options{rate: 1, keys: 1, dist: "fixed", minDur: 1, maxDur: 1, producers: 1, run: time.Second,
		interval: time.Second, top: 1, agent: "http://user:secret@127.0.0.1:notaport"}
	err := run(o, io.Discard)
	if err == nil || !errors.Is(err, stats.ErrBadConfig) || !strings.HasPrefix(err.Error(), "-agent: ") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("run: %v; want an ErrBadConfig starting \"-agent: \" without the password", err)
	}
}

// TestSignalDuringStopEndsAtOnce: once -run is over, Stop may wait up to
// 10 s for an agent that does not answer; a Ctrl-C then must end the
// process at once, not be taken as a first "stop gracefully" signal that
// is already under way and silently swallowed. So too for a process
// started with SIGINT ignored (whatever this test process inherited),
// which the first SIGINT stops as well.
func TestSignalDuringStopEndsAtOnce(t *testing.T) {
	t.Run("default", func(t *testing.T) { signalDuringStop(t, false) })
	t.Run("ignored at start", func(t *testing.T) { signalDuringStop(t, true) })
}

func signalDuringStop(t *testing.T, ignoreInt bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	accepted := make(chan struct{})
	go func() { // an agent that takes requests and never answers
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	defer func() { ln.Close(); <-accepted }()
	a, _ := json.Marshal([]string{"-agent", "http://" + ln.Addr().String(), "-run", "300ms", "-rate", "100", "-interval", "1s"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(a))
	if ignoreInt {
		cmd.Env = append(cmd.Env, ignoreIntEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	var out strings.Builder // written by the reader until stdout closes, read after Wait
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !said && strings.HasPrefix(sc.Text(), "stopping: ") {
				said = true
				close(stopping)
			}
		}
	}()
	select {
	case <-stopping: // -run is over: Stop waits on the silent agent
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("no \"stopping: \" line within 30s")
	}
	time.Sleep(200 * time.Millisecond) // well inside Stop's 10 s
	sent := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { <-read; done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("exit status %d (%v) after an interrupted Stop, want 1:\n%s", code, err, out.String())
		}
		if took := time.Since(sent); took > 2*time.Second {
			t.Fatalf("ended %s after the interrupt, want at once", took)
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running 5s after an interrupt during Stop:\n%s", out.String())
	}
}

// TestStatusLineCountsThePayloadsShown: each status line is followed by
// the tables of the payloads the agent received; the line's "payloads
// sent" must count them, not lag behind the SDK's bookkeeping of the
// agent's answer ("payloads sent 0" above "payload #1").
func TestStatusLineCountsThePayloadsShown(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 2000, keys: 5, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 2, run: 2300 * time.Millisecond, interval: time.Second, top: 1}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	status := regexp.MustCompile(`payloads sent (\d+) failed`)
	table := regexp.MustCompile(`^bucket .* payload #(\d+) `)
	sent, tables := -1, 0
	for _, l := range strings.Split(out.String(), "\n") {
		if m := status.FindStringSubmatch(l); m != nil && !strings.HasPrefix(l, "      counted") {
			sent, _ = strconv.Atoi(m[1])
		}
		if m := table.FindStringSubmatch(l); m != nil {
			tables++
			if n, _ := strconv.Atoi(m[1]); n > sent {
				t.Errorf("payload #%d shown under a status line of %d payloads sent:\n%s", n, sent, out.String())
			}
		}
	}
	if tables < 2 {
		t.Fatalf("%d tables, want at least 2:\n%s", tables, out.String())
	}
}
