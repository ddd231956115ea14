// This file is a stand-in for writer's payload splitter, used until it lands.

package agentclient

import (
	"errors"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

type part struct {
	Body []byte
	Hits uint64
}

func splitEncoded(body []byte, getBuf func(int) []byte) ([]part, error) {
	pl, err := writer.DecodePayload(body)
	if err != nil {
		return nil, err
	}
	var groups []*aggregate.Entry
	for i := range pl.Buckets {
		for j := range pl.Buckets[i].Groups {
			groups = append(groups, &pl.Buckets[i].Groups[j].Entry)
		}
	}
	if len(groups) < 2 {
		return nil, errors.New("one group cannot be split")
	}
	halves := [2][]writer.Bucket{}
	n, mid := 0, len(groups)/2
	for _, b := range pl.Buckets {
		for j := range b.Groups {
			h := 0
			if n >= mid {
				h = 1
			}
			n++
			hb := &halves[h]
			if len(*hb) == 0 || (*hb)[len(*hb)-1].Start != b.Start {
				*hb = append(*hb, writer.Bucket{Start: b.Start, Duration: b.Duration, AgentTimeShift: b.AgentTimeShift})
			}
			last := &(*hb)[len(*hb)-1]
			last.Groups = append(last.Groups, &b.Groups[j].Entry)
		}
	}
	var parts []part
	for _, hb := range halves {
		var hits uint64
		for _, b := range hb {
			for _, g := range b.Groups {
				hits += g.Hits
			}
		}
		parts = append(parts, part{Body: writer.AppendPayload(getBuf(len(body)), &pl.Header, hb), Hits: hits})
	}
	return parts, nil
}
