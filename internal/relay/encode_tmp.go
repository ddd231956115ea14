package relay

import (
	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// encodeParts is a stand-in until writer's splitter lands.
func encodeParts(p *writer.Payload, limit int, seq func() uint64) ([]part, error) {
	var bs []writer.Bucket
	var hits uint64
	for _, db := range p.Buckets {
		b := writer.Bucket{Start: db.Start, Duration: db.Duration, AgentTimeShift: db.AgentTimeShift}
		for i := range db.Groups {
			b.Groups = append(b.Groups, &db.Groups[i].Entry)
			hits += db.Groups[i].Hits
		}
		bs = append(bs, b)
	}
	h := p.Header
	h.Sequence = seq()
	_ = aggregate.BlockedValue
	return []part{{body: writer.AppendPayload(nil, &h, bs), hits: hits}}, nil
}
