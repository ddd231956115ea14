// This file tests statsgen's documented ranges at their edges, its exit
// status for stray arguments, its start line for -dist fixed, its -errors
// share, its status lines (per interval against a user's agent, their rate
// and legends), -keys, -top and which spans are top-level.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestValidateEdges: each range validate states is inclusive at both ends
// (-keys up to 1000000, -producers up to 10000, -errors 0..1, -rate
// 1e-06..1e+09, -interval the SDK's 1s..1h, -min = -max), and one past it
// is refused.
func TestValidateEdges(t *testing.T) {
	good := options{rate: 1000, keys: 10, errRatio: 0.1, dist: "loguniform", minDur: time.Millisecond,
		maxDur: time.Second, producers: 2, run: time.Second, interval: time.Second, top: 5}
	for name, set := range map[string]func(o *options){
		"keys max":        func(o *options) { o.keys = maxKeys },
		"producers max":   func(o *options) { o.producers = maxProducers },
		"errors 1":        func(o *options) { o.errRatio = 1 },
		"rate min":        func(o *options) { o.rate = minRate },
		"rate max":        func(o *options) { o.rate = maxRate },
		"interval max":    func(o *options) { o.interval = stats.MaxBucketInterval },
		"uniform min=max": func(o *options) { o.dist, o.maxDur = "uniform", o.minDur },
	} {
		o := good
		set(&o)
		if err := o.validate(); err != nil {
			t.Errorf("%s: %v; want it accepted", name, err)
		}
	}
	for name, set := range map[string]func(o *options){
		"interval past max": func(o *options) { o.interval = stats.MaxBucketInterval + time.Second },
		"keys past max":     func(o *options) { o.keys = maxKeys + 1 },
		"rate past max":     func(o *options) { o.rate = 2 * maxRate },
	} {
		o := good
		set(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestStrayArgumentExit2: a word that is not a flag (after which the flag
// package reads no more flags) exits 2 naming it, before any span is
// published, as a refused flag does; 1 would say the run lost spans.
func TestStrayArgumentExit2(t *testing.T) {
	for _, args := range [][]string{{"-run", "100ms", "extra"}, {"-run", "100ms", "extra", "-rate", "5"}} {
		a, _ := json.Marshal(args)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(a))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `unexpected arguments ["extra"`) ||
			strings.Contains(string(out), "publishing for") {
			t.Errorf("%q: %v, said %q; want exit status 2 naming \"extra\", nothing published", args, err, out)
		}
	}
}

// TestFixedDurationsStartLine: with -dist fixed every span lasts -min and
// -max is not used: the start line says so, not a range it does not draw.
func TestFixedDurationsStartLine(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 100, keys: 1, dist: "fixed", minDur: 3 * time.Millisecond, maxDur: 2 * time.Second,
		producers: 1, run: 10 * time.Millisecond, interval: time.Second, top: 1}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "0% errors, durations all 3ms, rate 100/s\n") {
		t.Fatalf("start line does not say every span lasts 3ms:\n%s", out.String())
	}
}

// TestErrorsShare: -errors 1 makes every span an error: each bucket the
// agent receives has as many errors as hits.
func TestErrorsShare(t *testing.T) {
	var out bytes.Buffer
	o := options{rate: 2000, keys: 4, errRatio: 1, dist: "uniform", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 2, run: 300 * time.Millisecond, interval: time.Second, top: 4}
	if err := run(o, &out); err != nil { // uniform with -min = -max: one value, no panic
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	b := regexp.MustCompile(`(?m)^bucket .* (\d+) hits  (\d+) errors `).FindAllStringSubmatch(out.String(), -1)
	if len(b) == 0 {
		t.Fatalf("no bucket line:\n%s", out.String())
	}
	for _, m := range b {
		if n, _ := strconv.Atoi(m[1]); n == 0 || m[1] != m[2] {
			t.Errorf("%q: want every hit an error with -errors 1", m[0])
		}
	}
}

// TestStatusLinePerIntervalWithUsersAgent: against an agent given with
// -agent (no embedded one to watch), a status line is still printed each
// interval, not only the final one after Stop.
func TestStatusLinePerIntervalWithUsersAgent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var out bytes.Buffer
	o := options{rate: 500, keys: 2, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 1, run: 2500 * time.Millisecond, interval: time.Second, top: 1, agent: ag.URL()}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// Ticks at 1s and 2s, then the final line: at least one tick's on a
	// loaded host.
	if n := strings.Count(out.String(), " spans/s  published "); n < 2 {
		t.Fatalf("%d status lines in a 2.5s run at a 1s interval, want one per interval and the final one:\n%s", n, out.String())
	}
}

// TestStatusLineRateAndLegends: the rate is the spans published since the
// previous line over the time since it (ending when publishing stopped,
// if it did in between); each legend is printed the first time its counter
// is non-zero and only then; the last send error only beside failed or
// dropped payloads.
func TestStatusLineRateAndLegends(t *testing.T) {
	var out bytes.Buffer
	st := &status{out: &out, last: time.Now().Add(-time.Second)}
	rate := func() float64 {
		m := regexp.MustCompile(`\n(\d+) spans/s `).FindAllStringSubmatch(out.String(), -1)
		r, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
		return r
	}
	st.line(stats.Health{Published: 1000, InboxFull: 3, LastSendError: errors.New("an old one")})
	if r := rate(); r < 500 || r > 1001 { // low: the host may stall before line
		t.Fatalf("first line rate %g, want about 1000 (1000 spans in 1s):\n%s", r, out.String())
	}
	st.last = time.Now().Add(-time.Second)
	st.line(stats.Health{Published: 1500, InboxFull: 5, LastSendError: errors.New("an old one")})
	if r := rate(); r < 250 || r > 501 {
		t.Fatalf("second line rate %g, want about 500 (500 more in 1s):\n%s", r, out.String())
	}
	// Publishing stopped a second after the previous line, and the line
	// comes a second later: 500 spans over 1s, not 2s.
	st.last, st.stopped = time.Now().Add(-2*time.Second), time.Now().Add(-time.Second)
	st.line(stats.Health{Published: 2000, InboxFull: 5})
	if r := rate(); r < 400 || r > 501 {
		t.Fatalf("line after the stop: rate %g, want about 500 (500 spans published within 1s):\n%s", r, out.String())
	}
	s := out.String()
	if n := strings.Count(s, "legend: inbox-full"); n != 1 {
		t.Errorf("%d inbox-full legends, want 1:\n%s", n, s)
	}
	if strings.Contains(s, "legend: tracer_blocked_value") || strings.Contains(s, "last send error") {
		t.Errorf("a legend for nothing collapsed, or a send error beside no failed payload:\n%s", s)
	}
}

// TestKeysAreDistinct: -keys is the number of distinct span keys: each
// key's resource is its own.
func TestKeysAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range resourceNames(1000) {
		seen[r] = true
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct resources for 1000 keys", len(seen))
	}
}

// TestTopAndTopLevel: -top bounds the rows of each table; server spans are
// top-level, client and consumer spans are not (as in a real service).
func TestTopAndTopLevel(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var out bytes.Buffer
	o := options{rate: 4000, keys: 8, dist: "fixed", minDur: time.Millisecond, maxDur: time.Millisecond,
		producers: 2, run: 300 * time.Millisecond, interval: time.Second, top: 2}
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	rows, maxRows := 0, 0
	row := regexp.MustCompile(`GET /api/v1/`)
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "bucket ") {
			rows = 0
		} else if row.MatchString(l) {
			rows++
			maxRows = max(maxRows, rows)
		}
	}
	if maxRows != 2 {
		t.Fatalf("at most %d rows in a table with -top 2 and 8 keys, want 2:\n%s", maxRows, out.String())
	}
	o.top, o.agent = 8, ag.URL()
	if err := run(o, io.Discard); err != nil {
		t.Fatal(err)
	}
	totals, hits := statstest.Sum(ag.Requests())
	if hits == 0 {
		t.Fatal("no hits at the agent")
	}
	for k, g := range totals {
		want := uint64(0)
		if k.SpanKind == "server" {
			want = g.Hits
		}
		if g.TopLevelHits != want {
			t.Errorf("%+v: %d top-level hits of %d, want %d", k, g.TopLevelHits, g.Hits, want)
		}
	}
}
