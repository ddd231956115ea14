// This file prints received payloads for the demos (cmd/statsgen,
// statsrelay -demo).

package statstest

import (
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

type row struct {
	g      *writer.Group
	merged aggregate.Sketch
}

// WriteTop prints the groups of one received payload with the most hits,
// top per bucket (none when top <= 0: the bucket lines alone), with their
// p50 and p99 (for the demos).
func WriteTop(out io.Writer, r Request, top int) {
	if r.Err != nil {
		fmt.Fprintf(out, "agent could not decode a payload: %v\n", r.Err)
		return
	}
	if r.Payload == nil { // a Request not made by the Agent
		fmt.Fprintln(out, "no decoded payload")
		return
	}
	top = max(top, 0)
	p := r.Payload
	for _, b := range p.Buckets {
		rows := make([]*row, 0, len(b.Groups))
		var hits, errs uint64
		for i := range b.Groups {
			g := &b.Groups[i]
			rw := &row{g: g}
			rw.merged.Merge(g.Ok)
			rw.merged.Merge(g.Err)
			rows = append(rows, rw)
			hits += g.Hits
			errs += g.Errors
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].g.Hits > rows[j].g.Hits })
		start := time.Unix(0, int64(b.Start)).UTC().Format("15:04:05.000")
		fmt.Fprintf(out, "\nbucket %s +%s  payload #%d  %d groups  %d hits  %d errors  %d bytes\n",
			start, time.Duration(b.Duration), p.Sequence, len(b.Groups), hits, errs, len(r.Body))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "service\tresource\tkind\thits\terrors\tp50\tp99\t")
		for _, rw := range rows[:min(top, len(rows))] {
			g := rw.g
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t\n", g.Service, trim(g.Resource, 32), g.SpanKind, g.Hits, g.Errors,
				quantile(&rw.merged, 0.5), quantile(&rw.merged, 0.99))
		}
		_ = tw.Flush()
	}
}

func quantile(s *aggregate.Sketch, q float64) string {
	v := s.Quantile(q)
	if math.IsNaN(v) {
		return "-"
	}
	if v >= math.MaxInt64 { // a float64 past it converts to a negative Duration
		return ">" + time.Duration(math.MaxInt64).Truncate(time.Second).String()
	}
	return time.Duration(v).Round(time.Microsecond).String()
}

// trim cuts s to n characters (runes), the last an ellipsis when cut.
func trim(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
